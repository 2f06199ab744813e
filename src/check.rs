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

    fn type_expr(&mut self, t: &Node<ast::TypeExpr>) -> Type {
        match &t.node {
            ast::TypeExpr::Prim(p) => Type::from(*p),
            ast::TypeExpr::List(inner) => Type::List(Box::new(self.type_expr(inner))),
            ast::TypeExpr::Map(k, v) => {
                let key = self.type_expr(k);
                self.map_key(&key, k.span);
                Type::Map(Box::new(key), Box::new(self.type_expr(v)))
            }
            ast::TypeExpr::Nullable(inner) => self.type_expr(inner).nullable(),
            ast::TypeExpr::Record(fields) => Type::Record(self.record_type(fields)),
        }
    }

    /// `map { k: v, … }`. Out of [`Checker::expr`] so that its locals do not enlarge that
    /// recursive function's frame.
    #[inline(never)]
    fn map_lit(&mut self, entries: &[(Node<ast::Expr>, Node<ast::Expr>)], span: Span, scope: &Scope) -> hir::Expr {
        let his: Vec<(hir::Expr, hir::Expr)> =
            entries.iter().map(|(k, v)| (self.expr(k, scope), self.expr(v, scope))).collect();
        let key = self.unify_all(his.iter().map(|(k, _)| k), "map keys", "every key of a map has one type");
        let value = self.unify_all(his.iter().map(|(_, v)| v), "map values", "every value of a map has one type");
        if !his.is_empty() {
            self.map_key(&key, his[0].0.span);
        }
        hir::Expr { kind: ExprKind::Map(his), ty: Type::Map(Box::new(key), Box::new(value)), span }
    }

    /// A map's keys are non-null scalars (their JSON form is an object's member name).
    fn map_key(&mut self, key: &Type, span: Span) {
        if !key.is_scalar() || key.is_nullable() {
            self.err(
                Diagnostic::new(Code::TypeMismatch, span, format!("a map's keys cannot be {key}"))
                    .label(format!("a {key}"))
                    .help("keys are string, int, float, bool, timestamp or duration, never null (wrap a nullable key in `coalesce`)"),
            );
        }
    }

    /// The one type of several expressions (a list's items, a map's keys or values), or the
    /// error type after a diagnostic at the first that does not fit.
    fn unify_all<'e>(&mut self, his: impl Iterator<Item = &'e hir::Expr>, what: &str, help: &str) -> Type {
        let mut elem: Option<Type> = None;
        for h in his {
            let Some(e) = &elem else {
                elem = Some(h.ty.clone());
                continue;
            };
            match e.unify(&h.ty) {
                Some(t) => elem = Some(t),
                None => {
                    self.err(
                        Diagnostic::new(Code::TypeMismatch, h.span, format!("{what} differ: {e} and {}", h.ty))
                            .label(format!("a {}", h.ty))
                            .help(help.to_string()),
                    );
                    return Type::Error;
                }
            }
        }
        elem.unwrap_or(Type::Error)
    }

    fn record_type(&mut self, fields: &[ast::FieldDecl]) -> RecordType {
        let mut out = RecordType::default();
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for f in fields {
            if let Some(prev) = seen.get(f.name.node.as_str()) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(Code::Duplicate, f.name.span, format!("field `{}` is declared twice", f.name.node))
                        .label("second declaration")
                        .related(prev, "first declared here"),
                );
                continue;
            }
            seen.insert(&f.name.node, f.name.span);
            let ty = self.type_expr(&f.ty);
            out.fields.push((f.name.node.clone(), ty));
        }
        out
    }

    fn source_decl(&mut self, d: &ast::SourceDecl, kind: SourceKind) {
        let what = if kind == SourceKind::Stream { "stream" } else { "table" };
        if let Some(i) = self.sources.iter().position(|s| s.name == d.name.node) {
            let prev = self.source_spans[i];
            self.err(
                Diagnostic::new(Code::Duplicate, d.name.span, format!("`{}` is declared twice", d.name.node))
                    .label("second declaration")
                    .related(prev, "first declared here")
                    .help("streams and tables share one namespace"),
            );
            return;
        }
        if let Some(t) = &d.topic {
            if !valid_topic(&t.node) {
                self.err(
                    Diagnostic::new(Code::BadTopic, t.span, format!("`{}` is not a valid topic name", t.node))
                        .label("invalid topic name")
                        .help("topic names are 1 to 249 characters of ASCII letters, digits, `.`, `_` and `-`"),
                );
            }
        }
        let mut first: BTreeMap<&'static str, Span> = BTreeMap::new();
        let (mut key, mut value, mut time, mut tenant) = (None, None, None, None);
        for item in &d.items {
            let slot = match &item.node {
                DeclItem::Key { .. } => "key",
                DeclItem::ValueJson { .. }
                | DeclItem::ValueString { .. }
                | DeclItem::ValueCsv { .. }
                | DeclItem::ValueRegistry { .. } => "value",
                DeclItem::Time(_) => "time",
                DeclItem::TenantField(_) | DeclItem::TenantHeader(_) => "tenant",
            };
            if let Some(prev) = first.get(slot) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(
                        Code::DuplicateDecl,
                        item.span,
                        format!("`{slot}` is declared twice in {what} `{}`", d.name.node),
                    )
                    .label("second declaration")
                    .related(prev, "first declared here"),
                );
                continue;
            }
            first.insert(slot, item.span);
            match slot {
                "key" => key = Some(item),
                "value" => value = Some(item),
                "time" => time = Some(item),
                _ => tenant = Some(item),
            }
        }
        let global = kind == SourceKind::Table && d.topic.is_none();
        let (format, mut wire) = match value.map(|v| &v.node) {
            Some(DeclItem::ValueJson { fields, .. }) => (Format::Json, self.record_type(fields)),
            Some(DeclItem::ValueString { name }) => {
                let n = name.as_ref().map(|n| n.node.clone()).unwrap_or_else(|| "value".into());
                (Format::String, RecordType { fields: vec![(n, Type::String)] })
            }
            Some(DeclItem::ValueCsv { delimiter, fields }) => {
                let rt = self.record_type(fields);
                for (f, (_, t)) in fields.iter().zip(&rt.fields) {
                    if !t.is_scalar() {
                        self.err(
                            Diagnostic::new(Code::BadFormat, f.ty.span, format!("a csv column cannot be a {t}"))
                                .label("not a scalar")
                                .help("csv columns are string, int, float, bool, timestamp or duration (nullable or not); use `value json` for nested values"),
                        );
                    }
                }
                if fields.is_empty() {
                    self.err(
                        Diagnostic::new(
                            Code::BadFormat,
                            value.map(|v| v.span).unwrap_or(d.name.span),
                            "a csv value with no columns",
                        )
                        .label("no fields")
                        .help("declare the columns in order, e.g. `value csv { ticker: string, price: float }`"),
                    );
                }
                (Format::Csv(*delimiter), rt)
            }
            Some(DeclItem::ValueRegistry { format, from_registry: true, .. }) => {
                // (`streamc check` and `run` fill the fields in from the registry first: this is
                // a program read without it, e.g. by an editor.)
                let topic = d.topic.as_ref().map_or("<topic>".to_string(), |t| t.node.clone());
                self.err(
                    Diagnostic::new(
                        Code::BadFormat,
                        value.map(|v| v.span).unwrap_or(d.name.span),
                        format!("the fields of `value {format}` come from the schema registry's latest schema of `{topic}-value`"),
                    )
                    .label("fields from the registry")
                    .help(format!("`streamc check` and `streamc run` look them up with `schema.registry.url` set; or declare them, e.g. `value {format} {{ ticker: string, price: float }}`")),
                );
                return;
            }
            Some(DeclItem::ValueRegistry { format, fields, .. }) => {
                let rt = self.record_type(fields);
                let (why, help) = match format {
                    Format::Protobuf => (
                        crate::protobuf::unsupported(&rt).map(|w| format!("no Protobuf form: {w}")),
                        "Protobuf field names are letters, digits and `_`; map keys are strings or ints; lists and map values are not nullable and do not nest without a record between",
                    ),
                    _ => (
                        crate::avro::unsupported(&rt).map(|w| format!("no Avro form: {w}")),
                        "Avro names are letters, digits and `_`; map keys are strings",
                    ),
                };
                if let Some(why) = why {
                    self.err(
                        Diagnostic::new(Code::BadFormat, value.map(|v| v.span).unwrap_or(d.name.span), why)
                            .label(format!("{format} value"))
                            .help(help),
                    );
                }
                (*format, rt)
            }
            _ => {
                self.err(
                    Diagnostic::new(
                        Code::MissingValue,
                        d.name.span,
                        format!("{what} `{}` declares no value", d.name.node),
                    )
                    .label("no `value` in this declaration")
                    .help("declare the value's schema, e.g. `value json { ticker: string, price: float }`"),
                );
                return;
            }
        };
        if global && format != Format::Json {
            self.err(
                Diagnostic::new(
                    Code::BadFormat,
                    value.map(|v| v.span).unwrap_or(d.name.span),
                    format!("a table with no topic has no format, so not `{format}`"),
                )
                .label("control-managed table")
                .help("its rows come from `update` statements: declare `value { … }`"),
            );
        }
        let key_format = match key.map(|k| &k.node) {
            Some(DeclItem::Key { format: Some(f), .. }) => {
                if global {
                    self.err(
                        Diagnostic::new(
                            Code::BadFormat,
                            f.span,
                            format!("a table with no topic has no key format, so not `{}`", f.node),
                        )
                        .label("control-managed table")
                        .help("its keys come from `update` statements: drop the key's format"),
                    );
                }
                Some(f.node)
            }
            _ => None,
        };
        // The tenant field leaves the schema the queries see.
        let mut visible = wire.clone();
        let tenant_spec = match tenant.map(|t| &t.node) {
            Some(DeclItem::TenantField(f)) => {
                match wire.get(&f.node) {
                    Some((_, t)) if *t.base() == Type::String => {}
                    Some((_, t)) => self.err(
                        Diagnostic::new(Code::BadTenant, f.span, format!("the tenant field `{}` is a {t}", f.node))
                            .label("must be a string")
                            .help("a tenant id is a string field, or a header: `tenant header \"x-tenant\"`"),
                    ),
                    None => self.err(self.unknown_field(f, &wire, &format!("{what} `{}`", d.name.node))),
                }
                if let Some(i) = visible.index_of(&f.node) {
                    visible.fields.remove(i);
                }
                // Decoded as nullable, so that a record without one is refused for that reason
                // ("the record has no tenant"), not as a malformed record.
                if let Some(i) = wire.index_of(&f.node) {
                    let t = wire.fields[i].1.clone();
                    wire.fields[i].1 = t.nullable();
                }
                Some(hir::TenantSpec::Field(f.node.clone()))
            }
            Some(DeclItem::TenantHeader(h)) => Some(hir::TenantSpec::Header(h.node.clone())),
            _ => None,
        };
        if global {
            if let Some(t) = tenant {
                self.err(
                    Diagnostic::new(Code::BadTenant, t.span, "a table with no topic cannot declare a tenant")
                        .label("control-managed table")
                        .help("scope its rows with `for tenant \"t\" update …` statements instead"),
                );
            }
        }
        let key_spec = match key.map(|k| &k.node) {
            Some(DeclItem::Key { name, ty: None, .. }) => match visible.get(&name.node) {
                Some((i, t)) => {
                    if !t.is_scalar() || t.is_nullable() {
                        let t = t.clone();
                        self.err(
                            Diagnostic::new(Code::BadKey, name.span, format!("key field `{}` is a {t}", name.node))
                                .label("not usable as a key")
                                .help("a key is a non-null scalar: string, int, float, bool, timestamp or duration"),
                        );
                    }
                    KeySpec::Field(i)
                }
                None => {
                    self.err(
                        self.unknown_field(name, &visible, &format!("{what} `{}`", d.name.node))
                            .with_code(Code::BadKey),
                    );
                    KeySpec::Raw
                }
            },
            Some(DeclItem::Key { name, ty: Some(ty), .. }) => {
                let t = self.type_expr(ty);
                if visible.get(&name.node).is_some() {
                    self.err(
                        Diagnostic::new(Code::BadKey, name.span, format!("`{}` is already a value field", name.node))
                            .label("declared as a separate key")
                            .help(format!("write `key {}` to key the records by that field", name.node)),
                    );
                } else if !t.is_scalar() || t.is_nullable() {
                    self.err(
                        Diagnostic::new(Code::BadKey, ty.span, format!("a key cannot be a {t}"))
                            .label("not usable as a key")
                            .help("a key is a non-null scalar: string, int, float, bool, timestamp or duration"),
                    );
                }
                KeySpec::Named(name.node.clone(), t)
            }
            _ => {
                if kind == SourceKind::Table {
                    self.err(
                        Diagnostic::new(Code::BadKey, d.name.span, format!("table `{}` declares no key", d.name.node))
                            .label("a table is a map from key to value")
                            .help("declare its key: `key ticker` (a value field) or `key ticker: string`"),
                    );
                }
                KeySpec::Raw
            }
        };
        let time_idx = match time.map(|t| &t.node) {
            Some(DeclItem::Time(f)) => match visible.get(&f.node) {
                Some((i, Type::Timestamp)) => Some(i),
                Some((_, t)) => {
                    let t = t.clone();
                    self.err(
                        Diagnostic::new(Code::BadTime, f.span, format!("event time field `{}` is a {t}", f.node))
                            .label("must be a non-null timestamp")
                            .help(
                                "declare it as `timestamp`: JSON epoch milliseconds or RFC 3339 strings are accepted",
                            ),
                    );
                    None
                }
                None => {
                    self.err(
                        self.unknown_field(f, &visible, &format!("{what} `{}`", d.name.node)).with_code(Code::BadTime),
                    );
                    None
                }
            },
            _ => None,
        };
        self.source_spans.push(d.name.span);
        self.sources.push(hir::Source {
            name: d.name.node.clone(),
            kind,
            topic: d.topic.as_ref().map(|t| t.node.clone()),
            key: key_spec,
            key_format,
            format,
            value: visible,
            wire,
            time: time_idx,
            tenant: tenant_spec,
            span: d.span,
            line: self.line(d.span),
        });
    }

    fn unknown_field(&self, name: &ast::Ident, rec: &RecordType, owner: &str) -> Diagnostic {
        let help = did_you_mean(&name.node, rec.names()).unwrap_or_else(|| {
            if rec.fields.is_empty() {
                format!("{owner} has no fields")
            } else {
                format!("{owner} has {}", rec.names().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
            }
        });
        Diagnostic::new(Code::UnknownField, name.span, format!("unknown field `{}`", name.node))
            .label(format!("not a field of {owner}"))
            .help(help)
    }

    fn define(&mut self, name: &ast::Ident, what: &str) -> bool {
        // (`explode` is the flat map of `select`, and the lambda functions are typed here: built-ins too.)
        if function::lookup(&name.node).is_some()
            || function::lambda_doc(&name.node).is_some()
            || aggregate::lookup(&name.node).is_some()
            || name.node == "explode"
        {
            self.err(
                Diagnostic::new(
                    Code::Duplicate,
                    name.span,
                    format!("`{}` is a built-in and cannot be redefined", name.node),
                )
                .label(format!("this {what}"))
                .help("choose another name"),
            );
            return false;
        }
        let taken =
            self.aggregates.iter().any(|a| a.name == name.node) || self.functions.iter().any(|f| f.name == name.node);
        if taken {
            let mut d = Diagnostic::new(Code::Duplicate, name.span, format!("`{}` is defined twice", name.node))
                .label(format!("this {what}"));
            match self.user_defs.get(&name.node) {
                Some(prev) => d = d.related(*prev, "first defined here"),
                None => d = d.help("the standard library already defines it; choose another name"),
            }
            self.err(d);
            return false;
        }
        self.user_defs.insert(name.node.clone(), name.span);
        true
    }

    fn params(&mut self, params: &[ast::Param]) -> Vec<(String, Type)> {
        let mut out: Vec<(String, Type)> = Vec::new();
        for p in params {
            if out.iter().any(|(n, _)| *n == p.name.node) {
                self.err(
                    Diagnostic::new(
                        Code::Duplicate,
                        p.name.span,
                        format!("parameter `{}` is declared twice", p.name.node),
                    )
                    .label("duplicate"),
                );
            }
            let t = self.type_expr(&p.ty);
            out.push((p.name.node.clone(), t));
        }
        out
    }

    fn aggregate_decl(&mut self, a: &ast::AggregateDecl) {
        if !self.define(&a.name, "aggregate") {
            return;
        }
        let params = self.params(&a.params);
        let result_type = self.type_expr(&a.result_type);
        let mut state: Vec<(String, Type)> = Vec::new();
        let mut init = Vec::new();
        for ast::InitField { name, ty, value: e } in &a.init {
            let reported = self.diags.len();
            let mut he = self.expr(e, &NO_LOCALS);
            // An empty list (`[]`, `[] + []`, `if c then [] else []`) has no item type; an
            // error type from a mistake already reported is not one.
            let empty_list = self.diags.len() == reported && has_error(&he.ty);
            if let Some(t) = ty {
                let want = self.type_expr(t);
                if !he.ty.assignable_to(&want) {
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            e.span,
                            format!("`{}` is declared {want}, but its initial value is a {}", name.node, he.ty),
                        )
                        .label(format!("a {}", he.ty))
                        .related(t.span, "declared here"),
                    );
                }
                he = widen(he, &want);
                he.ty = want;
            } else if empty_list {
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        e.span,
                        format!("the initial value of `{}` has no type", name.node),
                    )
                    .label("an empty list of what?")
                    .help(format!("write the state field's type: `{}: list<string> = []`", name.node)),
                );
            }
            if he.ty == Type::Null {
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        e.span,
                        format!("the initial value of `{}` has no type", name.node),
                    )
                    .label("`null` alone")
                    .help("start from a typed value, e.g. `0`, `0.0` or `\"\"`, and track emptiness with a count"),
                );
            }
            if state.iter().any(|(n, _)| *n == name.node) {
                self.err(
                    Diagnostic::new(
                        Code::Duplicate,
                        name.span,
                        format!("state field `{}` is declared twice", name.node),
                    )
                    .label("duplicate"),
                );
            }
            state.push((name.node.clone(), he.ty.clone()));
            init.push(he);
        }
        let mut locals: Vec<(String, Type)> = params.iter().cloned().chain(state.iter().cloned()).collect();
        let update = self.stmts(&a.update, &mut locals, params.len(), &state, None);
        let update_slots = locals.len();
        let (undo, undo_slots) = match &a.undo {
            Some(u) => {
                let mut locals: Vec<(String, Type)> = params.iter().cloned().chain(state.iter().cloned()).collect();
                let stmts = self.stmts(u, &mut locals, params.len(), &state, None);
                (Some(stmts), locals.len())
            }
            None => (None, 0),
        };
        let (merge, merge_slots) = match &a.merge {
            Some(m) => {
                // Slots: the state, then the other state, which is read only as `other.x`: its
                // slots are named so that a plain name never finds them (a plain `n` is the
                // first state's, not the other's).
                let mut locals: Vec<(String, Type)> =
                    state.iter().cloned().chain(state.iter().map(|(n, t)| (format!("other.{n}"), t.clone()))).collect();
                let stmts = self.stmts(m, &mut locals, 0, &state, Some(&state));
                (Some(stmts), locals.len())
            }
            None => (None, 0),
        };
        let result = self.expr(&a.result, &Scope::Locals { names: &state, other: None });
        if !result.ty.assignable_to(&result_type) {
            self.err(
                Diagnostic::new(
                    Code::BadResult,
                    a.result.span,
                    format!("the result is a {}, but `{}` declares {}", result.ty, a.name.node, result_type),
                )
                .label(format!("this is a {}", result.ty))
                .related(a.result_type.span, "declared here"),
            );
        }
        let in_place = hir::in_place(&update, params.len(), state.len());
        self.aggregates.push(Arc::new(hir::AggregateDef {
            in_place,
            name: a.name.node.clone(),
            params,
            state,
            init,
            update,
            update_slots,
            merge,
            merge_slots,
            undo,
            undo_slots,
            result,
            result_type,
            stdlib: self.stdlib_mode,
        }));
    }

    /// Check statements over `locals` (which grows with each `let`). Assignments may target the
    /// state fields, which start at `state_base`. In `merge`, `other` is the second state.
    fn stmts(
        &mut self,
        stmts: &[Node<ast::Stmt>],
        locals: &mut Vec<(String, Type)>,
        state_base: usize,
        state: &[(String, Type)],
        other: Option<&[(String, Type)]>,
    ) -> Vec<hir::Stmt> {
        let mut out = Vec::new();
        for s in stmts {
            let (target, e, is_let) = match &s.node {
                ast::Stmt::Let(n, e) => (n, e, true),
                ast::Stmt::Assign(n, e) => (n, e, false),
            };
            let scope = Scope::Locals { names: locals, other: other.map(|o| (state.len(), o)) };
            let he = self.expr(e, &scope);
            if is_let {
                locals.push((target.node.clone(), he.ty.clone()));
                out.push(hir::Stmt::Set(locals.len() - 1, he));
                continue;
            }
            match state.iter().position(|(n, _)| *n == target.node) {
                Some(i) => {
                    let want = &state[i].1;
                    if !he.ty.assignable_to(want) {
                        self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                e.span,
                                format!("`{}` is a {want}, but this is a {}", target.node, he.ty),
                            )
                            .label(format!("a {}", he.ty))
                            .help("the state's types come from the values in `init`"),
                        );
                    }
                    out.push(hir::Stmt::Set(state_base + i, widen(he, want)));
                }
                None if locals.iter().any(|(n, _)| *n == target.node) => {
                    self.err(
                        Diagnostic::new(Code::UnknownState, target.span, format!("`{}` is not a state field", target.node))
                            .label("assigned here")
                            .help("parameters and `let` temporaries cannot be reassigned; bind a new `let`, or declare it in `init`"),
                    );
                }
                None => {
                    let help = did_you_mean(&target.node, state.iter().map(|(n, _)| n.as_str())).unwrap_or_else(|| {
                        "only the fields declared in `init` can be assigned; use `let` for a temporary".into()
                    });
                    self.err(
                        Diagnostic::new(
                            Code::UnknownState,
                            target.span,
                            format!("`{}` is not a state field", target.node),
                        )
                        .label("assigned here")
                        .help(help),
                    );
                }
            }
        }
        out
    }

    fn function_decl(&mut self, f: &ast::FunctionDecl) {
        if !self.define(&f.name, "function") {
            return;
        }
        let params = self.params(&f.params);
        let result_type = self.type_expr(&f.result_type);
        let body = self.expr(&f.body, &Scope::Locals { names: &params, other: None });
        if !body.ty.assignable_to(&result_type) {
            self.err(
                Diagnostic::new(
                    Code::BadResult,
                    f.body.span,
                    format!("the body is a {}, but `{}` declares {}", body.ty, f.name.node, result_type),
                )
                .label(format!("this is a {}", body.ty))
                .related(f.result_type.span, "declared here"),
            );
        }
        self.functions.push(Arc::new(hir::FunctionDef {
            name: f.name.node.clone(),
            params,
            body,
            result_type,
            stdlib: self.stdlib_mode,
        }));
    }

    // ------------------------------------------------------------------ queries

    /// Whether table `src` (a query's input, `from src`) may join `o` at this clause: a
    /// table–table join needs a topic-fed table on the other side, right after `from` (what
    /// comes before the join would have to be kept per key for updates of the other side).
    fn table_join_allowed(
        &mut self,
        src: &hir::Source,
        o: &hir::Source,
        clause: Span,
        other: Span,
        after_steps: bool,
    ) -> bool {
        let refuse = |c: &mut Self, d: Diagnostic| {
            c.err(d);
            false
        };
        if o.kind == SourceKind::Stream {
            return refuse(
                self,
                Diagnostic::new(Code::JoinKind, other, format!("table `{}` cannot join stream `{}`", src.name, o.name))
                    .label("a stream")
                    .help(format!(
                        "a table joins tables; to look up `{}` for each record of `{}`, write `from {} join {} on …`",
                        src.name, o.name, o.name, src.name
                    )),
            );
        }
        if o.is_global() || src.is_global() {
            let name = if o.is_global() { &o.name } else { &src.name };
            return refuse(
                self,
                Diagnostic::new(Code::JoinKind, other, format!("`{name}` is a control-managed table"))
                    .label("no topic")
                    .help("a table–table join needs both tables read from topics (co-partitioned by their keys)"),
            );
        }
        if after_steps {
            return refuse(
                self,
                Diagnostic::new(Code::ClauseOrder, clause, "in a table–table join, `join` comes right after `from`")
                    .label("after other clauses")
                    .help("move the `where` or `select` after the join: they may use both tables' fields"),
            );
        }
        true
    }

    fn lookup_source(&mut self, name: &ast::Ident) -> Option<usize> {
        if let Some(i) = self.sources.iter().position(|s| s.name == name.node) {
            return Some(i);
        }
        let names: Vec<&str> = self.sources.iter().map(|s| s.name.as_str()).collect();
        let help = did_you_mean(&name.node, names.iter().copied()).unwrap_or_else(|| {
            if names.is_empty() {
                "declare it first: `stream NAME from \"topic\" { … }`".to_string()
            } else {
                format!(
                    "declared streams and tables: {}",
                    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                )
            }
        });
        let mut d = Diagnostic::new(Code::UnknownSource, name.span, format!("unknown stream or table `{}`", name.node))
            .label("not declared")
            .help(help);
        if self.query_spans.contains_key(&name.node) {
            d = d.help(format!("`{}` is a query; read its output topic through a stream declaration", name.node));
        }
        self.err(d);
        None
    }

    /// The other streams of `from a, b, …`: each a stream (not a table) of the first one's key
    /// and value types, read once, with the same tenant scoping.
    fn merged_inputs(&mut self, input: usize, names: &[ast::Ident]) -> Option<Vec<usize>> {
        let mut merged: Vec<usize> = Vec::new();
        let mut ok = true;
        let main = self.sources[input].clone();
        if !names.is_empty() && main.kind != SourceKind::Stream {
            self.err(
                Diagnostic::new(
                    Code::NotAStreamOrTable,
                    names[0].span,
                    format!("`{}` is a table: only streams merge", main.name),
                )
                .label("merged with a table")
                .help("merge streams; a table's updates can be joined (`join`) instead"),
            );
            return None;
        }
        for name in names {
            let Some(i) = self.lookup_source(name) else {
                ok = false;
                continue;
            };
            let other = self.sources[i].clone();
            let mut problem = |this: &mut Self, code: Code, msg: String, label: &str, help: String| {
                this.err(Diagnostic::new(code, name.span, msg).label(label.to_string()).help(help));
                ok = false;
            };
            if i == input || merged.contains(&i) {
                problem(
                    self,
                    Code::Duplicate,
                    format!("`{}` is merged twice", other.name),
                    "already read",
                    "name each stream once".into(),
                );
                continue;
            }
            if other.kind != SourceKind::Stream {
                let what = if other.is_global() { "a control-managed table" } else { "a table" };
                problem(
                    self,
                    Code::NotAStreamOrTable,
                    format!("`{}` is {what}: only streams merge", other.name),
                    "not a stream",
                    "join a table instead: `join T on …`".into(),
                );
                continue;
            }
            if other.key != main.key || other.key_type() != main.key_type() || other.key_format != main.key_format {
                problem(
                    self,
                    Code::TypeMismatch,
                    format!("`{}` is keyed by {}, `{}` by {}", other.name, key_desc(&other), main.name, key_desc(&main)),
                    "another key",
                    "merged streams are keyed alike: declare the same `key`, or merge after `key by` in a query of each".into(),
                );
                continue;
            }
            if other.value != main.value {
                problem(
                    self,
                    Code::TypeMismatch,
                    format!("`{}` has values {}, `{}` has {}", other.name, other.value, main.name, main.value),
                    "another value type",
                    "merged streams have one value type, field for field in the same order; `select` each into one shape in a query of its own first".into(),
                );
                continue;
            }
            if other.tenant.is_some() != main.tenant.is_some() {
                problem(
                    self,
                    Code::BadTenant,
                    format!("`{}` and `{}` differ in tenant scoping", other.name, main.name),
                    "tenant-scoped on one side only",
                    "merge streams that are both tenant-scoped, or neither".into(),
                );
                continue;
            }
            merged.push(i);
        }
        ok.then_some(merged)
    }

    fn query(&mut self, q: &ast::QueryDecl) -> Option<hir::Query> {
        let mut clauses = q.clauses.iter();
        let first = clauses.next();
        let (from, merge_names, alias) = match first.map(|c| &c.node) {
            Some(Clause::From { inputs, alias }) if !inputs.is_empty() => (&inputs[0], &inputs[1..], alias),
            Some(other) => {
                let first = first.map(|c| c.span).unwrap_or(q.name.span);
                self.err(
                    Diagnostic::new(
                        Code::MissingFrom,
                        first,
                        format!("query `{}` must start with `from`", q.name.node),
                    )
                    .label(format!("`{}` before any `from`", other.keyword()))
                    .help("the first clause names the input: `from trades`"),
                );
                return None;
            }
            None => {
                self.err(
                    Diagnostic::new(Code::MissingFrom, q.name.span, format!("query `{}` is empty", q.name.node))
                        .label("no clauses")
                        .help("a query reads `from` a stream and writes `to` a topic"),
                );
                return None;
            }
        };
        let input = self.lookup_source(from)?;
        let src = self.sources[input].clone();
        if src.is_global() {
            self.err(
                Diagnostic::new(
                    Code::NotAStreamOrTable,
                    from.span,
                    format!("`{}` is a control-managed table", from.node),
                )
                .label("has no topic to read")
                .help(format!("join it instead: `join {} on …`", from.node)),
            );
            return None;
        }
        let merged = self.merged_inputs(input, merge_names)?;
        let mut shape = Shape {
            key: src.key_type(),
            value: src.value.clone(),
            key_name: match &src.key {
                KeySpec::Named(n, _) => Some(n.clone()),
                _ => None,
            },
            key_field: match &src.key {
                KeySpec::Field(i) => Some(*i),
                _ => None,
            },
            // Keys in the wire format are partitioned by their encoded bytes (schema id included),
            // not by the key: a `group by` or a join repartitions by the key's text first.
            partitioned: src.key_format.is_none(),
            joined: Vec::new(),
            table: src.kind == SourceKind::Table,
            windowed: false,
            tenant_scoped: src.tenant.is_some(),
        };
        // The name the input goes by in the query: its own, or the one `as` gives it.
        let mut from_name = alias.as_ref().map(|a| a.node.clone()).unwrap_or_else(|| src.name.clone());
        let mut steps: Vec<hir::Step> = Vec::new();
        // The sources joined so far, each with the number of repartitions before it (`cuts`): a
        // source joined twice between two repartitions would be read twice by one task.
        let mut joined_in: Vec<(usize, u32)> = Vec::new();
        // A foreign-key join's clause, once there is one (nothing groups its result), and
        // whether a `group by` was refused for it (its `aggregate` is then not reported again).
        let mut foreign_join: Option<Span> = None;
        let mut refused_group = false;
        let mut cuts = 0u32;
        let mut slugs: HashSet<String> = HashSet::new();
        // The groupings, the clause, a repartition, a table's rows grouped (Kafka Streams'
        // KGroupedTable: an update takes the row's old value back out of its group).
        type Grouping = (Vec<(String, hir::Expr)>, Span, bool, bool);
        let mut group: Option<Grouping> = None;
        let mut window: Option<(hir::Window, Span)> = None;
        let mut aggregated: Option<usize> = None; // index of the aggregate step
        let mut emitted = false;
        let mut sinks: Vec<hir::Sink> = Vec::new();
        let mut ok = true;

        for c in clauses {
            if let Some(last) = sinks.last() {
                let another_to = matches!(c.node, Clause::To { .. });
                if !another_to {
                    self.err(
                        Diagnostic::new(Code::ClauseOrder, c.span, format!("`{}` after `to`", c.node.keyword()))
                            .label("nothing can follow `to`")
                            .help("`to` is the last clause of a query (several `to … when` branches may end it)"),
                    );
                    ok = false;
                    continue;
                }
                if last.when.is_none() {
                    self.err(
                        Diagnostic::new(Code::ClauseOrder, c.span, "this `to` is never reached")
                            .label("every record went to the `to` before it")
                            .related(last.span, "this `to` takes every record")
                            .help("branch with conditions: `to \"big\" when amount > 1000` before the `to` that takes the rest"),
                    );
                    ok = false;
                    continue;
                }
            }
            let in_group = group.is_some();
            // (Joins of tables on the key may follow one another: an n-way join.)
            let after_steps = steps.iter().any(|s| !matches!(s.kind, StepKind::JoinTable { mutual: true, .. }));
            let order_err = |this: &mut Self, msg: &str, help: &str| {
                this.err(
                    Diagnostic::new(Code::ClauseOrder, c.span, msg.to_string())
                        .label("out of order")
                        .help(help.to_string()),
                );
            };
            let mut push = |this: &mut Self, kind: StepKind, base: &str, out: Shape| {
                let mut slug = base.to_string();
                let mut n = 2;
                while !slugs.insert(slug.clone()) {
                    slug = format!("{base}-{n}");
                    n += 1;
                }
                steps.push(hir::Step {
                    kind,
                    slug,
                    span: c.span,
                    line: this.line(c.span),
                    text: this.text(c.span),
                    out,
                });
            };
            match &c.node {
                Clause::From { .. } => {
                    self.err(
                        Diagnostic::new(Code::DuplicateClause, c.span, "a query has one `from`")
                            .label("second `from`")
                            .help("combine inputs with `join`, or merge streams in the first: `from a, b`"),
                    );
                    ok = false;
                }
                Clause::Where(e) => {
                    if in_group {
                        order_err(
                            self,
                            "`where` between `group by` and `aggregate`",
                            "filter before `group by`, or after `aggregate` to filter the table",
                        );
                        ok = false;
                        continue;
                    }
                    let he = self.expr(e, &Scope::Row { shape: &shape, from: &from_name });
                    self.expect_bool(&he, "`where`");
                    push(self, StepKind::Filter(he), "where", shape.clone());
                }
                Clause::Select(items) => {
                    if in_group {
                        order_err(
                            self,
                            "`select` between `group by` and `aggregate`",
                            "map before `group by`, or after `aggregate`",
                        );
                        ok = false;
                        continue;
                    }
                    // `name = explode(list)`: a flat map, one record per item.
                    let explodes: Vec<(usize, &Node<ast::Expr>)> = items
                        .iter()
                        .enumerate()
                        .filter_map(|(i, it)| match &it.node {
                            ast::SelectItem::Named(_, e) => exploded(e).map(|arg| (i, arg)),
                            _ => None,
                        })
                        .collect();
                    let Some(&(at_item, _)) = explodes.first() else {
                        let (fields, out) = self.select(items, &shape, &from_name);
                        shape = out;
                        push(self, StepKind::Map(fields), "select", shape.clone());
                        continue;
                    };
                    let span = items[at_item].span;
                    let refuse = |this: &mut Self, span: Span, msg: &str, help: &str| {
                        this.err(
                            Diagnostic::new(Code::Explode, span, msg.to_string()).label("here").help(help.to_string()),
                        );
                    };
                    if shape.table || aggregated.is_some() {
                        refuse(self, span, "`explode` on a table", "a table's rows (and an aggregate's results) are one per key: explode the records of a stream");
                        ok = false;
                        continue;
                    }
                    // Each list itself in its item's place, then its item type for the field.
                    // Several are zipped (ksqlDB's table functions): past a shorter list's end
                    // its field is null.
                    let mut plain = items.to_vec();
                    let mut names = Vec::new();
                    for &(i, arg) in &explodes {
                        if let ast::SelectItem::Named(n, _) = &items[i].node {
                            plain[i] = Node::new(items[i].span, ast::SelectItem::Named(n.clone(), arg.clone()));
                            names.push((n.node.clone(), arg.span));
                        }
                    }
                    let (fields, mut out) = self.select(&plain, &shape, &from_name);
                    let mut at = Vec::new();
                    for (name, arg_span) in names {
                        let Some(i) = fields.iter().position(|(n, _)| *n == name) else {
                            ok = false;
                            continue;
                        };
                        let item = match fields[i].1.ty.base() {
                            Type::List(t) => Some((**t).clone()),
                            Type::Error => Some(Type::Error),
                            _ => None,
                        };
                        let Some(item) = item else {
                            refuse(
                                self,
                                arg_span,
                                &format!("`explode` takes a list, not a {}", fields[i].1.ty),
                                "explode a list field, or `split(text, \",\")`",
                            );
                            ok = false;
                            continue;
                        };
                        out.value.fields[i].1 = if explodes.len() > 1 { item.nullable() } else { item };
                        if out.key_field == Some(i) {
                            out.key_field = None;
                        }
                        at.push(i);
                    }
                    if at.len() != explodes.len() {
                        continue;
                    }
                    shape = out;
                    push(self, StepKind::Explode { fields, at }, "select", shape.clone());
                }
                Clause::KeyBy(e) => {
                    if in_group || shape.table {
                        order_err(
                            self,
                            "`key by` after `group by` or on a table",
                            "re-key the stream before grouping it",
                        );
                        ok = false;
                        continue;
                    }
                    let he = self.expr(e, &Scope::Row { shape: &shape, from: &from_name });
                    self.expect_key(&he, "a `key by` expression");
                    shape.key = he.ty.clone();
                    shape.key_name = None;
                    shape.key_field = value_field(&he);
                    shape.partitioned = false;
                    push(self, StepKind::Rekey(he), "key-by", shape.clone());
                }
                Clause::GroupBy(items) => {
                    if let Some(fk) = foreign_join {
                        self.err(
                            Diagnostic::new(Code::ClauseOrder, c.span, "`group by` after a foreign-key join")
                                .label("grouping the join's result")
                                .related(fk, "the foreign-key join")
                                .help("write the join's result to a topic and read it as a table, then group that"),
                        );
                        ok = false;
                        refused_group = true;
                        continue;
                    }
                    if aggregated.is_some() {
                        order_err(
                            self,
                            "`group by` after `aggregate`",
                            "a query aggregates once; group before `aggregate`",
                        );
                        ok = false;
                        continue;
                    }
                    if in_group {
                        self.err(
                            Diagnostic::new(Code::DuplicateClause, c.span, "a second `group by`")
                                .label("already grouped")
                                .help("list every grouping in one `group by a, b`"),
                        );
                        ok = false;
                        continue;
                    }
                    // A key that is no field of the value (`key id: int`) would read as the
                    // group key after the repartition: unless the grouping is that key alone, it
                    // travels in the value instead, as a field of its name, which the group items
                    // and aggregates then read (ksqlDB's key columns stay readable after GROUP BY).
                    let key_alone = matches!(items.as_slice(), [g] if g.alias.is_none()
                        && matches!(&g.expr.node, ast::Expr::Path(p) if p.len() == 1 && Some(&p[0].node) == shape.key_name.as_ref()));
                    if let Some(k) = shape.key_name.clone().filter(|k| !key_alone && shape.value.get(k).is_none()) {
                        shape.value.fields.push((k.clone(), shape.key.clone()));
                        shape.key_name = None;
                        shape.key_field = Some(shape.value.fields.len() - 1);
                        push(self, StepKind::KeyAsField(k), "key-as-field", shape.clone());
                    }
                    let mut out = Vec::new();
                    for g in items {
                        let he = self.expr(&g.expr, &Scope::Row { shape: &shape, from: &from_name });
                        self.expect_key(&he, "a `group by` expression");
                        let name = match (&g.alias, &g.expr.node) {
                            (Some(a), _) => a.node.clone(),
                            (None, ast::Expr::Path(p)) => p.last().map(|i| i.node.clone()).unwrap_or_default(),
                            _ => {
                                self.err(
                                    Diagnostic::new(Code::GroupNeedsName, g.expr.span, "this grouping needs a name")
                                        .label("not a plain field")
                                        .help("name it with `as`: `group by lower(ticker) as ticker`"),
                                );
                                String::new()
                            }
                        };
                        if out.iter().any(|(n, _): &(String, hir::Expr)| *n == name) && !name.is_empty() {
                            self.err(
                                Diagnostic::new(Code::Duplicate, g.expr.span, format!("`{name}` is grouped twice"))
                                    .label("duplicate"),
                            );
                        }
                        out.push((name, he));
                    }
                    let is_key = out.len() == 1 && {
                        let e = &out[0].1;
                        matches!(&e.kind, ExprKind::Field(Root::Key, p) if p.is_empty())
                            || (value_field(e).is_some() && value_field(e) == shape.key_field)
                    };
                    let repartition = !(is_key && shape.partitioned);
                    group = Some((out, c.span, repartition, shape.table));
                }
                Clause::Window { kind, grace, tz } => {
                    if aggregated.is_some() {
                        order_err(
                            self,
                            "`window` after `aggregate`",
                            "write the window between `group by` and `aggregate`",
                        );
                        ok = false;
                        continue;
                    }
                    if !in_group {
                        self.err(
                            Diagnostic::new(Code::WindowWithoutGroup, c.span, "`window` without `group by`")
                                .label("nothing is grouped here")
                                .help("windows are per key: write `group by FIELD` before `window`"),
                        );
                        ok = false;
                        continue;
                    }
                    if window.is_some() {
                        self.err(
                            Diagnostic::new(Code::DuplicateClause, c.span, "a second `window`")
                                .label("already windowed"),
                        );
                        ok = false;
                        continue;
                    }
                    if group.as_ref().is_some_and(|g| g.3) {
                        self.err(
                            Diagnostic::new(Code::NoUndo, c.span, format!("a window over the table `{from_name}`"))
                                .label("a table's rows are not events in time")
                                .help("aggregate the table's rows as they are now (no window), or declare its topic as a `stream` to window its records"),
                        );
                        ok = false;
                        continue;
                    }
                    self.check_window(kind, c.span);
                    let tz = tz.as_ref().and_then(|z| self.check_zone(kind, z));
                    let w =
                        hir::Window { kind: *kind, grace: grace.as_ref().map(|g| g.node).unwrap_or(Duration(0)), tz };
                    window = Some((w, c.span));
                }
                Clause::Aggregate(items) => {
                    if aggregated.is_some() {
                        self.err(
                            Diagnostic::new(Code::DuplicateClause, c.span, "a second `aggregate`")
                                .label("already aggregated")
                                .help("a query aggregates once; list every aggregate in one block"),
                        );
                        ok = false;
                        continue;
                    }
                    let Some((gitems, gspan, repartition, grouped_table)) = group.take() else {
                        if refused_group {
                            ok = false;
                            continue;
                        }
                        self.err(
                            Diagnostic::new(Code::AggregateWithoutGroup, c.span, "`aggregate` without `group by`")
                                .label("nothing is grouped here")
                                .help("write `group by FIELD` before `aggregate`"),
                        );
                        ok = false;
                        continue;
                    };
                    let win = window.take();
                    let aggs = self.aggregates_clause(items, &shape, &from_name, &gitems, win.as_ref().map(|w| w.0));

                    let mut value = RecordType::default();
                    if win.is_some() {
                        for f in WINDOW_FIELDS {
                            value.fields.push((f.to_string(), Type::Timestamp));
                        }
                    }
                    for (n, e) in &gitems {
                        value.fields.push((n.clone(), e.ty.clone()));
                    }
                    for a in &aggs {
                        value.fields.push((a.name.clone(), a.ty.clone()));
                    }
                    let key = if gitems.len() == 1 {
                        gitems[0].1.ty.clone()
                    } else {
                        Type::Tuple(gitems.iter().map(|(_, e)| e.ty.clone()).collect())
                    };
                    let key_field = (gitems.len() == 1).then(|| value.index_of(&gitems[0].0)).flatten();
                    let group_slug =
                        format!("group-by-{}", gitems.iter().map(|(n, _)| slugify(n)).collect::<Vec<_>>().join("-"));
                    shape = Shape {
                        key,
                        value,
                        key_name: None,
                        key_field,
                        partitioned: true,
                        joined: Vec::new(),
                        table: true,
                        windowed: win.is_some(),
                        tenant_scoped: shape.tenant_scoped,
                    };
                    let step = hir::AggregateStep {
                        group: gitems,
                        group_slug,
                        group_line: self.line(gspan),
                        group_text: self.text(gspan),
                        identity: (self.whole_text(gspan), self.whole_text(c.span)),
                        repartition,
                        table: grouped_table,
                        window: win.map(|w| w.0),
                        aggs,
                        emit: EmitMode::Changes,
                        idle: None,
                    };
                    push(self, StepKind::Aggregate(Box::new(step)), "aggregate", shape.clone());
                    aggregated = Some(steps.len() - 1);
                    // The aggregate's rows are a new table: the input stream's name is out of scope.
                    from_name.clear();
                }
                Clause::Emit(mode, idle) => {
                    if emitted {
                        self.err(
                            Diagnostic::new(Code::DuplicateClause, c.span, "a second `emit`")
                                .label("already set")
                                .help("choose one: `emit changes` or `emit final`"),
                        );
                        ok = false;
                        continue;
                    }
                    let Some(i) = aggregated.filter(|i| *i + 1 == steps.len()) else {
                        order_err(
                            self,
                            "`emit` must follow `aggregate`",
                            "`emit changes` or `emit final` says how an aggregate's results are sent",
                        );
                        ok = false;
                        continue;
                    };
                    emitted = true;
                    if let StepKind::Aggregate(a) = &mut steps[i].kind {
                        if *mode == EmitMode::Final && a.window.is_none() {
                            self.err(
                                Diagnostic::new(Code::EmitWithoutWindow, c.span, "`emit final` needs a window")
                                    .label("this aggregate has no window")
                                    .help("`emit final` emits each window once when it closes; without a window nothing closes. Use `emit changes`"),
                            );
                            ok = false;
                        }
                        a.emit = *mode;
                        if let Some(d) = idle {
                            if d.node.0 <= 0 {
                                self.err(
                                    Diagnostic::new(Code::BadDuration, d.span, "an idle time of zero")
                                        .label("must be positive")
                                        .help(
                                            "how long without input before windows close by the clock, e.g. `idle 30s`",
                                        ),
                                );
                                ok = false;
                            }
                            a.idle = Some(d.node.0);
                        }
                        steps[i].span = steps[i].span.to(c.span);
                    }
                }
                Clause::Join { left, outer, other, alias, within, after, grace, on } => {
                    if in_group || aggregated.is_some() {
                        order_err(self, "`join` after `group by`", "join the stream before grouping it");
                        ok = false;
                        continue;
                    }
                    let Some(oi) = self.lookup_source(other) else {
                        ok = false;
                        continue;
                    };
                    let o = self.sources[oi].clone();
                    // A table joined with a table (Kafka Streams' KTable–KTable join): an update
                    // of either side gives the key's new result.
                    let mutual = shape.table;
                    if mutual && !self.table_join_allowed(&src, &o, c.span, other.span, after_steps) {
                        ok = false;
                        continue;
                    }
                    // The name the joined side goes by: its own, or the one `as` gives it.
                    let name = alias.as_ref().map(|a| a.node.clone()).unwrap_or_else(|| o.name.clone());
                    let name_span = alias.as_ref().map(|a| a.span).unwrap_or(other.span);
                    if mutual && o.name == src.name {
                        self.err(
                            Diagnostic::new(
                                Code::JoinKind,
                                other.span,
                                format!("the table `{}` joined with itself", o.name),
                            )
                            .label("the same table")
                            .help("a table is not joined with itself: on the key each row would pair with itself, and a foreign-key join of a table with itself is not supported yet"),
                        );
                        ok = false;
                        continue;
                    }
                    let merged_name = merge_names.iter().any(|m| m.node == name);
                    if name == from_name || merged_name || shape.joined.iter().any(|j| j.name == name) {
                        self.err(
                            Diagnostic::new(Code::JoinKind, name_span, format!("`{name}` is already in this query"))
                                .label("joined again under the same name")
                                .help(format!(
                                    "name each side with `as` (a self-join names both): `from {} as a join {} as b …`, then `a.field` and `b.field`",
                                    src.name, o.name
                                )),
                        );
                        ok = false;
                        continue;
                    }
                    if o.kind == SourceKind::Stream && o.key == KeySpec::Raw {
                        self.err(
                            Diagnostic::new(Code::JoinKey, other.span, format!("stream `{}` declares no key", o.name))
                                .label("its records' keys are unknown")
                                .help(format!("a join matches `on` against the other side's key: declare one in `stream {}`, e.g. `key order_id`", o.name)),
                        );
                        ok = false;
                        continue;
                    }
                    let he = self.expr(on, &Scope::Row { shape: &shape, from: &from_name });
                    match (o.kind, within) {
                        (SourceKind::Stream, None) => self.err(
                            Diagnostic::new(
                                Code::JoinKind,
                                other.span,
                                format!("joining stream `{}` needs `within`", o.name),
                            )
                            .label("a stream–stream join")
                            .help(format!(
                                "say how far apart matching records may be: `join {} within 5m on …`",
                                o.name
                            )),
                        ),
                        (SourceKind::Table, Some(w)) => self.err(
                            Diagnostic::new(
                                Code::JoinKind,
                                w.span,
                                format!("`{}` is a table: `within` is only for stream–stream joins", o.name),
                            )
                            .label("not allowed here")
                            .help(if mutual {
                                "a table–table join matches the tables' current rows; remove `within`"
                            } else {
                                "a stream–table join looks up the table's current value; remove `within`"
                            }),
                        ),
                        (SourceKind::Table, None) if *outer && !mutual => self.err(
                            Diagnostic::new(
                                Code::JoinKind,
                                c.span,
                                format!("`{}` is a table: `outer join` is only for stream–stream joins", o.name),
                            )
                            .label("an outer join of a table")
                            .help("use `left join` to keep every record of the stream"),
                        ),
                        _ => {}
                    }
                    // A side whose records are partitioned by keys in the wire format cannot be
                    // lined up with the other side's partitions (its own, or a repartition's by
                    // the key's text): refused, with the way round.
                    let wire_keyed = if o.key_format.is_some() {
                        Some(&o)
                    } else if mutual && src.key_format.is_some() {
                        Some(&src)
                    } else {
                        None
                    };
                    if let Some(w) = wire_keyed {
                        let f = w.key_format.unwrap_or(Format::Avro);
                        self.err(
                            Diagnostic::new(
                                Code::JoinKind,
                                other.span,
                                format!("`{}`'s keys are {f}: a join cannot line up its partitions", w.name),
                            )
                            .label(format!("keyed by {f} bytes"))
                            .help(format!(
                                "its records are partitioned by their encoded keys (schema id included), not by the key: copy it to a topic keyed by text (a query `from {} … to \"{}-by-key\"`) and join that",
                                w.name,
                                w.topic.as_deref().unwrap_or(&w.name)
                            )),
                        );
                        ok = false;
                        continue;
                    }
                    let okey = o.key_type();
                    if !he.ty.is_error() && (he.ty.base() != okey.base() || !he.ty.base().is_scalar()) {
                        self.err(
                            Diagnostic::new(
                                Code::JoinKey,
                                on.span,
                                format!("`on` gives a {}, but `{}` is keyed by {}", he.ty, o.name, okey),
                            )
                            .label(format!("a {}", he.ty))
                            .help(format!("`on` is the expression matched against `{}`'s key", o.name)),
                        );
                    }
                    if !o.is_global() && (o.tenant.is_some() != shape.tenant_scoped) {
                        self.err(
                            Diagnostic::new(Code::BadTenant, other.span, "joining tenant-scoped and unscoped data")
                                .label(format!(
                                    "`{}` is {}tenant-scoped",
                                    o.name,
                                    if o.tenant.is_some() { "" } else { "not " }
                                ))
                                .help("both sides of a join must declare a tenant, or neither"),
                        );
                    }
                    let is_key = matches!(&he.kind, ExprKind::Field(Root::Key, p) if p.is_empty())
                        || (value_field(&he).is_some() && value_field(&he) == shape.key_field);
                    // A table–table join on anything but the key is a foreign-key join (Kafka
                    // Streams' `KTable#join(other, foreignKeyExtractor, joiner)`): `on` gives
                    // the other table's key from this table's row.
                    let foreign = mutual && !(is_key && shape.partitioned);
                    // Several tables joined on the key in a row (an n-way join) are one task's
                    // inputs; a foreign-key join joins one other table.
                    if mutual && (foreign || foreign_join.is_some()) && !shape.joined.is_empty() {
                        let mut d = Diagnostic::new(Code::ClauseOrder, c.span, "a foreign-key join joins one other table")
                            .label(if foreign { "a foreign-key join after a join" } else { "a second join" })
                            .help("join several tables on the key in a row, or write a foreign-key join's result to a topic and read it as a table");
                        if let Some(fk) = foreign_join {
                            d = d.related(fk, "the foreign-key join");
                        }
                        self.err(d);
                        ok = false;
                        continue;
                    }
                    if foreign && !he.ty.is_error() {
                        let refusal = if *outer {
                            Some((
                                c.span,
                                "a foreign-key join is `join` or `left join`",
                                "an outer join",
                                "as in Kafka Streams and ksqlDB, a foreign-key join has no outer form",
                            ))
                        } else if shape.tenant_scoped {
                            Some((
                                other.span,
                                "a foreign-key join of tenant-scoped tables",
                                "tenant-scoped",
                                "foreign-key joins are not supported for tenant-scoped tables yet; join on the key",
                            ))
                        } else if src.key == KeySpec::Raw {
                            Some((
                                c.span,
                                "a foreign-key join needs the table's key declared",
                                "no declared key",
                                "declare the key: `key id` or `key id: string`",
                            ))
                        } else {
                            None
                        };
                        if let Some((span, msg, label, help)) = refusal {
                            self.err(Diagnostic::new(Code::JoinKind, span, msg).label(label).help(help));
                            ok = false;
                            continue;
                        }
                        foreign_join = Some(c.span);
                    }
                    let repartition = !(o.is_global() || is_key && shape.partitioned || foreign);
                    // A source read twice by one task (joined twice with no repartition between)
                    // would share one read position: refused. The query's own stream before any
                    // repartition is read once for all its self-joins; a control-managed table
                    // is not read at all.
                    let generation = cuts + repartition as u32;
                    let own_input = o.name == src.name || merged.contains(&oi);
                    if !o.is_global() && joined_in.contains(&(oi, generation)) && !(own_input && generation == 0) {
                        self.err(
                            Diagnostic::new(Code::JoinKind, other.span, format!("`{}` is joined twice", o.name))
                                .label("joined again")
                                .help("join a source once and use its fields where needed (a query's own stream can be joined again before any repartition: a self-join)"),
                        );
                        ok = false;
                        continue;
                    }
                    joined_in.push((oi, generation));
                    cuts = generation;
                    if repartition {
                        shape.key = he.ty.clone();
                        shape.key_field = value_field(&he);
                        shape.key_name = None;
                        shape.partitioned = true;
                    }
                    if *outer {
                        // A record of the other side with no match comes with this side null:
                        // every field so far may be null (the key is the join key either way;
                        // in a table–table join the table's key field holds it too).
                        let keeps = if mutual { shape.key_field } else { None };
                        for (i, (_, t)) in shape.value.fields.iter_mut().enumerate() {
                            if Some(i) != keeps {
                                *t = t.clone().nullable();
                            }
                        }
                        for j in shape.joined.iter_mut() {
                            j.optional = true;
                        }
                    }
                    shape.joined.push(Joined {
                        name: name.clone(),
                        value: o.value.clone(),
                        key: o.key_name().map(|n| (n.to_string(), okey.clone())),
                        optional: *left || *outer,
                    });
                    let kind = match o.kind {
                        SourceKind::Table => StepKind::JoinTable {
                            table: oi,
                            on: he,
                            left: *left,
                            outer: *outer,
                            mutual,
                            foreign,
                            repartition,
                        },
                        SourceKind::Stream => StepKind::JoinStream {
                            stream: oi,
                            within: within.as_ref().map(|w| w.node).unwrap_or(Duration(0)),
                            after: after.as_ref().or(within.as_ref()).map(|w| w.node).unwrap_or(Duration(0)),
                            grace: grace.as_ref().map(|g| g.node).unwrap_or(Duration(0)),
                            on: he,
                            left: *left || *outer,
                            outer: *outer,
                            repartition,
                        },
                    };
                    push(self, kind, &format!("join-{}", slugify(&name)), shape.clone());
                }
                Clause::To { topic, format, key_format, windowed, when } => {
                    if let Some((_, gspan, _, _)) = &group {
                        self.err(group_without_aggregate(*gspan));
                        group = None;
                        ok = false;
                    }
                    if !valid_topic(&topic.node) {
                        self.err(
                            Diagnostic::new(
                                Code::BadTopic,
                                topic.span,
                                format!("`{}` is not a valid topic name", topic.node),
                            )
                            .label("invalid topic name")
                            .help("topic names are 1 to 249 characters of ASCII letters, digits, `.`, `_` and `-`"),
                        );
                    }
                    let reads: Vec<&str> = std::iter::once(src.topic.as_deref())
                        .chain(steps.iter().map(|st| match &st.kind {
                            StepKind::JoinTable { table, .. } => self.sources[*table].topic.as_deref(),
                            StepKind::JoinStream { stream, .. } => self.sources[*stream].topic.as_deref(),
                            _ => None,
                        }))
                        .flatten()
                        .collect();
                    if reads.contains(&topic.node.as_str()) {
                        self.err(
                            Diagnostic::new(
                                Code::BadTopic,
                                topic.span,
                                format!("query `{}` writes to `{}`, which it reads", q.name.node, topic.node),
                            )
                            .label("a feedback loop")
                            .help("write the results to another topic"),
                        );
                    }
                    let csv_sink = matches!(format.as_ref().map(|f| f.node), Some(Format::Csv(_)));
                    if shape.tenant_scoped && shape.value.get("tenant").is_some() && !csv_sink {
                        self.err(
                            Diagnostic::new(
                                Code::ReservedName,
                                c.span,
                                "the output of a tenant-scoped query has a field `tenant`",
                            )
                            .label("streamc adds the record's tenant as `tenant`")
                            .help("rename the field"),
                        );
                    }
                    let fmt = format.as_ref().map(|f| f.node).unwrap_or(Format::Json);
                    // Keys in the wire format: one scalar value each (null: no key), not the
                    // JSON arrays of a windowed key or a tenant's key.
                    if let Some(kf) = key_format {
                        let why = if !shape.key.base().is_scalar() {
                            Some(format!(
                                "the output key is a {}: a key in the wire format is one scalar value",
                                shape.key
                            ))
                        } else if windowed.is_some() {
                            Some("a windowed key is a JSON array `[key, window_start, window_end]`".to_string())
                        } else if shape.tenant_scoped {
                            Some("a tenant-scoped query's key is a JSON array `[tenant, key]`".to_string())
                        } else {
                            None
                        };
                        if let Some(why) = why {
                            self.err(
                                Diagnostic::new(Code::BadFormat, kf.span, format!("no {} key: {why}", kf.node))
                                    .label(format!("{} keys", kf.node))
                                    .help("key the output by one scalar (`group by` one field, `key by`), or drop the key's format"),
                            );
                        }
                    }
                    if fmt == Format::String && shape.value.fields.len() != 1 {
                        let n = shape.value.fields.len();
                        self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                c.span,
                                format!("the string format writes one field; this value has {n}"),
                            )
                            .label("string sink")
                            .help("`select` the one field to write, or write `json`"),
                        );
                    }
                    if let Format::Csv(_) = fmt {
                        let nested: Vec<&str> = shape
                            .value
                            .fields
                            .iter()
                            .filter(|(_, t)| !(t.is_scalar() || *t == Type::Null))
                            .map(|(n, _)| n.as_str())
                            .chain(shape.joined.iter().map(|j| j.name.as_str()))
                            .collect();
                        if !nested.is_empty() {
                            self.err(
                                Diagnostic::new(
                                    Code::BadFormat,
                                    format.as_ref().map(|f| f.span).unwrap_or(c.span),
                                    format!(
                                        "csv writes scalar columns; {} not scalar",
                                        match nested.as_slice() {
                                            [one] => format!("`{one}` is"),
                                            more => format!("`{}` are", more.join("`, `")),
                                        }
                                    ),
                                )
                                .label("csv sink")
                                .help("`select` scalar fields (a joined side's fields one by one), or write `json`"),
                            );
                        }
                    }
                    if let Some(fmt @ (Format::Avro | Format::Protobuf)) = format.as_ref().map(|f| f.node) {
                        let span = format.as_ref().map(|f| f.span).unwrap_or(c.span);
                        // The value as written: with each joined side not projected away as a
                        // record (its key last when not one of its fields).
                        let mut written = shape.value.clone();
                        for j in &shape.joined {
                            let mut rec = j.value.clone();
                            if let Some((k, t)) = &j.key {
                                if rec.get(k).is_none() {
                                    rec.fields.push((k.clone(), t.clone()));
                                }
                            }
                            written.fields.push((j.name.clone(), Type::Record(rec)));
                        }
                        let (name, unsupported, help) = match fmt {
                            Format::Protobuf => (
                                "Protobuf",
                                crate::protobuf::unsupported(&written),
                                "`select` fields with Protobuf names (letters, digits, `_`), string- or int-keyed maps, lists of non-null items and no list in a list, or write `json`",
                            ),
                            _ => (
                                "Avro",
                                crate::avro::unsupported(&written),
                                "`select` fields with Avro names (letters, digits, `_`) and string-keyed maps, or write `json`",
                            ),
                        };
                        let why = unsupported.or_else(|| {
                            shape.tenant_scoped.then(|| format!("a tenant-scoped query writes json or csv, not {fmt}"))
                        });
                        if let Some(why) = why {
                            self.err(
                                Diagnostic::new(Code::BadFormat, span, format!("no {name} form: {why}"))
                                    .label(format!("{fmt} sink"))
                                    .help(help),
                            );
                        }
                    }
                    if let (Some(wspan), false) = (windowed, shape.windowed) {
                        self.err(
                            Diagnostic::new(
                                Code::WindowedKeyWithoutWindow,
                                *wspan,
                                "`windowed` needs the results of a windowed aggregate",
                            )
                            .label("these results have no window")
                            .help("`to \"topic\" windowed` keys each result by [key, window_start, window_end]; add a `window` to the aggregate, or drop `windowed`"),
                        );
                    }
                    let when = when.as_ref().map(|e| {
                        let he = self.expr(e, &Scope::Row { shape: &shape, from: &from_name });
                        self.expect_bool(&he, "`when`");
                        he
                    });
                    if when.is_some() && src.kind == SourceKind::Table && aggregated.is_none() {
                        self.err(
                            Diagnostic::new(Code::ClauseOrder, c.span, "a query over the table `".to_string() + &from_name + "` writes one table")
                                .label("a branch of a table")
                                .help("filter it with `where` (rows it drops are deleted downstream), or write one query per branch"),
                        );
                        ok = false;
                    }
                    let windowed = windowed.is_some() && shape.windowed;
                    if let Some(first) = sinks.first() {
                        if first.windowed != windowed {
                            self.err(
                                Diagnostic::new(
                                    Code::WindowedKeyWithoutWindow,
                                    c.span,
                                    "branches of one query key their results alike",
                                )
                                .label(if windowed { "windowed here" } else { "not windowed here" })
                                .related(first.span, if first.windowed { "windowed here" } else { "not windowed here" })
                                .help("write `windowed` on every `to` of the query, or on none"),
                            );
                            ok = false;
                        }
                    }
                    sinks.push(hir::Sink {
                        topic: topic.node.clone(),
                        format: fmt,
                        key_format: key_format.as_ref().map(|f| f.node),
                        windowed,
                        when,
                        span: c.span,
                        line: self.line(c.span),
                        text: self.text(c.span),
                    });
                }
            }
        }
        if let Some((_, gspan, _, _)) = group {
            self.err(group_without_aggregate(gspan));
            return None;
        }
        if sinks.is_empty() {
            if ok {
                self.err(
                    Diagnostic::new(Code::MissingSink, q.name.span, format!("query `{}` has no `to`", q.name.node))
                        .label("its results go nowhere")
                        .help("end the query with `to \"topic\"`"),
                );
            }
            return None;
        }
        if !ok {
            return None;
        }
        let from_line = first.map(|c| self.line(c.span)).unwrap_or(0);
        Some(hir::Query {
            name: q.name.node.clone(),
            span: q.span,
            line: self.line(q.span),
            from_line,
            input,
            merged,
            steps,
            sinks,
        })
    }

    fn check_window(&mut self, kind: &WindowKind, span: Span) {
        let bad = |this: &mut Self, msg: &str, help: &str| {
            this.err(
                Diagnostic::new(Code::BadDuration, span, msg.to_string())
                    .label("in this window")
                    .help(help.to_string()),
            );
        };
        match kind {
            WindowKind::Tumbling { size } | WindowKind::Sliding { size } if size.0 <= 0 => {
                bad(self, "a window size must be positive", "write a size like `5s`")
            }
            WindowKind::Hopping { size, advance } => {
                if size.0 <= 0 || advance.0 <= 0 {
                    bad(self, "window size and advance must be positive", "write `hopping 5s advance 1s`");
                } else if advance.0 > size.0 {
                    bad(
                        self,
                        &format!("the advance ({advance}) is larger than the window ({size})"),
                        "records between windows would be dropped; make the advance at most the size",
                    );
                }
            }
            WindowKind::Session { gap } if gap.0 <= 0 => {
                bad(self, "a session gap must be positive", "write `session gap 30s`")
            }
            _ => {}
        }
    }

    /// `tz "ZONE"` on a window: a zone of the bundled database, on tumbling or hopping windows
    /// whose size and advance are whole days.
    fn check_zone(&mut self, kind: &WindowKind, zone: &Node<String>) -> Option<&'static str> {
        const DAY: i64 = 86_400_000;
        let whole_days = match kind {
            WindowKind::Tumbling { size } => size.0 % DAY == 0,
            WindowKind::Hopping { size, advance } => size.0 % DAY == 0 && advance.0 % DAY == 0,
            WindowKind::Sliding { .. } | WindowKind::Session { .. } => {
                self.err(
                    Diagnostic::new(Code::BadTime, zone.span, "`tz` is for tumbling and hopping windows")
                        .label("not on this window")
                        .help("sliding and session windows follow the records' times, not the calendar: remove `tz`"),
                );
                return None;
            }
        };
        if !whole_days {
            self.err(
                Diagnostic::new(Code::BadTime, zone.span, "`tz` aligns whole days: the window is not")
                    .label("a zone for a window of hours or less")
                    .help("write the size (and advance) in days, e.g. `tumbling 1d tz \"Europe/Paris\"`; shorter windows are aligned on UTC"),
            );
            return None;
        }
        match crate::function::calendar::zone_name(&zone.node) {
            Ok(name) => Some(name),
            Err(_) => {
                let names: Vec<String> = jiff::tz::db().available().map(|n| n.as_str().to_string()).collect();
                let help = did_you_mean(&zone.node, names.iter().map(String::as_str))
                    .unwrap_or_else(|| "an IANA zone name, e.g. `Europe/Paris`, `America/New_York` or `UTC`".into());
                self.err(
                    Diagnostic::new(Code::BadTime, zone.span, format!("unknown time zone {:?}", zone.node))
                        .label("not in the time zone database")
                        .help(help),
                );
                None
            }
        }
    }

    fn aggregates_clause(
        &mut self,
        items: &[ast::AggItem],
        shape: &Shape,
        from: &str,
        group: &[(String, hir::Expr)],
        window: Option<hir::Window>,
    ) -> Vec<hir::AggCall> {
        let mut out: Vec<hir::AggCall> = Vec::new();
        let mut names: BTreeMap<String, Span> = BTreeMap::new();
        for a in items {
            let name = &a.name.node;
            if window.is_some() && WINDOW_FIELDS.contains(&name.as_str()) {
                self.err(
                    Diagnostic::new(Code::ReservedName, a.name.span, format!("`{name}` is set by the window"))
                        .label("reserved in windowed results")
                        .help("choose another name"),
                );
            } else if group.iter().any(|(g, _)| g == name) {
                self.err(
                    Diagnostic::new(Code::Duplicate, a.name.span, format!("`{name}` is already a grouping field"))
                        .label("duplicate output field")
                        .help("choose another name for the aggregate"),
                );
            } else if let Some(prev) = names.get(name) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(Code::Duplicate, a.name.span, format!("`{name}` is defined twice"))
                        .label("duplicate output field")
                        .related(prev, "first defined here"),
                );
            }
            names.insert(name.clone(), a.name.span);
            let args: Vec<hir::Expr> = a.args.iter().map(|e| self.expr(e, &Scope::Row { shape, from })).collect();
            let Some(call) = self.agg_call(a, args) else { continue };
            if shape.table && !call.func.retractable() {
                self.no_undo(a, &call, from);
            }
            if matches!(window.map(|w| w.kind), Some(WindowKind::Session { .. })) && !call.func.mergeable() {
                self.err(
                    Diagnostic::new(
                        Code::NoMerge,
                        a.func.span,
                        format!("`{}` has no `merge`, so it cannot aggregate session windows", call.func.name()),
                    )
                    .label("sessions merge when a record bridges two")
                    .help("use a tumbling or hopping window, or give the aggregate a `merge` block"),
                );
            }
            out.push(call);
        }
        out
    }

    /// An aggregate over a grouped table that cannot take a row's old value back out.
    fn no_undo(&mut self, a: &ast::AggItem, call: &hir::AggCall, table: &str) {
        let name = call.func.name();
        let help = match &call.func {
            hir::AggFunc::User(_) => format!("give `{name}` an `undo` block: the inverse of its `update`"),
            hir::AggFunc::Native(_) => {
                "over a table: count, sum, and user-defined aggregates with an `undo` block (avg, variance, stddev and count_if have one); or declare the topic as a `stream` to aggregate every record".to_string()
            }
        };
        self.err(
            Diagnostic::new(
                Code::NoUndo,
                a.func.span,
                format!("`{name}` cannot take a value back, so it cannot aggregate the table `{table}`"),
            )
            .label("an update of a row takes its old value out of its group")
            .help(help),
        );
    }

    fn agg_call(&mut self, a: &ast::AggItem, args: Vec<hir::Expr>) -> Option<hir::AggCall> {
        let fname = a.func.node.as_str();
        let arity = |this: &mut Self, want: &str| {
            this.err(
                Diagnostic::new(Code::ArgCount, a.span, format!("`{fname}` takes {want}, not {}", args_desc(a)))
                    .label("wrong number of arguments"),
            );
        };
        if a.star && fname != "count" {
            arity(self, "a value");
            return None;
        }
        if let Some(native) = aggregate::lookup(fname) {
            let types: Vec<Type> = args.iter().map(|e| e.ty.clone()).collect();
            let literals: Vec<Option<&Literal>> = args
                .iter()
                .map(|e| match &e.kind {
                    ExprKind::Lit(l) => Some(l),
                    _ => None,
                })
                .collect();
            return match native.signature(&types).and_then(|sig| native.check_literals(&literals).map(|()| sig)) {
                Ok(sig) => Some(hir::AggCall {
                    name: a.name.node.clone(),
                    func: AggFunc::Native(native),
                    args,
                    ty: sig.result,
                    state_ty: sig.state,
                }),
                Err(SignatureError::Arity(want)) => {
                    arity(self, want);
                    None
                }
                Err(SignatureError::Argument { arg, problem, message, label, help }) => {
                    let code = match problem {
                        ArgProblem::NotNumeric => Code::NotNumeric,
                        ArgProblem::NotOrdered => Code::NotOrdered,
                        ArgProblem::NotConstant => Code::NotConstant,
                    };
                    let span = a.args.get(arg).map(|e| e.span).unwrap_or(a.span);
                    self.err(Diagnostic::new(code, span, message).label(label).help(help));
                    None
                }
            };
        }
        let Some(def) = self.aggregates.iter().find(|d| d.name == fname).cloned() else {
            let mut cands: Vec<&str> = aggregate::names().collect();
            cands.extend(self.aggregates.iter().map(|d| d.name.as_str()));
            let help = if function::lookup(fname).is_some() || self.functions.iter().any(|f| f.name == fname) {
                format!("`{fname}` is a function, not an aggregate; apply it to a field inside one: `sum({fname}(x))`")
            } else {
                did_you_mean(fname, cands.iter().copied())
                    .unwrap_or_else(|| format!("aggregates: {}", cands.join(", ")))
            };
            self.err(
                Diagnostic::new(Code::UnknownAggregate, a.func.span, format!("unknown aggregate `{fname}`"))
                    .label("not an aggregate")
                    .help(help),
            );
            return None;
        };
        if args.len() != def.params.len() {
            arity(self, &plural(def.params.len(), "argument"));
            return None;
        }
        for ((e, he), (pn, pt)) in a.args.iter().zip(&args).zip(&def.params) {
            if !he.ty.assignable_to(pt) {
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        e.span,
                        format!("`{fname}` takes a {pt} as `{pn}`, not a {}", he.ty),
                    )
                    .label(format!("a {}", he.ty))
                    .help_opt(he.ty.is_nullable().then(|| {
                        format!(
                            "the value may be null: give a default with `coalesce({}, …)`",
                            self.src.get(e.span.start..e.span.end).unwrap_or("x")
                        )
                    })),
                );
                return None;
            }
        }
        let args = args.into_iter().zip(&def.params).map(|(he, (_, pt))| widen(he, pt)).collect();
        Some(hir::AggCall {
            name: a.name.node.clone(),
            func: AggFunc::User(def.clone()),
            args,
            ty: def.result_type.clone(),
            state_ty: Type::Record(RecordType { fields: def.state.clone() }),
        })
    }

    fn select(
        &mut self,
        items: &[Node<ast::SelectItem>],
        shape: &Shape,
        from: &str,
    ) -> (Vec<(String, hir::Expr)>, Shape) {
        let mut fields: Vec<(String, hir::Expr)> = Vec::new();
        let mut explicit: BTreeMap<String, Span> = BTreeMap::new();
        for it in items {
            let (name, he, span) = match &it.node {
                ast::SelectItem::Star => {
                    for (i, (n, t)) in shape.value.fields.iter().enumerate() {
                        if !fields.iter().any(|(f, _)| f == n) {
                            let e =
                                hir::Expr { kind: ExprKind::Field(Root::Value, vec![i]), ty: t.clone(), span: it.span };
                            fields.push((n.clone(), e));
                        }
                    }
                    continue;
                }
                ast::SelectItem::Named(n, e) => (n.node.clone(), self.expr(e, &Scope::Row { shape, from }), n.span),
                ast::SelectItem::Path(p) => {
                    let e = Node::new(it.span, ast::Expr::Path(p.clone()));
                    let name = p.last().map(|i| i.node.clone()).unwrap_or_default();
                    (name, self.expr(&e, &Scope::Row { shape, from }), it.span)
                }
            };
            if let Some(prev) = explicit.get(&name) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(Code::Duplicate, span, format!("field `{name}` is selected twice"))
                        .label("second definition")
                        .related(prev, "first defined here"),
                );
                continue;
            }
            if shape.joined.iter().any(|j| j.name == name) || (!from.is_empty() && name == from) {
                self.err(
                    Diagnostic::new(
                        Code::ShadowsStream,
                        span,
                        format!("output field `{name}` would shadow the stream `{name}`"),
                    )
                    .label("same name as a stream in scope")
                    .help("output field names never shadow stream names; choose another name"),
                );
                continue;
            }
            explicit.insert(name.clone(), span);
            // A named field replaces a field of the same name that `*` brought in, in place.
            match fields.iter().position(|(f, _)| *f == name) {
                Some(i) => fields[i].1 = he,
                None => fields.push((name, he)),
            }
        }
        let value = RecordType { fields: fields.iter().map(|(n, e)| (n.clone(), e.ty.clone())).collect() };
        let key_field = shape.key_field.and_then(|k| {
            fields.iter().position(|(_, e)| matches!(&e.kind, ExprKind::Field(Root::Value, p) if p == &[k]))
        });
        let out = Shape { value, key_field, joined: Vec::new(), ..shape.clone() };
        (fields, out)
    }

    /// The type of `l op r`, or a diagnostic at `span` and the error type.
    fn binary_result(&mut self, op: BinOp, l: &Type, r: &Type, span: Span) -> Type {
        binary_type(op, l, r).unwrap_or_else(|| {
            self.err(
                Diagnostic::new(Code::BadOperands, span, format!("`{}` cannot combine {l} and {r}", op.symbol()))
                    .label(format!("{l} {} {r}", op.symbol()))
                    .help_opt(binary_help(op, l, r)),
            );
            Type::Error
        })
    }

    fn expect_bool(&mut self, e: &hir::Expr, what: &str) {
        if !matches!(e.ty.base(), Type::Bool | Type::Error | Type::Null) {
            self.err(
                Diagnostic::new(Code::NotBool, e.span, format!("{what} needs a bool, not a {}", e.ty))
                    .label(format!("a {}", e.ty))
                    .help("compare it: `x > 0`, `name == \"a\"`, `x is not null`"),
            );
        }
    }

    fn expect_key(&mut self, e: &hir::Expr, what: &str) {
        if !e.ty.is_scalar() {
            self.err(
                Diagnostic::new(Code::TypeMismatch, e.span, format!("{what} must be a scalar, not a {}", e.ty))
                    .label("cannot be a key")
                    .help("keys are strings, numbers, bools, timestamps or durations"),
            );
        }
    }

    // ------------------------------------------------------------------ control statements

    fn statement(&mut self, s: &ast::Statement, program: &hir::Program) -> Option<Control> {
        self.queries = program.queries.clone();
        for q in &program.queries {
            self.query_spans.insert(q.name.clone(), Span::default());
        }
        if let Some(t) = s.tenant.as_ref().filter(|t| t.node.is_empty()) {
            self.err(
                Diagnostic::new(Code::TenantMismatch, t.span, "the empty tenant")
                    .label("no tenant named")
                    .help("an unscoped statement applies to every tenant: leave out `for tenant`"),
            );
            return None;
        }
        let query_stmt = matches!(
            s.body,
            ast::StatementBody::NewQuery(_) | ast::StatementBody::Replace { .. } | ast::StatementBody::Drop(_)
        );
        if let (Some(t), true) = (&s.tenant, query_stmt) {
            self.err(
                Diagnostic::new(Code::TenantMismatch, t.span, "queries are shared by every tenant")
                    .label("`for tenant` on a query statement")
                    .help("`for tenant` scopes `update`, `delete` and `purge`; queries see each tenant's data separately already"),
            );
            return None;
        }
        match &s.body {
            ast::StatementBody::Update { table, key, value } => {
                let (ti, key) = self.control_key(table, key)?;
                let hv = self.expr(value, &NO_LOCALS);
                let want = Type::Record(self.sources[ti].value.clone());
                if !hv.ty.assignable_to(&want) {
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            value.span,
                            format!("`{}` holds {want}, not {}", table.node, hv.ty),
                        )
                        .label("does not match the table's value")
                        .help("give every non-nullable field, with its declared type"),
                    );
                    return None;
                }
                Some(Control::Update { table: ti, key, value: hv })
            }
            ast::StatementBody::Delete { table, key } => {
                let (ti, key) = self.control_key(table, key)?;
                Some(Control::Delete { table: ti, key })
            }
            ast::StatementBody::Purge => {
                if s.tenant.is_none() {
                    self.err(
                        Diagnostic::new(Code::TenantMismatch, s.span, "`purge` needs a tenant")
                            .label("purges nothing in particular")
                            .help("write `for tenant \"t\" purge`"),
                    );
                    return None;
                }
                Some(Control::Purge)
            }
            ast::StatementBody::NewQuery(q) => {
                if program.query(&q.name.node).is_some() {
                    self.err(
                        Diagnostic::new(
                            Code::QueryExists,
                            q.name.span,
                            format!("query `{}` already runs", q.name.node),
                        )
                        .label("existing name")
                        .help(format!("write `replace query {} {{ … }}` to change it", q.name.node)),
                    );
                    return None;
                }
                self.query_spans.remove(&q.name.node);
                self.query(q).map(Control::NewQuery)
            }
            ast::StatementBody::Replace { query, mode } => {
                if program.query(&query.name.node).is_none() {
                    self.err(self.unknown_query(&query.name, program));
                    return None;
                }
                self.query(query).map(|q| Control::Replace { query: q, mode: mode.as_ref().map(|m| m.node) })
            }
            ast::StatementBody::Drop(name) => {
                if program.query(&name.node).is_none() {
                    self.err(self.unknown_query(name, program));
                    return None;
                }
                Some(Control::Drop(name.node.clone()))
            }
        }
    }

    fn unknown_query(&self, name: &ast::Ident, program: &hir::Program) -> Diagnostic {
        let help = did_you_mean(&name.node, program.queries.iter().map(|q| q.name.as_str())).unwrap_or_else(|| {
            format!(
                "running queries: {}",
                program.queries.iter().map(|q| format!("`{}`", q.name)).collect::<Vec<_>>().join(", ")
            )
        });
        Diagnostic::new(Code::UnknownQuery, name.span, format!("no query `{}` is running", name.node))
            .label("unknown query")
            .help(help)
    }

    fn control_key(&mut self, table: &ast::Ident, key: &Node<ast::Expr>) -> Option<(usize, hir::Expr)> {
        let ti = match self.sources.iter().position(|s| s.name == table.node && s.kind == SourceKind::Table) {
            Some(i) => i,
            None => {
                let tables: Vec<&str> =
                    self.sources.iter().filter(|s| s.is_global()).map(|s| s.name.as_str()).collect();
                let help = did_you_mean(&table.node, tables.iter().copied()).unwrap_or_else(|| {
                    format!(
                        "control-managed tables: {}",
                        if tables.is_empty() { "none".into() } else { tables.join(", ") }
                    )
                });
                self.err(
                    Diagnostic::new(Code::UnknownTable, table.span, format!("unknown table `{}`", table.node))
                        .label("not a table")
                        .help(help),
                );
                return None;
            }
        };
        if let Some(topic) = &self.sources[ti].topic {
            self.err(
                Diagnostic::new(
                    Code::NotControlTable,
                    table.span,
                    format!("`{}` is fed from topic `{topic}`", table.node),
                )
                .label("not a control-managed table")
                .help("change it by producing to its topic; control statements change tables declared without a topic"),
            );
            return None;
        }
        let hk = self.expr(key, &NO_LOCALS);
        let kt = self.sources[ti].key_type();
        if !hk.ty.assignable_to(&kt) || hk.ty.is_nullable() {
            self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    key.span,
                    format!("`{}` is keyed by {kt}, not {}", table.node, hk.ty),
                )
                .label(format!("a {}", hk.ty)),
            );
            return None;
        }
        Some((ti, hk))
    }

    // ------------------------------------------------------------------ expressions

    fn expr(&mut self, e: &Node<ast::Expr>, scope: &Scope) -> hir::Expr {
        let out = self.expr_unrecorded(e, scope);
        if let Some(types) = &mut self.types {
            types.push((out.span, out.ty.clone()));
        }
        out
    }

    fn expr_unrecorded(&mut self, e: &Node<ast::Expr>, scope: &Scope) -> hir::Expr {
        let span = e.span;
        let mk = |kind, ty| hir::Expr { kind, ty, span };
        match &e.node {
            ast::Expr::Lit(l) => {
                let ty = match l {
                    Literal::Int(_) => Type::Int,
                    Literal::Float(_) => Type::Float,
                    Literal::String(_) => Type::String,
                    Literal::Bool(_) => Type::Bool,
                    Literal::Duration(_) => Type::Duration,
                    Literal::Null => Type::Null,
                };
                mk(ExprKind::Lit(l.clone()), ty)
            }
            ast::Expr::Path(p) => self.path(p, span, scope),
            ast::Expr::Unary { op, expr } => {
                let inner = self.expr(expr, scope);
                let t = inner.ty.clone();
                let ty = match op {
                    UnOp::Not if matches!(t.base(), Type::Bool | Type::Error | Type::Null) => {
                        Type::Bool.nullable_if(t.is_nullable())
                    }
                    UnOp::Neg if matches!(t.base(), Type::Int | Type::Float | Type::Duration | Type::Error) => {
                        t.clone()
                    }
                    _ => {
                        let (sym, want) =
                            if *op == UnOp::Not { ("not", "a bool") } else { ("-", "a number or duration") };
                        self.err(
                            Diagnostic::new(Code::BadOperands, span, format!("`{sym}` of a {t}"))
                                .label(format!("`{sym}` needs {want}")),
                        );
                        Type::Error
                    }
                };
                mk(ExprKind::Unary(*op, Box::new(inner)), ty)
            }
            ast::Expr::Binary { op, lhs, rhs } => {
                let l = self.expr(lhs, scope);
                let r = self.expr(rhs, scope);
                let ty = self.binary_result(*op, &l.ty, &r.ty, span);
                mk(ExprKind::Binary(*op, Box::new(l), Box::new(r)), ty)
            }
            ast::Expr::Chain { first, rest } => {
                let first = self.expr(first, scope);
                let mut ty = first.ty.clone();
                let mut sp = first.span;
                let mut items = Vec::with_capacity(rest.len());
                for (op, e) in rest {
                    let r = self.expr(e, scope);
                    sp = sp.to(r.span);
                    ty = self.binary_result(*op, &ty, &r.ty, sp);
                    items.push((*op, r));
                }
                mk(ExprKind::Chain(Box::new(first), items), ty)
            }
            ast::Expr::IsNull { expr, negated } => {
                let inner = self.expr(expr, scope);
                mk(ExprKind::IsNull(Box::new(inner), *negated), Type::Bool)
            }
            ast::Expr::Between { expr, lo, hi, negated } => {
                let x = self.expr(expr, scope);
                let l = self.expr(lo, scope);
                let h = self.expr(hi, scope);
                let nullable = x.ty.is_nullable() || l.ty.is_nullable() || h.ty.is_nullable();
                let u = x.ty.unify(&l.ty).and_then(|t| t.unify(&h.ty));
                if !u.as_ref().is_some_and(|t| t.is_ordered() || *t.base() == Type::Null) {
                    self.err(
                        Diagnostic::new(
                            Code::BadOperands,
                            e.span,
                            format!(
                                "`between` compares values of one ordered type, not {}, {} and {}",
                                x.ty, l.ty, h.ty
                            ),
                        )
                        .label(format!("{} between {} and {}", x.ty, l.ty, h.ty))
                        .help(
                            "numbers, strings, timestamps, durations or bools, all of one type: `n between 1 and 10`",
                        ),
                    );
                }
                mk(ExprKind::Between(Box::new(x), Box::new(l), Box::new(h), *negated), Type::Bool.nullable_if(nullable))
            }
            ast::Expr::If { cond, then, otherwise } => {
                let c = self.expr(cond, scope);
                self.expect_bool(&c, "`if`");
                let a = self.expr(then, scope);
                let b = self.expr(otherwise, scope);
                let ty = match a.ty.unify(&b.ty) {
                    Some(t) => t,
                    None => {
                        self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                otherwise.span,
                                format!("`if` branches differ: {} and {}", a.ty, b.ty),
                            )
                            .label(format!("a {}", b.ty))
                            .related(then.span, format!("a {}", a.ty))
                            .help("both branches must have one type"),
                        );
                        Type::Error
                    }
                };
                mk(ExprKind::If(Box::new(c), Box::new(a), Box::new(b)), ty)
            }
            ast::Expr::List(items) => {
                let his: Vec<hir::Expr> = items.iter().map(|i| self.expr(i, scope)).collect();
                let elem = self.unify_all(his.iter(), "list items", "every item of a list has one type");
                mk(ExprKind::List(his), Type::List(Box::new(elem)))
            }
            ast::Expr::Map(entries) => self.map_lit(entries, span, scope),
            ast::Expr::Record(fields) => {
                let mut out: Vec<(String, hir::Expr)> = Vec::new();
                for (n, fe) in fields {
                    let h = self.expr(fe, scope);
                    if out.iter().any(|(o, _)| *o == n.node) {
                        self.err(
                            Diagnostic::new(Code::Duplicate, n.span, format!("field `{}` is given twice", n.node))
                                .label("duplicate"),
                        );
                        continue;
                    }
                    out.push((n.node.clone(), h));
                }
                let ty =
                    Type::Record(RecordType { fields: out.iter().map(|(n, e)| (n.clone(), e.ty.clone())).collect() });
                mk(ExprKind::Record(out), ty)
            }
            ast::Expr::Call { func, args } if args.iter().any(|a| matches!(a.node, ast::Expr::Lambda { .. })) => {
                self.lambda_call(func, args, span, scope)
            }
            ast::Expr::Call { func, args } => {
                let hargs: Vec<hir::Expr> = args.iter().map(|a| self.expr(a, scope)).collect();
                self.call(func, hargs, span)
            }
            ast::Expr::Lambda { .. } => {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, span, "a lambda is not a value")
                        .label("`x => …` here")
                        .help(LAMBDA_HELP),
                );
                err_expr(span)
            }
        }
    }

    /// `transform(list, x => e)`, `filter(list, x => c)`, `reduce(list, init, (acc, x) => e)`.
    fn lambda_call(&mut self, func: &ast::Ident, args: &[Node<ast::Expr>], span: Span, scope: &Scope) -> hir::Expr {
        use hir::LambdaOp;
        let op = match func.node.as_str() {
            "transform" => LambdaOp::Transform,
            "filter" => LambdaOp::Filter,
            "reduce" => LambdaOp::Reduce,
            name => {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, func.span, format!("`{name}` takes no lambda"))
                        .label("called with `x => …`")
                        .help(LAMBDA_HELP),
                );
                return err_expr(span);
            }
        };
        let name = func.node.as_str();
        let shape_err = |this: &mut Self| {
            this.err(
                Diagnostic::new(
                    Code::ArgCount,
                    span,
                    match op {
                        LambdaOp::Transform => format!("`{name}` takes a list, then a lambda (of a map: a lambda for the key, then one for the value)"),
                        LambdaOp::Filter => format!("`{name}` takes a list or a map, then a lambda"),
                        LambdaOp::Reduce => format!("`{name}` takes a list or a map and a start value, then a lambda"),
                    },
                )
                .label("in this call")
                .help(LAMBDA_HELP),
            );
            err_expr(span)
        };
        let Some(first) = args.first().filter(|a| !matches!(a.node, ast::Expr::Lambda { .. })) else {
            return shape_err(self);
        };
        let list = self.expr(first, scope);
        // The parameters each item gives a lambda: a list's item, or a map's key and value.
        let items: Vec<Type> = match list.ty.base() {
            Type::List(t) => vec![(**t).clone()],
            Type::Map(k, v) => vec![(**k).clone(), (**v).clone()],
            Type::Error => return err_expr(span),
            t => {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, first.span, format!("`{name}` of a {t}, not a list or a map"))
                        .label(format!("a {t}"))
                        .help(LAMBDA_HELP),
                );
                return err_expr(span);
            }
        };
        let of_map = items.len() == 2;
        let nlambdas = if of_map && op == LambdaOp::Transform { 2 } else { 1 };
        let nparams = items.len() + usize::from(op == LambdaOp::Reduce);
        let want = 1 + usize::from(op == LambdaOp::Reduce) + nlambdas;
        if args.len() != want {
            return shape_err(self);
        }
        let mut lambdas = Vec::new();
        for l in &args[want - nlambdas..] {
            let ast::Expr::Lambda { params, body } = &l.node else {
                return shape_err(self);
            };
            if params.len() != nparams {
                self.err(
                    Diagnostic::new(
                        Code::ArgCount,
                        l.span,
                        format!(
                            "the lambda of `{name}` over a {} takes {}, not {}",
                            if of_map { "map" } else { "list" },
                            plural(nparams, "parameter"),
                            params.len()
                        ),
                    )
                    .label("its parameters")
                    .help(LAMBDA_HELP),
                );
                return err_expr(span);
            }
            if let Some(p) =
                params.iter().enumerate().find(|(i, p)| params[..*i].iter().any(|q| q.node == p.node)).map(|(_, p)| p)
            {
                self.err(
                    Diagnostic::new(
                        Code::Duplicate,
                        p.span,
                        format!("the lambda's parameter `{}` is named twice", p.node),
                    )
                    .label("duplicate"),
                );
                return err_expr(span);
            }
            lambdas.push((params, body));
        }
        let init = (op == LambdaOp::Reduce).then(|| self.expr(&args[1], scope));
        if let Some(i) = &init {
            if i.ty == Type::Null {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, i.span, "the start value of `reduce` has no type")
                        .label("`null` alone")
                        .help("start from a typed value, e.g. `0`, `0.0` or `\"\"`"),
                );
                return err_expr(span);
            }
        }
        let base = scope.locals();
        let mut bodies = Vec::new();
        for (params, body) in lambdas {
            let mut typed: Vec<(String, Type)> = Vec::new();
            if let Some(i) = &init {
                typed.push((params[0].node.clone(), i.ty.clone()));
            }
            for (p, t) in params[usize::from(init.is_some())..].iter().zip(&items) {
                typed.push((p.node.clone(), t.clone()));
            }
            let inner = Scope::Lambda { params: &typed, base, outer: scope };
            bodies.push(self.expr(body, &inner));
        }
        let mut bodies = bodies.into_iter();
        let Some(body) = bodies.next() else {
            return err_expr(span);
        };
        let value = bodies.next();
        let nullable = list.ty.is_nullable();
        let ty = match op {
            LambdaOp::Transform => match &value {
                Some(v) => {
                    if !body.ty.is_error() {
                        self.map_key(&body.ty, body.span);
                    }
                    Type::Map(Box::new(body.ty.clone()), Box::new(v.ty.clone()))
                }
                None => Type::List(Box::new(body.ty.clone())),
            },
            LambdaOp::Filter => {
                if !body.ty.is_error() && !matches!(body.ty.base(), Type::Bool | Type::Null) {
                    self.err(
                        Diagnostic::new(
                            Code::NotBool,
                            body.span,
                            format!("the condition of `filter` is a {}", body.ty),
                        )
                        .label("not a bool")
                        .help("`filter(xs, x => x > 0)` keeps the items for which the body is true"),
                    );
                }
                list.ty.base().clone()
            }
            LambdaOp::Reduce => {
                let start = init.as_ref().map(|i| i.ty.clone()).unwrap_or(Type::Error);
                if !body.ty.is_error() && !body.ty.assignable_to(&start) {
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            body.span,
                            format!("the body of `reduce` is a {}, but its start value is a {start}", body.ty),
                        )
                        .label(format!("a {}", body.ty))
                        .help("the body's value is the next value so far: it must have the start value's type"),
                    );
                }
                start
            }
        };
        let body = match op {
            LambdaOp::Reduce => widen(body, &ty),
            _ => body,
        };
        // (`reduce` of a null list or map is its start value, as ksqlDB's REDUCE.)
        let ty = if nullable && op != LambdaOp::Reduce { ty.nullable() } else { ty };
        hir::Expr {
            kind: ExprKind::Lambda {
                op,
                list: Box::new(list),
                init: init.map(Box::new),
                body: Box::new(body),
                value: value.map(Box::new),
                base,
            },
            ty,
            span,
        }
    }

    fn call(&mut self, func: &ast::Ident, args: Vec<hir::Expr>, span: Span) -> hir::Expr {
        let name = func.node.as_str();
        if let Some(f) = function::lookup(name) {
            let types: Vec<&Type> = args.iter().map(|a| &a.ty).collect();
            let checked = if types.iter().any(|t| t.is_error()) {
                Ok(Type::Error)
            } else {
                f.check(&function::Args { types: &types })
            };
            let ty = match checked {
                Ok(t) => t,
                Err(msg) => {
                    self.err(
                        Diagnostic::new(Code::ArgCount, span, format!("`{name}`: {msg}"))
                            .label("in this call")
                            .help(f.doc().signature),
                    );
                    Type::Error
                }
            };
            return hir::Expr { kind: ExprKind::Builtin(f, args), ty, span };
        }
        if let Some(f) = self.functions.iter().find(|f| f.name == name).cloned() {
            let mut ok = args.len() == f.params.len();
            if !ok {
                self.err(
                    Diagnostic::new(
                        Code::ArgCount,
                        span,
                        format!("`{name}` takes {}, not {}", plural(f.params.len(), "argument"), args.len()),
                    )
                    .label("wrong number of arguments"),
                );
            }
            for (a, (pn, pt)) in args.iter().zip(&f.params) {
                if !a.ty.assignable_to(pt) {
                    ok = false;
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            a.span,
                            format!("`{name}` takes a {pt} as `{pn}`, not a {}", a.ty),
                        )
                        .label(format!("a {}", a.ty)),
                    );
                }
            }
            let ty = if ok { f.result_type.clone() } else { Type::Error };
            let args = args
                .into_iter()
                .enumerate()
                .map(|(i, a)| match f.params.get(i) {
                    Some((_, pt)) => widen(a, pt),
                    None => a,
                })
                .collect();
            return hir::Expr { kind: ExprKind::Function(f, args), ty, span };
        }
        if let Some(d) = function::lambda_doc(name) {
            self.err(
                Diagnostic::new(Code::ArgCount, span, format!("`{name}` takes a lambda as its last argument"))
                    .label("in this call")
                    .help(d.signature),
            );
            return err_expr(span);
        }
        if name == "explode" {
            self.err(
                Diagnostic::new(Code::Explode, func.span, "`explode` is not a function of one value")
                    .label("makes one record per item of a list")
                    .help("it can only be a whole `select` item: `select { id, tag = explode(tags) }`"),
            );
            return err_expr(span);
        }
        let help = if name == "map" {
            "a map is written `map { key: value, … }`".to_string()
        } else if aggregate::lookup(name).is_some() || self.aggregates.iter().any(|a| a.name == name) {
            format!("`{name}` is an aggregate; use it inside `aggregate {{ x = {name}(…) }}`")
        } else if self.all_defs.contains(name) {
            format!("`{name}` cannot call itself or a function defined after it: define it first")
        } else {
            let mut cands: Vec<&str> = function::ALL.iter().map(|f| f.name()).collect();
            cands.extend(self.functions.iter().map(|f| f.name.as_str()));
            did_you_mean(name, cands.iter().copied()).unwrap_or_else(|| format!("functions: {}", cands.join(", ")))
        };
        let code = if self.all_defs.contains(name) { Code::Recursion } else { Code::UnknownFunction };
        self.err(
            Diagnostic::new(code, func.span, format!("unknown function `{name}`")).label("not a function").help(help),
        );
        err_expr(span)
    }

    fn path(&mut self, p: &[ast::Ident], span: Span, scope: &Scope) -> hir::Expr {
        let Some(first) = p.first() else { return err_expr(span) };
        match scope {
            Scope::Lambda { params, base, outer } => {
                if let Some(i) = params.iter().rposition(|(n, _)| *n == first.node) {
                    let e = hir::Expr { kind: ExprKind::Local(base + i), ty: params[i].1.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                self.path(p, span, outer)
            }
            Scope::Locals { names, other } => {
                if let (Some((base, state)), true) = (other, p.len() >= 2 && first.node == "other") {
                    if let Some(i) = state.iter().position(|(n, _)| *n == p[1].node) {
                        let e = hir::Expr { kind: ExprKind::Local(base + i), ty: state[i].1.clone(), span };
                        return self.descend(e, &p[2..], span);
                    }
                    let rec = RecordType { fields: state.to_vec() };
                    self.err(self.unknown_field(&p[1], &rec, "the other state"));
                    return err_expr(span);
                }
                if let Some(i) = names.iter().rposition(|(n, _)| *n == first.node) {
                    let e = hir::Expr { kind: ExprKind::Local(i), ty: names[i].1.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                let rec = RecordType { fields: names.to_vec() };
                let mut d = self.unknown_field(first, &rec, "this scope");
                d.message = format!("unknown name `{}`", first.node);
                d.label = "not a parameter, state field or `let`".into();
                self.err(d);
                err_expr(span)
            }
            Scope::Row { shape, from } => {
                if p.len() >= 2 {
                    if let Some(j) = shape.joined.iter().rposition(|j| j.name == first.node) {
                        let jd = &shape.joined[j];
                        let second = &p[1];
                        let (kind, ty) = if let Some((i, t)) = jd.value.get(&second.node) {
                            (ExprKind::Field(Root::Joined(j), vec![i]), t.clone())
                        } else if jd.key.as_ref().is_some_and(|(k, _)| *k == second.node) {
                            (
                                ExprKind::Field(Root::JoinedKey(j), vec![]),
                                jd.key.as_ref().map(|(_, t)| t.clone()).unwrap_or(Type::Error),
                            )
                        } else {
                            let mut rec = jd.value.clone();
                            if let Some((k, t)) = &jd.key {
                                rec.fields.push((k.clone(), t.clone()));
                            }
                            self.err(self.unknown_field(second, &rec, &format!("`{}`", jd.name)));
                            return err_expr(span);
                        };
                        let e = hir::Expr { kind, ty: ty.nullable_if(jd.optional), span };
                        return self.descend(e, &p[2..], span);
                    }
                }
                if let Some((i, t)) = shape.value.get(&first.node) {
                    let e = hir::Expr { kind: ExprKind::Field(Root::Value, vec![i]), ty: t.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                if shape.key_name.as_deref() == Some(first.node.as_str()) {
                    let e = hir::Expr { kind: ExprKind::Field(Root::Key, vec![]), ty: shape.key.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                if p.len() >= 2 && !from.is_empty() && first.node == *from {
                    return self.path(&p[1..], span, scope);
                }
                let mut rec = shape.value.clone();
                if let Some(k) = &shape.key_name {
                    rec.fields.push((k.clone(), shape.key.clone()));
                }
                let mut d = self.unknown_field(first, &rec, &format!("`{from}` here"));
                if let Some(j) = shape.joined.iter().find(|j| j.name == first.node) {
                    d = d.help(format!("`{}` is a joined stream: name one of its fields, `{}.field`", j.name, j.name));
                } else if !shape.joined.is_empty() && did_you_mean(&first.node, rec.names()).is_none() {
                    let owners: Vec<&str> = shape
                        .joined
                        .iter()
                        .filter(|j| j.value.get(&first.node).is_some())
                        .map(|j| j.name.as_str())
                        .collect();
                    if let Some(o) = owners.first() {
                        d = d.help(format!(
                            "`{}` is a field of the joined `{o}`: write `{o}.{}`",
                            first.node, first.node
                        ));
                    }
                }
                self.err(d);
                err_expr(span)
            }
        }
    }

    /// Follow `.field` segments into nested records.
    fn descend(&mut self, mut e: hir::Expr, rest: &[ast::Ident], span: Span) -> hir::Expr {
        for seg in rest {
            let nullable = e.ty.is_nullable();
            let Type::Record(rec) = e.ty.base().clone() else {
                if !e.ty.is_error() {
                    self.err(
                        Diagnostic::new(
                            Code::UnknownField,
                            seg.span,
                            format!(
                                "`{}` is a {}, which has no fields",
                                self.src.get(span.start..seg.span.start).unwrap_or("").trim_end_matches('.').trim(),
                                e.ty
                            ),
                        )
                        .label("no such field")
                        .help("only records have fields"),
                    );
                }
                return err_expr(span);
            };
            let Some((i, t)) = rec.get(&seg.node) else {
                self.err(self.unknown_field(seg, &rec, "this record"));
                return err_expr(span);
            };
            let ty = t.clone().nullable_if(nullable);
            let kind = match e.kind {
                ExprKind::Field(root, mut path) => {
                    path.push(i);
                    ExprKind::Field(root, path)
                }
                other => ExprKind::Get(Box::new(hir::Expr { kind: other, ty: e.ty.clone(), span }), i),
            };
            e = hir::Expr { kind, ty, span };
        }
        e
    }
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
