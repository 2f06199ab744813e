//! The syntax tree: what the program says, with a span on every node. Built by
//! [`crate::syntax`] from pest's pairs; it holds no pest types. Names are not resolved and
//! types are not checked here: that is [`crate::check`]'s job.

use std::fmt;

/// A byte range in the source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
    pub fn len(self) -> usize {
        self.end - self.start
    }
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

impl From<Span> for miette::SourceSpan {
    fn from(s: Span) -> Self {
        (s.start, s.end - s.start).into()
    }
}

/// A node and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Node<T> {
    pub span: Span,
    pub node: T,
}

impl<T> Node<T> {
    pub fn new(span: Span, node: T) -> Self {
        Node { span, node }
    }
}

pub type Ident = Node<String>;

#[derive(Clone, Debug, Default)]
pub struct Program {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug)]
pub enum Item {
    Stream(SourceDecl),
    Table(SourceDecl),
    Query(QueryDecl),
    Aggregate(AggregateDecl),
    Function(FunctionDecl),
}

/// `stream NAME from "topic" { ... }` or `table NAME [from "topic"] { ... }`.
#[derive(Clone, Debug)]
pub struct SourceDecl {
    pub span: Span,
    pub name: Ident,
    pub topic: Option<Node<String>>,
    pub items: Vec<Node<DeclItem>>,
}

#[derive(Clone, Debug)]
pub enum DeclItem {
    /// `key FIELD` (the key is that value field) or `key NAME: TYPE` (a key outside the value).
    Key { name: Ident, ty: Option<Node<TypeExpr>> },
    /// `value json { ... }`, `value { ... }` (no format: a control-managed table).
    ValueJson { explicit_format: bool, fields: Vec<FieldDecl> },
    /// `value string [as NAME]`: the whole value is one string field (default name `value`).
    ValueString { name: Option<Ident> },
    Time(Ident),
    TenantField(Ident),
    TenantHeader(Node<String>),
}

#[derive(Clone, Debug)]
pub struct FieldDecl {
    pub name: Ident,
    pub ty: Node<TypeExpr>,
}

#[derive(Clone, Debug)]
pub enum TypeExpr {
    Prim(PrimType),
    List(Box<Node<TypeExpr>>),
    Record(Vec<FieldDecl>),
    Nullable(Box<Node<TypeExpr>>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrimType {
    String,
    Int,
    Float,
    Bool,
    Timestamp,
    Duration,
}

impl fmt::Display for PrimType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrimType::String => "string",
            PrimType::Int => "int",
            PrimType::Float => "float",
            PrimType::Bool => "bool",
            PrimType::Timestamp => "timestamp",
            PrimType::Duration => "duration",
        })
    }
}

/// `query NAME { clause... }`: a pipeline read top to bottom.
#[derive(Clone, Debug)]
pub struct QueryDecl {
    pub span: Span,
    pub name: Ident,
    pub clauses: Vec<Node<Clause>>,
}

#[derive(Clone, Debug)]
pub enum Clause {
    From(Ident),
    Where(Node<Expr>),
    Select(Vec<Node<SelectItem>>),
    KeyBy(Node<Expr>),
    GroupBy(Vec<GroupItem>),
    Window { kind: WindowKind, grace: Option<Node<Duration>> },
    Aggregate(Vec<AggItem>),
    Emit(EmitMode),
    Join { left: bool, other: Ident, within: Option<Node<Duration>>, on: Node<Expr> },
    To { topic: Node<String>, format: Option<Node<Format>> },
}

impl Clause {
    /// The clause's keyword(s), as a user would name it in prose.
    pub fn keyword(&self) -> &'static str {
        match self {
            Clause::From(_) => "from",
            Clause::Where(_) => "where",
            Clause::Select(_) => "select",
            Clause::KeyBy(_) => "key by",
            Clause::GroupBy(_) => "group by",
            Clause::Window { .. } => "window",
            Clause::Aggregate(_) => "aggregate",
            Clause::Emit(_) => "emit",
            Clause::Join { left: false, .. } => "join",
            Clause::Join { left: true, .. } => "left join",
            Clause::To { .. } => "to",
        }
    }
}

#[derive(Clone, Debug)]
pub enum SelectItem {
    Star,
    /// `name = expr`
    Named(Ident, Node<Expr>),
    /// A bare field path: keeps that field under its last name.
    Path(Vec<Ident>),
}

#[derive(Clone, Debug)]
pub struct GroupItem {
    pub expr: Node<Expr>,
    pub alias: Option<Ident>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WindowKind {
    Tumbling { size: Duration },
    Hopping { size: Duration, advance: Duration },
    Sliding { size: Duration },
    Session { gap: Duration },
}

#[derive(Clone, Debug)]
pub struct AggItem {
    pub span: Span,
    pub name: Ident,
    pub func: Ident,
    /// `count(*)` is written with a star and no arguments.
    pub star: bool,
    pub args: Vec<Node<Expr>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmitMode {
    Changes,
    Final,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Json,
    String,
}

/// A duration in milliseconds, written as one token (`250ms`, `5s`, `1m`, `2h`, `1d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Duration(pub i64);

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        for (unit, n) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
            if ms != 0 && ms % n == 0 {
                return write!(f, "{}{}", ms / n, unit);
            }
        }
        write!(f, "{ms}ms")
    }
}

/// `aggregate NAME(params) -> TYPE { init {..} update {..} [merge {..}] result EXPR }`.
#[derive(Clone, Debug)]
pub struct AggregateDecl {
    pub span: Span,
    pub name: Ident,
    pub params: Vec<Param>,
    pub result_type: Node<TypeExpr>,
    pub init: Vec<(Ident, Node<Expr>)>,
    pub update: Vec<Node<Stmt>>,
    pub merge: Option<Vec<Node<Stmt>>>,
    pub result: Node<Expr>,
}

/// `function NAME(params) -> TYPE = EXPR`.
#[derive(Clone, Debug)]
pub struct FunctionDecl {
    pub span: Span,
    pub name: Ident,
    pub params: Vec<Param>,
    pub result_type: Node<TypeExpr>,
    pub body: Node<Expr>,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: Ident,
    pub ty: Node<TypeExpr>,
}

#[derive(Clone, Debug)]
pub enum Stmt {
    Let(Ident, Node<Expr>),
    Assign(Ident, Node<Expr>),
}

#[derive(Clone, Debug)]
pub enum Expr {
    Lit(Literal),
    /// `a`, `a.b.c`, `limits.max_price`: resolved by the checker.
    Path(Vec<Ident>),
    Call { func: Ident, args: Vec<Node<Expr>> },
    Unary { op: UnOp, expr: Box<Node<Expr>> },
    Binary { op: BinOp, lhs: Box<Node<Expr>>, rhs: Box<Node<Expr>> },
    IsNull { expr: Box<Node<Expr>>, negated: bool },
    If { cond: Box<Node<Expr>>, then: Box<Node<Expr>>, otherwise: Box<Node<Expr>> },
    List(Vec<Node<Expr>>),
    Record(Vec<(Ident, Node<Expr>)>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Int(i64),
    Float(f64),
    String(String),
    Bool(bool),
    Duration(Duration),
    Null,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum UnOp {
    Not,
    Neg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::NotIn => "not in",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }
}

/// A control statement: one record on the control topic.
#[derive(Clone, Debug)]
pub struct Statement {
    pub span: Span,
    pub tenant: Option<Node<String>>,
    pub body: StatementBody,
}

#[derive(Clone, Debug)]
pub enum StatementBody {
    Update { table: Ident, key: Node<Expr>, value: Node<Expr> },
    Delete { table: Ident, key: Node<Expr> },
    Purge,
    NewQuery(QueryDecl),
    Replace { query: QueryDecl, mode: Option<Node<ReplaceMode>> },
    Drop(Ident),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplaceMode {
    Reprocess,
    FreshState,
}
