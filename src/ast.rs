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
    Key {
        name: Ident,
        ty: Option<Node<TypeExpr>>,
        /// `key … avro` / `key … protobuf`: the record key in the Confluent wire format.
        format: Option<Node<Format>>,
    },
    /// `value json { ... }`, `value { ... }` (no format: a control-managed table).
    ValueJson {
        explicit_format: bool,
        fields: Vec<FieldDecl>,
    },
    /// `value string [as NAME]`: the whole value is one string field (default name `value`).
    ValueString {
        name: Option<Ident>,
    },
    /// `value csv [delimiter "X"] { ... }`: delimited text; the fields are its columns in order.
    ValueCsv {
        delimiter: u8,
        fields: Vec<FieldDecl>,
    },
    /// `value avro { ... }` / `value protobuf { ... }` (`format`): Avro or Protobuf (Confluent
    /// wire format), read into these fields. Without fields (`from_registry`): the fields of the
    /// schema registry's latest schema of the topic's value subject, filled in before checking
    /// ([`crate::expand_registry_fields`]).
    ValueRegistry {
        format: Format,
        fields: Vec<FieldDecl>,
        from_registry: bool,
    },
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
    /// `map<K, V>`.
    Map(Box<Node<TypeExpr>>, Box<Node<TypeExpr>>),
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
    /// `from a` or, merging several streams, `from a, b, …` (the first is the main input);
    /// `from a as x`: the main input goes by `x` in the query.
    From {
        inputs: Vec<Ident>,
        alias: Option<Ident>,
    },
    Where(Node<Expr>),
    Select(Vec<Node<SelectItem>>),
    KeyBy(Node<Expr>),
    GroupBy(Vec<GroupItem>),
    Window {
        kind: WindowKind,
        grace: Option<Node<Duration>>,
        /// `tz "ZONE"`: days aligned on the zone's midnights (an IANA name).
        tz: Option<Node<String>>,
    },
    Aggregate(Vec<AggItem>),
    /// `emit changes`, `emit final`, or `emit final idle D` (windows close after D of wall-clock
    /// time without input as well).
    Emit(EmitMode, Option<Node<Duration>>),
    Join {
        left: bool,
        /// `outer join`: a full outer stream–stream join.
        outer: bool,
        other: Ident,
        /// `join s as x`: the joined side goes by `x` (a self-join names both sides).
        alias: Option<Ident>,
        /// `within D`: the other side's records at most D before or after match; `within (B, A)`:
        /// at most B before and A after (`within` holds B, `after` A).
        within: Option<Node<Duration>>,
        after: Option<Node<Duration>>,
        /// `within D grace G`: how long after its window a stream–stream join still takes a
        /// record (0 unless written).
        grace: Option<Node<Duration>>,
        on: Node<Expr>,
    },
    /// `windowed`: the span of the `windowed` word (the key written is the windowed key).
    /// `when C`: a branch, taking the records for which C is true (the others go on to the
    /// next `to`).
    To {
        topic: Node<String>,
        format: Option<Node<Format>>,
        /// `key avro` / `key protobuf`: the output keys in the Confluent wire format.
        key_format: Option<Node<Format>>,
        windowed: Option<Span>,
        when: Option<Node<Expr>>,
    },
}

impl Clause {
    /// The clause's keyword(s), as a user would name it in prose.
    pub fn keyword(&self) -> &'static str {
        match self {
            Clause::From { .. } => "from",
            Clause::Where(_) => "where",
            Clause::Select(_) => "select",
            Clause::KeyBy(_) => "key by",
            Clause::GroupBy(_) => "group by",
            Clause::Window { .. } => "window",
            Clause::Aggregate(_) => "aggregate",
            Clause::Emit(..) => "emit",
            Clause::Join { outer: true, .. } => "outer join",
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    String,
    /// Delimited text (ksqlDB's `DELIMITED`): one record, its fields the columns in order,
    /// separated by this byte.
    Csv(u8),
    /// Avro in the Confluent wire format, with a schema registry.
    Avro,
    /// Protobuf in the Confluent wire format, with a schema registry.
    Protobuf,
}

impl Format {
    /// The delimiter of `value csv` / `to … csv` when none is written.
    pub const CSV_DEFAULT_DELIMITER: u8 = b',';

    /// Whether values of this format name their schema in a schema registry (Avro, Protobuf).
    pub fn uses_registry(self) -> bool {
        matches!(self, Format::Avro | Format::Protobuf)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Json => f.write_str("json"),
            Format::String => f.write_str("string"),
            Format::Csv(Format::CSV_DEFAULT_DELIMITER) => f.write_str("csv"),
            Format::Csv(d) => write!(f, "csv delimiter {:?}", char::from(*d).to_string()),
            Format::Avro => f.write_str("avro"),
            Format::Protobuf => f.write_str("protobuf"),
        }
    }
}

impl serde::Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
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

/// `aggregate NAME(params) -> TYPE { init {..} update {..} [merge {..}] [undo {..}] result EXPR }`.
#[derive(Clone, Debug)]
pub struct AggregateDecl {
    pub span: Span,
    pub name: Ident,
    pub params: Vec<Param>,
    pub result_type: Node<TypeExpr>,
    pub init: Vec<InitField>,
    pub update: Vec<Node<Stmt>>,
    pub merge: Option<Vec<Node<Stmt>>>,
    /// The inverse of `update` (a grouped table's old rows are taken out with it).
    pub undo: Option<Vec<Node<Stmt>>>,
    pub result: Node<Expr>,
}

/// A state field of a user-defined aggregate: `name [: TYPE] = EXPR` in its `init`.
#[derive(Clone, Debug)]
pub struct InitField {
    pub name: Ident,
    /// The type written, if any (an empty list needs one).
    pub ty: Option<Node<TypeExpr>>,
    pub value: Node<Expr>,
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
    Call {
        func: Ident,
        args: Vec<Node<Expr>>,
    },
    Unary {
        op: UnOp,
        expr: Box<Node<Expr>>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Node<Expr>>,
        rhs: Box<Node<Expr>>,
    },
    /// A long run of arithmetic operators of one precedence (`a + b - c + …`), evaluated left
    /// to right as the left-nested tree it stands for. Kept flat so that its length is not
    /// nesting: no pass recurses once per operand.
    Chain {
        first: Box<Node<Expr>>,
        rest: Vec<(BinOp, Node<Expr>)>,
    },
    IsNull {
        expr: Box<Node<Expr>>,
        negated: bool,
    },
    /// `x [not] between lo and hi`: `x` evaluated once.
    Between {
        expr: Box<Node<Expr>>,
        lo: Box<Node<Expr>>,
        hi: Box<Node<Expr>>,
        negated: bool,
    },
    If {
        cond: Box<Node<Expr>>,
        then: Box<Node<Expr>>,
        otherwise: Box<Node<Expr>>,
    },
    List(Vec<Node<Expr>>),
    /// `x => body`, `(acc, x) => body`: an argument of `transform`, `filter` and `reduce`.
    Lambda {
        params: Vec<Ident>,
        body: Box<Node<Expr>>,
    },
    Record(Vec<(Ident, Node<Expr>)>),
    /// `map { k: v, … }`: its entries as written.
    Map(Vec<(Node<Expr>, Node<Expr>)>),
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

// ---------------------------------------------------------------------- outline

/// A compact, fully parenthesized rendering of the tree: one line per item and clause. Used by
/// the parse snapshots, and to show how an expression was grouped.
pub fn outline(p: &Program) -> String {
    let mut o = String::new();
    for item in &p.items {
        match item {
            Item::Stream(d) | Item::Table(d) => {
                let kw = if matches!(item, Item::Stream(_)) { "stream" } else { "table" };
                let topic = d.topic.as_ref().map(|t| format!(" from {:?}", t.node)).unwrap_or_default();
                o += &format!("{kw} {}{topic} @{}..{}\n", d.name.node, d.span.start, d.span.end);
                for it in &d.items {
                    let line = match &it.node {
                        DeclItem::Key { name, ty, format } => {
                            let ty = ty.as_ref().map(|t| format!(": {}", t.node)).unwrap_or_default();
                            let f = format.as_ref().map(|f| format!(" {}", f.node)).unwrap_or_default();
                            format!("key {}{ty}{f}", name.node)
                        }
                        DeclItem::ValueJson { explicit_format, fields } => {
                            format!(
                                "value{} {}",
                                if *explicit_format { " json" } else { "" },
                                TypeExpr::Record(fields.clone())
                            )
                        }
                        DeclItem::ValueString { name } => {
                            format!("value string as {}", name.as_ref().map(|n| n.node.as_str()).unwrap_or("value"))
                        }
                        DeclItem::ValueCsv { delimiter, fields } => {
                            format!("value {} {}", Format::Csv(*delimiter), TypeExpr::Record(fields.clone()))
                        }
                        DeclItem::ValueRegistry { format, from_registry: true, .. } => format!("value {format}"),
                        DeclItem::ValueRegistry { format, fields, .. } => {
                            format!("value {format} {}", TypeExpr::Record(fields.clone()))
                        }
                        DeclItem::Time(t) => format!("time {}", t.node),
                        DeclItem::TenantField(t) => format!("tenant {}", t.node),
                        DeclItem::TenantHeader(h) => format!("tenant header {:?}", h.node),
                    };
                    o += &format!("  {line}\n");
                }
            }
            Item::Query(q) => outline_query(&mut o, q, ""),
            Item::Aggregate(a) => {
                o += &format!("aggregate {}({}) -> {}\n", a.name.node, params(&a.params), a.result_type.node);
                let init: Vec<String> = a
                    .init
                    .iter()
                    .map(|f| match &f.ty {
                        Some(t) => format!("{}: {} = {}", f.name.node, t.node, f.value.node),
                        None => format!("{} = {}", f.name.node, f.value.node),
                    })
                    .collect();
                o += &format!("  init {{{}}}\n", init.join(", "));
                o += &format!("  update {}\n", stmts(&a.update));
                if let Some(m) = &a.merge {
                    o += &format!("  merge {}\n", stmts(m));
                }
                if let Some(u) = &a.undo {
                    o += &format!("  undo {}\n", stmts(u));
                }
                o += &format!("  result {}\n", a.result.node);
            }
            Item::Function(f) => {
                o += &format!(
                    "function {}({}) -> {} = {}\n",
                    f.name.node,
                    params(&f.params),
                    f.result_type.node,
                    f.body.node
                );
            }
        }
    }
    o
}

/// One control statement, outlined like [`outline`].
pub fn outline_statement(s: &Statement) -> String {
    let mut o = String::new();
    let prefix = s.tenant.as_ref().map(|t| format!("for tenant {:?} ", t.node)).unwrap_or_default();
    match &s.body {
        StatementBody::Update { table, key, value } => {
            o += &format!("{prefix}update {}[{}] = {}\n", table.node, key.node, value.node)
        }
        StatementBody::Delete { table, key } => o += &format!("{prefix}delete {}[{}]\n", table.node, key.node),
        StatementBody::Purge => o += &format!("{prefix}purge\n"),
        StatementBody::NewQuery(q) => outline_query(&mut o, q, &prefix),
        StatementBody::Replace { query, mode } => {
            let m = match mode.as_ref().map(|m| m.node) {
                Some(ReplaceMode::Reprocess) => " with reprocess",
                Some(ReplaceMode::FreshState) => " with fresh state",
                None => "",
            };
            outline_query(&mut o, query, &format!("{prefix}replace{m} "));
        }
        StatementBody::Drop(q) => o += &format!("{prefix}drop query {}\n", q.node),
    }
    o
}

fn outline_query(o: &mut String, q: &QueryDecl, prefix: &str) {
    *o += &format!("{prefix}query {} @{}..{}\n", q.name.node, q.span.start, q.span.end);
    for c in &q.clauses {
        let body = match &c.node {
            Clause::From { inputs, alias } => {
                let names = inputs.iter().map(|n| n.node.as_str()).collect::<Vec<_>>();
                match alias {
                    Some(a) => format!(
                        "{} as {}{}",
                        names[0],
                        a.node,
                        names[1..].iter().map(|n| format!(", {n}")).collect::<String>()
                    ),
                    None => names.join(", "),
                }
            }
            Clause::Where(e) | Clause::KeyBy(e) => e.node.to_string(),
            Clause::Select(items) => items
                .iter()
                .map(|i| match &i.node {
                    SelectItem::Star => "*".to_string(),
                    SelectItem::Named(n, e) => format!("{} = {}", n.node, e.node),
                    SelectItem::Path(p) => p.iter().map(|i| i.node.as_str()).collect::<Vec<_>>().join("."),
                })
                .collect::<Vec<_>>()
                .join(", "),
            Clause::GroupBy(items) => items
                .iter()
                .map(|g| match &g.alias {
                    Some(a) => format!("{} as {}", g.expr.node, a.node),
                    None => g.expr.node.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            Clause::Window { kind, grace, tz } => {
                let g = grace.as_ref().map(|g| format!(" grace {}", g.node)).unwrap_or_default();
                let z = tz.as_ref().map(|z| format!(" tz {:?}", z.node)).unwrap_or_default();
                format!("{kind:?}{z}{g}")
            }
            Clause::Aggregate(items) => items
                .iter()
                .map(|a| {
                    let args = if a.star {
                        "*".to_string()
                    } else {
                        a.args.iter().map(|e| e.node.to_string()).collect::<Vec<_>>().join(", ")
                    };
                    format!("{} = {}({args})", a.name.node, a.func.node)
                })
                .collect::<Vec<_>>()
                .join(", "),
            Clause::Emit(m, idle) => {
                format!("{m:?}").to_lowercase()
                    + &idle.as_ref().map(|d| format!(" idle {}", d.node)).unwrap_or_default()
            }
            Clause::Join { other, alias, within, after, grace, on, .. } => {
                let mut w = alias.as_ref().map(|a| format!(" as {}", a.node)).unwrap_or_default();
                w += &match (within, after) {
                    (Some(b), Some(a)) => format!(" within ({}, {})", b.node, a.node),
                    (Some(w), None) => format!(" within {}", w.node),
                    _ => String::new(),
                };
                if let Some(g) = grace {
                    w += &format!(" grace {}", g.node);
                }
                format!("{}{w} on {}", other.node, on.node)
            }
            Clause::To { topic, format, key_format, windowed, when } => format!(
                "{:?}{}{}{}{}",
                topic.node,
                format.as_ref().map(|f| format!(" {}", f.node)).unwrap_or_default(),
                key_format.as_ref().map(|f| format!(" key {}", f.node)).unwrap_or_default(),
                if windowed.is_some() { " windowed" } else { "" },
                when.as_ref().map(|w| format!(" when {}", w.node)).unwrap_or_default()
            ),
        };
        *o += &format!("  {} {body} @{}..{}\n", c.node.keyword(), c.span.start, c.span.end);
    }
}

fn params(ps: &[Param]) -> String {
    ps.iter().map(|p| format!("{}: {}", p.name.node, p.ty.node)).collect::<Vec<_>>().join(", ")
}

fn record(fs: &[(Ident, Node<Expr>)]) -> String {
    format!("{{{}}}", fs.iter().map(|(n, e)| format!("{} = {}", n.node, e.node)).collect::<Vec<_>>().join(", "))
}

fn stmts(ss: &[Node<Stmt>]) -> String {
    let parts: Vec<String> = ss
        .iter()
        .map(|s| match &s.node {
            Stmt::Let(n, e) => format!("let {} = {}", n.node, e.node),
            Stmt::Assign(n, e) => format!("{} = {}", n.node, e.node),
        })
        .collect();
    format!("{{ {} }}", parts.join("; "))
}

impl fmt::Display for TypeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeExpr::Prim(p) => write!(f, "{p}"),
            TypeExpr::List(t) => write!(f, "list<{}>", t.node),
            TypeExpr::Map(k, v) => write!(f, "map<{}, {}>", k.node, v.node),
            TypeExpr::Nullable(t) => write!(f, "{}?", t.node),
            TypeExpr::Record(fields) => {
                f.write_str("{")?;
                for (i, fd) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {}", fd.name.node, fd.ty.node)?;
                }
                f.write_str("}")
            }
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => write!(f, "{x:?}"),
            Literal::String(s) => write!(f, "{s:?}"),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Duration(d) => write!(f, "{d}"),
            Literal::Null => f.write_str("null"),
        }
    }
}

/// Fully parenthesized, so that the grouping the parser chose is visible.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Lit(l) => write!(f, "{l}"),
            Expr::Path(p) => {
                for (i, s) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(&s.node)?;
                }
                Ok(())
            }
            Expr::Call { func, args } => {
                write!(f, "{}(", func.node)?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", a.node)?;
                }
                f.write_str(")")
            }
            Expr::Lambda { params, body } => {
                let ps: Vec<&str> = params.iter().map(|p| p.node.as_str()).collect();
                write!(f, "(({}) => {})", ps.join(", "), body.node)
            }
            Expr::Unary { op: UnOp::Not, expr } => write!(f, "(not {})", expr.node),
            Expr::Unary { op: UnOp::Neg, expr } => write!(f, "(-{})", expr.node),
            Expr::Binary { op, lhs, rhs } => write!(f, "({} {} {})", lhs.node, op.symbol(), rhs.node),
            Expr::Chain { first, rest } => {
                for _ in rest {
                    f.write_str("(")?;
                }
                write!(f, "{}", first.node)?;
                for (op, e) in rest {
                    write!(f, " {} {})", op.symbol(), e.node)?;
                }
                Ok(())
            }
            Expr::IsNull { expr, negated } => {
                write!(f, "({} is {}null)", expr.node, if *negated { "not " } else { "" })
            }
            Expr::Between { expr, lo, hi, negated } => {
                write!(f, "({} {}between {} and {})", expr.node, if *negated { "not " } else { "" }, lo.node, hi.node)
            }
            Expr::If { cond, then, otherwise } => {
                write!(f, "(if {} then {} else {})", cond.node, then.node, otherwise.node)
            }
            Expr::List(items) => {
                f.write_str("[")?;
                for (i, a) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", a.node)?;
                }
                f.write_str("]")
            }
            Expr::Record(fields) => write!(f, "{}", record(fields)),
            Expr::Map(entries) => {
                f.write_str("map {")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, " {}: {}", k.node, v.node)?;
                }
                f.write_str(if entries.is_empty() { "}" } else { " }" })
            }
        }
    }
}
