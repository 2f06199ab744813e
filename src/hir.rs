//! The checked program: every name resolved to a slot, every expression typed. Built by
//! [`crate::check`]; read by [`crate::plan`] and the runtime. Holds no spans into pest and no
//! unresolved names: a field is a path of indices, a function is a built-in [`crate::function::Function`] or a definition.

use std::sync::Arc;

use crate::ast::{BinOp, Duration, EmitMode, Format, Literal, Span, UnOp, WindowKind};
use crate::types::{RecordType, Type};

#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Streams and tables, in declaration order (the standard library declares none).
    pub sources: Vec<Source>,
    pub queries: Vec<Query>,
    /// User-defined aggregates: the standard library's first, then the program's.
    pub aggregates: Vec<Arc<AggregateDef>>,
    pub functions: Vec<Arc<FunctionDef>>,
}

impl Program {
    pub fn source(&self, name: &str) -> Option<(usize, &Source)> {
        self.sources.iter().enumerate().find(|(_, s)| s.name == name)
    }
    pub fn query(&self, name: &str) -> Option<&Query> {
        self.queries.iter().find(|q| q.name == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Stream,
    Table,
}

#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub kind: SourceKind,
    /// None for a control-managed (global) table.
    pub topic: Option<String>,
    pub key: KeySpec,
    /// `key … avro` / `key … protobuf`: keys in the Confluent wire format; None: keys as text.
    pub key_format: Option<Format>,
    pub format: Format,
    /// The value as queries see it (the tenant field removed).
    pub value: RecordType,
    /// The decoded value as it is on the wire, tenant field included.
    pub wire: RecordType,
    /// Event time: a field of `value`, else the record timestamp.
    pub time: Option<usize>,
    pub tenant: Option<TenantSpec>,
    pub span: Span,
    pub line: usize,
}

impl Source {
    pub fn key_type(&self) -> Type {
        match &self.key {
            KeySpec::Field(i) => self.value.fields[*i].1.clone(),
            KeySpec::Named(_, t) => t.clone(),
            KeySpec::Raw => Type::String.nullable(),
        }
    }
    /// The name by which a query refers to the key, if it has one.
    pub fn key_name(&self) -> Option<&str> {
        match &self.key {
            KeySpec::Field(i) => Some(&self.value.fields[*i].0),
            KeySpec::Named(n, _) => Some(n),
            KeySpec::Raw => None,
        }
    }
    pub fn is_global(&self) -> bool {
        self.kind == SourceKind::Table && self.topic.is_none()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum KeySpec {
    /// `key FIELD`: the key equals this value field.
    Field(usize),
    /// `key NAME: TYPE`: a key outside the value.
    Named(String, Type),
    /// No declaration: whatever the record carries.
    Raw,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantSpec {
    Field(String),
    Header(String),
}

/// What a query's records look like at some point of its pipeline.
#[derive(Clone, Debug)]
pub struct Shape {
    pub key: Type,
    pub value: RecordType,
    /// The name the key can be referred to by (`key NAME: T`), if it is not a value field.
    pub key_name: Option<String>,
    /// The value field that equals the key, if it is still the source's declared key.
    pub key_field: Option<usize>,
    /// Records are partitioned by the current key (false after `key by` until a repartition).
    pub partitioned: bool,
    /// Joined sides in scope: (qualifier, its value, its key name and type).
    pub joined: Vec<Joined>,
    /// The records are updates of a table (after `aggregate`, or from a table).
    pub table: bool,
    pub windowed: bool,
    pub tenant_scoped: bool,
}

#[derive(Clone, Debug)]
pub struct Joined {
    pub name: String,
    pub value: RecordType,
    pub key: Option<(String, Type)>,
    /// Left joins make every field of the joined side nullable.
    pub optional: bool,
}

#[derive(Clone, Debug)]
pub struct Query {
    pub name: String,
    pub span: Span,
    pub line: usize,
    /// The line of its `from` clause.
    pub from_line: usize,
    /// Index into [`Program::sources`].
    pub input: usize,
    /// `from a, b, …`: the other streams merged with the input (indices into
    /// [`Program::sources`]), of its key and value types; their records go through the query
    /// like the input's, in event-time order across them.
    pub merged: Vec<usize>,
    pub steps: Vec<Step>,
    /// Where its results go: one `to`, or several branches (`to … when C`), tried in order,
    /// the first whose condition is true taking the record.
    pub sinks: Vec<Sink>,
}

#[derive(Clone, Debug)]
pub struct Step {
    pub kind: StepKind,
    /// Stable name part: `where`, `select`, `group-by-ticker`, `join-limits`, `aggregate`, …
    pub slug: String,
    pub span: Span,
    pub line: usize,
    /// The clause's text, first line, for explain.
    pub text: String,
    /// The records after this step.
    pub out: Shape,
}

#[derive(Clone, Debug)]
pub enum StepKind {
    Filter(Expr),
    Map(Vec<(String, Expr)>),
    /// The record's key appended to its value as a field of this name (what a join added
    /// stays): before a repartition by a grouping that does not keep the key whole, so that the
    /// key's name still reads it after.
    KeyAsField(String),
    /// A `select` with `explode(list)` items (a flat map): one record per item of the lists the
    /// fields `at` evaluate to, zipped (ksqlDB's several table functions: as many records as the
    /// longest list has items, a shorter one's field null past its end; none when every list is
    /// empty or null), each of those fields holding its item.
    Explode {
        fields: Vec<(String, Expr)>,
        at: Vec<usize>,
    },
    /// `key by`: the key becomes this expression; stateful steps after it repartition.
    Rekey(Expr),
    /// Group and aggregate, optionally windowed. `repartition` when the group key is not the
    /// key the records are partitioned by.
    Aggregate(Box<AggregateStep>),
    JoinTable {
        table: usize,
        on: Expr,
        left: bool,
        /// `outer join` (table–table only): rows of either side without a match.
        outer: bool,
        /// The query reads a table: a table–table join, whose result changes with updates of
        /// either table (not only this side's).
        mutual: bool,
        /// A table–table join on a foreign key: `on` gives the other table's key from this
        /// table's row (see `plan` for how it runs).
        foreign: bool,
        repartition: bool,
    },
    JoinStream {
        stream: usize,
        /// How far before and after a main-side record the other side's records match
        /// (`within D`: both D; `within (B, A)`).
        within: Duration,
        after: Duration,
        /// How long after its window closes a record is still joined (Kafka Streams' join grace).
        grace: Duration,
        on: Expr,
        left: bool,
        /// A full outer join (`left` too): the other side's unmatched records pass as well.
        outer: bool,
        repartition: bool,
    },
}

#[derive(Clone, Debug)]
pub struct AggregateStep {
    pub group: Vec<(String, Expr)>,
    pub group_slug: String,
    pub group_line: usize,
    pub group_text: String,
    /// The `group by` and `aggregate` clauses' whole source text, comments dropped and
    /// whitespace collapsed: what a grouped table's stores are valid for
    /// (`plan::StoreKind::Grouped`).
    pub identity: (String, String),
    pub repartition: bool,
    /// It groups a table's rows (Kafka Streams' KGroupedTable): each update of a row takes its
    /// old value back out of its group (`undo`) before the new one goes in, and a group left
    /// with no rows is deleted.
    pub table: bool,
    pub window: Option<Window>,
    pub aggs: Vec<AggCall>,
    pub emit: EmitMode,
    /// `emit final idle D` (ms): windows also close after D of wall-clock time without input.
    pub idle: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Window {
    #[serde(flatten)]
    pub kind: WindowKind,
    pub grace: Duration,
    /// `tz "ZONE"`: whole-day windows aligned on the zone's midnights, not UTC's (the name is
    /// one of the bundled IANA database's, interned: see [`crate::function::calendar::zone_name`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<&'static str>,
}

#[derive(Clone, Debug)]
pub struct AggCall {
    pub name: String,
    pub func: AggFunc,
    pub args: Vec<Expr>,
    pub ty: Type,
    /// The type of its state: stores and changelogs hold it as JSON of this type.
    pub state_ty: Type,
}

#[derive(Clone, Debug)]
pub enum AggFunc {
    /// A built-in aggregate (`count`, `sum`, `count_distinct`, …): see [`crate::aggregate`].
    Native(&'static dyn crate::aggregate::Native),
    User(Arc<AggregateDef>),
}

impl AggFunc {
    pub fn name(&self) -> &str {
        match self {
            AggFunc::Native(n) => n.name(),
            AggFunc::User(d) => &d.name,
        }
    }
    pub fn mergeable(&self) -> bool {
        match self {
            AggFunc::User(d) => d.merge.is_some(),
            AggFunc::Native(_) => true,
        }
    }
    /// It can take a record's contribution back out (an aggregate over a grouped table).
    pub fn retractable(&self) -> bool {
        match self {
            AggFunc::User(d) => d.undo.is_some(),
            AggFunc::Native(n) => n.retractable(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Sink {
    pub topic: String,
    pub format: Format,
    /// `to … key avro|protobuf`: keys in the Confluent wire format; None: keys as text.
    pub key_format: Option<Format>,
    /// Keyed by the windowed key `[key, window_start, window_end]` (`to … windowed`).
    pub windowed: bool,
    /// A branch's condition (`to … when C`): the records for which it is not true go on to the
    /// next `to`.
    pub when: Option<Expr>,
    pub span: Span,
    pub line: usize,
    pub text: String,
}

/// A user-defined aggregate. Its body runs over numbered local slots:
/// in `update` and `undo`, `[params.., state.., lets..]`; in `merge`, `[state.., other state.., lets..]`;
/// in `result`, `[state..]`.
#[derive(Clone, Debug)]
pub struct AggregateDef {
    pub name: String,
    pub params: Vec<(String, Type)>,
    pub state: Vec<(String, Type)>,
    pub init: Vec<Expr>,
    pub update: Vec<Stmt>,
    pub update_slots: usize,
    pub merge: Option<Vec<Stmt>>,
    pub merge_slots: usize,
    /// `undo`: the inverse of `update`, over the same slots (a grouped table's old rows).
    pub undo: Option<Vec<Stmt>>,
    pub undo_slots: usize,
    pub result: Expr,
    pub result_type: Type,
    pub stdlib: bool,
    /// `update`, when every statement is `s = s OP v` (see [`InPlace`]): run in place on the
    /// state, with no locals and no tree walk. Found once, when the aggregate is checked.
    pub in_place: Option<Vec<InPlace>>,
}

/// One update statement `s = s OP v`: state field `state` (an index into the state) combined,
/// by `+`, `-` or `*`, with a parameter, a state field or a literal — `avg`'s `n = n + 1;
/// sum = sum + x`.
#[derive(Clone, Debug)]
pub struct InPlace {
    pub state: usize,
    pub op: BinOp,
    pub operand: Operand,
}

#[derive(Clone, Debug)]
pub enum Operand {
    Param(usize),
    State(usize),
    Lit(Literal),
}

/// The update statements of an aggregate with `params` parameters and `state` state fields as
/// [`InPlace`] steps, if every one has that form.
pub fn in_place(update: &[Stmt], params: usize, state: usize) -> Option<Vec<InPlace>> {
    update
        .iter()
        .map(|Stmt::Set(slot, e)| {
            let ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), l, r) = &e.kind else { return None };
            let s = slot.checked_sub(params).filter(|s| *s < state)?;
            if !matches!(l.kind, ExprKind::Local(a) if a == *slot) {
                return None;
            }
            let operand = match &r.kind {
                ExprKind::Local(b) if *b < params => Operand::Param(*b),
                ExprKind::Local(b) if *b < params + state => Operand::State(*b - params),
                ExprKind::Lit(l) => Operand::Lit(l.clone()),
                _ => return None,
            };
            Some(InPlace { state: s, op: *op, operand })
        })
        .collect()
}

/// A user-defined function; its body reads the parameters as local slots.
#[derive(Clone, Debug)]
pub struct FunctionDef {
    pub name: String,
    pub params: Vec<(String, Type)>,
    pub body: Expr,
    pub result_type: Type,
    pub stdlib: bool,
}

#[derive(Clone, Debug)]
pub enum Stmt {
    /// Set a local slot (a `let`, or a state field by its slot).
    Set(usize, Expr),
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Lit(Literal),
    /// A field of the current record: a root and a path of record indices below it.
    Field(Root, Vec<usize>),
    Local(usize),
    /// A field of a record-valued expression (a local holding a record).
    Get(Box<Expr>, usize),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `first op1 e1 op2 e2 …` folded left to right (a long arithmetic run; see `ast::Expr::Chain`).
    Chain(Box<Expr>, Vec<(BinOp, Expr)>),
    IsNull(Box<Expr>, bool),
    /// `x [not] between lo and hi` (negated when true).
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    List(Vec<Expr>),
    Record(Vec<(String, Expr)>),
    /// `map { k: v, … }`: entries as written (the value sorts them by key; a later equal key wins).
    Map(Vec<(Expr, Expr)>),
    /// A built-in function (see [`crate::function`]).
    Builtin(&'static dyn crate::function::Function, Vec<Expr>),
    Function(Arc<FunctionDef>, Vec<Expr>),
    /// `transform(list, x => e)`, `filter(list, x => c)`, `reduce(list, init, (acc, x) => e)`:
    /// the body runs once per item, its parameters in locals `base..` (after the enclosing
    /// scope's own: a function's or aggregate's, an enclosing lambda's). Over a map, each entry
    /// gives two parameters, its key and value (`(k, v) => …`, `(acc, k, v) => …`), and
    /// `transform` has two bodies: `body` makes the new key, `value` the new value.
    Lambda {
        op: LambdaOp,
        list: Box<Expr>,
        init: Option<Box<Expr>>,
        body: Box<Expr>,
        value: Option<Box<Expr>>,
        base: usize,
    },
}

/// What a lambda does with a list (see [`ExprKind::Lambda`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LambdaOp {
    /// Each item mapped: a list of the body's values.
    Transform,
    /// The items for which the body is true.
    Filter,
    /// The body folded over the items from `init`: its value for (the value so far, the item).
    Reduce,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Value,
    Key,
    /// The n-th joined side's value / key.
    Joined(usize),
    JoinedKey(usize),
}

impl Program {
    /// A readable summary of what the checker resolved: sources with their keys, times and
    /// schemas, and each query's steps with the shape of the records after each. Used by the
    /// check snapshots.
    pub fn summary(&self) -> String {
        let mut o = String::new();
        for s in &self.sources {
            let topic =
                s.topic.as_deref().map(|t| format!(" from {t:?}")).unwrap_or_else(|| " (control-managed)".into());
            let key = match &s.key {
                KeySpec::Field(i) => format!("field {}", s.value.fields[*i].0),
                KeySpec::Named(n, t) => format!("{n}: {t}"),
                KeySpec::Raw => "the record key".into(),
            };
            let time = s.time.map(|i| s.value.fields[i].0.clone()).unwrap_or_else(|| "record timestamp".into());
            o += &format!("{:?} {}{topic}: key {key}; time {time}; {:?} {}", s.kind, s.name, s.format, s.value)
                .to_lowercase();
            if let Some(t) = &s.tenant {
                o += &format!("; tenant {t:?}");
            }
            o += "\n";
        }
        for q in &self.queries {
            o += &format!("query {} from {}\n", q.name, self.sources[q.input].name);
            for st in &q.steps {
                let what = match &st.kind {
                    StepKind::Filter(_) => "filter".to_string(),
                    StepKind::Map(_) => "map".to_string(),
                    StepKind::KeyAsField(n) => format!("key as field `{n}`"),
                    StepKind::Explode { fields, at } => format!(
                        "flat map (explode {})",
                        at.iter().map(|i| format!("`{}`", fields[*i].0)).collect::<Vec<_>>().join(", ")
                    ),
                    StepKind::Rekey(_) => "rekey".to_string(),
                    StepKind::Aggregate(a) => format!(
                        "aggregate by {}{}{} [{}] emit {:?}",
                        a.group.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "),
                        if a.repartition { " (repartition)" } else { "" },
                        a.window
                            .map(|w| format!(
                                " window {:?}{} grace {}",
                                w.kind,
                                w.tz.map(|z| format!(" tz {z:?}")).unwrap_or_default(),
                                w.grace
                            ))
                            .unwrap_or_default(),
                        a.aggs
                            .iter()
                            .map(|c| format!("{} = {}: {}", c.name, c.func.name(), c.ty))
                            .collect::<Vec<_>>()
                            .join(", "),
                        a.emit
                    ),
                    StepKind::JoinTable { table, left, outer, repartition, foreign, .. } => {
                        format!(
                            "{}join table {}{}{}",
                            if *outer {
                                "outer "
                            } else if *left {
                                "left "
                            } else {
                                ""
                            },
                            self.sources[*table].name,
                            if *foreign { " (foreign key)" } else { "" },
                            if *repartition { " (repartition)" } else { "" }
                        )
                    }
                    StepKind::JoinStream { stream, within, after, grace, left, outer, repartition, .. } => format!(
                        "{}join stream {} within {} grace {grace}{}",
                        if *outer {
                            "outer "
                        } else if *left {
                            "left "
                        } else {
                            ""
                        },
                        self.sources[*stream].name,
                        if within == after { within.to_string() } else { format!("({within}, {after})") },
                        if *repartition { " (repartition)" } else { "" }
                    ),
                };
                let joined: String = st
                    .out
                    .joined
                    .iter()
                    .map(|j| format!(" + {}{}", j.name, if j.optional { "?" } else { "" }))
                    .collect();
                o += &format!(
                    "  {} [{}] -> key {}, value {}{joined}{}\n",
                    st.slug,
                    what,
                    st.out.key,
                    st.out.value,
                    if st.out.table { " (table)" } else { "" }
                );
            }
            for sink in &q.sinks {
                o += &format!(
                    "  to {:?} {:?}{}{}\n",
                    sink.topic,
                    sink.format,
                    if sink.windowed { " windowed" } else { "" },
                    if sink.when.is_some() { " when …" } else { "" }
                );
            }
        }
        for a in self.aggregates.iter().filter(|a| !a.stdlib) {
            o += &format!(
                "aggregate {}({}) -> {}; state {}; merge: {}\n",
                a.name,
                a.params.iter().map(|(n, t)| format!("{n}: {t}")).collect::<Vec<_>>().join(", "),
                a.result_type,
                RecordType { fields: a.state.clone() },
                a.merge.is_some()
            );
        }
        for f in self.functions.iter().filter(|f| !f.stdlib) {
            o += &format!(
                "function {}({}) -> {}\n",
                f.name,
                f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect::<Vec<_>>().join(", "),
                f.result_type
            );
        }
        o
    }
}
