//! [`hir::Program`] → [`Topology`]: the processor DAG, with its sub-topologies, state stores
//! and topics. This is what `streamc explain` prints and what the runtime executes.
//!
//! Names follow docs/conventions.md and are derived from the query and the clause, never from
//! counters, so an unrelated edit renames no state: a processor is `<query>-<clause-slug>`, a
//! store `<query>-<clause-slug>`, its changelog `<app>-<store>-changelog`, a repartition topic
//! `<app>-<query>-<clause-slug>-repartition`.
//!
//! Each query owns its sub-topologies and its stores, so replacing or dropping one query never
//! touches another's state.
//!
//! [`physical::specs`] turns a topology into the physical plan the runtime runs: one
//! [`physical::TaskSpec`] per sub-topology.

pub mod physical;
pub mod reserved;

pub use reserved::{check_statement_text, reserved_sink, reserved_sink_diagnostics, reserved_sinks};

use petgraph::algo::{is_cyclic_directed, toposort};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::ast::{Duration, EmitMode, Format, WindowKind};
use crate::hir::{self, Shape, StepKind};
use crate::types::{RecordType, Type};

#[derive(Clone, Debug)]
pub struct Topology {
    pub app: String,
    pub graph: DiGraph<Node, Edge>,
    pub subtopologies: Vec<SubTopology>,
    pub stores: Vec<Store>,
    pub topics: Vec<Topic>,
}

#[derive(Clone, Debug)]
pub struct SubTopology {
    pub id: usize,
    pub query: String,
    /// Topics this sub-topology's tasks read (its partitions are the tasks).
    pub sources: Vec<String>,
    /// Its nodes in topological order.
    pub nodes: Vec<NodeIndex>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    pub query: String,
    pub subtopology: usize,
    pub line: usize,
    /// The clause it came from, first line.
    pub clause: String,
    pub stores: Vec<String>,
}

#[derive(Clone, Debug)]
pub enum NodeKind {
    /// `from a, b, …`: the records of several streams (their source nodes, in `inputs` order)
    /// as one stream, in event-time order across them.
    Merge {
        inputs: Vec<String>,
    },
    Source {
        topic: String,
        from: String,
        table: bool,
    },
    Filter {
        pred: hir::Expr,
        table: bool,
    },
    Map {
        fields: Vec<(String, hir::Expr)>,
        table: bool,
    },
    /// The key appended to the value as the field `name` (see `hir::StepKind::KeyAsField`).
    KeyAsField {
        name: String,
    },
    /// A flat map: one record per item of the lists `fields[at]` evaluate to, zipped.
    Explode {
        fields: Vec<(String, hir::Expr)>,
        at: Vec<usize>,
    },
    Rekey {
        key: hir::Expr,
    },
    /// Writes records to a repartition topic, keyed by `key` (None: the current key).
    /// Writes records to a repartition topic keyed by `key` (several expressions: a composite
    /// key, written as a JSON array).
    RepartitionSink {
        topic: String,
        key: Vec<hir::Expr>,
        /// Of a foreign-key join: each record also carries the key of the row it is about and
        /// the offset of the update it comes from (docs/conventions.md, `streamc.fk.*`).
        fk: bool,
    },
    /// Reads a repartition topic. Its records' values hold `value_fields` fields, then one
    /// record per joined side, which carries the side's named key last when `joined_keys` says.
    RepartitionSource {
        topic: String,
        value_fields: usize,
        joined_keys: Vec<bool>,
    },
    Aggregate(Box<hir::AggregateStep>),
    /// Before a grouped table's aggregate: keeps each row as it was last grouped, so that an
    /// update (or a deletion, or a row the filters now drop) first takes the old row out of
    /// its group (Kafka Streams' KGroupedTable subtractor). `group`: the grouping expressions (a
    /// row whose group key is null is refused here, before it is kept).
    GroupTable {
        group: Vec<hir::Expr>,
        /// A null group key is a group of its own (a foreign-key join's row whose foreign key
        /// is null) rather than bad input.
        nulls: bool,
    },
    /// A foreign-key join's middle: this task's partition of `table` (the other table, keyed by
    /// the foreign key) and the rows of the query's table that refer to each of its keys
    /// (their subscriptions, read from the repartition topic by foreign key). A subscription or
    /// an update of `table` gives the result of each row concerned, keyed by the row's key
    /// `key` (of the query's table), to the result repartition topic.
    ForeignJoin {
        table: String,
        left: bool,
        key: Type,
    },
    /// A foreign-key join's end, in the partition of the row's key: results of one row can
    /// come from several tasks (its foreign key changed); each carries the offset of the
    /// update it answers, and only the latest update's results pass.
    ForeignGate,
    /// Materializes a topic-fed table for a join.
    TableSource {
        topic: String,
        table: String,
    },
    JoinTable {
        table: String,
        on: hir::Expr,
        left: bool,
        global: bool,
        /// A table–table join (the query reads a table): updates of either side give results;
        /// the query's own table is kept in the node's store for the other side's updates.
        mutual: bool,
        /// A table–table outer join: rows of either side without a match.
        outer: bool,
    },
    /// Joins the other stream's records from `within` before to `after` after each of this
    /// side's (`within D`: both D). `on` (over this side)
    /// is matched against the other side's key; this side's rows are stored as records of the
    /// incoming edge's value, laid out like a repartition topic's (`value_fields`, `joined_keys`).
    JoinStream {
        stream: String,
        /// How far before and after this side's record the other side's records match.
        within: Duration,
        after: Duration,
        grace: Duration,
        left: bool,
        outer: bool,
        /// The value field of this side that holds its key, if one does (an outer join's row
        /// from the other side alone fills it with the key).
        key_field: Option<usize>,
        on: hir::Expr,
        value_fields: usize,
        joined_keys: Vec<bool>,
        /// A self-join: the joined stream is an input the sub-topology already reads (its main
        /// input, or one merged with it). Each of its records is both sides, read once.
        same_input: bool,
    },
    /// `tenant`: the query is tenant-scoped (keys `[tenant, key]`, a `tenant` field).
    Sink {
        topic: String,
        format: Format,
        /// `to … key avro|protobuf`.
        key_format: Option<Format>,
        tenant: bool,
        /// Keyed by the windowed key (`to … windowed`).
        windowed: bool,
        /// A branch (`to … when C`): it takes the records for which C is true; the others go on
        /// to the next sink of the chain.
        when: Option<hir::Expr>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub key: Type,
    pub value: Type,
    pub mode: EdgeMode,
}

#[derive(Clone, Debug, PartialEq)]
pub enum EdgeMode {
    Forward,
    Repartition { topic: String },
}

#[derive(Clone, Debug)]
pub struct Store {
    pub name: String,
    pub kind: StoreKind,
    /// None for a global table, rebuilt from the control topic.
    pub changelog: Option<String>,
    pub node: String,
    pub subtopology: Option<usize>,
    pub key: Type,
    pub value: Type,
    pub tenant_scoped: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StoreKind {
    KeyValue,
    /// Windows of an aggregate; entries expire at window end + grace (stream time).
    Window {
        window: hir::Window,
    },
    /// One side of a stream–stream join: records kept for `within + after + grace`.
    JoinWindow {
        /// The join's bounds: before (`within`) and after a main-side record.
        within: Duration,
        after: Duration,
        grace: Duration,
        /// Of an outer join (its other side's records carry whether a null row is owed).
        outer: bool,
    },
    /// A control-managed table that every task sees whole.
    Global,
    /// Of a grouped table (its rows as last grouped, or its aggregate): key-value, valid only
    /// for this `grouping` (the `group by` clause, and for the aggregate's store its `aggregate`
    /// clause too, whitespace collapsed), since a row taken back must leave the group it was
    /// added to, with the arguments it was added with.
    Grouped {
        grouping: String,
    },
    /// One of a foreign-key join's stores (its rows by key, its subscriptions, its offsets):
    /// built for this join (`join`: its clause), so the three are kept or dropped together.
    ForeignKey {
        join: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Topic {
    pub name: String,
    pub role: TopicRole,
    pub partitions: Partitions,
    pub compacted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TopicRole {
    Source,
    Sink,
    Repartition,
    Changelog,
    DeadLetter,
    Late,
    Control,
    ControlStatus,
    Metrics,
}

impl TopicRole {
    pub fn as_str(self) -> &'static str {
        match self {
            TopicRole::Source => "source",
            TopicRole::Sink => "sink",
            TopicRole::Repartition => "repartition",
            TopicRole::Changelog => "changelog",
            TopicRole::DeadLetter => "dead letters",
            TopicRole::Late => "late records",
            TopicRole::Control => "control",
            TopicRole::ControlStatus => "control status",
            TopicRole::Metrics => "metrics",
        }
    }
    pub fn internal(self) -> bool {
        matches!(self, TopicRole::Repartition | TopicRole::Changelog)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Partitions {
    /// Owned by someone else (an input or output topic): whatever it has.
    External,
    /// The largest partition count among the sources of these sub-topologies.
    OfSubtopology(usize),
    Fixed(u32),
    /// As many as this (external) topic: a repartition co-partitioned with a joined side.
    Like(String),
}

/// Build the DAG of every query of the program.
pub fn lower(program: &hir::Program, app: &str) -> Topology {
    let mut l =
        Lowering { program, app, graph: DiGraph::new(), subs: Vec::new(), stores: Vec::new(), topics: Vec::new() };
    for q in &program.queries {
        l.query(q);
    }
    for s in &program.sources {
        if s.is_global() {
            l.stores.push(Store {
                name: format!("{}-table", s.name),
                kind: StoreKind::Global,
                changelog: None,
                node: String::new(),
                subtopology: None,
                key: s.key_type(),
                value: Type::Record(s.value.clone()),
                tenant_scoped: false,
            });
        }
    }
    for (name, role) in reserved::APP_TOPICS {
        l.topic(format!("{app}-{name}"), role, Partitions::Fixed(1), false);
    }
    debug_assert!(!is_cyclic_directed(&l.graph), "queries lower to a DAG");
    let order = toposort(&l.graph, None).unwrap_or_else(|_| l.graph.node_indices().collect());
    for n in order {
        let s = l.graph[n].subtopology;
        l.subs[s].nodes.push(n);
    }
    Topology { app: app.to_string(), graph: l.graph, subtopologies: l.subs, stores: l.stores, topics: l.topics }
}

/// Where and how a pipeline is cut by a repartition topic.
struct Cut<'s> {
    slug: &'s str,
    /// The new key: one expression, or several for a composite group key.
    key: Vec<hir::Expr>,
    /// None: the largest partition count of the upstream sub-topology's sources.
    partitions: Option<Partitions>,
    /// A foreign-key join's repartition (see [`NodeKind::RepartitionSink`]).
    fk: bool,
}

struct Lowering<'a> {
    program: &'a hir::Program,
    app: &'a str,
    graph: DiGraph<Node, Edge>,
    subs: Vec<SubTopology>,
    stores: Vec<Store>,
    topics: Vec<Topic>,
}

/// The edge carrying records of this shape: the value, plus each joined side as a record
/// field under its name (nullable after a left join), its named key (if any) last.
pub fn edge(shape: &Shape, mode: EdgeMode) -> Edge {
    Edge { key: shape.key.clone(), value: Type::Record(wire_value(shape)), mode }
}

/// The value of records of this shape as they travel through a topic.
pub fn wire_value(shape: &Shape) -> RecordType {
    let mut value = shape.value.clone();
    for j in &shape.joined {
        let mut rec = j.value.clone();
        if let Some((k, t)) = &j.key {
            if rec.get(k).is_none() {
                rec.fields.push((k.clone(), t.clone()));
            }
        }
        value.fields.push((j.name.clone(), Type::Record(rec).nullable_if(j.optional)));
    }
    value
}

impl Lowering<'_> {
    fn topic(&mut self, name: String, role: TopicRole, partitions: Partitions, compacted: bool) {
        if let Some(t) = self.topics.iter_mut().find(|t| t.name == name) {
            // A topic read by one query and written by another keeps its first role.
            t.role = t.role.min(role);
            return;
        }
        self.topics.push(Topic { name, role, partitions, compacted });
    }

    fn new_sub(&mut self, query: &str) -> usize {
        let id = self.subs.len();
        self.subs.push(SubTopology { id, query: query.to_string(), sources: Vec::new(), nodes: Vec::new() });
        id
    }

    fn node(
        &mut self,
        q: &hir::Query,
        sub: usize,
        name: String,
        kind: NodeKind,
        line: usize,
        clause: String,
    ) -> NodeIndex {
        self.graph.add_node(Node {
            name,
            kind,
            query: q.name.clone(),
            subtopology: sub,
            line,
            clause,
            stores: Vec::new(),
        })
    }

    fn store(&mut self, n: NodeIndex, name: String, kind: StoreKind, key: Type, value: Type, tenant_scoped: bool) {
        let changelog = format!("{}-{}-changelog", self.app, name);
        let sub = self.graph[n].subtopology;
        self.topic(changelog.clone(), TopicRole::Changelog, Partitions::OfSubtopology(sub), true);
        self.graph[n].stores.push(name.clone());
        let node = self.graph[n].name.clone();
        self.stores.push(Store {
            name,
            kind,
            changelog: Some(changelog),
            node,
            subtopology: Some(sub),
            key,
            value,
            tenant_scoped,
        });
    }

    /// Cut the pipeline at a repartition topic: a sink in the current sub-topology, a source in
    /// a new one. Returns the new source node and its sub-topology.
    #[allow(clippy::too_many_arguments)]
    fn repartition(
        &mut self,
        q: &hir::Query,
        prev: NodeIndex,
        sub: usize,
        cut: Cut,
        before: &Shape,
        out: &Shape,
        line: usize,
        clause: &str,
    ) -> (NodeIndex, usize) {
        let Cut { slug, key, partitions, fk } = cut;
        let topic = format!("{}-{}-{}-repartition", self.app, q.name, slug);
        self.topic(topic.clone(), TopicRole::Repartition, partitions.unwrap_or(Partitions::OfSubtopology(sub)), false);
        let sink = self.node(
            q,
            sub,
            format!("{}-{}-repartition-sink", q.name, slug),
            NodeKind::RepartitionSink { topic: topic.clone(), key, fk },
            line,
            clause.to_string(),
        );
        self.graph.add_edge(prev, sink, edge(before, EdgeMode::Forward));
        let new_sub = self.new_sub(&q.name);
        self.subs[new_sub].sources.push(topic.clone());
        let src = self.node(
            q,
            new_sub,
            format!("{}-{}-repartition-source", q.name, slug),
            NodeKind::RepartitionSource {
                topic: topic.clone(),
                value_fields: out.value.fields.len(),
                joined_keys: out
                    .joined
                    .iter()
                    .map(|j| j.key.as_ref().is_some_and(|(k, _)| j.value.get(k).is_none()))
                    .collect(),
            },
            line,
            clause.to_string(),
        );
        self.graph.add_edge(sink, src, edge(out, EdgeMode::Repartition { topic }));
        (src, new_sub)
    }

    /// The table `t` a join node `join` of sub-topology `sub` reads: its topic, a source node
    /// materializing it in the store `name` (the join's).
    fn table_source(&mut self, q: &hir::Query, sub: usize, join: NodeIndex, name: &str, t: &hir::Source) {
        let topic = t.topic.clone().unwrap_or_default();
        self.topic(topic.clone(), TopicRole::Source, Partitions::External, false);
        self.subs[sub].sources.push(topic.clone());
        let kind = NodeKind::TableSource { topic, table: t.name.clone() };
        let ts = self.node(q, sub, format!("{name}-source"), kind, t.line, format!("table {}", t.name));
        let value = Type::Record(t.value.clone());
        let e = Edge { key: t.key_type(), value: value.clone(), mode: EdgeMode::Forward };
        self.store(ts, name.to_string(), StoreKind::KeyValue, t.key_type(), value, t.tenant.is_some());
        self.graph[join].stores.push(name.to_string());
        self.graph.add_edge(ts, join, e);
    }

    /// A foreign-key join of the query's table (its rows keyed by K, each naming a key of the
    /// other table with `on`) with `table`, in three sub-topologies:
    ///
    /// 1. in the partition of K, each row as last subscribed (a `GroupTable` by the foreign
    ///    key, nulls allowed): an update first unsubscribes the old row from its foreign key,
    ///    then subscribes the new one, through the repartition topic `…-fk-repartition` keyed by
    ///    foreign key (co-partitioned with `table`), each record carrying K and the offset of
    ///    the update;
    /// 2. in the partition of the foreign key, `table`'s rows and the subscriptions: a
    ///    subscription, or an update of `table`, sends the result of each row concerned keyed
    ///    by K to `…-fk-result-repartition` (a tombstone where the row has none);
    /// 3. in the partition of K, only results answering the row's latest update pass (a row
    ///    whose foreign key changed may still get a late result from its old one), then the
    ///    rest of the query.
    ///
    /// Returns the gate node (its incoming edge is the caller's) and the result repartition's
    /// source node.
    fn foreign_join(
        &mut self,
        q: &hir::Query,
        prev: NodeIndex,
        sub: usize,
        step: &hir::Step,
        shape: &Shape,
        (table, left, on): (usize, bool, hir::Expr),
    ) -> (NodeIndex, NodeIndex) {
        let program = self.program;
        let t = &program.sources[table];
        let input = &program.sources[q.input];
        let name = format!("{}-{}", q.name, step.slug);
        let (line, clause) = (step.line, step.text.clone());
        // 1. The query's table, keyed by its key: each row as last subscribed.
        let rows = format!("{name}-fk-rows");
        let kind = NodeKind::GroupTable { group: vec![on.clone()], nulls: true };
        let n = self.node(q, sub, rows.clone(), kind, line, clause.clone());
        self.graph.add_edge(prev, n, edge(shape, EdgeMode::Forward));
        let state = StoreKind::ForeignKey { join: step.text.split_whitespace().collect::<Vec<_>>().join(" ") };
        self.store(n, rows, state.clone(), shape.key.clone(), Type::Record(shape.value.clone()), shape.tenant_scoped);
        let mut by_fk = shape.clone();
        by_fk.key = on.ty.base().clone();
        let slug = format!("{}-fk", step.slug);
        let like = Partitions::Like(t.topic.clone().unwrap_or_default());
        let c = Cut { slug: &slug, key: vec![on], partitions: Some(like), fk: true };
        let (subs, sub) = self.repartition(q, n, sub, c, shape, &by_fk, line, &clause);
        // 2. In the partition of the foreign key: the other table and the subscriptions.
        let kind = NodeKind::ForeignJoin { table: t.name.clone(), left, key: shape.key.clone() };
        let j = self.node(q, sub, name.clone(), kind, line, clause.clone());
        self.graph.add_edge(subs, j, edge(&by_fk, EdgeMode::Forward));
        self.table_source(q, sub, j, &name, t);
        // Each subscription: the row, under its foreign key and key.
        self.store(
            j,
            format!("{name}-fk-subscriptions"),
            state.clone(),
            by_fk.key.clone(),
            Type::Record(shape.value.clone()),
            false,
        );
        // 3. Back in the partition of the row's key, behind the gate.
        let key = hir::Expr {
            kind: hir::ExprKind::Field(hir::Root::Key, Vec::new()),
            ty: shape.key.clone(),
            span: crate::ast::Span::default(),
        };
        let slug = format!("{}-fk-result", step.slug);
        let itopic = input.topic.clone().unwrap_or_default();
        let c = Cut { slug: &slug, key: vec![key], partitions: Some(Partitions::Like(itopic)), fk: true };
        let (results, sub) = self.repartition(q, j, sub, c, &step.out, &step.out, line, &clause);
        let g = self.node(q, sub, format!("{name}-fk-gate"), NodeKind::ForeignGate, line, clause);
        self.store(g, format!("{name}-fk-offsets"), state, shape.key.clone(), Type::Int, false);
        (g, results)
    }

    fn query(&mut self, q: &hir::Query) {
        let program = self.program;
        let input = &program.sources[q.input];
        let mut sub = self.new_sub(&q.name);
        // The query's own inputs' topics, read by its first sub-topology (a self-join there
        // reads them once).
        let first_sub = sub;
        let own_topics: Vec<String> = std::iter::once(q.input)
            .chain(q.merged.iter().copied())
            .filter_map(|i| program.sources.get(i).and_then(|s| s.topic.clone()))
            .collect();
        let topic = input.topic.clone().unwrap_or_default();
        self.topic(topic.clone(), TopicRole::Source, Partitions::External, false);
        self.subs[sub].sources.push(topic.clone());
        let table = input.kind == hir::SourceKind::Table;
        let mut prev = self.node(
            q,
            sub,
            format!("{}-from", q.name),
            NodeKind::Source { topic, from: input.name.clone(), table },
            q.from_line,
            format!("from {}", input.name),
        );
        if !q.merged.is_empty() {
            // `from a, b, …`: every stream's source node in this sub-topology (its tasks read
            // partition p of each), into one merge node.
            let mut names = vec![input.name.clone()];
            let mut sources = vec![prev];
            for (k, &m) in q.merged.iter().enumerate() {
                let other = &program.sources[m];
                let topic = other.topic.clone().unwrap_or_default();
                self.topic(topic.clone(), TopicRole::Source, Partitions::External, false);
                self.subs[sub].sources.push(topic.clone());
                let n = self.node(
                    q,
                    sub,
                    format!("{}-from-{}", q.name, k + 2),
                    NodeKind::Source { topic, from: other.name.clone(), table: false },
                    q.from_line,
                    format!("from {}", other.name),
                );
                names.push(other.name.clone());
                sources.push(n);
            }
            let text = format!("from {}", names.join(", "));
            let merge =
                self.node(q, sub, format!("{}-merge", q.name), NodeKind::Merge { inputs: names }, q.from_line, text);
            let e = Edge { key: input.key_type(), value: Type::Record(input.value.clone()), mode: EdgeMode::Forward };
            for n in sources {
                self.graph.add_edge(n, merge, e.clone());
            }
            prev = merge;
        }
        let mut shape = Shape {
            key: input.key_type(),
            value: input.value.clone(),
            key_name: None,
            key_field: None,
            partitioned: true,
            joined: Vec::new(),
            table,
            windowed: false,
            tenant_scoped: input.tenant.is_some(),
        };
        // A table–table join's first join node keeps the query's own table's rows (the
        // joins after it, an n-way join on the key, share them).
        let mut own_rows = false;
        for step in &q.steps {
            let name = format!("{}-{}", q.name, step.slug);
            let (kind, line, clause) = (step.kind.clone(), step.line, step.text.clone());
            let n = match kind {
                StepKind::Filter(pred) => {
                    self.node(q, sub, name, NodeKind::Filter { pred, table: shape.table }, line, clause)
                }
                StepKind::Map(fields) => {
                    self.node(q, sub, name, NodeKind::Map { fields, table: shape.table }, line, clause)
                }
                StepKind::Explode { fields, at } => {
                    self.node(q, sub, name, NodeKind::Explode { fields, at }, line, clause)
                }
                StepKind::Rekey(key) => self.node(q, sub, name, NodeKind::Rekey { key }, line, clause),
                StepKind::KeyAsField(field) => {
                    self.node(q, sub, name, NodeKind::KeyAsField { name: field }, line, clause)
                }
                StepKind::Aggregate(a) => {
                    let mut at = At { prev, sub, shape: shape.clone() };
                    self.aggregate(q, step, &mut at, a);
                    (prev, sub, shape) = (at.prev, at.sub, step.out.clone());
                    continue;
                }
                StepKind::JoinTable { table, left, foreign: true, on, .. } => {
                    let (n, src) = self.foreign_join(q, prev, sub, step, &shape, (table, left, on));
                    prev = src;
                    sub = self.graph[n].subtopology;
                    // The gate reads the join's results.
                    shape = step.out.clone();
                    n
                }
                StepKind::JoinTable { .. } => {
                    let mut at = At { prev, sub, shape: shape.clone() };
                    let n = self.join_table(q, step, &mut at, &mut own_rows);
                    (prev, sub, shape) = (at.prev, at.sub, at.shape);
                    n
                }
                StepKind::JoinStream { .. } => {
                    let mut at = At { prev, sub, shape: shape.clone() };
                    let n = self.join_stream(q, step, &mut at, first_sub, &own_topics);
                    (prev, sub, shape) = (at.prev, at.sub, at.shape);
                    n
                }
            };
            self.graph.add_edge(prev, n, edge(&shape, EdgeMode::Forward));
            prev = n;
            shape = step.out.clone();
        }
        // Branches are a chain: the records a `to … when` does not take go on to the next `to`.
        for (i, sink) in q.sinks.iter().enumerate() {
            self.topic(sink.topic.clone(), TopicRole::Sink, Partitions::External, false);
            let name = if i == 0 { format!("{}-to", q.name) } else { format!("{}-to-{}", q.name, i + 1) };
            let n = self.node(
                q,
                sub,
                name,
                NodeKind::Sink {
                    topic: sink.topic.clone(),
                    format: sink.format,
                    key_format: sink.key_format,
                    tenant: shape.tenant_scoped,
                    windowed: sink.windowed,
                    when: sink.when.clone(),
                },
                sink.line,
                sink.text.clone(),
            );
            self.graph.add_edge(prev, n, edge(&shape, EdgeMode::Forward));
            prev = n;
        }
    }

    /// A stream–stream join step: a repartition first if the join key is not the key, the join
    /// node with its two window stores, and the other stream's source node (unless a self-join
    /// reads it as this sub-topology's own input).
    /// Before a join whose key is not the records' key: a repartition by `on`, co-partitioned
    /// with the joined source (as many partitions as its topic); `at` moves past it.
    fn repartition_for_join(
        &mut self,
        q: &hir::Query,
        step: &hir::Step,
        at: &mut At,
        on: &hir::Expr,
        joined: &hir::Source,
    ) {
        let mut cut = at.shape.clone();
        cut.key = on.ty.clone();
        let c = Cut {
            slug: &step.slug,
            key: vec![on.clone()],
            partitions: Some(Partitions::Like(joined.topic.clone().unwrap_or_default())),
            fk: false,
        };
        let (src, s) = self.repartition(q, at.prev, at.sub, c, &at.shape, &cut, step.line, &step.text);
        at.prev = src;
        at.sub = s;
        at.shape = cut;
    }

    /// A table join step (a lookup, or a table–table join on the key): a repartition first if
    /// the join key is not the key, the join node, the table's source node and store; the first
    /// table–table join of a query keeps the query's own table's rows too (`own_rows`).
    fn join_table(&mut self, q: &hir::Query, step: &hir::Step, at: &mut At, own_rows: &mut bool) -> NodeIndex {
        let program = self.program;
        let input = &program.sources[q.input];
        let name = format!("{}-{}", q.name, step.slug);
        let (line, clause) = (step.line, step.text.clone());
        let StepKind::JoinTable { table, left, outer, mutual, repartition, on, .. } = step.kind.clone() else {
            unreachable!("a table join step")
        };
        let t = &program.sources[table];
        if repartition {
            self.repartition_for_join(q, step, at, &on, t);
        }
        let global = t.is_global();
        let n = self.node(
            q,
            at.sub,
            name.clone(),
            NodeKind::JoinTable { table: t.name.clone(), on, left, global, mutual, outer },
            line,
            clause.clone(),
        );
        if mutual && !std::mem::replace(own_rows, true) {
            // This side's rows, for the other tables' updates to join.
            self.store(
                n,
                format!("{name}-left"),
                StoreKind::KeyValue,
                input.key_type(),
                Type::Record(input.value.clone()),
                input.tenant.is_some(),
            );
        }
        if global {
            self.graph[n].stores.push(format!("{}-table", t.name));
        } else {
            self.table_source(q, at.sub, n, &name, t);
        }
        n
    }

    /// An aggregate step: for a grouped table, the node keeping each key's row as last grouped;
    /// a repartition by the grouping if needed; the aggregate node and its store.
    fn aggregate(&mut self, q: &hir::Query, step: &hir::Step, at: &mut At, a: Box<hir::AggregateStep>) {
        let name = format!("{}-{}", q.name, step.slug);
        let (line, clause) = (step.line, step.text.clone());
        if a.table {
            let rows = format!("{}-{}-rows", q.name, a.group_slug);
            let group = a.group.iter().map(|(_, e)| e.clone()).collect();
            let kind = NodeKind::GroupTable { group, nulls: false };
            let n = self.node(q, at.sub, rows.clone(), kind, a.group_line, a.group_text.clone());
            self.graph.add_edge(at.prev, n, edge(&at.shape, EdgeMode::Forward));
            let value = Type::Record(at.shape.value.clone());
            let kind = StoreKind::Grouped { grouping: a.identity.0.clone() };
            self.store(n, rows, kind, at.shape.key.clone(), value, at.shape.tenant_scoped);
            at.prev = n;
        }
        if a.repartition {
            let key = a.group.iter().map(|(_, e)| e.clone()).collect();
            let mut cut = at.shape.clone();
            cut.key = step.out.key.clone();
            let c = Cut { slug: &a.group_slug, key, partitions: None, fk: false };
            let (src, s) = self.repartition(q, at.prev, at.sub, c, &at.shape, &cut, a.group_line, &a.group_text);
            at.prev = src;
            at.sub = s;
            at.shape = cut;
        }
        let kind = match a.window {
            Some(w) => StoreKind::Window { window: w },
            // Its states were built from these arguments: taking a row back needs the same.
            None if a.table => StoreKind::Grouped { grouping: format!("{}; {}", a.identity.0, a.identity.1) },
            None => StoreKind::KeyValue,
        };
        let state =
            Type::Record(RecordType { fields: a.aggs.iter().map(|c| (c.name.clone(), c.state_ty.clone())).collect() });
        let n = self.node(q, at.sub, name.clone(), NodeKind::Aggregate(a), line, clause);
        self.graph.add_edge(at.prev, n, edge(&at.shape, EdgeMode::Forward));
        self.store(n, name, kind, step.out.key.clone(), state, at.shape.tenant_scoped);
        at.prev = n;
    }

    fn join_stream(
        &mut self,
        q: &hir::Query,
        step: &hir::Step,
        at: &mut At,
        first_sub: usize,
        own_topics: &[String],
    ) -> NodeIndex {
        let program = self.program;
        let name = format!("{}-{}", q.name, step.slug);
        let (line, clause) = (step.line, step.text.clone());
        let StepKind::JoinStream { stream, within, after, grace, left, outer, repartition, on } = step.kind.clone()
        else {
            unreachable!("a stream–stream join step")
        };
        let o = &program.sources[stream];
        if repartition {
            self.repartition_for_join(q, step, at, &on, o);
        }
        let joined_keys =
            at.shape.joined.iter().map(|j| j.key.as_ref().is_some_and(|(k, _)| j.value.get(k).is_none())).collect();
        let otopic = o.topic.clone().unwrap_or_default();
        // Joined with an input this at.sub-topology reads already (a self-join on the
        // key): one reader, each record both sides.
        let same_input = at.sub == first_sub && own_topics.contains(&otopic);
        let kind = NodeKind::JoinStream {
            stream: o.name.clone(),
            within,
            after,
            grace,
            left,
            outer,
            // The join key is this side's key: the value field `on` reads, if it is one.
            key_field: match &on.kind {
                hir::ExprKind::Field(hir::Root::Value, p) if p.len() == 1 => Some(p[0]),
                _ => None,
            },
            on: on.clone(),
            value_fields: at.shape.value.fields.len(),
            joined_keys,
            same_input,
        };
        let n = self.node(q, at.sub, name.clone(), kind, line, clause.clone());
        if !same_input {
            self.topic(otopic.clone(), TopicRole::Source, Partitions::External, false);
            self.subs[at.sub].sources.push(otopic.clone());
            let os = self.node(
                q,
                at.sub,
                format!("{name}-source"),
                NodeKind::Source { topic: otopic, from: o.name.clone(), table: false },
                o.line,
                format!("stream {}", o.name),
            );
            let e = Edge { key: o.key_type(), value: Type::Record(o.value.clone()), mode: EdgeMode::Forward };
            self.graph.add_edge(os, n, e);
        }
        let scoped = at.shape.tenant_scoped;
        self.store(
            n,
            format!("{name}-left"),
            StoreKind::JoinWindow { within, after, grace, outer },
            at.shape.key.clone(),
            Type::Record(at.shape.value.clone()),
            scoped,
        );
        self.store(
            n,
            format!("{name}-right"),
            StoreKind::JoinWindow { within, after, grace, outer },
            o.key_type(),
            Type::Record(o.value.clone()),
            scoped,
        );
        n
    }
}

impl NodeKind {
    /// The node's kind, as explain names it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            NodeKind::Merge { .. } => "merge",
            NodeKind::Source { table: false, .. } => "source",
            NodeKind::Source { table: true, .. } => "table source",
            NodeKind::Filter { table: false, .. } => "filter",
            NodeKind::Filter { table: true, .. } => "table filter",
            NodeKind::Map { table: false, .. } => "map",
            NodeKind::Map { table: true, .. } => "table map",
            NodeKind::Explode { .. } => "flat map",
            NodeKind::Rekey { .. } => "rekey",
            NodeKind::KeyAsField { .. } => "key as field",
            NodeKind::RepartitionSink { .. } => "repartition sink",
            NodeKind::RepartitionSource { .. } => "repartition source",
            NodeKind::Aggregate(a) if a.window.is_some() => "window aggregate",
            NodeKind::Aggregate(_) => "aggregate",
            NodeKind::GroupTable { nulls: true, .. } => "foreign-key subscriptions",
            NodeKind::GroupTable { .. } => "table group by",
            NodeKind::ForeignJoin { left: true, .. } => "foreign-key left join",
            NodeKind::ForeignJoin { .. } => "foreign-key join",
            NodeKind::ForeignGate => "foreign-key results",
            NodeKind::TableSource { .. } => "table source",
            NodeKind::JoinTable { mutual: true, outer: true, .. } => "table-table outer join",
            NodeKind::JoinTable { mutual: true, left: true, .. } => "table-table left join",
            NodeKind::JoinTable { mutual: true, .. } => "table-table join",
            NodeKind::JoinTable { left: false, .. } => "stream-table join",
            NodeKind::JoinTable { left: true, .. } => "stream-table left join",
            NodeKind::JoinStream { outer: true, .. } => "stream-stream outer join",
            NodeKind::JoinStream { left: false, .. } => "stream-stream join",
            NodeKind::JoinStream { left: true, .. } => "stream-stream left join",
            NodeKind::Sink { .. } => "sink",
        }
    }

    /// A one-line description of what the node does.
    pub fn describe(&self) -> String {
        match self {
            NodeKind::Merge { inputs } => format!(
                "the records of {} as one stream, in event-time order across them (partition p of each topic in task p)",
                inputs.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
            ),
            NodeKind::Source { topic, from, .. } => format!("reads `{from}` from topic {topic}"),
            NodeKind::Filter { table: true, .. } => {
                "keeps rows that match; a row that stops matching is deleted (tombstone, or taken out of its group)".into()
            }
            NodeKind::Filter { .. } => "keeps records that match".into(),
            NodeKind::Map { fields, .. } => {
                format!("value {{{}}}", fields.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "))
            }
            NodeKind::Explode { fields, at } => format!(
                "one record per item of {}{}: value {{{}}}",
                at.iter().map(|i| format!("`{}`", fields[*i].0)).collect::<Vec<_>>().join(", "),
                if at.len() > 1 { " (zipped: a shorter list's field null past its end)" } else { "" },
                fields.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            ),
            NodeKind::Rekey { .. } => "changes the key; a later stateful clause repartitions".into(),
            NodeKind::KeyAsField { name } => {
                format!("adds the key to the value as `{name}`, which the grouping then reads across the repartition")
            }
            NodeKind::RepartitionSink { topic, fk: true, .. } => {
                format!("writes to {topic}, with the row's key and the offset of its update (streamc.fk.*)")
            }
            NodeKind::RepartitionSink { topic, key, .. } if key.len() > 1 => {
                format!("writes to {topic}, keyed by the composite group key")
            }
            NodeKind::RepartitionSink { topic, .. } => format!("writes to {topic}, keyed by the new key"),
            NodeKind::RepartitionSource { topic, .. } => format!("reads {topic}"),
            NodeKind::Aggregate(a) => {
                let aggs: Vec<String> = a.aggs.iter().map(|c| format!("{}={}", c.name, c.func.name())).collect();
                let w = match &a.window {
                    Some(w) => format!("{}, grace {} (effective), ", zoned_window_desc(w), w.grace),
                    None => String::new(),
                };
                let emit = match (a.emit, a.idle) {
                    (EmitMode::Changes, _) => "emit changes".to_string(),
                    (EmitMode::Final, None) => "emit final".to_string(),
                    (EmitMode::Final, Some(d)) => format!(
                        "emit final; after {} of wall-clock time without input, stream time moves with the clock (windows close)",
                        crate::ast::Duration(d)
                    ),
                };
                let group: Vec<&str> = a.group.iter().map(|(n, _)| n.as_str()).collect();
                let how =
                    if a.repartition { "repartitioned by it" } else { "already partitioned by it: no repartition" };
                format!("group by {} ({how}); {w}{}; {emit}", group.join(", "), aggs.join(", "))
            }
            NodeKind::GroupTable { nulls: true, .. } => {
                "keeps each row as last sent by foreign key; an update that changes it unsubscribes the old row from its old foreign key first".into()
            }
            NodeKind::GroupTable { .. } => {
                "keeps each row as grouped; an update takes the old row out of its group first".into()
            }
            NodeKind::ForeignJoin { table, .. } => format!(
                "joins each subscribed row with `{table}`'s row of its foreign key: a subscription or an update of `{table}` gives each row's result, keyed by the row's key"
            ),
            NodeKind::ForeignGate => {
                "passes only the results that answer each row's latest update (a row whose foreign key changed may get a late result from the old one)".into()
            }
            NodeKind::TableSource { topic, table } => format!("materializes table `{table}` from topic {topic}"),
            NodeKind::JoinTable { table, global: true, .. } => {
                format!("looks up the control-managed table `{table}` (global: every task sees all of it)")
            }
            NodeKind::JoinTable { table, mutual: true, .. } => {
                format!("joins `{table}` by key, co-partitioned: an update of either table gives the key's result")
            }
            NodeKind::JoinTable { table, .. } => format!("looks up `{table}` by key, co-partitioned"),
            NodeKind::JoinStream { stream, within, after, grace, left, outer, same_input, .. } => format!(
                "matches `{stream}` records {} (grace {grace}){}{}",
                if within == after {
                    format!("at most {within} apart")
                } else {
                    format!("from {within} before to {after} after")
                },
                if *outer {
                    "; a record of either side with no match is passed on once its window closes"
                } else if *left {
                    "; a record with no match is passed on once its window closes"
                } else {
                    ""
                },
                if *same_input { "; a self-join: each record of the input is both sides, read once" } else { "" }
            ),
            NodeKind::Sink { topic, format, key_format, tenant, windowed, when } => format!(
                "{}writes to topic {topic} as {}{}{}{}",
                if when.is_some() {
                    "a branch: the records for which its condition is true (the others go on to the next `to`); "
                } else {
                    ""
                },
                format,
                key_format.map(|f| format!(", keys as {f}")).unwrap_or_default(),
                if *windowed {
                    ", keyed by window: [key, window_start, window_end], partitioned by the key"
                } else {
                    ""
                },
                if *tenant {
                    "; per tenant: keyed [tenant, key], with a `tenant` field and the streamc.tenant header"
                } else {
                    ""
                }
            ),
        }
    }
}

/// A window as the program writes it (kind, sizes, zone).
pub fn zoned_window_desc(w: &hir::Window) -> String {
    match w.tz {
        Some(z) => format!("{} tz {z:?}", window_desc(&w.kind)),
        None => window_desc(&w.kind),
    }
}

pub fn window_desc(w: &WindowKind) -> String {
    match w {
        WindowKind::Tumbling { size } => format!("tumbling {size}"),
        WindowKind::Hopping { size, advance } => format!("hopping {size} advance {advance}"),
        WindowKind::Sliding { size } => format!("sliding {size}"),
        WindowKind::Session { gap } => format!("session gap {gap}"),
    }
}

/// Where the lowering of a query stands: the last node, its sub-topology, the shape of the
/// records it gives.
struct At {
    prev: NodeIndex,
    sub: usize,
    shape: Shape,
}
