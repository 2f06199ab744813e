//! A task: one sub-topology over one partition, single-threaded, with its own shard of every
//! store. The task knows nothing of the backend: it is given decoded input records and
//! returns output records; the driver moves records and commits.
//!
//! Per commit, the task's record cache is flushed in first-change order: one changelog record,
//! one store write and (with `emit changes`) one downstream update per changed (key, window).

use std::sync::Arc;

use crate::eval::{Row, Tenant};
use crate::format::decode_tenanted;
use crate::hir::{self, KeySpec};
use crate::plan::physical::{Decode, MutualJoin, MutualKind, TaskSpec};
use crate::record::Record;
use crate::runtime::foreign::{split_offset, subscription_key, Foreign};
use crate::runtime::op::Stateful;
pub use crate::runtime::op::{
    Change, Counters, Input, NoStores, OutRef, Output, Outputs, RecordError, Route, StoreRead, TenantCounts,
};
use crate::runtime::ops::repartition::{H_FK_DELETED, H_FK_KEY, H_FK_OFFSET, H_OLD};
use crate::runtime::ops::{self, group_table, sink::tombstone, Before, Ctx, Down, FkMarks, Operator};
use crate::runtime::stream_join::StreamJoins;
use crate::runtime::tables::{TableInputs, TableRecord, TableRow};
use crate::runtime::tenant;
pub use crate::runtime::wire::decode_key;
use crate::runtime::wire::{decode_source_key, split_wire};
use crate::value::{decode_record, Value};

/// Header names of docs/conventions.md.
pub use crate::dlq::{H_ERROR, H_OFFSET, H_PARTITION, H_TOPIC};
pub use crate::runtime::ops::repartition::H_RETRACT;
pub use crate::runtime::ops::sink::{H_VERSION, H_WINDOW_END, H_WINDOW_START};

pub struct Task {
    pub spec: Arc<TaskSpec>,
    pub partition: u32,
    /// Stream time of the aggregate processor.
    pub stream_time: i64,
    pub counters: Counters,
    /// Its operators, one per entry of the plan's chain (`ops`, then `post`).
    chain: Vec<Box<dyn Operator>>,
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
    /// A foreign-key join's marks on the record being processed (its offset: set by the run
    /// loop for each record read).
    pub(crate) fk: FkMarks,
    /// A foreign-key join's middle or end: its subscriptions' index and pending entries.
    foreign: Foreign,
    /// The largest record any topic the task writes takes (see `TaskRun::set_limits`).
    pub(crate) record_max: usize,
}

impl Task {
    pub fn new(spec: Arc<TaskSpec>, partition: u32, stream_time: i64) -> Task {
        let counters = Counters { ops_in: vec![0; spec.ops.len() + spec.post.len()], ..Counters::default() };
        let chain = ops::build(&spec);
        let joins = StreamJoins::new(spec.clone());
        let tables = TableInputs::new(spec.clone());
        let foreign = Foreign::new(&spec);
        Task {
            spec,
            partition,
            stream_time,
            counters,
            chain,
            late_reason: None,
            table_changes: Vec::new(),
            globals: Arc::default(),
            joins,
            tables,
            result_window: None,
            orphan_errors: Vec::new(),
            fk: FkMarks::default(),
            foreign,
            record_max: usize::MAX,
        }
    }

    /// Rebuild the stateful operators' in-memory state from the restored stores.
    pub fn restore_index(&mut self, stores: &dyn StoreRead) {
        self.tables.restore(stores);
        self.joins.restore(stores);
        self.foreign.restore(stores);
        for op in &mut self.chain {
            op.restore(stores);
        }
    }

    /// The task's operators' state: its side inputs', then its chain's.
    fn operators(&self) -> impl Iterator<Item = &dyn Stateful> {
        let sides: [&dyn Stateful; 3] = [&self.tables, &self.joins, &self.foreign];
        sides.into_iter().chain(self.chain.iter().map(|op| &**op as &dyn Stateful))
    }

    /// Its chain and what its operators share, for handling a row or a flush (`flushing`: the
    /// flush's store changes, else those pending until the next flush).
    fn parts<'s>(
        &'s mut self,
        out: &'s mut Outputs,
        stores: &'s dyn StoreRead,
        flushing: Option<&'s mut Vec<Change>>,
    ) -> (&'s mut [Box<dyn Operator>], Ctx<'s>) {
        let cx = Ctx {
            spec: &self.spec,
            counters: &mut self.counters,
            late_reason: &mut self.late_reason,
            changes: match flushing {
                Some(c) => c,
                None => &mut self.table_changes,
            },
            stores,
            out,
            orphans: &mut self.orphan_errors,
            stream_time: &mut self.stream_time,
            result_window: &mut self.result_window,
            tables: &mut self.tables,
            globals: &self.globals,
            joins: &mut self.joins,
            fk: &mut self.fk,
            record_max: self.record_max,
            before: Default::default(),
        };
        (&mut self.chain, cx)
    }

    /// The stateful operator that keeps store `store`.
    fn owner(&self, store: usize) -> Option<&dyn Stateful> {
        self.operators().find(|op| op.stores().contains(&store))
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
                let retract = rec.headers.iter().any(|(k, _)| k == H_RETRACT);
                Ok(Input { row: Row { key, value: fields, joined, tenant, retract }, ts: rec.timestamp, offset: 0 })
            }
        }
    }

    /// The old row a grouped table's repartition record of an update within its group carries
    /// (`streamc.old`), taken back: None for any other record.
    pub fn decode_old(&self, rec: &Record, like: &Row) -> Option<Result<Row, RecordError>> {
        let Decode::Internal { wire, nvalue, joined_keys, .. } = &self.spec.main.decode else { return None };
        let (_, bytes) = rec.headers.iter().find(|(k, _)| k == H_OLD)?;
        Some(decode_record(bytes, wire).map_err(RecordError).map(|fields| {
            let (value, joined) = split_wire(fields, *nvalue, joined_keys);
            Row { key: like.key.clone(), value, joined, tenant: like.tenant.clone(), retract: true }
        }))
    }

    /// A deletion (a record without a value) of the table a table query reads: a tombstone for
    /// its key downstream; in a grouped table's chain, its key's row taken back down the chain
    /// (`Row::retract`). None if the main input is not such a table.
    pub fn table_deletion(
        &mut self,
        rec: &Record,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Option<Result<(), RecordError>> {
        if rec.value.is_some() {
            return None;
        }
        let Decode::Source(src) = &self.spec.main.decode else { return None };
        let sink = self.spec.table_sink_spec();
        if sink.is_none() && self.spec.table_group.is_none() {
            return None;
        }
        let key = match &src.key {
            KeySpec::Field(i) => decode_source_key(src, rec.key.as_deref(), &src.value.fields[*i].1),
            KeySpec::Named(_, t) => decode_source_key(src, rec.key.as_deref(), t),
            KeySpec::Raw => {
                Ok(rec.key.as_deref().map(|k| Value::str(&String::from_utf8_lossy(k))).unwrap_or(Value::Null))
            }
        };
        let tenant = match &src.tenant {
            None => Ok(None),
            Some(_) => tenant::of_record(src, None, rec).map(Some).map_err(RecordError),
        };
        let (key, tenant) = match key.and_then(|k| Ok((k, tenant?))) {
            Ok(kt) => kt,
            Err(e) => return Some(Err(e)),
        };
        self.counters.records_in += 1;
        if let Some(t) = &tenant {
            self.counters.tenant(t).records_in += 1;
        }
        // A deletion has no time field: its time is the record timestamp.
        let Some(sink) = sink else {
            let row = Row { key, value: Vec::new(), joined: Vec::new(), tenant, retract: true };
            let (chain, mut cx) = self.parts(out, stores, None);
            return Some(Down::from(chain, 0).emit(row, rec.timestamp, &mut cx));
        };
        tombstone(out, sink, &key, None, rec.timestamp, tenant.as_deref(), self.spec.version);
        self.counters.records_out += 1;
        Some(Ok(()))
    }

    /// Process one record of the main input (or of a stream merged with it): down the chain.
    pub fn process(&mut self, input: Input, out: &mut Outputs, stores: &dyn StoreRead) -> Result<(), RecordError> {
        self.process_update(None, input, out, stores)
    }

    /// Process one record of the main input that may carry the row it replaces (`old`, taken
    /// back first: a grouped table's update within its group, see [`Task::decode_old`]).
    pub fn process_update(
        &mut self,
        old: Option<Row>,
        input: Input,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        self.counters.records_in += 1;
        if let Some(t) = &input.row.tenant {
            self.counters.tenant(t).records_in += 1;
        }
        let (chain, mut cx) = self.parts(out, stores, None);
        let taken = match old {
            Some(old) => Down::from(&mut *chain, 0).emit(old, input.ts, &mut cx),
            None => Ok(()),
        };
        taken.and(Down::from(chain, 0).emit(input.row, input.ts, &mut cx))
    }

    /// Process one record of a side input: `side` counts tables, then joined streams.
    pub fn process_side(
        &mut self,
        side: usize,
        rec: &Record,
        offset: u64,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let tables = self.spec.tables.len();
        if side < tables {
            return self.process_table(side, rec);
        }
        self.counters.records_in += 1;
        let spec = self.spec.clone();
        let side =
            spec.read_stream(side - tables).ok_or_else(|| RecordError(format!("internal: no side input {side}")))?;
        self.join_side(side, rec, offset, out, stores)
    }

    /// A record of the task's main input (or of a stream merged with it) that ran down the
    /// chain: in a self-join of that input, the other side's record too (Kafka Streams' order:
    /// this side first, so a record also matches itself).
    pub fn self_joins(
        &mut self,
        topic: &str,
        rec: &Record,
        offset: u64,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        for (side, si) in spec.streams.iter().enumerate() {
            if si.same_input && si.topic == topic {
                self.join_side(side, rec, offset, out, stores)?;
            }
        }
        Ok(())
    }

    /// A record of joined stream `side` (an index into `streams`): into its side of the join.
    fn join_side(
        &mut self,
        side: usize,
        rec: &Record,
        offset: u64,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let si = &spec.streams[side];
        let input = decode_source(&si.source, rec)?;
        misplaced(&si.source, rec)?;
        // (A self-join's record was counted as the main input's.)
        if let (Some(t), false) = (&input.row.tenant, si.same_input) {
            self.counters.tenant(t).records_in += 1;
        }
        let (chain, mut cx) = self.parts(out, stores, None);
        ops::join_right(side, input, rec.value.clone(), offset, &mut cx, &mut Down::from(chain, si.op + 1))
    }

    /// Apply one record of a table input: the table is updated in timestamp order with the stream.
    pub fn process_table(&mut self, table: usize, rec: &Record) -> Result<(), RecordError> {
        self.tables.apply(table, rec, &mut self.counters, &mut self.table_changes)
    }

    /// A record of any table of a table–table join ([`TaskSpec::mutual`]): `side` is the
    /// table's index among the task's tables, None for the query's own table (the main input).
    /// A value is checked as any input record (its key against its key field, its event time),
    /// the table's store updated, then the key's result, worked out from every table's current
    /// row, goes down the chain after the joins at time `ts`; if the key had a result and has
    /// none now, a tombstone; if it had none and has none, nothing (Kafka Streams'
    /// KTable–KTable joins, chained for an n-way join).
    pub fn mutual_join(
        &mut self,
        side: Option<usize>,
        rec: &Record,
        ts: i64,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let (Some(m), Some(own)) = (&spec.mutual, &spec.left) else {
            return Err(RecordError("internal: not a table-table join".into()));
        };
        let own_index = spec.tables.len();
        let (table, src) = match side {
            Some(s) if m.sides.iter().any(|j| j.right == s) => (s, &spec.tables[s].source),
            Some(s) => return self.process_table(s, rec),
            None => (own_index, &own.source),
        };
        let decoded = match &rec.value {
            // Checked as any input record of the table (key against key field, event time).
            Some(_) => {
                let input = decode_source(src, rec)?;
                TableRecord { key: input.row.key, row: Some(input.row.value), tenant: input.row.tenant }
            }
            None => self.tables.decode(table, rec)?,
        };
        let (key, tenant) = (decoded.key.clone(), decoded.tenant.clone());
        if key.is_null() {
            return Err(RecordError(format!("a record of table `{}` has no key", src.name)));
        }
        let old = self.tables.row(table, &key, tenant.as_ref(), stores)?;
        self.tables.store(table, decoded, rec, &mut self.counters, &mut self.table_changes)?;
        if crate::runtime::lineage::on() {
            // `streamc trace`: the key's result is made of every table's row for it.
            crate::runtime::lineage::reset(Vec::new());
            self.tables.trace_join(own_index, &key, tenant.as_ref());
            for j in &m.sides {
                self.tables.trace_join(j.right, &key, tenant.as_ref());
            }
        }
        self.counters.records_in += 1;
        let mine = self.tables.row(own_index, &key, tenant.as_ref(), stores)?;
        let others = m
            .sides
            .iter()
            .map(|j| self.tables.row(j.right, &key, tenant.as_ref(), stores))
            .collect::<Result<Vec<_>, _>>()?;
        // The rows as they were before this record.
        let (mine_before, others_before) = match side {
            None => (old, others.clone()),
            Some(s) => {
                let mut before = others.clone();
                for (b, j) in before.iter_mut().zip(&m.sides) {
                    if j.right == s {
                        *b = old.clone();
                    }
                }
                (mine.clone(), before)
            }
        };
        let had = mutual_present(m, mine_before.is_some(), &others_before);
        let result = mutual_row(m, &own.source, &key, tenant.as_ref(), mine, others);
        // Whether the result this one replaces went through the rest of the query (a `where`
        // deletes only a result that was sent): its row is built only then.
        let after = m.op + m.sides.len();
        let rest = &spec.ops[after..];
        let filtered = rest.iter().any(|op| matches!(op, crate::plan::physical::Op::Filter(_)));
        let sent = match (had, filtered) {
            (false, _) => Before::NotSent,
            (true, false) => Before::Unknown,
            (true, true) => match mutual_row(m, &own.source, &key, tenant.as_ref(), mine_before, others_before) {
                Some(row) => ops::sent(rest, row),
                None => Before::NotSent,
            },
        };
        let Some(row) = result else {
            // (A result that a `where` kept from the sink has nothing there to delete.)
            if let (true, Some(sink)) = (had && sent != Before::NotSent, spec.table_sink_spec()) {
                tombstone(out, sink, &key, None, ts, tenant.as_deref(), spec.version);
                self.counters.records_out += 1;
            } else if had && spec.table_group.is_some() {
                // Grouped: the key's old result leaves its group.
                let row = Row { key, value: Vec::new(), joined: Vec::new(), tenant, retract: true };
                let (chain, mut cx) = self.parts(out, stores, None);
                return Down::from(chain, after).emit(row, ts, &mut cx);
            }
            return Ok(());
        };
        let (chain, mut cx) = self.parts(out, stores, None);
        cx.before = sent;
        Down::from(chain, after).emit(row, ts, &mut cx)
    }

    /// A record of a foreign-key join's middle task ([`TaskSpec::foreign`]): `side` None, a
    /// subscription from the repartition topic (a row of the query's table under its foreign
    /// key; taken back: unsubscribed); else a record of the other table, which updates its
    /// store and gives the result of every row subscribed to its key. Each result (a tombstone
    /// where the row has none: an inner join without a match, a deleted row) goes down the
    /// chain to the results' repartition topic, marked with the offset of the row's update.
    pub fn foreign(
        &mut self,
        side: Option<usize>,
        rec: &Record,
        ts: i64,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let Some(f) = &spec.foreign else {
            return Err(RecordError("internal: not a foreign-key join".into()));
        };
        let fk_ty = match &spec.main.decode {
            Decode::Internal { key, .. } => key.clone(),
            Decode::Source(_) => {
                return Err(RecordError("internal: a foreign-key join reads its subscriptions".into()))
            }
        };
        match side {
            None => {
                let input = self.decode_main(rec)?;
                self.counters.records_in += 1;
                let header = |name: &str| rec.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice());
                let key = decode_key(header(H_FK_KEY), &f.key_ty)?;
                if key.is_null() {
                    return Err(RecordError("a foreign-key subscription without its row's key".into()));
                }
                let offset = fk_offset(header(H_FK_OFFSET))?;
                let kb = key.key_bytes(&f.key_ty);
                let fk = input.row.key.clone();
                let fkb = (!fk.is_null()).then(|| fk.key_bytes(&fk_ty));
                if input.row.retract {
                    if let Some(fkb) = &fkb {
                        self.foreign.unsubscribe(f.subscriptions, (fkb, &kb), ts, stores, &mut self.table_changes);
                    }
                    if header(H_FK_DELETED).is_some() {
                        // The row is gone: so is its result.
                        return self.foreign_result((key, input.row.value), None, offset, ts, out, stores);
                    }
                    return Ok(());
                }
                let right = match &fkb {
                    Some(fkb) => {
                        let mut entry = offset.to_le_bytes().to_vec();
                        entry.extend(group_table::encode_row(&input.row));
                        self.foreign.subscribe(f.subscriptions, (fkb, &kb), entry, ts, stores, &mut self.table_changes);
                        self.tables.row(f.right, &fk, None, stores)?.map(|r| (fk, r))
                    }
                    // A null foreign key matches nothing.
                    None => None,
                };
                let right = match right {
                    Some(r) => Some(Some(r)),
                    None if f.left => Some(None),
                    None => None,
                };
                self.foreign_result((key, input.row.value), right, offset, ts, out, stores)
            }
            Some(s) if s == f.right => {
                let decoded = self.tables.decode(s, rec)?;
                let fk = decoded.key.clone();
                self.tables.store(s, decoded, rec, &mut self.counters, &mut self.table_changes)?;
                self.counters.records_in += 1;
                let row = self.tables.row(s, &fk, None, stores)?;
                let fkb = fk.key_bytes(&fk_ty);
                let mut result = Ok(());
                for kb in self.foreign.subscribers(f.subscriptions, &fkb, stores) {
                    let Some(entry) = self.foreign.get(f.subscriptions, &subscription_key(&fkb, &kb), stores) else {
                        continue;
                    };
                    let key = decode_key(Some(&kb), &f.key_ty)?;
                    let (offset, stored) = split_offset(&entry)?;
                    let like =
                        Row { key: key.clone(), value: Vec::new(), joined: Vec::new(), tenant: None, retract: false };
                    let left = group_table::decode_row(stored, &like)
                        .map_err(|e| RecordError(format!("damaged foreign-key subscription: {e}")))?;
                    let right = match &row {
                        Some(r) => Some(Some((fk.clone(), r.clone()))),
                        None if f.left => Some(None),
                        None => None,
                    };
                    // Every row concerned gets its result, whatever became of another's (each
                    // all or nothing, and none larger than the topics take).
                    out.begin_record();
                    let r = self.foreign_result((key, left.value), right, offset, ts, out, stores);
                    result = result.and(self.settle_part(r, out));
                }
                result
            }
            Some(s) => self.process_table(s, rec),
        }
    }

    /// The record being processed is through (`ok`) or failed: what it did to the task's
    /// joins and operators (an aggregate fed several rows by it) stays, or is taken back.
    pub(crate) fn settle(&mut self, ok: bool) {
        if ok {
            self.joins.forget();
        } else {
            self.joins.undo(&mut self.table_changes);
        }
        for op in &mut self.chain {
            op.settle(ok);
        }
    }

    /// One of the results a record makes independently of one another (a foreign-key join's
    /// subscribers): what it made is kept; or it failed, or made a record over
    /// [`Task::record_max`], and what it made is dropped.
    fn settle_part(&mut self, r: Result<(), RecordError>, out: &mut Outputs) -> Result<(), RecordError> {
        let max = self.record_max;
        let r = r.and_then(|()| match out.made_by_record().find(|o| o.size() > max) {
            Some(o) => Err(RecordError(format!(
                "a result for topic `{}` would be about {} bytes, over the {max} bytes the topics the task writes take (max.message.bytes, message.max.bytes or embedded.max_message_bytes)",
                o.topic(),
                o.size()
            ))),
            None => Ok(()),
        });
        if r.is_err() {
            let dropped = out.drop_record() as u64;
            self.counters.records_out = self.counters.records_out.saturating_sub(dropped);
        }
        out.keep_so_far();
        r
    }

    /// A foreign-key join's result for the row `key` (its fields `value`), joined with `right`
    /// (None: no result, a tombstone; Some(None): a left join's row without a match), marked
    /// with the offset of the row's update.
    fn foreign_result(
        &mut self,
        (key, value): (Value, Vec<Value>),
        right: Option<Option<(Value, crate::runtime::tables::TableRow)>>,
        offset: i64,
        ts: i64,
        out: &mut Outputs,
        stores: &dyn StoreRead,
    ) -> Result<(), RecordError> {
        let retract = right.is_none();
        let row = Row { key, value, joined: vec![right.flatten()], tenant: None, retract };
        self.fk = FkMarks { offset, deleted: false, ..FkMarks::default() };
        let (chain, mut cx) = self.parts(out, stores, None);
        Down::from(chain, 0).emit(row, ts, &mut cx)
    }

    /// A result of a foreign-key join at its end task ([`TaskSpec::foreign_gate`]): passed down
    /// the chain (a tombstone: the row's result deleted, if it had one) when it answers the
    /// row's latest update so far; a result of an older update (from the row's old foreign key,
    /// arriving late) is dropped.
    pub fn foreign_gate(&mut self, rec: &Record, out: &mut Outputs, stores: &dyn StoreRead) -> Result<(), RecordError> {
        let spec = self.spec.clone();
        let (Some(store), Decode::Internal { key: key_ty, .. }) = (spec.foreign_gate, &spec.main.decode) else {
            return Err(RecordError("internal: not a foreign-key join's results".into()));
        };
        let header = |name: &str| rec.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice());
        let offset = fk_offset(header(H_FK_OFFSET))?;
        // A tombstone's value is not read (an inner join's has no other side to decode).
        let (key, input) = match header(H_RETRACT) {
            Some(_) => (decode_key(rec.key.as_deref(), key_ty)?, None),
            None => {
                let input = self.decode_main(rec)?;
                (input.row.key.clone(), Some(input))
            }
        };
        self.counters.records_in += 1;
        let kb = key.key_bytes(key_ty);
        let (last, had) = match self.foreign.get(store, &kb, stores) {
            Some(b) => {
                let (last, rest) = split_offset(&b)?;
                (last, rest.first() == Some(&1))
            }
            None => (i64::MIN, false),
        };
        if offset < last {
            return Ok(());
        }
        let mut entry = offset.to_le_bytes().to_vec();
        entry.push(u8::from(input.is_some()));
        self.foreign.set(store, kb, Some(entry), rec.timestamp, &mut self.table_changes);
        if let Some(input) = input {
            let (chain, mut cx) = self.parts(out, stores, None);
            return Down::from(chain, 0).emit(input.row, input.ts, &mut cx);
        }
        if let (true, Some(sink)) = (had, spec.table_sink_spec()) {
            tombstone(out, sink, &key, None, rec.timestamp, None, spec.version);
            self.counters.records_out += 1;
        }
        Ok(())
    }

    /// How many changed entries its operators hold back until the next flush (an aggregate's
    /// changed keys or windows).
    pub(crate) fn held(&self) -> usize {
        self.chain.iter().map(|o| o.held()).sum::<usize>()
    }

    /// The most changed entries one record can make in the task's operators.
    pub(crate) fn changes_per_record(&self) -> usize {
        self.chain.iter().map(|o| o.changes_per_record()).sum::<usize>()
    }

    /// Flush the operators, in chain order: first stream time advances for each (an
    /// aggregate's window kind drops what no window can need; with `close_all`, the end of a
    /// finite input with `--close-windows-at-end`, every join and window closes), then each
    /// flushes — the aggregate's record cache (its store changes, for the changelog and the
    /// local store, and its results down the chain after it, in first-change order; then the
    /// windows stream time has passed) — after the store changes tables and joins made since
    /// the last flush. Returns the errors of rows no input record caused.
    pub fn flush(
        &mut self,
        out: &mut Outputs,
        changes: &mut Vec<Change>,
        close_all: bool,
        stores: &dyn StoreRead,
    ) -> Vec<RecordError> {
        {
            let (chain, mut cx) = self.parts(out, stores, None);
            for i in 0..chain.len() {
                let (head, rest) = chain.split_at_mut(i + 1);
                head[i].advance(close_all, &mut cx, &mut Down::after(rest, i + 1));
            }
        }
        changes.append(&mut self.table_changes);
        self.tables.flushed();
        self.foreign.flushed();
        {
            // (The stores as of the last commit: the flush's own changes are not in them yet.)
            let (chain, mut cx) = self.parts(out, stores, Some(changes));
            for i in 0..chain.len() {
                let (head, rest) = chain.split_at_mut(i + 1);
                head[i].flush(&mut cx, &mut Down::after(rest, i + 1));
            }
        }
        std::mem::take(&mut self.orphan_errors)
    }
}

/// The offset a foreign-key join's record carries (`streamc.fk.offset`).
fn fk_offset(header: Option<&[u8]>) -> Result<i64, RecordError> {
    header
        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
        .ok_or_else(|| RecordError("a foreign-key join's record without its update's offset".into()))
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
                let declared = decode_source_key(src, Some(kb), &src.value.fields[*i].1)?;
                if !declared.equals(&k) {
                    let shown = match src.key_format {
                        Some(_) => declared.to_string(),
                        None => String::from_utf8_lossy(kb).into_owned(),
                    };
                    return Err(RecordError(format!(
                        "the record key `{shown}` differs from its `{}` field `{k}`",
                        src.value.fields[*i].0
                    )));
                }
            }
            k
        }
        KeySpec::Named(_, t) => decode_source_key(src, rec.key.as_deref(), t)?,
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
    Ok(Input { row: Row { key, value: wire, joined: vec![], tenant, retract: false }, ts, offset: 0 })
}

/// A table–table join's result for a key from each table's row (`mine`, the query's own table;
/// `others`, the joined tables in join order), None when there is none. Each join takes the
/// result of the joins before it as its left side, as chained KTable joins do: where that
/// result is missing and an outer join still gives one, every earlier table's fields are null
/// (the own table's key field still holds the key).
/// Whether a key has a table–table join result, from which tables hold it (the own table's,
/// then the joined ones in join order): each join over the result before it.
fn mutual_present(m: &MutualJoin, mine: bool, others: &[Option<TableRow>]) -> bool {
    m.sides.iter().zip(others).fold(mine, |present, (j, other)| match j.kind {
        MutualKind::Inner => present && other.is_some(),
        MutualKind::Left => present,
        MutualKind::Outer => present || other.is_some(),
    })
}

fn mutual_row(
    m: &MutualJoin,
    own: &hir::Source,
    key: &Value,
    tenant: Option<&Tenant>,
    mine: Option<TableRow>,
    others: Vec<Option<TableRow>>,
) -> Option<Row> {
    let mut present = mine.is_some();
    let mut value = mine;
    let mut joined: Vec<Option<(Value, TableRow)>> = Vec::with_capacity(others.len());
    for (j, other) in m.sides.iter().zip(others) {
        let next = match j.kind {
            MutualKind::Inner => present && other.is_some(),
            MutualKind::Left => present,
            MutualKind::Outer => present || other.is_some(),
        };
        if !present {
            value = None;
            joined.iter_mut().for_each(|s| *s = None);
        }
        joined.push(other.map(|r| (key.clone(), r)));
        present = next;
    }
    if !present {
        return None;
    }
    let value = match value {
        Some(r) => r.as_ref().clone(),
        None => {
            let mut v = vec![Value::Null; own.value.fields.len()];
            if let KeySpec::Field(i) = own.key {
                v[i] = key.clone();
            }
            v
        }
    };
    Some(Row { key: key.clone(), value, joined, tenant: tenant.cloned(), retract: false })
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
                let ops: Vec<&dyn Stateful> = task.operators().collect();
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
