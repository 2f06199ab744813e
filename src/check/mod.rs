//! [`ast::Program`] → [`hir::Program`]: resolve every name, type every expression, check the
//! shape of every query, and report **all** problems found, each once.
//!
//! Follow-on errors are suppressed with [`Type::Error`]: an expression that already failed has
//! the error type, which matches everything, and a query whose `from` failed is not checked
//! further.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::aggregate::{self, ArgProblem, SignatureError};
use crate::ast::{self, BinOp, Clause, DeclItem, Duration, EmitMode, Format, Literal, Node, Span, UnOp, WindowKind};
use crate::diag::{did_you_mean, Code, Diagnostic, Diagnostics};
use crate::function::{self, plural};
use crate::hir::{self, AggFunc, ExprKind, Joined, KeySpec, Root, Shape, SourceKind, StepKind};
use crate::types::{RecordType, Type};

mod aggregates;
mod declarations;
mod expressions;
mod lambdas;
mod query;
mod statements;

/// Names of the native aggregates.
/// Fields every windowed result starts with.
pub const WINDOW_FIELDS: [&str; 2] = ["window_start", "window_end"];

/// Check a parsed program, with the definitions of `lib` (the standard library) in scope.
pub fn check(program: &ast::Program, source: &str, lib: &hir::Program) -> Result<hir::Program, Diagnostics> {
    let mut c = Checker::new(source, lib, false);
    c.program(program);
    c.finish()
}

/// What an editor needs of a program (`streamc lsp`): the check's result, every checked
/// expression's span and type (also where the program has errors), and the sources declared.
pub struct Analysis {
    pub result: Result<hir::Program, Diagnostics>,
    /// In the order checked; spans nest (an expression's operands come before it).
    pub types: Vec<(Span, Type)>,
    pub sources: Vec<hir::Source>,
}

/// [`check`], recording what [`Analysis`] holds.
pub fn analyze(program: &ast::Program, source: &str, lib: &hir::Program) -> Analysis {
    let mut c = Checker::new(source, lib, false);
    c.types = Some(Vec::new());
    c.program(program);
    let types = c.types.take().unwrap_or_default();
    let sources = c.sources.clone();
    Analysis { result: c.finish(), types, sources }
}

/// Check one standard-library file: only aggregates and functions.
pub fn check_stdlib(program: &ast::Program, source: &str, lib: &hir::Program) -> Result<hir::Program, Diagnostics> {
    let mut c = Checker::new(source, lib, true);
    c.program(program);
    c.finish()
}

/// A checked control statement.
#[derive(Clone, Debug)]
pub enum Control {
    Update { table: usize, key: hir::Expr, value: hir::Expr },
    Delete { table: usize, key: hir::Expr },
    Purge,
    NewQuery(hir::Query),
    Replace { query: hir::Query, mode: Option<ast::ReplaceMode> },
    Drop(String),
}

/// Check a control statement against the running program.
pub fn check_statement(
    program: &hir::Program,
    stmt: &ast::Statement,
    text: &str,
) -> Result<(Option<String>, Control), Diagnostics> {
    let mut c = Checker::new(text, program, false);
    c.sources = program.sources.clone();
    let tenant = stmt.tenant.as_ref().map(|t| t.node.clone());
    let control = c.statement(stmt, program);
    match control {
        Some(ctl) if c.diags.is_empty() => Ok((tenant, ctl)),
        _ => Err(c.diags),
    }
}

/// Maps byte offsets to 1-based line numbers.
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }
    pub fn line(&self, offset: usize) -> usize {
        match self.starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }
}

struct Checker<'a> {
    src: &'a str,
    lines: LineIndex,
    diags: Diagnostics,
    stdlib_mode: bool,
    sources: Vec<hir::Source>,
    source_spans: Vec<Span>,
    queries: Vec<hir::Query>,
    query_spans: BTreeMap<String, Span>,
    aggregates: Vec<Arc<hir::AggregateDef>>,
    functions: Vec<Arc<hir::FunctionDef>>,
    user_defs: BTreeMap<String, Span>,
    /// Every aggregate and function the program defines, checked or not yet.
    all_defs: HashSet<String>,
    /// When recording ([`analyze`]): each checked expression's span and type.
    types: Option<Vec<(Span, Type)>>,
}

/// Where the names of an expression come from.
enum Scope<'s> {
    /// A record flowing through a query.
    Row { shape: &'s Shape, from: &'s str },
    /// Numbered locals (aggregate bodies, function bodies); `other.x` in `merge` reads the
    /// other state at `other_base + index`.
    Locals { names: &'s [(String, Type)], other: Option<(usize, &'s [(String, Type)])> },
    /// A lambda's body: its parameters (locals from `base`), then the scope around it.
    Lambda { params: &'s [(String, Type)], base: usize, outer: &'s Scope<'s> },
}

impl Scope<'_> {
    /// How many locals the scope numbers (a lambda's parameters come after them).
    fn locals(&self) -> usize {
        match self {
            Scope::Row { .. } => 0,
            Scope::Locals { names, other } => names.len().max(other.map_or(0, |(b, o)| b + o.len())),
            Scope::Lambda { params, base, .. } => base + params.len(),
        }
    }
}

const NO_LOCALS: Scope<'static> = Scope::Locals { names: &[], other: None };

const LAMBDA_HELP: &str = "lambdas are arguments of `transform(xs, x => …)`, `filter(xs, x => …)` and `reduce(xs, start, (acc, x) => …)`; over a map, `(k, v) => …` (`transform(m, (k, v) => key, (k, v) => value)`, `reduce(m, start, (acc, k, v) => …)`)";

fn err_expr(span: Span) -> hir::Expr {
    hir::Expr { kind: ExprKind::Lit(Literal::Null), ty: Type::Error, span }
}

impl<'a> Checker<'a> {
    fn new(src: &'a str, lib: &hir::Program, stdlib_mode: bool) -> Self {
        Checker {
            src,
            lines: LineIndex::new(src),
            diags: Vec::new(),
            stdlib_mode,
            sources: Vec::new(),
            source_spans: Vec::new(),
            queries: Vec::new(),
            query_spans: BTreeMap::new(),
            aggregates: lib.aggregates.clone(),
            functions: lib.functions.clone(),
            user_defs: BTreeMap::new(),
            all_defs: HashSet::new(),
            types: None,
        }
    }

    fn finish(self) -> Result<hir::Program, Diagnostics> {
        if !self.diags.is_empty() {
            return Err(self.diags);
        }
        Ok(hir::Program {
            sources: self.sources,
            queries: self.queries,
            aggregates: self.aggregates,
            functions: self.functions,
        })
    }

    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn line(&self, span: Span) -> usize {
        self.lines.line(span.start)
    }

    /// A clause's whole text, comments dropped and whitespace collapsed.
    fn whole_text(&self, span: Span) -> String {
        let raw = self.src.get(span.start..span.end).unwrap_or("");
        let words: Vec<&str> = raw
            .lines()
            .map(|l| match crate::syntax::comment_start(l) {
                Some(i) => &l[..i],
                None => l,
            })
            .flat_map(str::split_whitespace)
            .collect();
        words.join(" ")
    }

    /// The first line of a clause's text, whitespace collapsed, for explain.
    fn text(&self, span: Span) -> String {
        let raw = self.src.get(span.start..span.end).unwrap_or("");
        let first = raw.lines().next().unwrap_or("");
        let first = match crate::syntax::comment_start(first) {
            Some(i) => &first[..i],
            None => first,
        };
        let mut t: String = first.split_whitespace().collect::<Vec<_>>().join(" ");
        if raw.lines().nth(1).is_some() {
            t.push_str(" …");
        }
        if t.chars().count() > 72 {
            t = t.chars().take(71).collect::<String>() + "…";
        }
        t
    }

    fn program(&mut self, p: &ast::Program) {
        for item in &p.items {
            match item {
                ast::Item::Aggregate(a) => self.all_defs.insert(a.name.node.clone()),
                ast::Item::Function(f) => self.all_defs.insert(f.name.node.clone()),
                _ => false,
            };
        }
        // Definitions first, so that queries may use aggregates and functions defined below them.
        for item in &p.items {
            match item {
                ast::Item::Aggregate(a) => self.aggregate_decl(a),
                ast::Item::Function(f) => self.function_decl(f),
                _ => {}
            }
        }
        for item in &p.items {
            match item {
                ast::Item::Stream(d) | ast::Item::Table(d) if self.stdlib_mode => self.err(Diagnostic::new(
                    Code::Syntax,
                    d.span,
                    "the standard library declares only aggregates and functions",
                )),
                ast::Item::Stream(d) => self.source_decl(d, SourceKind::Stream),
                ast::Item::Table(d) => self.source_decl(d, SourceKind::Table),
                _ => {}
            }
        }
        for item in &p.items {
            if let ast::Item::Query(q) = item {
                if self.stdlib_mode {
                    self.err(Diagnostic::new(
                        Code::Syntax,
                        q.span,
                        "the standard library declares only aggregates and functions",
                    ));
                    continue;
                }
                if let Some(prev) = self.query_spans.get(&q.name.node) {
                    let prev = *prev;
                    self.err(
                        Diagnostic::new(
                            Code::Duplicate,
                            q.name.span,
                            format!("query `{}` is defined twice", q.name.node),
                        )
                        .label("second definition")
                        .related(prev, "first defined here")
                        .help("query names name their state stores and topics; give each query its own"),
                    );
                    continue;
                }
                self.query_spans.insert(q.name.node.clone(), q.name.span);
                if !valid_topic(&q.name.node) {
                    self.err(
                        Diagnostic::new(
                            Code::BadTopic,
                            q.name.span,
                            format!("query name `{}` cannot be part of a topic name", q.name.node),
                        )
                        .label("names the query's stores and internal topics")
                        .help("use ASCII letters, digits, `_`, `.` and `-`"),
                    );
                    continue;
                }
                if let Some(hq) = self.query(q) {
                    self.queries.push(hq);
                }
            }
        }
    }

    // ------------------------------------------------------------------ declarations
}

trait WithCode {
    fn with_code(self, code: Code) -> Self;
}

impl WithCode for Diagnostic {
    fn with_code(mut self, code: Code) -> Self {
        self.code = code;
        self
    }
}

fn group_without_aggregate(span: Span) -> Diagnostic {
    Diagnostic::new(Code::GroupWithoutAggregate, span, "`group by` without `aggregate`")
        .label("grouped here")
        .help("follow `group by` with `aggregate { n = count() }`")
}

/// Kafka's rule for topic names.
pub fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The value field an expression reads directly, if it is a plain top-level field.
fn value_field(e: &hir::Expr) -> Option<usize> {
    match &e.kind {
        ExprKind::Field(Root::Value, p) if p.len() == 1 => Some(p[0]),
        _ => None,
    }
}

fn slugify(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

fn args_desc(a: &ast::AggItem) -> String {
    if a.star {
        "`*`".into()
    } else {
        plural(a.args.len(), "argument")
    }
}

/// The result type of a binary operator, if the operands fit it.
pub fn binary_type(op: BinOp, l: &Type, r: &Type) -> Option<Type> {
    use Type as T;
    if l.is_error() || r.is_error() {
        return Some(match op {
            BinOp::Or
            | BinOp::And
            | BinOp::Eq
            | BinOp::Ne
            | BinOp::Lt
            | BinOp::Le
            | BinOp::Gt
            | BinOp::Ge
            | BinOp::In
            | BinOp::NotIn => T::Bool,
            _ => T::Error,
        });
    }
    let nullable = l.is_nullable() || r.is_nullable();
    let (lb, rb) = (l.base(), r.base());
    let t = match op {
        BinOp::And | BinOp::Or => match (lb, rb) {
            (T::Bool | T::Null, T::Bool | T::Null) => T::Bool.nullable_if(nullable),
            _ => return None,
        },
        BinOp::Eq | BinOp::Ne => {
            l.unify(r)?;
            T::Bool
        }
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let u = l.unify(r)?;
            if !u.is_ordered() && *u.base() != T::Null {
                return None;
            }
            T::Bool.nullable_if(nullable)
        }
        BinOp::In | BinOp::NotIn => match rb {
            T::List(elem) => {
                l.unify(elem)?;
                T::Bool.nullable_if(l.is_nullable())
            }
            _ => return None,
        },
        BinOp::Add => match (lb, rb) {
            (T::Int, T::Int) => T::Int,
            (T::Int | T::Float, T::Int | T::Float) => T::Float,
            (T::String, T::String) => T::String,
            (T::Timestamp, T::Duration) | (T::Duration, T::Timestamp) => T::Timestamp,
            (T::Duration, T::Duration) => T::Duration,
            // Concatenation: `xs + [x]` (a user-defined aggregate's growing list).
            (T::List(a), T::List(b)) => T::List(Box::new(a.unify(b)?)),
            _ => return None,
        }
        .nullable_if(nullable),
        BinOp::Sub => match (lb, rb) {
            (T::Int, T::Int) => T::Int,
            (T::Int | T::Float, T::Int | T::Float) => T::Float,
            (T::Timestamp, T::Duration) => T::Timestamp,
            (T::Timestamp, T::Timestamp) | (T::Duration, T::Duration) => T::Duration,
            _ => return None,
        }
        .nullable_if(nullable),
        BinOp::Mul => match (lb, rb) {
            (T::Int, T::Int) => T::Int,
            (T::Int | T::Float, T::Int | T::Float) => T::Float,
            (T::Duration, T::Int) | (T::Int, T::Duration) => T::Duration,
            _ => return None,
        }
        .nullable_if(nullable),
        BinOp::Div | BinOp::Rem => match (lb, rb) {
            (T::Int, T::Int) => T::Int,
            (T::Int | T::Float, T::Int | T::Float) => T::Float,
            (T::Duration, T::Int) => T::Duration,
            _ => return None,
        }
        .nullable_if(nullable),
    };
    Some(t)
}

fn binary_help(op: BinOp, l: &Type, r: &Type) -> Option<String> {
    let (lb, rb) = (l.base(), r.base());
    Some(match op {
        BinOp::Add if (*lb == Type::String) != (*rb == Type::String) => {
            "convert with `to_string(x)`, or join strings with `concat`".into()
        }
        BinOp::In | BinOp::NotIn => {
            "`in` takes a list on the right: `x in [\"a\", \"b\"]` or `x in (\"a\", \"b\")`".into()
        }
        BinOp::And | BinOp::Or => "`and` and `or` take bools; compare first: `x > 0 and y > 0`".into(),
        _ if lb.is_numeric() && *rb == Type::String || *lb == Type::String && rb.is_numeric() => {
            "convert explicitly with `to_int`, `to_float` or `to_string`".into()
        }
        _ => return None,
    })
}

/// The argument of `explode(arg)` when the expression is exactly that call.
fn exploded(e: &Node<ast::Expr>) -> Option<&Node<ast::Expr>> {
    match &e.node {
        ast::Expr::Call { func, args } if func.node == "explode" && args.len() == 1 => Some(&args[0]),
        _ => None,
    }
}

/// How a source's key is declared, for a diagnostic.
fn key_desc(s: &hir::Source) -> String {
    let desc = match &s.key {
        KeySpec::Field(i) => format!("its field `{}` ({})", s.value.fields[*i].0, s.value.fields[*i].1),
        KeySpec::Named(n, t) => format!("`{n}: {t}`"),
        KeySpec::Raw => "the record key as it is".into(),
    };
    match s.key_format {
        Some(f) => format!("{desc} in {f}"),
        None => desc,
    }
}

/// An int expression where a float is wanted (a state field, a parameter), converted: a float
/// slot never holds an int, which `/` would divide as an integer and a restored state would
/// hold as a float.
fn widen(e: hir::Expr, want: &Type) -> hir::Expr {
    if *e.ty.base() == Type::Int && *want.base() == Type::Float {
        let (span, ty) = (e.span, Type::Float.nullable_if(e.ty.is_nullable()));
        hir::Expr { kind: ExprKind::Builtin(&crate::function::convert::TO_FLOAT, vec![e]), ty, span }
    } else {
        e
    }
}

/// Whether a type has the error type in it (an empty list's item type, or a reported mistake).
fn has_error(t: &Type) -> bool {
    match t {
        Type::Error => true,
        Type::Nullable(t) | Type::List(t) => has_error(t),
        Type::Map(k, v) => has_error(k) || has_error(v),
        Type::Record(r) => r.fields.iter().any(|(_, t)| has_error(t)),
        Type::Tuple(ts) => ts.iter().any(has_error),
        _ => false,
    }
}
