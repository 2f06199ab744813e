//! A small context for testing one operator alone (as Kafka Streams' `KStreamFilterTest` drives a
//! processor through a mock context): a task spec planned from a program's text, stores in
//! memory, no log. [`Harness::send`] runs a row through the operator under test and collects
//! what it passes down; the records it writes (tombstones, results) are in [`Harness::out`],
//! the store changes it makes in [`Harness::changes`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::eval::Row;
use crate::plan::physical::TaskSpec;
use crate::runtime::op::{Change, Counters, Outputs, RecordError, Stateful, StoreRead};
use crate::runtime::ops::{Before, Ctx, Down, FkMarks, Operator};
use crate::runtime::stream_join::StreamJoins;
use crate::runtime::tables::TableInputs;
use crate::value::Value;

/// Stores in memory: per store, its entries.
#[derive(Default)]
pub(crate) struct MemStores(pub(crate) BTreeMap<usize, BTreeMap<Vec<u8>, Vec<u8>>>);

impl StoreRead for MemStores {
    fn get(&self, store: usize, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(&store)?.get(key).cloned()
    }
    fn entries(&self, store: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.0.get(&store).map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
    }
}

/// What the chain under test passed down: each row with its time.
type Rows = Arc<Mutex<Vec<(Row, i64)>>>;

/// The end of the chain under test: keeps every row it gets.
struct Collect(Rows);

impl Stateful for Collect {}

impl Operator for Collect {
    fn on_row(&mut self, row: Row, ts: i64, _cx: &mut Ctx, _down: &mut Down) -> Result<(), RecordError> {
        self.0.lock().expect("the collector's rows").push((row, ts));
        Ok(())
    }
}

/// One sub-topology's task spec (planned from a program) and the task state an operator works
/// with, all in memory.
pub(crate) struct Harness {
    pub(crate) spec: TaskSpec,
    pub(crate) counters: Counters,
    pub(crate) changes: Vec<Change>,
    pub(crate) stores: MemStores,
    pub(crate) out: Outputs,
    pub(crate) before: Before,
    late_reason: Option<String>,
    orphans: Vec<RecordError>,
    stream_time: i64,
    result_window: Option<(i64, i64)>,
    tables: TableInputs,
    globals: crate::control::Tables,
    joins: StreamJoins,
    fk: FkMarks,
}

impl Harness {
    /// The task spec of sub-topology `sub` of `program` (its text, checked and planned).
    pub(crate) fn new(program: &str, sub: usize) -> Harness {
        let p = crate::compile(program).unwrap_or_else(|d| panic!("the test's program does not check: {d:?}"));
        let topo = crate::plan::lower(&p, "test");
        let spec = crate::plan::physical::specs(&p, &topo).expect("planned").swap_remove(sub);
        let shared = Arc::new(spec.clone());
        Harness {
            tables: TableInputs::new(shared.clone()),
            joins: StreamJoins::new(shared),
            spec,
            counters: Counters::default(),
            changes: Vec::new(),
            stores: MemStores::default(),
            out: Outputs::default(),
            before: Before::Unknown,
            late_reason: None,
            orphans: Vec::new(),
            stream_time: i64::MIN,
            result_window: None,
            globals: Default::default(),
            fk: FkMarks::default(),
        }
    }

    /// The spec's chain operators (`ops`, then `post`) as the task builds them.
    pub(crate) fn chain(&self) -> Vec<Box<dyn Operator>> {
        crate::runtime::ops::build(&self.spec)
    }

    /// Send `row` at `ts` into `op`: what it passed down, in order, or its error.
    pub(crate) fn send(&mut self, op: &mut dyn Operator, row: Row, ts: i64) -> Result<Vec<(Row, i64)>, RecordError> {
        let (r, rows) = self.drive(|cx, down| op.on_row(row, ts, cx, down));
        r.map(|()| rows)
    }

    /// A record of joined stream `side` (`row` keyed by the join key, `raw` its value's bytes)
    /// into its join step, as the task sends it: what the step passed down the rest of the
    /// chain, or the record's error.
    pub(crate) fn send_right(
        &mut self,
        side: usize,
        row: Row,
        ts: i64,
        offset: u64,
        raw: Option<Vec<u8>>,
    ) -> Result<Vec<(Row, i64)>, RecordError> {
        let input = crate::runtime::op::Input { row, ts, offset };
        let (r, rows) = self.drive(|cx, down| crate::runtime::ops::join_right(side, input, raw, offset, cx, down));
        r.map(|()| rows)
    }

    /// Run a flush of `op` (a commit): what it passed down.
    pub(crate) fn flush(&mut self, op: &mut dyn Operator) -> Vec<(Row, i64)> {
        self.drive(|cx, down| op.flush(cx, down)).1
    }

    /// `f` with the task's context and a chain that ends in a collector: its result and the
    /// rows the collector got.
    fn drive<R>(&mut self, f: impl FnOnce(&mut Ctx, &mut Down) -> R) -> (R, Vec<(Row, i64)>) {
        let got = Rows::default();
        let mut end: Vec<Box<dyn Operator>> = vec![Box::new(Collect(got.clone()))];
        let mut cx = Ctx {
            spec: &self.spec,
            counters: &mut self.counters,
            late_reason: &mut self.late_reason,
            changes: &mut self.changes,
            stores: &self.stores,
            out: &mut self.out,
            orphans: &mut self.orphans,
            stream_time: &mut self.stream_time,
            result_window: &mut self.result_window,
            tables: &mut self.tables,
            globals: &self.globals,
            joins: &mut self.joins,
            fk: &mut self.fk,
            record_max: usize::MAX,
            before: self.before,
        };
        let r = f(&mut cx, &mut Down::from(&mut end, 0));
        drop(end);
        let rows = std::mem::take(&mut *got.lock().expect("the collector's rows"));
        (r, rows)
    }

    /// The records written so far: (topic, key text, value text; None: a tombstone).
    pub(crate) fn written(&self) -> Vec<(String, Option<String>, Option<String>)> {
        self.out
            .iter()
            .map(|o| {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                (o.topic().to_string(), text(o.key()), text(o.value()))
            })
            .collect()
    }
}

/// A row of key `key` and value fields `value` (no joined sides, no tenant).
pub(crate) fn row(key: Value, value: Vec<Value>) -> Row {
    Row { key, value, joined: Vec::new(), tenant: None, retract: false }
}
