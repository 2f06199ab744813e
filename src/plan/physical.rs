//! The physical plan: what the runtime executes for each sub-topology of a [`Topology`] — its
//! main input and how it is decoded, its side inputs (tables, joined streams), a linear chain of
//! operators with the aggregate in the middle, and the stores it opens. Built once per program
//! version by [`specs`]; the runtime consumes it and never looks back at the graph.

use std::sync::Arc;

use crate::ast::{EmitMode, Format, WindowKind};
use crate::hir;
use crate::plan::{NodeKind, Topology};
use crate::types::{RecordType, Type};

/// How a task's main input is decoded.
#[derive(Clone, Debug)]
pub enum Decode {
    /// A declared stream or table.
    Source(Arc<hir::Source>),
    /// A repartition topic: `nvalue` value fields, then the joined sides.
    Internal { key: Type, wire: RecordType, nvalue: usize, joined_keys: Vec<bool> },
}

#[derive(Clone, Debug)]
pub struct InputSpec {
    pub topic: String,
    pub decode: Decode,
}

/// A topic-fed table that the task materializes for a join.
#[derive(Clone, Debug)]
pub struct TableInput {
    pub topic: String,
    pub source: Arc<hir::Source>,
    /// Index of its store in the task.
    pub store: usize,
}

/// The other stream of a stream–stream join: read by the task alongside its main input.
#[derive(Clone, Debug)]
pub struct StreamInput {
    pub topic: String,
    pub source: Arc<hir::Source>,
    /// Index of the join in the task's `ops`.
    pub op: usize,
    /// A main-side record at `t` matches the joined stream's records in `[t − before, t +
    /// after]` (ms; `within D` sets both to D).
    pub before: i64,
    pub after: i64,
    /// How long after its window closes a record still counts (ms): a side keeps its records
    /// for `before + after + grace` of its own stream time, and a left join's unmatched record
    /// is passed on once stream time passes its time + after + grace.
    pub grace: i64,
    pub left: bool,
    /// A full outer join: the joined stream's records with no match pass too, the main side
    /// null (`left` is set as well).
    pub outer: bool,
    /// The main side's value field that holds its key, if one does.
    pub key_field: Option<usize>,
    /// Over the main side, matched against this stream's key.
    pub on: hir::Expr,
    /// Stores of the main side's and this side's records.
    pub left_store: usize,
    pub right_store: usize,
    /// How the main side's rows are stored (as on a repartition topic).
    pub wire: RecordType,
    pub nvalue: usize,
    pub joined_keys: Vec<bool>,
    /// A self-join: the stream is the task's main input (or one merged with it), not read on
    /// its own; each of its records, after it ran down the chain, is this side's record too.
    pub same_input: bool,
}

#[derive(Clone, Debug)]
pub enum Op {
    Filter(hir::Expr),
    Map(Vec<hir::Expr>),
    /// The key appended to the value (what a join added stays).
    KeyAsField,
    /// A map whose fields `at` are lists: one record per item (zipped), each of those fields
    /// holding its item.
    Explode {
        fields: Vec<hir::Expr>,
        at: Vec<usize>,
    },
    Rekey(hir::Expr),
    Repartition(RepartitionSpec),
    JoinTable(TableJoinSpec),
    /// Join with the task's `side`-th stream input.
    JoinStream {
        side: usize,
    },
    Aggregate,
    /// A grouped table's rows as last grouped, in `store` (see [`TaskSpec::table_group`]).
    GroupTable {
        store: usize,
        group: Vec<hir::Expr>,
        /// A null group key is a group (a foreign-key join's subscriptions), not bad input.
        nulls: bool,
    },
    Sink(SinkSpec),
}

/// The end of a sub-topology whose next one keeps state by another key: rows written to
/// `topic` keyed by `key` (of type `key_ty`), their value as `wire`.
#[derive(Clone, Debug)]
pub struct RepartitionSpec {
    pub topic: Arc<str>,
    pub key: Vec<hir::Expr>,
    pub key_ty: Type,
    pub wire: RecordType,
    /// A foreign-key join's: each record carries the row's key (`streamc.fk.key`) and the
    /// offset of the update it comes from (`streamc.fk.offset`).
    pub fk: bool,
}

/// The middle of a foreign-key join (see `plan::NodeKind::ForeignJoin`): the task's main input
/// is the subscriptions' repartition topic (rows of the query's table, keyed by foreign key),
/// its `right`-th table input the other table; its chain writes the results.
#[derive(Clone, Debug)]
pub struct ForeignJoin {
    pub right: usize,
    pub left: bool,
    /// The subscriptions' store: per foreign key and row key, the row and its update's offset.
    pub subscriptions: usize,
    /// The type of the query's table's key (of the rows).
    pub key_ty: Type,
}

/// A stream–table join: look up the task's `table`-th table input (topic-fed), or the
/// control-managed table `global` (by name), for the key `on`.
#[derive(Clone, Debug)]
pub struct TableJoinSpec {
    pub table: Option<usize>,
    pub global: Option<String>,
    pub on: hir::Expr,
    pub left: bool,
}

/// What a task does with a record of one of its inputs ([`TaskSpec::input_roles`]); the index
/// in each is the input's among those of its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputRole {
    /// The query's input (a stream, a table, or a repartition topic): down the chain (a table's
    /// deletion as a tombstone, or a row taken back out of its group).
    Main,
    /// A stream merged with the main input (`from a, b`): down the chain like it.
    Merged(usize),
    /// A table the query looks up (`TaskSpec::tables`): its rows kept, in time order with the
    /// stream.
    Table(usize),
    /// A stream joined with the query's stream: the join's other side (`read_streams`).
    JoinedStream(usize),
    /// A table of a table–table join: the query's own table (None, the main input) or a joined
    /// one; either gives the key's result.
    Mutual(Option<usize>),
    /// A foreign-key join's middle: a subscription (None, the main input) or a row of the other
    /// table.
    Foreign(Option<usize>),
    /// A foreign-key join's end: a result, passed on if it answers the row's latest update.
    ForeignGate,
}

/// A table–table join (Kafka Streams' KTable–KTable join on the key), or several in a row (an
/// n-way join, `t1.join(t2).join(t3)`): a record of any of the tables updates that table's
/// store, then the key's result is worked out from every table's row and sent down the chain
/// after the last join operator.
#[derive(Clone, Debug)]
pub struct MutualJoin {
    /// The first join's index in the task's `ops` (the joins are `op..op + sides.len()`, and
    /// the chain goes on after them).
    pub op: usize,
    /// The other tables, in join order: each joins the result of the joins before it.
    pub sides: Vec<MutualSide>,
}

#[derive(Clone, Copy, Debug)]
pub struct MutualSide {
    /// The table: an index into the task's `tables`.
    pub right: usize,
    pub kind: MutualKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MutualKind {
    /// A result while both tables have the key.
    Inner,
    /// A result while the query's own table has the key (the other side null without a match).
    Left,
    /// A result while either table has the key (the missing side null).
    Outer,
}

/// A `to`: the topic, the value's format and type, the key's type.
#[derive(Clone, Debug)]
pub struct SinkSpec {
    pub topic: Arc<str>,
    pub format: Format,
    pub key_ty: Type,
    pub value_ty: RecordType,
    /// Keyed by the windowed key `[key, window_start, window_end]`, partitioned by the key.
    pub windowed: bool,
    /// A branch: it takes the rows for which this is true; the others go on to the next op
    /// (the next branch's sink).
    pub when: Option<hir::Expr>,
    /// An avro or protobuf sink: its schema's text, derived from `value_ty`
    /// ([`crate::format::schema_text`]).
    pub registry_schema: Option<String>,
    /// `to … key avro|protobuf`: the format of its keys and their schema's text, derived from
    /// `key_ty` ([`crate::format::key_schema_text`]).
    pub key_schema: Option<(Format, String)>,
}

#[derive(Clone, Debug)]
pub struct AggSpec {
    pub node: String,
    pub group: Vec<hir::Expr>,
    pub key_ty: Type,
    pub window: Option<hir::Window>,
    pub aggs: Vec<hir::AggCall>,
    pub emit: EmitMode,
    /// `emit final idle D` (ms): after D of wall-clock time without input, the task's stream
    /// time moves with the clock, so that windows close (see `runtime::run::Idle`).
    pub idle: Option<i64>,
    pub store: usize,
    /// Session windows: the gap (a session closes at end + gap + grace); 0 for time windows.
    pub gap: i64,
    /// Its results are written keyed by window (`to … windowed`): a session sent with other
    /// bounds is deleted downstream when it grows.
    pub windowed_key: bool,
    /// It aggregates a grouped table: rows taken back are undone, each entry counts its rows
    /// ([`crate::runtime::agg::AggEntry::rows`]), and a group left with none is deleted.
    pub table: bool,
}

#[derive(Clone, Debug)]
pub struct StoreSpec {
    pub name: String,
    pub changelog: String,
}

/// Everything the tasks of one sub-topology share.
#[derive(Clone, Debug)]
pub struct TaskSpec {
    pub sub: usize,
    pub query: String,
    /// Stable identity across program edits: the name of the sub-topology's input node.
    pub name: String,
    pub main: InputSpec,
    pub tables: Vec<TableInput>,
    pub streams: Vec<StreamInput>,
    /// Streams merged with the main input (`from a, b, …`): their records run the task's
    /// operators like the main input's.
    pub merged: Vec<InputSpec>,
    pub ops: Vec<Op>,
    /// Operators after the aggregate, run on its emitted rows.
    pub post: Vec<Op>,
    pub agg: Option<AggSpec>,
    pub stores: Vec<StoreSpec>,
    /// The plan node of each operator: those of `ops`, then those of `post` (for metrics).
    pub nodes: Vec<String>,
    /// The version of the program that defined its query (`streamc.query.version`).
    pub version: u64,
    /// Its query reads a tenant-scoped stream: every record has a tenant, every state key of
    /// the task is scoped to it, and outputs carry it.
    pub tenant: bool,
    /// Records its repartition topics hold from before this version were written for an older
    /// form of the query: they are skipped.
    pub epoch: u64,
    /// With several inputs: per input (main, tables, joined streams), how to read its declared
    /// event-time field alone from a value (None: the record timestamp is the event time).
    /// Records across the inputs go in event-time order. Empty with one input.
    pub time_fields: Vec<Option<TimeField>>,
    /// A table–table join: the query's own table, kept in a store of the task (the left side of
    /// [`TaskSpec::mutual`]); its records are the main input's, not read separately.
    pub left: Option<TableInput>,
    pub mutual: Option<MutualJoin>,
    /// A query over a topic-fed table that keeps it a table (only filters, maps and table
    /// lookups before its sink): the index of its sink in `ops`. Rows its filter drops and
    /// deletions in the input become tombstones there.
    pub table_sink: Option<usize>,
    /// A query grouping a table's rows (Kafka Streams' KGroupedTable): the index in `ops` of
    /// its [`Op::GroupTable`]. A deletion in the input goes down the chain as a row taken
    /// back (`Row::retract`), which takes the key's old row out of its group.
    pub table_group: Option<usize>,
    /// The middle of a foreign-key join.
    pub foreign: Option<ForeignJoin>,
    /// The end of a foreign-key join: the store of each row key's latest update offset; only
    /// results answering it pass (the main input is the results' repartition topic).
    pub foreign_gate: Option<usize>,
}

/// Why a topology cannot become a physical plan: what the runtime cannot run, or a topology
/// the planner did not make.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("unknown {kind} {name}")]
    Unknown { kind: &'static str, name: String },
    #[error("{0}: a sub-topology with two main inputs")]
    TwoMainInputs(String),
    #[error("{0}")]
    Inconsistent(&'static str),
}

/// Build the task specs of every sub-topology. Errors name what the runtime cannot run yet.
pub fn specs(program: &hir::Program, topo: &Topology) -> Result<Vec<TaskSpec>, PlanError> {
    topo.subtopologies.iter().map(|sub| sub_spec(program, topo, sub)).collect()
}

/// The task spec of one sub-topology: its nodes lowered in topological order.
fn sub_spec(program: &hir::Program, topo: &Topology, sub: &crate::plan::SubTopology) -> Result<TaskSpec, PlanError> {
    let mut spec = TaskSpec {
        sub: sub.id,
        query: sub.query.clone(),
        name: String::new(),
        main: InputSpec {
            topic: String::new(),
            decode: Decode::Internal { key: Type::Error, wire: RecordType::default(), nvalue: 0, joined_keys: vec![] },
        },
        tables: Vec::new(),
        streams: Vec::new(),
        merged: Vec::new(),
        ops: Vec::new(),
        post: Vec::new(),
        agg: None,
        stores: Vec::new(),
        nodes: Vec::new(),
        version: 0,
        epoch: 0,
        time_fields: Vec::new(),
        left: None,
        mutual: None,
        table_sink: None,
        table_group: None,
        foreign: None,
        foreign_gate: None,
        tenant: program
            .queries
            .iter()
            .find(|q| q.name == sub.query)
            .is_some_and(|q| program.sources.get(q.input).is_some_and(|s| s.tenant.is_some())),
    };
    // The other streams of this sub-topology's stream–stream joins: their source nodes are
    // side inputs, not the main one.
    let joined: Vec<&str> = sub
        .nodes
        .iter()
        .filter_map(|&n| match &topo.graph[n].kind {
            // (A self-join's stream is the main or a merged input: read as that.)
            NodeKind::JoinStream { stream, same_input: false, .. } => Some(stream.as_str()),
            _ => None,
        })
        .collect();
    // The streams merged into the main input (`from a, b, …`): their source nodes are
    // inputs read like the main one.
    let merged: Vec<&str> = sub
        .nodes
        .iter()
        .filter_map(|&n| match &topo.graph[n].kind {
            NodeKind::Merge { inputs } => Some(inputs.iter().skip(1).map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();
    for &n in &sub.nodes {
        let nops = spec.ops.len() + spec.post.len();
        lower(program, topo, &mut spec, n, &joined, &merged)?;
        if spec.ops.len() + spec.post.len() > nops {
            spec.nodes.push(topo.graph[n].name.clone());
        }
    }
    let inputs = input_sources(&spec);
    if inputs.len() > 1 {
        spec.time_fields = inputs.iter().map(|s| s.and_then(time_field)).collect();
    }
    spec.table_sink = table_sink(&spec);
    Ok(spec)
}

/// A node of the sub-topology into the spec: an input, or an operator of the chain (after the
/// aggregate, of the chain after it).
fn lower(
    program: &hir::Program,
    topo: &Topology,
    spec: &mut TaskSpec,
    n: petgraph::graph::NodeIndex,
    joined: &[&str],
    merged: &[&str],
) -> Result<(), PlanError> {
    let node = &topo.graph[n];
    let incoming = topo.graph.edges_directed(n, petgraph::Direction::Incoming).next().map(|e| e.weight().clone());
    let ops = if spec.agg.is_some() { &mut spec.post } else { &mut spec.ops };
    match &node.kind {
        NodeKind::Source { from, .. } if joined.contains(&from.as_str()) => {}
        NodeKind::Source { topic, from, .. } if merged.contains(&from.as_str()) => {
            let (_, src) =
                program.source(from).ok_or_else(|| PlanError::Unknown { kind: "source", name: from.clone() })?;
            spec.merged.push(InputSpec { topic: topic.clone(), decode: Decode::Source(Arc::new(src.clone())) });
        }
        NodeKind::Merge { .. } => {}
        NodeKind::Source { topic, from, .. } => {
            if !spec.name.is_empty() {
                return Err(PlanError::TwoMainInputs(node.name.clone()));
            }
            let (_, src) =
                program.source(from).ok_or_else(|| PlanError::Unknown { kind: "source", name: from.clone() })?;
            spec.name = node.name.clone();
            spec.main = InputSpec { topic: topic.clone(), decode: Decode::Source(Arc::new(src.clone())) };
        }
        NodeKind::RepartitionSource { topic, value_fields, joined_keys } => {
            let e = incoming.ok_or(PlanError::Inconsistent("repartition source without input"))?;
            let Type::Record(wire) = e.value else {
                return Err(PlanError::Inconsistent("repartition value is not a record"));
            };
            spec.name = node.name.clone();
            let decode = Decode::Internal { key: e.key, wire, nvalue: *value_fields, joined_keys: joined_keys.clone() };
            spec.main = InputSpec { topic: topic.clone(), decode };
        }
        NodeKind::TableSource { topic, table } => {
            let (_, src) =
                program.source(table).ok_or_else(|| PlanError::Unknown { kind: "table", name: table.clone() })?;
            let store = spec.stores.len();
            spec.stores.push(store_spec(topo, &node.name));
            spec.tables.push(TableInput { topic: topic.clone(), source: Arc::new(src.clone()), store });
        }
        NodeKind::Filter { pred, .. } => ops.push(Op::Filter(pred.clone())),
        NodeKind::Map { fields, .. } => ops.push(Op::Map(fields.iter().map(|(_, e)| e.clone()).collect())),
        NodeKind::Explode { fields, at } => {
            ops.push(Op::Explode { fields: fields.iter().map(|(_, e)| e.clone()).collect(), at: at.clone() })
        }
        NodeKind::Rekey { key } => ops.push(Op::Rekey(key.clone())),
        NodeKind::KeyAsField { .. } => ops.push(Op::KeyAsField),
        NodeKind::RepartitionSink { topic, key, fk } => {
            let e = topo
                .graph
                .edges_directed(n, petgraph::Direction::Outgoing)
                .next()
                .map(|e| e.weight().clone())
                .ok_or(PlanError::Inconsistent("repartition sink without output"))?;
            let Type::Record(wire) = e.value else {
                return Err(PlanError::Inconsistent("repartition value is not a record"));
            };
            ops.push(Op::Repartition(RepartitionSpec {
                topic: topic.as_str().into(),
                key: key.clone(),
                key_ty: e.key,
                wire,
                fk: *fk,
            }));
        }
        NodeKind::JoinTable { .. } | NodeKind::JoinStream { .. } => lower_join(program, topo, spec, n)?,
        NodeKind::GroupTable { group, nulls } => {
            let store = spec.stores.len();
            spec.stores.push(store_spec(topo, &node.name));
            spec.table_group = Some(ops.len());
            ops.push(Op::GroupTable { store, group: group.clone(), nulls: *nulls });
        }
        NodeKind::ForeignJoin { table, left, key } => {
            let right = spec
                .tables
                .iter()
                .rposition(|t| t.source.name == *table)
                .ok_or(PlanError::Inconsistent("foreign-key join without its table"))?;
            let subscriptions = spec.stores.len();
            spec.stores.push(store_named(topo, &format!("{}-fk-subscriptions", node.name)));
            spec.foreign = Some(ForeignJoin { right, left: *left, subscriptions, key_ty: key.clone() });
        }
        NodeKind::ForeignGate => {
            let store = spec.stores.len();
            spec.stores.push(store_spec(topo, &node.name));
            spec.foreign_gate = Some(store);
        }
        NodeKind::Aggregate(a) => {
            let store = spec.stores.len();
            spec.stores.push(store_spec(topo, &node.name));
            let key_ty = topo.stores.iter().find(|s| s.node == node.name).map(|s| s.key.clone()).unwrap_or(Type::Error);
            ops.push(Op::Aggregate);
            spec.agg = Some(AggSpec {
                node: node.name.clone(),
                group: a.group.iter().map(|(_, e)| e.clone()).collect(),
                key_ty,
                window: a.window,
                aggs: a.aggs.clone(),
                emit: a.emit,
                idle: a.idle,
                store,
                gap: match a.window.map(|w| w.kind) {
                    Some(WindowKind::Session { gap }) => gap.0,
                    // A sliding window's end is inclusive: it closes one ms after it.
                    Some(WindowKind::Sliding { .. }) => 1,
                    _ => 0,
                },
                windowed_key: false,
                table: a.table,
            });
        }
        NodeKind::Sink { topic, format, key_format, windowed, when, .. } => {
            let e = incoming.ok_or(PlanError::Inconsistent("sink without input"))?;
            let Type::Record(value_ty) = e.value else {
                return Err(PlanError::Inconsistent("sink value is not a record"));
            };
            if let Some(a) = spec.agg.as_mut() {
                a.windowed_key = *windowed;
            }
            let windowed = *windowed;
            let when = when.clone();
            let registry_schema = crate::format::schema_text(*format, &value_ty, topic);
            let key_schema =
                key_format.and_then(|f| Some((f, crate::format::key_schema_text(f, e.key.base(), topic, "key")?)));
            ops.push(Op::Sink(SinkSpec {
                topic: topic.as_str().into(),
                format: *format,
                key_ty: e.key,
                value_ty,
                windowed,
                when,
                registry_schema,
                key_schema,
            }));
        }
    }
    Ok(())
}

/// A join node into the spec: a table lookup (or a table–table join, several on the key in a
/// row), or a stream–stream join's side input.
fn lower_join(
    program: &hir::Program,
    topo: &Topology,
    spec: &mut TaskSpec,
    n: petgraph::graph::NodeIndex,
) -> Result<(), PlanError> {
    let node = &topo.graph[n];
    let ops = if spec.agg.is_some() { &mut spec.post } else { &mut spec.ops };
    match &node.kind {
        NodeKind::JoinTable { global, left, on, table: name, mutual, outer } => {
            // A topic-fed table is the task's table input of that name, declared by its
            // table source node (which comes before the join in topological order).
            let table = if *global {
                None
            } else {
                Some(
                    spec.tables
                        .iter()
                        .rposition(|t| t.source.name == *name)
                        .ok_or(PlanError::Inconsistent("join without its table"))?,
                )
            };
            if *mutual {
                let (Decode::Source(main), Some(right)) = (&spec.main.decode, table) else {
                    return Err(PlanError::Inconsistent("a table-table join without its tables"));
                };
                let kind = match (*outer, *left) {
                    (true, _) => MutualKind::Outer,
                    (false, true) => MutualKind::Left,
                    (false, false) => MutualKind::Inner,
                };
                match &mut spec.mutual {
                    // A join after a join (n-way): right after it, on the same rows.
                    Some(m) if m.op + m.sides.len() == ops.len() => m.sides.push(MutualSide { right, kind }),
                    Some(_) => return Err(PlanError::Inconsistent("table-table joins apart")),
                    None => {
                        let store = spec.stores.len();
                        spec.stores.push(store_spec(topo, &node.name));
                        spec.left = Some(TableInput { topic: spec.main.topic.clone(), source: main.clone(), store });
                        spec.mutual = Some(MutualJoin { op: ops.len(), sides: vec![MutualSide { right, kind }] });
                    }
                }
            }
            ops.push(Op::JoinTable(TableJoinSpec {
                table,
                global: global.then(|| name.clone()),
                on: on.clone(),
                left: *left,
            }));
        }
        NodeKind::JoinStream {
            stream,
            within,
            after,
            grace,
            left,
            outer,
            key_field,
            on,
            value_fields,
            joined_keys,
            same_input,
        } => {
            let (_, src) =
                program.source(stream).ok_or_else(|| PlanError::Unknown { kind: "stream", name: stream.clone() })?;
            let side_source = format!("{}-source", node.name);
            let e = topo
                .graph
                .edges_directed(n, petgraph::Direction::Incoming)
                .find(|e| topo.graph[petgraph::visit::EdgeRef::source(e)].name != side_source)
                .map(|e| e.weight().clone())
                .ok_or(PlanError::Inconsistent("join without its input"))?;
            let Type::Record(wire) = e.value else {
                return Err(PlanError::Inconsistent("join input is not a record"));
            };
            let left_store = spec.stores.len();
            spec.stores.push(store_named(topo, &format!("{}-left", node.name)));
            spec.stores.push(store_named(topo, &format!("{}-right", node.name)));
            let side = spec.streams.len();
            spec.streams.push(StreamInput {
                topic: src.topic.clone().unwrap_or_default(),
                source: Arc::new(src.clone()),
                op: ops.len(),
                before: within.0,
                after: after.0,
                grace: grace.0,
                left: *left,
                outer: *outer,
                key_field: *key_field,
                on: on.clone(),
                left_store,
                right_store: left_store + 1,
                wire,
                nvalue: *value_fields,
                joined_keys: joined_keys.clone(),
                same_input: *same_input,
            });
            ops.push(Op::JoinStream { side });
        }
        _ => {}
    }
    Ok(())
}

fn store_named(topo: &Topology, name: &str) -> StoreSpec {
    let s = topo.stores.iter().find(|s| s.name == name);
    StoreSpec { name: name.to_string(), changelog: s.and_then(|s| s.changelog.clone()).unwrap_or_default() }
}

impl AggSpec {
    /// Where a window whose (last) end is `end` closes: the stream time (less grace) at or
    /// past which it is closed. A tumbling or hopping window closes at its end, a sliding one
    /// (whose end is inclusive) 1 ms after it; a session once stream time passes its end plus
    /// gap (Kafka Streams' rule: on the boundary it is still open).
    pub fn closes_at(&self, end: i64) -> i64 {
        match self.window.as_ref().map(|w| &w.kind) {
            Some(crate::ast::WindowKind::Session { .. }) => end.saturating_add(self.gap).saturating_add(1),
            _ => end.saturating_add(self.gap),
        }
    }
}

impl TaskSpec {
    /// Topics read besides the main input, in side-input order: tables, then joined streams, then
    /// merged streams.
    pub fn side_topics(&self) -> Vec<String> {
        self.tables
            .iter()
            .map(|t| t.topic.clone())
            .chain(self.read_streams().map(|s| s.topic.clone()))
            .chain(self.merged.iter().map(|m| m.topic.clone()))
            .collect()
    }

    /// What the task does with each of its inputs, in input order (the main input, then
    /// `side_topics`): a record is dispatched by its input's role.
    pub fn input_roles(&self) -> Vec<InputRole> {
        let main = if self.foreign.is_some() {
            InputRole::Foreign(None)
        } else if self.foreign_gate.is_some() {
            InputRole::ForeignGate
        } else if self.mutual.is_some() {
            InputRole::Mutual(None)
        } else {
            InputRole::Main
        };
        let tables = (0..self.tables.len()).map(|k| {
            if self.foreign.is_some() {
                InputRole::Foreign(Some(k))
            } else if self.mutual.is_some() {
                InputRole::Mutual(Some(k))
            } else {
                InputRole::Table(k)
            }
        });
        let streams = (0..self.read_streams().count()).map(InputRole::JoinedStream);
        let merged = (0..self.merged.len()).map(InputRole::Merged);
        std::iter::once(main).chain(tables).chain(streams).chain(merged).collect()
    }

    /// The joined streams read on their own (in `side_topics` order): all but self-joins'.
    pub fn read_streams(&self) -> impl Iterator<Item = &StreamInput> {
        self.streams.iter().filter(|s| !s.same_input)
    }

    /// The index in `streams` of the `k`-th stream read on its own.
    pub fn read_stream(&self, k: usize) -> Option<usize> {
        self.streams.iter().enumerate().filter(|(_, s)| !s.same_input).nth(k).map(|(i, _)| i)
    }

    /// The task has inputs besides its main one.
    pub fn has_side_inputs(&self) -> bool {
        !self.tables.is_empty() || self.read_streams().next().is_some() || !self.merged.is_empty()
    }

    /// The sink of a query that keeps a table a table ([`TaskSpec::table_sink`]).
    pub fn table_sink_spec(&self) -> Option<&SinkSpec> {
        match self.ops.get(self.table_sink?)? {
            Op::Sink(s) => Some(s),
            _ => None,
        }
    }

    /// The sinks of the chain after the aggregate (with branches, several).
    pub fn post_sinks(&self) -> impl Iterator<Item = &SinkSpec> {
        self.post.iter().filter_map(|op| match op {
            Op::Sink(s) => Some(s),
            _ => None,
        })
    }

    /// Every sink of the task, before and after its aggregate.
    pub fn sinks(&self) -> impl Iterator<Item = &SinkSpec> {
        self.ops.iter().chain(&self.post).filter_map(|op| match op {
            Op::Sink(s) => Some(s),
            _ => None,
        })
    }

    /// Per input (main, tables, joined streams, merged streams): its format when its values
    /// name their schemas in the registry (their writer schemas are fetched before the task
    /// reads them).
    pub fn registry_inputs(&self) -> Vec<Option<Format>> {
        input_sources(self).iter().map(|s| s.map(|s| s.format).filter(|f| f.uses_registry())).collect()
    }

    /// Per input, likewise: the format of its keys when they name their schemas in the registry
    /// (`key … avro|protobuf`).
    pub fn registry_keys(&self) -> Vec<Option<Format>> {
        input_sources(self).iter().map(|s| s.and_then(|s| s.key_format)).collect()
    }

    /// The repartition topics the task writes.
    pub fn repartition_topics(&self) -> Vec<String> {
        self.ops
            .iter()
            .chain(&self.post)
            .filter_map(|op| match op {
                Op::Repartition(r) => Some(r.topic.to_string()),
                _ => None,
            })
            .collect()
    }

    /// The topics the task writes records stamped with event times to: its sinks, repartition
    /// topics and changelogs (dead letters and late records keep their input's timestamp).
    pub fn written_topics(&self) -> Vec<String> {
        let ops = self.ops.iter().chain(&self.post).filter_map(|op| match op {
            Op::Sink(SinkSpec { topic, .. }) | Op::Repartition(RepartitionSpec { topic, .. }) => {
                Some(topic.to_string())
            }
            _ => None,
        });
        let mut out: Vec<String> = ops.chain(self.stores.iter().map(|s| s.changelog.clone())).collect();
        out.sort();
        out.dedup();
        out
    }
}

fn store_spec(topo: &Topology, node: &str) -> StoreSpec {
    let s = topo.stores.iter().find(|s| s.node == node);
    StoreSpec {
        name: s.map(|s| s.name.clone()).unwrap_or_default(),
        changelog: s.and_then(|s| s.changelog.clone()).unwrap_or_default(),
    }
}

/// The declared source of each input of a task, in input order (main, tables, joined streams);
/// None for a repartition topic, whose record timestamps are already event times.
fn input_sources(spec: &TaskSpec) -> Vec<Option<&hir::Source>> {
    let main = match &spec.main.decode {
        Decode::Source(s) => Some(s.as_ref()),
        Decode::Internal { .. } => None,
    };
    let merged = spec.merged.iter().map(|m| match &m.decode {
        Decode::Source(s) => Some(s.as_ref()),
        Decode::Internal { .. } => None,
    });
    std::iter::once(main)
        .chain(spec.tables.iter().map(|t| Some(t.source.as_ref())))
        .chain(spec.read_streams().map(|s| Some(s.source.as_ref())))
        .chain(merged)
        .collect()
}

/// A source's declared event-time field, read alone from a record; None where the event time
/// is the record timestamp.
fn time_field(src: &hir::Source) -> Option<TimeField> {
    let field = src.value.fields.get(src.time?)?;
    Some(TimeField(crate::format::FieldReader::new(src.format, &src.wire, field)?))
}

/// How to read a declared event-time field alone from a record (see [`TaskSpec::time_fields`]).
#[derive(Clone, Debug)]
pub struct TimeField(crate::format::FieldReader);

impl TimeField {
    /// The event time of a record's value, if it decodes.
    pub fn read(&self, value: &[u8]) -> Option<i64> {
        match self.0.read(value)? {
            crate::value::Value::Ts(t) => Some(t),
            _ => None,
        }
    }
}

/// See [`TaskSpec::table_sink`].
fn table_sink(spec: &TaskSpec) -> Option<usize> {
    // A table query's, or after a foreign-key join's gate (its input is the join's results).
    let table = match &spec.main.decode {
        Decode::Source(src) => src.kind == hir::SourceKind::Table,
        Decode::Internal { .. } => spec.foreign_gate.is_some(),
    };
    if !table || spec.agg.is_some() {
        return None;
    }
    let mut sink = None;
    for (i, op) in spec.ops.iter().enumerate() {
        match op {
            Op::Filter(_) | Op::Map(_) | Op::Explode { .. } | Op::JoinTable(_) => {}
            Op::Sink(_) => sink = Some(i),
            _ => return None,
        }
    }
    sink
}
