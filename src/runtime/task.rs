//! A task: one sub-topology over one partition, single-threaded, with its own shard of every
//! store. The task knows nothing of the backend: it is given decoded input records and
//! returns output records; the driver moves records and commits.
//!
//! Per commit, the task's record cache is flushed in first-change order: one changelog record,
//! one store write and (with `emit changes`) one downstream update per changed (key, window).

use std::sync::Arc;

use crate::ast::{EmitMode, Format};
use crate::codec::decode_tenanted;
use crate::eval::{eval, Row, Tenant};
use crate::hir::{self, KeySpec};
use crate::log::Record;
use crate::plan::physical::{Decode, Op, StreamInput, TaskSpec};
use crate::runtime::aggregate::{Aggregate, Emitted};
use crate::runtime::op::{scoped, Ctx, Operator};
pub use crate::runtime::op::{Change, Counters, Input, NoStores, Output, RecordError, Route, StoreRead, TenantCounts};
use crate::runtime::stream_join::StreamJoins;
use crate::runtime::tables::TableInputs;
use crate::runtime::tenant::{self, H_TENANT};
pub use crate::runtime::wire::decode_key;
use crate::runtime::wire::{split_wire, wire_row, write_record};
use crate::types::{RecordType, Type};
use crate::value::{decode_record, Value};

/// The most records `explode` makes of one record: past it, the record is bad input (a
/// dead letter with the reason), not an unbounded fan-out.
pub(crate) const MAX_EXPLODE: usize = 100_000;

/// Header names of docs/conventions.md.
pub const H_ERROR: &str = "streamc.error";
pub const H_TOPIC: &str = "streamc.source.topic";
pub const H_PARTITION: &str = "streamc.source.partition";
pub const H_OFFSET: &str = "streamc.source.offset";
pub const H_VERSION: &str = "streamc.query.version";
/// On the tombstone of a merged-away session: which session it deletes.
pub const H_WINDOW_START: &str = "streamc.window.start";
pub const H_WINDOW_END: &str = "streamc.window.end";

pub struct Task {
    pub spec: Arc<TaskSpec>,
    pub partition: u32,
    /// Stream time of the aggregate processor.
    pub stream_time: i64,
    pub counters: Counters,
    /// The aggregate (None: the task has none).
    aggregate: Option<Aggregate>,
    /// What the aggregate's last flush emitted (a buffer kept for reuse).
    emitted: Vec<Emitted>,
    /// Why the record just processed was late (for one or more of its windows), if it was.
    pub late_reason: Option<String>,
    /// The control-managed tables as of the control offset the task applied.
    pub globals: Arc<crate::control::Tables>,
    /// Table and join store changes since the last flush, in order.
    table_changes: Vec<Change>,
    /// The stream–stream joins: both sides' records, their stream time and row numbering.
    pub(crate) joins: StreamJoins,
    /// The table inputs.
    tables: TableInputs,
    /// The window bounds of the windowed result row running down `post` (for its tombstone).
    result_window: Option<(i64, i64)>,
    /// Errors of rows no input record caused (a join's null rows passed on as stream time
    /// moves), reported at the next flush.
    orphan_errors: Vec<RecordError>,
}

impl Task {
    pub fn new(spec: Arc<TaskSpec>, partition: u32, stream_time: i64) -> Task {
        let counters = Counters { ops_in: vec![0; spec.ops.len() + spec.post.len()], ..Counters::default() };
        let aggregate = Aggregate::new(&spec);
        let joins = StreamJoins::new(spec.clone());
        let tables = TableInputs::new(spec.clone());
        Task {
            spec,
            partition,
            stream_time,
            counters,
            aggregate,
            emitted: Vec::new(),
            late_reason: None,
            table_changes: Vec::new(),
            globals: Arc::default(),
            joins,
            tables,
            result_window: None,
            orphan_errors: Vec::new(),
        }
    }

    /// Rebuild the stateful operators' in-memory state from the restored stores.
    pub fn restore_index(&mut self, stores: &dyn StoreRead) {
        self.tables.restore(stores);
        self.joins.restore(stores);
        if let Some(a) = self.aggregate.as_mut() {
            a.restore(stores);
        }
    }

    /// The task's stateful operators.
    fn operators(&self) -> impl Iterator<Item = &dyn Operator> {
        let ops: [Option<&dyn Operator>; 3] =
            [Some(&self.tables), Some(&self.joins), self.aggregate.as_ref().map(|a| a as &dyn Operator)];
        ops.into_iter().flatten()
    }

    /// The stateful operator that keeps store `store`.
    fn owner(&self, store: usize) -> Option<&dyn Operator> {
        self.operators().find(|op| op.stores().contains(&store))
    }

    /// A key's bytes as the task's stores hold them: scoped to the record's tenant in a
    /// tenant-scoped task.
    fn scoped(&self, tenant: Option<&Tenant>, kb: Vec<u8>) -> Result<Vec<u8>, RecordError> {
        scoped(self.spec.tenant, tenant, kb)
    }

    /// The tenant a key of store `store` belongs to, if the task is tenant-scoped (for purges
    /// and per-tenant metrics): every layout starts from the scoped key bytes.
    pub fn key_tenant<'a>(&self, store: usize, key: &'a [u8]) -> Option<&'a [u8]> {
        if !self.spec.tenant {
            return None;
        }
        self.owner(store)?.key_tenant(key)
    }

    /// The tenant of a record of one of the task's inputs, if it has a readable one: for
    /// counting a bad record against its tenant.
    pub fn record_tenant(&self, topic: &str, rec: &Record) -> Option<Tenant> {
        if !self.spec.tenant {
            return None;
        }
        let src = match &self.spec.main.decode {
            Decode::Internal { .. } if topic == self.spec.main.topic => return tenant::of_internal(rec).ok(),
            Decode::Source(src) if topic == self.spec.main.topic => src.clone(),
            _ => self
                .spec
                .tables
                .iter()
                .map(|t| &t.source)
                .chain(self.spec.streams.iter().map(|s| &s.source))
                .find(|s| s.topic.as_deref() == Some(topic))?
                .clone(),
        };
        if let (Some(hir::TenantSpec::Field(f)), Some(v)) = (&src.tenant, &rec.value) {
            // Read from the JSON as it is: a value that does not decode may still name its tenant.
            let v = serde_json::from_slice::<serde_json::Value>(v).ok()?;
            return tenant::checked(v.get(f)?.as_str()?.as_bytes()).ok();
        }
        tenant::of_record(&src, None, rec).ok()
    }

    /// Count a record sent to the dead-letter topic against its tenant.
    pub fn dead_letter(&mut self, tenant: Option<&[u8]>) {
        self.counters.dead_letters += 1;
        if let Some(t) = tenant {
            let counted = self.counters.counted;
            let c = self.counters.tenant(t);
            c.dead_letters += 1;
            if !counted {
                c.records_in += 1;
            }
        }
    }

    /// Decode a record of the `k`-th stream merged with the main input (`from a, b, …`).
    pub fn decode_merged(&self, k: usize, rec: &Record) -> Result<Input, RecordError> {
        match self.spec.merged.get(k).map(|m| &m.decode) {
            Some(Decode::Source(src)) => self.decode_stream(src, rec),
            _ => Err(RecordError("a merged input that is not a stream".into())),
        }
    }

    /// Decode a record of a source the task's chain runs on (its main input or a merged one).
    fn decode_stream(&self, src: &hir::Source, rec: &Record) -> Result<Input, RecordError> {
        let input = decode_source(src, rec)?;
        // A task with state reads its input in the partitions its keys belong to.
        if !self.spec.stores.is_empty() {
            misplaced(src, rec)?;
        }
        Ok(input)
    }

    /// Decode a record of the main input.
    pub fn decode_main(&self, rec: &Record) -> Result<Input, RecordError> {
        match &self.spec.main.decode {
            Decode::Source(src) => self.decode_stream(src, rec),
            Decode::Internal { key, wire, nvalue, joined_keys } => {
                let key = decode_key(rec.key.as_deref(), key)?;
                let bytes =
                    rec.value.as_deref().ok_or_else(|| RecordError("a repartition record has no value".into()))?;
                let fields = decode_record(bytes, wire).map_err(RecordError)?;
                let (fields, joined) = split_wire(fields, *nvalue, joined_keys);
                let tenant = if self.spec.tenant { Some(tenant::of_internal(rec).map_err(RecordError)?) } else { None };
                Ok(Input { row: Row { key, value: fields, joined, tenant }, ts: rec.timestamp, offset: 0 })
            }
        }
    }

    /// The sink of a query that keeps a table a table ([`TaskSpec::table_sink`]).
    fn table_sink(&self) -> Option<(&str, &Type)> {
        match self.spec.ops.get(self.spec.table_sink?)? {
            Op::Sink { topic, key_ty, .. } => Some((topic.as_str(), key_ty)),
            _ => None,
        }
    }

    /// A deletion (a record without a value) of the table a table query reads: a tombstone for
    /// its key downstream. None if the main input is not such a table.
    pub fn table_deletion(&mut self, rec: &Record, out: &mut Vec<Output>) -> Option<Result<(), RecordError>> {
        if rec.value.is_some() {
            return None;
        }
        let Decode::Source(src) = &self.spec.main.decode else { return None };
        let src = src.clone();
        self.table_sink()?;
        let key = match &src.key {
            KeySpec::Field(i) => decode_key(rec.key.as_deref(), &src.value.fields[*i].1),
            KeySpec::Named(_, t) => decode_key(rec.key.as_deref(), t),
            KeySpec::Raw => {
                Ok(rec.key.as_deref().map(|k| Value::str(&String::from_utf8_lossy(k))).unwrap_or(Value::Null))
            }
        };
        let tenant = match &src.tenant {
            None => Ok(None),
            Some(_) => tenant::of_record(&src, None, rec).map(Some).map_err(RecordError),
        };
        Some(key.and_then(|key| {
            let tenant = tenant?;
            self.counters.records_in += 1;
            if let Some(t) = &tenant {
                self.counters.tenant(t).records_in += 1;
            }
            // A deletion has no time field: its time is the record timestamp.
            self.table_tombstone(&Row { key, value: vec![], joined: vec![], tenant }, rec.timestamp, out);
            Ok(())
        }))
    }

    /// A tombstone for `row`'s key at the table query's sink.
    fn table_tombstone(&mut self, row: &Row, ts: i64, out: &mut Vec<Output>) {
        let Some((topic, key_ty)) = self.table_sink() else { return };
        let record = Record {
            key: output_key(&row.key, key_ty, row.tenant.as_deref()),
            value: None,
            timestamp: ts,
            headers: out_headers(self.spec.version, row.tenant.as_deref()),
        };
        out.push(Output { topic: topic.to_string(), route: Route::Key, record });
        self.counters.records_out += 1;
    }

    /// Process one record of the main input.
    pub fn process(&mut self, input: Input, out: &mut Vec<Output>, stores: &dyn StoreRead) -> Result<(), RecordError> {
        self.counters.records_in += 1;
        if let Some(t) = &input.row.tenant {
            self.counters.tenant(t).records_in += 1;
        }
        let spec = self.spec.clone();
        self.run_ops(&spec.ops, 0, input.row, input.ts, out, stores)
    }

    /// Process one record of a side input: `side` counts tables, then joined streams.
    pub fn process_side(
        &mut self,
        side: usize,
        rec: &Record,
        offset: u64,
        out: &mut Vec<Output>,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let tables = self.spec.tables.len();
        if side < tables {
            return self.process_table(side, rec);
        }
        self.counters.records_in += 1;
        self.join_right(side - tables, rec, offset, out, stores)
    }

    /// A record of a joined stream: stored for later records of the main side, and joined with
    /// the main side's stored records whose bounds hold it.
    fn join_right(
        &mut self,
        side: usize,
        rec: &Record,
        offset: u64,
        out: &mut Vec<Output>,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let si = &spec.streams[side];
        let input = decode_source(&si.source, rec)?;
        misplaced(&si.source, rec)?;
        if let Some(t) = &input.row.tenant {
            self.counters.tenant(t).records_in += 1;
        }
        let ts = input.ts;
        if input.row.key.is_null() {
            return Err(RecordError("the join key is null".into()));
        }
        self.join_time(side, false, ts, out, stores);
        let kb = self.scoped(input.row.tenant.as_ref(), input.row.key.key_bytes(&si.on.ty))?;
        let value = Arc::new(input.row.value);
        let (matched, stored) = self.joins.right(
            side,
            si,
            kb,
            input.row.key,
            value,
            rec.value.clone(),
            ts,
            offset,
            &mut self.table_changes,
        );
        if !stored && matched.is_empty() {
            self.join_late(side, ts, si);
        }
        for (row, t) in matched {
            self.run_ops_at(si.op + 1, row, t, out, stores)?;
        }
        Ok(())
    }

    /// The main side of a stream–stream join (the operator at `ops[at]`).
    fn join_left(
        &mut self,
        side: usize,
        row: Row,
        ts: i64,
        out: &mut Vec<Output>,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let si = &spec.streams[side];
        let rest = &spec.ops[si.op + 1..];
        let k = eval(&si.on, &row, &[]).map_err(RecordError)?;
        if k.is_null() {
            // A null key matches nothing: a left join passes the record on at once. Its time
            // counts, but (as in Kafka Streams) it brings no pass over the pending records.
            self.joins.observe(side, ts);
            if si.left {
                let mut r = row;
                r.joined.push(None);
                self.run_ops(rest, si.op + 1, r, ts, out, stores)?;
            }
            return Ok(());
        }
        self.join_time(side, true, ts, out, stores);
        let kb = self.scoped(row.tenant.as_ref(), k.key_bytes(&si.on.ty))?;
        let (rows, stored) = self.joins.left(side, si, kb, row, ts, &mut self.table_changes);
        if !stored && rows.is_empty() {
            self.join_late(side, ts, si);
        }
        for (r, t) in rows {
            self.run_ops(rest, si.op + 1, r, t, out, stores)?;
        }
        Ok(())
    }

    /// A record at `ts` reached join `side`: the join's stream time moves; if the record is at
    /// it, a left join passes on its pending records whose windows closed; each side drops what
    /// it no longer keeps. Those rows are not the record's: an error evaluating one is reported
    /// at the next flush (as a result's is), and lateness they meet is not the record's.
    /// (`main`: the record is the main side's.)
    fn join_time(&mut self, side: usize, main: bool, ts: i64, out: &mut Vec<Output>, stores: &dyn StoreRead) {
        let spec = self.spec.clone();
        let si = &spec.streams[side];
        let mut rows = Vec::new();
        if self.joins.observe(side, ts) && si.left {
            rows = self.joins.closed_pending(side, si, main, &mut self.table_changes);
        }
        self.joins.expire(side, si, &mut self.table_changes);
        if rows.is_empty() {
            return;
        }
        let reason = self.late_reason.take();
        for (r, t) in rows {
            if let Err(e) = self.run_ops_at(si.op + 1, r, t, out, stores) {
                self.orphan_errors.push(e);
            }
        }
        self.late_reason = reason;
    }

    /// A record too old for its side to keep that matched nothing: dropped, as late.
    fn join_late(&mut self, side: usize, ts: i64, si: &StreamInput) {
        if self.late_reason.is_some() {
            return;
        }
        self.counters.late += 1;
        self.late_reason = Some(format!(
            "late: its join side keeps records for {} + {} + grace {} (time {ts}, stream time {})",
            crate::ast::Duration(si.before),
            crate::ast::Duration(si.after),
            crate::ast::Duration(si.grace),
            self.joins.time(side)
        ));
    }

    /// Apply one record of a table input: the table is updated in timestamp order with the stream.
    pub fn process_table(&mut self, table: usize, rec: &Record) -> Result<(), RecordError> {
        self.tables.apply(table, rec, &mut self.counters, &mut self.table_changes)
    }

    /// Run the operators from `spec.ops[start..]` on a row.
    fn run_ops_at(
        &mut self,
        start: usize,
        row: Row,
        ts: i64,
        out: &mut Vec<Output>,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        self.run_ops(&spec.ops[start..], start, row, ts, out, stores)
    }

    /// Run a chain of operators; `base` is the index of its first one in the task's operator
    /// counts (`ops`, then `post`).
    #[allow(clippy::too_many_arguments)]
    fn run_ops(
        &mut self,
        ops: &[Op],
        base: usize,
        mut row: Row,
        ts: i64,
        out: &mut Vec<Output>,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let err = |e: String| RecordError(e);
        for (i, op) in ops.iter().enumerate() {
            if let Some(n) = self.counters.ops_in.get_mut(base + i) {
                *n += 1;
            }
            match op {
                Op::Filter(pred) => {
                    if eval(pred, &row, &[]).map_err(err)? != Value::Bool(true) {
                        if base == 0 {
                            // A table query deletes a row that does not match downstream.
                            self.table_tombstone(&row, ts, out);
                        } else if base == self.spec.ops.len() {
                            // The chain after the aggregate (`post`, which starts at `ops.len()`):
                            // a result row that does not match is deleted downstream.
                            self.result_tombstone(row, ts, out);
                        }
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
                Op::Explode { fields, at } => {
                    let mut v = Vec::with_capacity(fields.len());
                    for f in fields {
                        v.push(eval(f, &row, &[]).map_err(err)?);
                    }
                    let items = match std::mem::replace(&mut v[*at], Value::Null) {
                        Value::List(items) => items,
                        // A null list: no record.
                        _ => return Ok(()),
                    };
                    if items.len() > MAX_EXPLODE {
                        return Err(RecordError(format!(
                            "explode: {} items, more than the {MAX_EXPLODE} one record may become",
                            items.len()
                        )));
                    }
                    row.value = v;
                    row.joined.clear();
                    // Each item goes down the rest of the chain as a record of its own.
                    for item in items.iter() {
                        let mut r = row.clone();
                        r.value[*at] = item.clone();
                        self.run_ops(&ops[i + 1..], base + i + 1, r, ts, out, stores)?;
                    }
                    return Ok(());
                }
                Op::Rekey(e) => row.key = eval(e, &row, &[]).map_err(err)?,
                Op::Repartition { topic, key, key_ty, wire } => {
                    let k = group_key(key, &row)?;
                    let mut value = Vec::with_capacity(128);
                    write_record(&wire_row(&row, wire), wire, &mut value);
                    let headers = out_headers(self.spec.version, row.tenant.as_deref());
                    out.push(Output {
                        topic: topic.clone(),
                        route: Route::Key,
                        record: Record { key: Some(k.key_bytes(key_ty)), value: Some(value), timestamp: ts, headers },
                    });
                    self.counters.records_out += 1;
                    return Ok(());
                }
                Op::JoinTable { table, global, on, left } => {
                    let k = eval(on, &row, &[]).map_err(err)?;
                    let found = match (table, global) {
                        (Some(t), _) => self.tables.row(*t, &k, row.tenant.as_ref(), stores)?.map(|r| (k, r)),
                        // Control-managed tables: as of the control offset the task applied.
                        (None, Some(name)) => {
                            let kb = crate::control::table_key(row.tenant.as_deref(), &k.key_bytes(&on.ty));
                            self.globals.get(name).and_then(|t| t.get(&kb)).cloned().map(|r| (k, r))
                        }
                        (None, None) => None,
                    };
                    if found.is_none() && !left {
                        return Ok(());
                    }
                    row.joined.push(found);
                }
                Op::JoinStream { side } => {
                    return self.join_left(*side, row, ts, out, stores);
                }
                Op::Aggregate => {
                    return self.aggregate(row, ts, stores);
                }
                Op::Sink { topic, format, key_ty, value_ty, windowed, when } => {
                    // A branch that does not take the row passes it on to the next `to`.
                    if let Some(c) = when {
                        if !matches!(eval(c, &row, &[]).map_err(err)?, Value::Bool(true)) {
                            continue;
                        }
                    }
                    let window = match (windowed, self.result_window) {
                        (false, _) => None,
                        (true, Some(w)) => Some(w),
                        (true, None) => return Err(RecordError("a windowed key without a window".into())),
                    };
                    let key = sink_key(&row.key, key_ty, row.tenant.as_deref(), window);
                    out.push(sink_record(topic, *format, value_ty, &row, ts, self.spec.version, key)?);
                    self.counters.records_out += 1;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn aggregate(&mut self, row: Row, ts: i64, stores: &dyn StoreRead) -> Result<(), RecordError> {
        let Some(agg) = self.aggregate.as_mut() else { return Ok(()) };
        let mut cx = Ctx {
            counters: &mut self.counters,
            late_reason: &mut self.late_reason,
            changes: &mut self.table_changes,
            stores,
        };
        agg.add(row, ts, &mut self.stream_time, &mut cx)
    }

    /// Flush the operators: the aggregate's record cache (the store changes, for the changelog
    /// and the local store, and the downstream records, in first-change order; then the windows
    /// stream time has passed), after the store changes tables and joins made since the last
    /// flush. `close_all` closes every window (end of a finite input with
    /// `--close-windows-at-end`).
    pub fn flush(
        &mut self,
        out: &mut Vec<Output>,
        changes: &mut Vec<Change>,
        close_all: bool,
        stores: &dyn StoreRead,
    ) -> Vec<RecordError> {
        let mut errors = Vec::new();
        if let Some(agg) = self.aggregate.as_mut() {
            let mut cx = Ctx {
                counters: &mut self.counters,
                late_reason: &mut self.late_reason,
                changes: &mut self.table_changes,
                stores,
            };
            agg.advance(&mut self.stream_time, close_all, &mut cx);
        }
        if close_all && !self.spec.streams.is_empty() {
            // `--close-windows-at-end`: every join window closes, one join after the other (a
            // chained join still takes what the one before it passes on); left joins emit
            // their unmatched records.
            for side in 0..self.spec.streams.len() {
                self.joins.close(side);
                self.join_time(side, true, i64::MAX, out, stores);
            }
        }
        errors.append(&mut self.orphan_errors);
        changes.append(&mut self.table_changes);
        let Some(agg) = self.aggregate.as_mut() else { return errors };
        let mut emitted = std::mem::take(&mut self.emitted);
        agg.flush(self.stream_time, changes, &mut emitted);
        // The aggregate's results run down the rest of the query.
        let spec = self.spec.clone();
        for e in emitted.drain(..) {
            match e {
                Emitted::Row(row, ts) => {
                    self.result_window = match (&spec.agg, row.value.as_slice()) {
                        (Some(a), [Value::Ts(s), Value::Ts(e), ..]) if a.window.is_some() => Some((*s, *e)),
                        _ => None,
                    };
                    if let Err(e) = self.run_ops(&spec.post, spec.ops.len(), row, ts, out, &NoStores) {
                        errors.push(e);
                    }
                }
                Emitted::Error(e) => errors.push(e),
                Emitted::Deleted { key, start, end, ts, tenant } => {
                    self.tombstone(key, Some((start, end)), ts, tenant, out)
                }
            }
        }
        self.emitted = emitted;
        errors
    }
}

impl Task {
    /// Delete an aggregate's result row that does not match a `where` after the aggregate
    /// (the filter of a table): with `emit changes`, a tombstone for its key (and window) at the
    /// query's sink, as Kafka Streams' table filter sends one for a row that does not pass
    /// (it may never have matched: a delete of a key a table does not hold changes nothing).
    /// With `emit final` a window's one result is simply not sent.
    fn result_tombstone(&mut self, row: Row, ts: i64, out: &mut Vec<Output>) {
        if self.spec.agg.as_ref().is_none_or(|a| a.emit != EmitMode::Changes) {
            return;
        }
        let window = self.result_window;
        self.tombstone(row.key, window, ts, row.tenant, out);
    }

    /// Delete a result downstream: a tombstone for its key at the query's sink, a window's
    /// bounds in headers (filters and projections do not apply to deletions).
    fn tombstone(
        &mut self,
        key: Value,
        window: Option<(i64, i64)>,
        ts: i64,
        tenant: Option<Tenant>,
        out: &mut Vec<Output>,
    ) {
        // With branches, the result it deletes may have gone to any of them: each gets the
        // tombstone.
        let spec = self.spec.clone();
        for op in &spec.post {
            let Op::Sink { topic, key_ty, windowed, .. } = op else { continue };
            let mut headers = out_headers(self.spec.version, tenant.as_deref());
            if let Some((start, end)) = window {
                headers.push((H_WINDOW_START.to_string(), start.to_string().into_bytes()));
                headers.push((H_WINDOW_END.to_string(), end.to_string().into_bytes()));
            }
            let (key, route) = sink_key(&key, key_ty, tenant.as_deref(), window.filter(|_| *windowed));
            out.push(Output {
                topic: topic.clone(),
                route,
                record: Record { key, value: None, timestamp: ts, headers },
            });
            self.counters.records_out += 1;
        }
    }
}

fn group_key(exprs: &[hir::Expr], row: &Row) -> Result<Value, RecordError> {
    let mut vals = Vec::with_capacity(exprs.len());
    for e in exprs {
        vals.push(eval(e, row, &[]).map_err(RecordError)?);
    }
    Ok(if vals.len() == 1 { vals.pop().unwrap_or(Value::Null) } else { Value::List(Arc::new(vals)) })
}

/// A record without a key (whose value decodes), of a source keyed by a field, read by a task
/// that keeps state by that key: it is in whatever partition its producer chose, not necessarily the one its key
/// belongs to, so its state would be split across tasks. Such a record is refused (dead
/// letter), as a record whose key differs from its key field is.
fn misplaced(src: &hir::Source, rec: &Record) -> Result<(), RecordError> {
    match (&src.key, &rec.key) {
        (KeySpec::Field(i), None) => Err(RecordError(format!(
            "the record has no key, but `{}` is keyed by its `{}` field: a stateful query needs each record in the partition of its key (write records with their key)",
            src.name, src.value.fields[*i].0
        ))),
        _ => Ok(()),
    }
}

fn decode_source(src: &hir::Source, rec: &Record) -> Result<Input, RecordError> {
    let bytes = rec.value.as_deref().ok_or_else(|| RecordError("the record has no value".into()))?;
    let (wire, field) = decode_tenanted(src, bytes).map_err(RecordError)?;
    let tenant = match &src.tenant {
        None => None,
        Some(_) => Some(tenant::of_record(src, field.as_ref(), rec).map_err(RecordError)?),
    };
    let key = match &src.key {
        KeySpec::Field(i) => {
            let k = wire[*i].clone();
            if let Some(kb) = &rec.key {
                let declared = decode_key(Some(kb), &src.value.fields[*i].1)?;
                if !declared.equals(&k) {
                    return Err(RecordError(format!(
                        "the record key `{}` differs from its `{}` field `{k}`",
                        String::from_utf8_lossy(kb),
                        src.value.fields[*i].0
                    )));
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
    if ts < 0 {
        // Kafka takes no record timestamp before the epoch, and Kafka Streams skips such records:
        // windows start at 0.
        return Err(RecordError(format!("the event time {ts} is before the epoch (1970-01-01T00:00:00Z)")));
    }
    Ok(Input { row: Row { key, value: wire, joined: vec![], tenant }, ts, offset: 0 })
}

/// The headers of a record a task writes: the version of the query that wrote it, and the
/// record's tenant (raw bytes) in a tenant-scoped query.
fn out_headers(version: u64, tenant: Option<&[u8]>) -> Vec<(String, Vec<u8>)> {
    let mut h = Vec::with_capacity(2);
    h.push((H_VERSION.to_string(), version.to_string().into_bytes()));
    if let Some(t) = tenant {
        h.push((H_TENANT.to_string(), t.to_vec()));
    }
    h
}

/// An output record's key: the key's text (docs/conventions.md), or for a tenant's record the JSON
/// array `[tenant, key]`, so that different tenants' results never share a key.
fn output_key(key: &Value, key_ty: &Type, tenant: Option<&[u8]>) -> Option<Vec<u8>> {
    match tenant {
        None if key.is_null() => None,
        None => Some(key.key_bytes(key_ty)),
        Some(t) => {
            let mut b = Vec::with_capacity(t.len() + 32);
            b.push(b'[');
            tenant::write_json(t, &mut b);
            b.push(b',');
            key.write_json(key_ty, &mut b);
            b.push(b']');
            Some(b)
        }
    }
}

/// A sink record's key and where it goes: the output key, or with a window (`to … windowed`)
/// the windowed key `[key, window_start, window_end]`, routed by the key without the window.
fn sink_key(key: &Value, key_ty: &Type, tenant: Option<&[u8]>, window: Option<(i64, i64)>) -> (Option<Vec<u8>>, Route) {
    let plain = output_key(key, key_ty, tenant);
    let Some((start, end)) = window else { return (plain, Route::Key) };
    let wkey = Value::List(Arc::new(vec![key.clone(), Value::Ts(start), Value::Ts(end)]));
    let wty = Type::Tuple(vec![key_ty.clone(), Type::Timestamp, Type::Timestamp]);
    let route = plain.map(Route::Bytes).unwrap_or(Route::Partition(0));
    (output_key(&wkey, &wty, tenant), route)
}

fn sink_record(
    topic: &str,
    format: Format,
    value_ty: &RecordType,
    row: &Row,
    ts: i64,
    version: u64,
    (key, route): (Option<Vec<u8>>, Route),
) -> Result<Output, RecordError> {
    let headers = out_headers(version, row.tenant.as_deref());
    let value = match format {
        Format::Json => {
            let mut b = Vec::with_capacity(128);
            write_record(&wire_row(row, value_ty), value_ty, &mut b);
            if let Some(t) = &row.tenant {
                // The tenant, as the last field `tenant` (the checker keeps the name free).
                b.pop();
                if b.len() > 1 {
                    b.push(b',');
                }
                b.extend_from_slice(b"\"tenant\":");
                tenant::write_json(t, &mut b);
                b.push(b'}');
            }
            Some(b)
        }
        Format::String => match row.value.first() {
            Some(Value::Str(s)) => Some(s.as_bytes().to_vec()),
            Some(Value::Null) | None => None,
            Some(v) => Some(v.to_string().into_bytes()),
        },
    };
    Ok(Output { topic: topic.to_string(), route, record: Record { key, value, timestamp: ts, headers } })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every store the physical plan gives a task is declared by exactly one of the task's
    /// stateful operators, for every program of the runtime corpus and the examples (an
    /// operator type that forgot one would leave its keys without a layout for purges and
    /// per-tenant counts).
    #[test]
    fn every_store_has_exactly_one_operator() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("tests/runs"))
            .unwrap()
            .map(|e| e.unwrap().path().join("program.stream"))
            .filter(|p| p.exists())
            .collect();
        files.extend(
            std::fs::read_dir(root.join("examples"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "stream")),
        );
        files.sort();
        assert!(files.len() >= 20, "found only {} programs", files.len());
        let mut stores = 0;
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let program = crate::compile(&text).unwrap_or_else(|d| panic!("{}: {d:?}", f.display()));
            let topo = crate::plan::lower(&program, "app");
            for spec in crate::plan::physical::specs(&program, &topo).unwrap() {
                let spec = Arc::new(spec);
                let task = Task::new(spec.clone(), 0, i64::MIN);
                let ops: Vec<&dyn Operator> = task.operators().collect();
                for (i, st) in spec.stores.iter().enumerate() {
                    let owners = ops.iter().filter(|op| op.stores().contains(&i)).count();
                    assert_eq!(owners, 1, "{}: store {} of {} has {owners} operators", f.display(), st.name, spec.name);
                    stores += 1;
                }
                let declared: usize = ops.iter().map(|op| op.stores().len()).sum();
                assert_eq!(
                    declared,
                    spec.stores.len(),
                    "{}: {} declares stores it does not have",
                    f.display(),
                    spec.name
                );
            }
        }
        assert!(stores > 20, "only {stores} stores seen");
    }
}
