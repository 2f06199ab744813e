//! A task: one sub-topology over one partition, single-threaded, with its own shard of every
//! store. The task knows nothing of the backend: it is given decoded input records and
//! returns output records; the driver moves records and commits.
//!
//! Per commit, the task's record cache is flushed in first-change order: one changelog record,
//! one store write and (with `emit changes`) one downstream update per changed (key, window).

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::ast::{EmitMode, Format, WindowKind};
use crate::hir::{self, AggFunc, KeySpec};
use crate::log::Record;
use crate::plan::{self, NodeKind, Topology};
use crate::runtime::eval::{eval, uda_init, uda_result, uda_update, Row};
use crate::runtime::value::{decode_record, decode_value, Value};
use crate::types::{RecordType, Type};

/// Header names of CONVENTIONS.md.
pub const H_ERROR: &str = "streamc.error";
pub const H_TOPIC: &str = "streamc.source.topic";
pub const H_PARTITION: &str = "streamc.source.partition";
pub const H_OFFSET: &str = "streamc.source.offset";
pub const H_VERSION: &str = "streamc.query.version";

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

#[derive(Clone, Debug)]
pub enum Op {
    Filter(hir::Expr),
    Map(Vec<hir::Expr>),
    Rekey(hir::Expr),
    Repartition { topic: String, key: Vec<hir::Expr>, key_ty: Type, wire: RecordType },
    /// Look up the task's `table`-th table input (None: a control-managed table).
    JoinTable { table: Option<usize>, on: hir::Expr, left: bool },
    Aggregate,
    Sink { topic: String, format: Format, key_ty: Type, value_ty: RecordType },
}

#[derive(Clone, Debug)]
pub struct AggSpec {
    pub node: String,
    pub group: Vec<hir::Expr>,
    pub key_ty: Type,
    pub window: Option<hir::Window>,
    pub aggs: Vec<hir::AggCall>,
    pub emit: EmitMode,
    pub store: usize,
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
    pub ops: Vec<Op>,
    /// Operators after the aggregate, run on its emitted rows.
    pub post: Vec<Op>,
    pub agg: Option<AggSpec>,
    pub stores: Vec<StoreSpec>,
    /// The plan node of each operator: those of `ops`, then those of `post` (for metrics).
    pub nodes: Vec<String>,
}

/// Build the task specs of every sub-topology. Errors name what the runtime cannot run yet.
pub fn specs(program: &hir::Program, topo: &Topology) -> Result<Vec<TaskSpec>, String> {
    let mut out = Vec::new();
    for sub in &topo.subtopologies {
        let mut spec = TaskSpec {
            sub: sub.id,
            query: sub.query.clone(),
            name: String::new(),
            main: InputSpec { topic: String::new(), decode: Decode::Internal { key: Type::Error, wire: RecordType::default(), nvalue: 0, joined_keys: vec![] } },
            tables: Vec::new(),
            ops: Vec::new(),
            post: Vec::new(),
            agg: None,
            stores: Vec::new(),
            nodes: Vec::new(),
        };
        for &n in &sub.nodes {
            let node = &topo.graph[n];
            let incoming = topo.graph.edges_directed(n, petgraph::Direction::Incoming).next().map(|e| e.weight().clone());
            let nops = spec.ops.len() + spec.post.len();
            let ops = if spec.agg.is_some() { &mut spec.post } else { &mut spec.ops };
            match &node.kind {
                NodeKind::Source { topic, from, .. } => {
                    if !spec.name.is_empty() {
                        return Err(format!("{}: stream–stream joins are not supported by the runtime yet", node.name));
                    }
                    let (_, src) = program.source(from).ok_or_else(|| format!("unknown source {from}"))?;
                    spec.name = node.name.clone();
                    spec.main = InputSpec { topic: topic.clone(), decode: Decode::Source(Arc::new(src.clone())) };
                }
                NodeKind::RepartitionSource { topic, value_fields, joined_keys } => {
                    let e = incoming.ok_or("repartition source without input")?;
                    let Type::Record(wire) = e.value else { return Err("repartition value is not a record".into()) };
                    spec.name = node.name.clone();
                    let decode = Decode::Internal { key: e.key, wire, nvalue: *value_fields, joined_keys: joined_keys.clone() };
                    spec.main = InputSpec { topic: topic.clone(), decode };
                }
                NodeKind::TableSource { topic, table } => {
                    let (_, src) = program.source(table).ok_or_else(|| format!("unknown table {table}"))?;
                    let store = spec.stores.len();
                    spec.stores.push(store_spec(topo, &node.name));
                    spec.tables.push(TableInput { topic: topic.clone(), source: Arc::new(src.clone()), store });
                }
                NodeKind::Filter { pred, .. } => ops.push(Op::Filter(pred.clone())),
                NodeKind::Map { fields, .. } => ops.push(Op::Map(fields.iter().map(|(_, e)| e.clone()).collect())),
                NodeKind::Rekey { key } => ops.push(Op::Rekey(key.clone())),
                NodeKind::RepartitionSink { topic, key } => {
                    let e = topo.graph.edges_directed(n, petgraph::Direction::Outgoing).next().map(|e| e.weight().clone()).ok_or("repartition sink without output")?;
                    let Type::Record(wire) = e.value else { return Err("repartition value is not a record".into()) };
                    ops.push(Op::Repartition { topic: topic.clone(), key: key.clone(), key_ty: e.key, wire });
                }
                NodeKind::JoinTable { global, left, on, .. } => {
                    // A topic-fed table is the task's last table input, declared by its table
                    // source node just before.
                    let table = if *global { None } else { Some(spec.tables.len().checked_sub(1).ok_or("join without its table")?) };
                    ops.push(Op::JoinTable { table, on: on.clone(), left: *left });
                }
                NodeKind::JoinStream { .. } => return Err(format!("{}: stream–stream joins are not supported by the runtime yet", node.name)),
                NodeKind::Aggregate(a) => {
                    if let Some(w) = &a.window {
                        if matches!(w.kind, WindowKind::Session { .. } | WindowKind::Sliding { .. }) {
                            return Err(format!("{}: {} windows are not supported by the runtime yet", node.name, plan::window_desc(&w.kind)));
                        }
                    }
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
                        store,
                    });
                }
                NodeKind::Sink { topic, format } => {
                    let e = incoming.ok_or("sink without input")?;
                    let Type::Record(value_ty) = e.value else { return Err("sink value is not a record".into()) };
                    ops.push(Op::Sink { topic: topic.clone(), format: *format, key_ty: e.key, value_ty });
                }
            }
            if spec.ops.len() + spec.post.len() > nops {
                spec.nodes.push(node.name.clone());
            }
        }
        out.push(spec);
    }
    Ok(out)
}

fn store_spec(topo: &Topology, node: &str) -> StoreSpec {
    let s = topo.stores.iter().find(|s| s.node == node);
    StoreSpec {
        name: s.map(|s| s.name.clone()).unwrap_or_default(),
        changelog: s.and_then(|s| s.changelog.clone()).unwrap_or_default(),
    }
}

/// One decoded input record.
pub struct Input {
    pub row: Row,
    pub ts: i64,
}

/// A record for the driver to write: topic, partition (None: by key), record.
#[derive(Debug)]
pub struct Output {
    pub topic: String,
    pub partition: Option<u32>,
    pub record: Record,
}

/// Counters the task keeps for metrics and tests.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub records_in: u64,
    pub records_out: u64,
    pub late: u64,
    pub dead_letters: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Records that reached each operator, indexed like `TaskSpec::nodes` (`ops`, then `post`).
    pub ops_in: Vec<u64>,
}

/// An error evaluating one record: it goes to the dead-letter topic (or fails the task).
#[derive(Debug)]
pub struct RecordError(pub String);

/// What the store layer offers a task: point reads of committed state.
pub trait StoreRead {
    fn get(&self, store: usize, key: &[u8]) -> Option<Vec<u8>>;
    /// Every entry of a store (used to rebuild the window index after a restore).
    fn entries(&self, store: usize) -> Vec<(Vec<u8>, Vec<u8>)>;
}

/// A change to one store entry, produced at flush.
#[derive(Debug)]
pub struct Change {
    pub store: usize,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    pub timestamp: i64,
}

/// The state of one (key, window) of an aggregate.
#[derive(Clone, Debug)]
struct AggEntry {
    group: Vec<Value>,
    start: i64,
    end: i64,
    max_ts: i64,
    states: Vec<AggState>,
}

#[derive(Clone, Debug)]
enum AggState {
    Count(i64),
    /// Sums, mins and maxes; Null until a non-null value arrives.
    Val(Value),
    User(Vec<Value>),
}

struct Slot {
    entry: Option<AggEntry>,
    dirty: bool,
}

/// A decoded row of a table input.
type TableRow = Arc<Vec<Value>>;

pub struct Task {
    pub spec: Arc<TaskSpec>,
    pub partition: u32,
    /// Stream time of the aggregate processor.
    pub stream_time: i64,
    pub counters: Counters,
    cache: FxHashMap<Vec<u8>, Slot>,
    /// Keys changed since the last flush, in first-change order.
    dirty: Vec<Vec<u8>>,
    /// Open windows by end: (end, store key).
    windows: BTreeSet<(i64, Vec<u8>)>,
    /// Table entries changed since the last flush (table store, key, value), in order.
    table_changes: Vec<Change>,
    /// Decoded table rows by (table input, key): each row is decoded once, when it arrives or
    /// is first read from the store, and joins read it from here.
    table_rows: FxHashMap<(usize, Vec<u8>), Option<TableRow>>,
}

impl Task {
    pub fn new(spec: Arc<TaskSpec>, partition: u32, stream_time: i64) -> Task {
        let counters = Counters { ops_in: vec![0; spec.ops.len() + spec.post.len()], ..Counters::default() };
        Task {
            spec,
            partition,
            stream_time,
            counters,
            cache: FxHashMap::default(),
            dirty: Vec::new(),
            windows: BTreeSet::new(),
            table_changes: Vec::new(),
            table_rows: FxHashMap::default(),
        }
    }

    /// Rebuild the open-window index from the restored store.
    pub fn restore_index(&mut self, stores: &dyn StoreRead) {
        self.windows.clear();
        if let Some(agg) = &self.spec.agg {
            if agg.window.is_some() {
                // Every open window lives in the cache: a window not in it does not exist, so
                // the hot path never asks the store.
                for (k, v) in stores.entries(agg.store) {
                    if let Ok(e) = decode_entry(&v, agg) {
                        self.windows.insert((e.end, k.clone()));
                        self.cache.insert(k, Slot { entry: Some(e), dirty: false });
                    }
                }
            }
        }
    }

    /// Decode a record of the main input.
    pub fn decode_main(&self, rec: &Record) -> Result<Input, RecordError> {
        match &self.spec.main.decode {
            Decode::Source(src) => decode_source(src, rec),
            Decode::Internal { key, wire, nvalue, joined_keys } => {
                let key = decode_key(rec.key.as_deref(), key)?;
                let bytes = rec.value.as_deref().ok_or_else(|| RecordError("a repartition record has no value".into()))?;
                let mut fields = decode_record(bytes, wire).map_err(RecordError)?;
                let n = (*nvalue).min(fields.len());
                let rest = fields.split_off(n);
                let joined = rest
                    .into_iter()
                    .zip(joined_keys.iter().chain(std::iter::repeat(&false)))
                    .map(|(v, has_key)| match v {
                        Value::Record(r) => {
                            let mut r = (*r).clone();
                            let k = if *has_key { r.pop().unwrap_or(Value::Null) } else { Value::Null };
                            Some((k, Arc::new(r)))
                        }
                        _ => None,
                    })
                    .collect();
                Ok(Input { row: Row { key, value: fields, joined }, ts: rec.timestamp })
            }
        }
    }

    /// Process one record of the main input.
    pub fn process(&mut self, input: Input, out: &mut Vec<Output>, stores: &dyn StoreRead) -> Result<(), RecordError> {
        self.counters.records_in += 1;
        let spec = self.spec.clone();
        self.run_ops(&spec.ops, input.row, input.ts, out, stores)
    }

    /// Apply one record of a table input: the table is updated in timestamp order with the stream.
    pub fn process_table(&mut self, table: usize, rec: &Record) -> Result<(), RecordError> {
        let ti = &self.spec.tables[table];
        let store = ti.store;
        let key = rec.key.clone().ok_or_else(|| RecordError(format!("a record of table `{}` has no key", ti.source.name)))?;
        // Decoded now, so a bad row goes to the dead-letter topic and a join never meets one.
        let row = match &rec.value {
            None => None,
            Some(v) => Some(Arc::new(decode_visible(&ti.source, v)?)),
        };
        self.table_rows.insert((table, key.clone()), row);
        self.table_changes.push(Change { store, key, value: rec.value.clone(), timestamp: rec.timestamp });
        Ok(())
    }

    fn run_ops(&mut self, ops: &[Op], mut row: Row, ts: i64, out: &mut Vec<Output>, stores: &dyn StoreRead) -> Result<(), RecordError> {
        let err = |e: String| RecordError(e);
        // `ops` is the spec's `ops` or its `post`, whose counts follow those of `ops`.
        let base = if std::ptr::eq(ops, self.spec.post.as_slice()) { self.spec.ops.len() } else { 0 };
        for (i, op) in ops.iter().enumerate() {
            if let Some(n) = self.counters.ops_in.get_mut(base + i) {
                *n += 1;
            }
            match op {
                Op::Filter(pred) => {
                    if eval(pred, &row, &[]).map_err(err)? != Value::Bool(true) {
                        return Ok(());
                    }
                }
                Op::Map(fields) => {
                    let mut v = Vec::with_capacity(fields.len());
                    for f in fields {
                        v.push(eval(f, &row, &[]).map_err(err)?);
                    }
                    row.value = v;
                    row.joined.clear();
                }
                Op::Rekey(e) => row.key = eval(e, &row, &[]).map_err(err)?,
                Op::Repartition { topic, key, key_ty, wire } => {
                    let k = group_key(key, &row)?;
                    let mut value = Vec::with_capacity(128);
                    write_record(&wire_row(&row, wire), wire, &mut value);
                    out.push(Output {
                        topic: topic.clone(),
                        partition: None,
                        record: Record { key: Some(k.key_bytes(key_ty)), value: Some(value), timestamp: ts, headers: vec![] },
                    });
                    self.counters.records_out += 1;
                    return Ok(());
                }
                Op::JoinTable { table, on, left } => {
                    let k = eval(on, &row, &[]).map_err(err)?;
                    let found = match table {
                        Some(t) => self.table_row(*t, &k, stores)?.map(|r| (k, r)),
                        // Control-managed tables are filled by control statements.
                        None => None,
                    };
                    if found.is_none() && !left {
                        return Ok(());
                    }
                    row.joined.push(found);
                }
                Op::Aggregate => {
                    return self.aggregate(row, ts, stores);
                }
                Op::Sink { topic, format, key_ty, value_ty } => {
                    out.push(sink_record(topic, *format, key_ty, value_ty, &row, ts)?);
                    self.counters.records_out += 1;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The current row of a table input for a key: from the decoded rows, else from the store.
    fn table_row(&mut self, table: usize, key: &Value, stores: &dyn StoreRead) -> Result<Option<Arc<Vec<Value>>>, RecordError> {
        let ti = &self.spec.tables[table];
        let kb = key.key_bytes(&ti.source.key_type());
        if let Some(r) = self.table_rows.get(&(table, kb.clone())) {
            return Ok(r.clone());
        }
        let row = match stores.get(ti.store, &kb) {
            Some(b) => Some(Arc::new(decode_visible(&ti.source, &b)?)),
            None => None,
        };
        if self.table_rows.len() >= 200_000 {
            // Bounded: every row is also in the store.
            self.table_rows.clear();
        }
        self.table_rows.insert((table, kb), row.clone());
        Ok(row)
    }

    fn aggregate(&mut self, row: Row, ts: i64, stores: &dyn StoreRead) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let Some(agg) = &spec.agg else { return Ok(()) };
        let err = |e: String| RecordError(e);
        let mut group = Vec::with_capacity(agg.group.len());
        for g in &agg.group {
            group.push(eval(g, &row, &[]).map_err(err)?);
        }
        if group.iter().any(Value::is_null) {
            return Err(RecordError("the group key is null".into()));
        }
        let key = if group.len() == 1 { group[0].clone() } else { Value::List(Arc::new(group.clone())) };
        let mut args: Vec<Vec<Value>> = Vec::with_capacity(agg.aggs.len());
        for a in &agg.aggs {
            let mut v = Vec::with_capacity(a.args.len());
            for e in &a.args {
                v.push(eval(e, &row, &[]).map_err(err)?);
            }
            args.push(v);
        }
        self.stream_time = self.stream_time.max(ts);
        let windows: Vec<(i64, i64)> = match &agg.window {
            None => vec![(0, 0)],
            Some(w) => {
                let (size, advance) = match w.kind {
                    WindowKind::Tumbling { size } => (size.0, size.0),
                    WindowKind::Hopping { size, advance } => (size.0, advance.0),
                    _ => return Err(err("unsupported window".into())),
                };
                let close = self.stream_time.saturating_sub(w.grace.0);
                let first = (ts - size + advance).max(0);
                let first = first - first.rem_euclid(advance);
                let mut v = Vec::new();
                let mut s = first;
                while s <= ts {
                    let end = s.saturating_add(size);
                    if ts >= s && ts < end {
                        if end > close {
                            v.push((s, end));
                        } else {
                            self.counters.late += 1;
                        }
                    }
                    s += advance;
                }
                v
            }
        };
        let kb = key.key_bytes(&agg.key_ty);
        for (start, end) in windows {
            let sk = store_key(&kb, agg.window.is_some().then_some(start));
            let slot = match self.cache.get_mut(&sk) {
                Some(s) => {
                    self.counters.cache_hits += 1;
                    s
                }
                None => {
                    self.counters.cache_misses += 1;
                    // Every open window is in the cache, so for windows this read finds nothing;
                    // it is kept because sled 0.34 consolidates a page's updates on reads, and
                    // without them its memory grows with every write.
                    let entry = match stores.get(agg.store, &sk) {
                        Some(b) => Some(decode_entry(&b, agg).map_err(err)?),
                        None => None,
                    };
                    self.cache.entry(sk.clone()).or_insert(Slot { entry, dirty: false })
                }
            };
            let entry = match &mut slot.entry {
                Some(e) => e,
                None => {
                    if agg.window.is_some() {
                        self.windows.insert((end, sk.clone()));
                    }
                    slot.entry.insert(AggEntry { group: group.clone(), start, end, max_ts: i64::MIN, states: init_states(agg).map_err(err)? })
                }
            };
            entry.max_ts = entry.max_ts.max(ts);
            for ((a, st), argv) in agg.aggs.iter().zip(entry.states.iter_mut()).zip(&args) {
                update_state(a, st, argv).map_err(err)?;
            }
            if !slot.dirty {
                slot.dirty = true;
                self.dirty.push(sk);
            }
        }
        Ok(())
    }

    /// Flush the record cache: the store changes (for the changelog and the local store) and the
    /// downstream records, in first-change order; then close the windows stream time has passed.
    /// `close_all` closes every window (end of a finite input with `--close-windows-at-end`).
    pub fn flush(&mut self, out: &mut Vec<Output>, changes: &mut Vec<Change>, close_all: bool) -> Vec<RecordError> {
        let mut errors = Vec::new();
        changes.append(&mut self.table_changes);
        let spec = self.spec.clone();
        let Some(agg) = &spec.agg else { return errors };
        let dirty = std::mem::take(&mut self.dirty);
        for sk in dirty {
            let Some(slot) = self.cache.get_mut(&sk) else { continue };
            slot.dirty = false;
            let Some(entry) = slot.entry.clone() else { continue };
            changes.push(Change { store: agg.store, key: sk.clone(), value: Some(encode_entry(&entry, agg)), timestamp: entry.max_ts });
            if agg.emit == EmitMode::Changes {
                if let Err(e) = self.emit(agg, &entry, out) {
                    errors.push(e);
                }
            }
        }
        if let Some(w) = &agg.window {
            if close_all {
                // `--close-windows-at-end`: stream time moves past every window, for good.
                self.stream_time = i64::MAX;
            }
            let close = if close_all { i64::MAX } else { self.stream_time.saturating_sub(w.grace.0) };
            while let Some((end, _)) = self.windows.first() {
                if *end > close {
                    break;
                }
                let Some((_, sk)) = self.windows.pop_first() else { break };
                let entry = match self.cache.remove(&sk) {
                    Some(Slot { entry: Some(e), .. }) => Some(e),
                    _ => None,
                };
                if agg.emit == EmitMode::Final {
                    if let Some(e) = &entry {
                        if let Err(err) = self.emit(agg, e, out) {
                            errors.push(err);
                        }
                    }
                }
                // Expired by stream time: deleted locally and in the changelog (a tombstone).
                changes.push(Change { store: agg.store, key: sk, value: None, timestamp: entry.map(|e| e.max_ts).unwrap_or(0) });
            }
        }
        // The cache keeps clean entries for reuse, bounded (windows stay: they expire by time).
        if agg.window.is_none() && self.cache.len() > 200_000 {
            self.cache.retain(|_, s| s.dirty);
        }
        errors
    }

    fn emit(&mut self, agg: &AggSpec, e: &AggEntry, out: &mut Vec<Output>) -> Result<(), RecordError> {
        let mut value = Vec::with_capacity(2 + e.group.len() + e.states.len());
        if agg.window.is_some() {
            value.push(Value::Ts(e.start));
            value.push(Value::Ts(e.end));
        }
        value.extend(e.group.iter().cloned());
        for (a, st) in agg.aggs.iter().zip(&e.states) {
            value.push(state_result(a, st).map_err(RecordError)?);
        }
        let key = if e.group.len() == 1 { e.group[0].clone() } else { Value::List(Arc::new(e.group.clone())) };
        let spec = self.spec.clone();
        let stores = NoStores;
        self.run_ops(&spec.post, Row { key, value, joined: vec![] }, e.max_ts, out, &stores)
    }
}

struct NoStores;

impl StoreRead for NoStores {
    fn get(&self, _: usize, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn entries(&self, _: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        Vec::new()
    }
}

fn write_record(fields: &[Value], rt: &RecordType, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (v, (n, t))) in fields.iter().zip(&rt.fields).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut *out, n);
        out.push(b':');
        v.write_json(t, out);
    }
    out.push(b'}');
}

/// The row as it travels through a topic (see [`plan::wire_value`]): the value, then each joined
/// side as a record with its named key last when the key is not one of its fields.
fn wire_row(row: &Row, wire: &RecordType) -> Vec<Value> {
    let mut all = row.value.clone();
    for j in &row.joined {
        let i = all.len();
        all.push(match j {
            Some((jk, jv)) => {
                let mut r = (**jv).clone();
                let with_key = matches!(wire.fields.get(i).map(|f| f.1.base()), Some(Type::Record(rt)) if rt.fields.len() > r.len());
                if with_key {
                    r.push(jk.clone());
                }
                Value::Record(Arc::new(r))
            }
            None => Value::Null,
        });
    }
    all
}

fn group_key(exprs: &[hir::Expr], row: &Row) -> Result<Value, RecordError> {
    let mut vals = Vec::with_capacity(exprs.len());
    for e in exprs {
        vals.push(eval(e, row, &[]).map_err(RecordError)?);
    }
    Ok(if vals.len() == 1 { vals.pop().unwrap_or(Value::Null) } else { Value::List(Arc::new(vals)) })
}

/// Store keys: the key's bytes, length-prefixed, then for windows the start (big-endian, sign
/// flipped) so that one key's windows sort by start.
fn store_key(kb: &[u8], start: Option<i64>) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + kb.len() + 8);
    k.extend_from_slice(&(kb.len() as u32).to_be_bytes());
    k.extend_from_slice(kb);
    if let Some(s) = start {
        k.extend_from_slice(&((s as u64) ^ (1 << 63)).to_be_bytes());
    }
    k
}

fn init_states(agg: &AggSpec) -> Result<Vec<AggState>, String> {
    agg.aggs
        .iter()
        .map(|a| {
            Ok(match &a.func {
                AggFunc::Count => AggState::Count(0),
                AggFunc::Sum | AggFunc::Min | AggFunc::Max => AggState::Val(Value::Null),
                AggFunc::User(d) => AggState::User(uda_init(d)?),
            })
        })
        .collect()
}

fn update_state(a: &hir::AggCall, st: &mut AggState, args: &[Value]) -> Result<(), String> {
    match (&a.func, st) {
        (AggFunc::Count, AggState::Count(n)) => {
            if args.first().is_none_or(|v| !v.is_null()) {
                *n += 1;
            }
        }
        (AggFunc::Sum, AggState::Val(acc)) => {
            let x = &args[0];
            *acc = match (&*acc, x) {
                (_, Value::Null) => acc.clone(),
                (Value::Null, x) => x.clone(),
                (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or("integer overflow in `sum`")?),
                (Value::Dur(a), Value::Dur(b)) => Value::Dur(a.checked_add(*b).ok_or("duration overflow in `sum`")?),
                (Value::Float(a), Value::Float(b)) => {
                    let s = a + b;
                    if !s.is_finite() {
                        return Err("`sum` is not a finite number".into());
                    }
                    Value::Float(s)
                }
                (Value::Float(a), Value::Int(b)) | (Value::Int(b), Value::Float(a)) => Value::Float(a + *b as f64),
                _ => return Err("bad operand for `sum`".into()),
            };
        }
        (AggFunc::Min | AggFunc::Max, AggState::Val(acc)) => {
            let x = &args[0];
            let min = matches!(a.func, AggFunc::Min);
            if !x.is_null() && (acc.is_null() || (min && x.cmp_total(acc).is_lt()) || (!min && x.cmp_total(acc).is_gt())) {
                *acc = x.clone();
            }
        }
        (AggFunc::User(d), AggState::User(s)) => uda_update(d, s, args)?,
        _ => return Err("aggregate state does not match its function".into()),
    }
    Ok(())
}

fn state_result(a: &hir::AggCall, st: &AggState) -> Result<Value, String> {
    Ok(match (&a.func, st) {
        (_, AggState::Count(n)) => Value::Int(*n),
        (_, AggState::Val(v)) => v.clone(),
        (AggFunc::User(d), AggState::User(s)) => uda_result(d, s)?,
        _ => Value::Null,
    })
}

/// Entries are stored (locally and in the changelog) as JSON:
/// `{"g": [group values], "s": start, "e": end, "t": max event time, "a": [states]}`.
fn encode_entry(e: &AggEntry, agg: &AggSpec) -> Vec<u8> {
    let mut o = Vec::with_capacity(96);
    o.extend_from_slice(b"{\"g\":[");
    for (i, (v, g)) in e.group.iter().zip(&agg.group).enumerate() {
        if i > 0 {
            o.push(b',');
        }
        v.write_json(&g.ty, &mut o);
    }
    o.extend_from_slice(b"],\"s\":");
    Value::Int(e.start).write_json(&Type::Int, &mut o);
    o.extend_from_slice(b",\"e\":");
    Value::Int(e.end).write_json(&Type::Int, &mut o);
    o.extend_from_slice(b",\"t\":");
    Value::Int(e.max_ts).write_json(&Type::Int, &mut o);
    o.extend_from_slice(b",\"a\":[");
    for (i, (s, c)) in e.states.iter().zip(&agg.aggs).enumerate() {
        if i > 0 {
            o.push(b',');
        }
        match (s, &c.func) {
            (AggState::Count(n), _) => Value::Int(*n).write_json(&Type::Int, &mut o),
            (AggState::Val(v), _) => v.write_json(&c.ty, &mut o),
            (AggState::User(vals), AggFunc::User(d)) => {
                o.push(b'[');
                for (j, (v, (_, t))) in vals.iter().zip(&d.state).enumerate() {
                    if j > 0 {
                        o.push(b',');
                    }
                    v.write_json(t, &mut o);
                }
                o.push(b']');
            }
            _ => o.extend_from_slice(b"null"),
        }
    }
    o.extend_from_slice(b"]}");
    o
}

/// The stored form of an entry, parsed once; each part is then decoded by its type.
#[derive(serde::Deserialize)]
struct StoredEntry<'a> {
    #[serde(borrow)]
    g: Vec<&'a serde_json::value::RawValue>,
    s: i64,
    e: i64,
    t: i64,
    #[serde(borrow)]
    a: Vec<&'a serde_json::value::RawValue>,
}

fn decode_entry(b: &[u8], agg: &AggSpec) -> Result<AggEntry, String> {
    let raw: StoredEntry = serde_json::from_slice(b).map_err(|e| format!("damaged state entry: {e}"))?;
    let part = |r: &serde_json::value::RawValue, ty: &Type| decode_value(r.get().as_bytes(), ty);
    let group = raw.g.iter().zip(&agg.group).map(|(x, e)| part(x, &e.ty)).collect::<Result<Vec<_>, _>>()?;
    let states = raw
        .a
        .iter()
        .zip(&agg.aggs)
        .map(|(x, c)| {
            Ok(match &c.func {
                AggFunc::Count => match part(x, &Type::Int)? {
                    Value::Int(n) => AggState::Count(n),
                    _ => return Err("bad count".to_string()),
                },
                AggFunc::Sum | AggFunc::Min | AggFunc::Max => AggState::Val(part(x, &c.ty.clone().nullable())?),
                AggFunc::User(d) => {
                    let vals: Vec<&serde_json::value::RawValue> = serde_json::from_str(x.get()).map_err(|e| format!("bad aggregate state: {e}"))?;
                    AggState::User(vals.iter().zip(&d.state).map(|(v, (_, t))| part(v, t)).collect::<Result<Vec<_>, String>>()?)
                }
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(AggEntry { group, start: raw.s, end: raw.e, max_ts: raw.t, states })
}

/// Decode a record key of the given type: a string key is its raw UTF-8, others JSON.
pub fn decode_key(bytes: Option<&[u8]>, ty: &Type) -> Result<Value, RecordError> {
    match (bytes, ty.base()) {
        (None, _) => Ok(Value::Null),
        (Some(b), Type::String) => std::str::from_utf8(b).map(Value::str).map_err(|_| RecordError("the key is not UTF-8".into())),
        (Some(b), t) => decode_value(b, t).map_err(|e| RecordError(format!("bad key: {e}"))),
    }
}

/// A source's value as queries see it: decoded by its format, the tenant field removed.
fn decode_visible(src: &hir::Source, bytes: &[u8]) -> Result<Vec<Value>, RecordError> {
    let mut fields = match src.format {
        Format::Json => decode_record(bytes, &src.wire).map_err(RecordError)?,
        Format::String => vec![Value::str(&String::from_utf8_lossy(bytes))],
    };
    if let Some(hir::TenantSpec::Field(f)) = &src.tenant {
        if let Some(i) = src.wire.index_of(f) {
            fields.remove(i);
        }
    }
    Ok(fields)
}

fn decode_source(src: &hir::Source, rec: &Record) -> Result<Input, RecordError> {
    let bytes = rec.value.as_deref().ok_or_else(|| RecordError("the record has no value".into()))?;
    let wire = decode_visible(src, bytes)?;
    let key = match &src.key {
        KeySpec::Field(i) => {
            let k = wire[*i].clone();
            if let Some(kb) = &rec.key {
                let declared = decode_key(Some(kb), &src.value.fields[*i].1)?;
                if !declared.equals(&k) {
                    return Err(RecordError(format!("the record key `{}` differs from its `{}` field `{k}`", String::from_utf8_lossy(kb), src.value.fields[*i].0)));
                }
            }
            k
        }
        KeySpec::Named(_, t) => decode_key(rec.key.as_deref(), t)?,
        KeySpec::Raw => match &rec.key {
            Some(k) => Value::str(&String::from_utf8_lossy(k)),
            None => Value::Null,
        },
    };
    let ts = match src.time {
        Some(i) => match &wire[i] {
            Value::Ts(t) => *t,
            _ => return Err(RecordError("the event time is missing".into())),
        },
        None => rec.timestamp,
    };
    Ok(Input { row: Row { key, value: wire, joined: vec![] }, ts })
}

fn sink_record(topic: &str, format: Format, key_ty: &Type, value_ty: &RecordType, row: &Row, ts: i64) -> Result<Output, RecordError> {
    let key = if row.key.is_null() { None } else { Some(row.key.key_bytes(key_ty)) };
    let value = match format {
        Format::Json => {
            let mut b = Vec::with_capacity(128);
            write_record(&wire_row(row, value_ty), value_ty, &mut b);
            Some(b)
        }
        Format::String => match row.value.first() {
            Some(Value::Str(s)) => Some(s.as_bytes().to_vec()),
            Some(Value::Null) | None => None,
            Some(v) => Some(v.to_string().into_bytes()),
        },
    };
    Ok(Output {
        topic: topic.to_string(),
        partition: None,
        record: Record { key, value, timestamp: ts, headers: vec![(H_VERSION.to_string(), b"0".to_vec())] },
    })
}
