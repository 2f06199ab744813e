//! The aggregate operator (`group by … [window …] aggregate { … }`): its record cache, its
//! window kind ([`Windowing`], one type per kind in `runtime/window/`), and its one store.
//!
//! A record updates the entries of its key's windows in the cache. A flush writes every entry
//! changed since the last flush to the store (one change per key and window, in first-change
//! order), hands the task the result rows to emit (`emit changes`), and closes the windows
//! stream time has passed, less the grace period (their result rows with `emit final`, and a
//! store tombstone). A session merged into another is deleted from the store and, if it was
//! emitted, downstream. The task runs what it gets back down the query's chain after the
//! aggregate (`TaskSpec::post`), in order.

use std::sync::Arc;

use crate::ast::EmitMode;
use crate::eval::{eval, Row, Tenant};
use crate::plan::physical::{AggSpec, Op, TaskSpec};
use crate::runtime::agg::{
    decode_entry, encode_entry, key_part, result_values, retract_state, store_key, store_key_into, AggArgs, AggEntry,
    Cache, Slot, Win, SLIDE_RECORDS,
};
use crate::runtime::op::{scoped, Change, RecordError, Stateful, StoreRead};
use crate::runtime::ops::group_table::encode_row;
use crate::runtime::ops::sink::PostSinks;
use crate::runtime::ops::{Before, Ctx, Down, Operator};
use crate::runtime::tenant;
use crate::runtime::window::{self, Cx, Windowing};
use crate::value::Value;
use rustc_hash::FxHashMap;

/// What a flush of the aggregate gives the task, in order.
pub(crate) enum Emitted {
    /// A result row at its time (the entry's latest event time), for the chain after the
    /// aggregate, with the result it replaces when that is tracked.
    Row(Row, i64, Before),
    /// A result that could not be computed.
    Error(RecordError),
    /// A merged-away session, deleted downstream: a tombstone for its key at the query's sink,
    /// the session's bounds in headers; or a grouped table's group left with no rows (no
    /// bounds).
    Deleted { key: Value, start: i64, end: i64, ts: i64, tenant: Option<Tenant> },
}

/// The aggregate of a task.
pub(crate) struct Aggregate {
    spec: AggSpec,
    /// Its one store.
    stores: [usize; 1],
    /// Keys are scoped to their tenant (a tenant-scoped task).
    tenant_scoped: bool,
    cache: Cache,
    windowing: Box<dyn Windowing>,
    /// What the last flush emitted (a buffer kept for reuse).
    emitted: Vec<Emitted>,
    /// The sinks after it, where a deleted result is deleted.
    sinks: Arc<PostSinks>,
    /// The group values and aggregate arguments of the record being added (buffers reused).
    group: Vec<Value>,
    args: AggArgs,
    /// A grouped table's refused rows changed since the last flush (see [`refusal_key`]).
    refused: FxHashMap<Vec<u8>, i64>,
    /// `streamc trace`: the store key of each result in `emitted`, in order.
    traced: std::collections::VecDeque<Vec<u8>>,
    /// Results go with whether the ones they replace were sent ([`Before`]), worked out on the
    /// chain after the aggregate kept here: with a `where` after the aggregate, `emit changes`,
    /// no session windows (whose results change keys), and nothing after it but `where`,
    /// `select` and sinks.
    befores: Option<Vec<Op>>,
}

/// About the memory one clean entry of a table aggregate's record cache holds (its key, group
/// values and states as `Value`s, the maps' slots): 200,000 entries took about 90 MB more than
/// 20,000 in a run over 300,000 keys.
const RECORD_CACHE_ENTRY_BYTES: usize = 512;

/// The entries a table aggregate's record cache keeps, for a task's share of
/// `statestore.cache.max.bytes`: a quarter of it, between 1,000 and 200,000 entries.
pub(crate) fn record_cache_entries(cache_share: usize) -> usize {
    (cache_share / 4 / RECORD_CACHE_ENTRY_BYTES).clamp(1_000, 200_000)
}

/// The most changed entries a task's aggregate holds back before it commits on Kafka
/// ([`crate::runtime::run::TaskRun::cache_full`]): its record cache's entries, at most
/// [`CHANGED_ENTRIES_MAX`].
pub(crate) fn changed_entries_max(cache_share: usize) -> usize {
    record_cache_entries(cache_share).min(CHANGED_ENTRIES_MAX)
}

/// Each changed entry is, at the commit, a result and a changelog record, encoded and then
/// copied into the producer's queue until the broker has them (about 1.5 KB in all): a commit
/// of 200,000 of them was most of a 335 MB peak in a 300,000-trade stats run (the 1 M-key
/// first run: 731 MB); with at most 25,000, 125 MB and 272 MB at the same speed. About what
/// Kafka Streams' default 10 MB record cache holds before it evicts and sends.
const CHANGED_ENTRIES_MAX: usize = 25_000;

impl Aggregate {
    /// The aggregate of a task, if its sub-topology has one.
    pub(crate) fn new(spec: &TaskSpec, sinks: Arc<PostSinks>) -> Option<Aggregate> {
        let agg = spec.agg.clone()?;
        let windowing = window::for_agg(&agg);
        let mut cache = Cache::new(&agg);
        // One input record can bring several rows (an `explode`, a stream–stream join before
        // it): the windows a record changes are journaled, to be put back if it fails. (Not
        // session or sliding windows, whose kinds keep indexes of their own.)
        let several = spec.ops.iter().any(|op| matches!(op, Op::Explode { .. } | Op::JoinStream { .. }));
        let fixed = !matches!(
            agg.window.map(|w| w.kind),
            Some(crate::ast::WindowKind::Session { .. } | crate::ast::WindowKind::Sliding { .. })
        );
        if several && fixed && !agg.table {
            cache.journal = Some(Default::default());
        }
        let sessions = matches!(agg.window.map(|w| w.kind), Some(crate::ast::WindowKind::Session { .. }));
        let befores = (agg.emit == EmitMode::Changes
            && !sessions
            && spec.post.iter().any(|op| matches!(op, Op::Filter(_)))
            && spec.post.iter().all(|op| matches!(op, Op::Filter(_) | Op::Map(_) | Op::Sink(_))))
        .then(|| spec.post.clone());
        Some(Aggregate {
            stores: [agg.store],
            spec: agg,
            tenant_scoped: spec.tenant,
            cache,
            windowing,
            emitted: Vec::new(),
            sinks,
            group: Vec::new(),
            args: Vec::new(),
            refused: FxHashMap::default(),
            traced: Default::default(),
            befores,
        })
    }

    /// Add a record: its group key and aggregate arguments evaluated, then its windows updated
    /// (a grouped table's row taken back: taken out of its group instead). The task's stream
    /// time moves to the record's time if it is later.
    fn add(&mut self, row: Row, ts: i64, cx: &mut Ctx) -> Result<(), RecordError> {
        let kb = match self.evaluate(&row) {
            Ok(kb) => kb,
            // A grouped table's row taken back whose group or arguments cannot be evaluated
            // was refused the same way when it came (evaluation is deterministic): there is
            // nothing to take back.
            Err(_) if row.retract && self.spec.table => return Ok(()),
            Err(e) => return Err(e),
        };
        // The group key is in the store key, in the entry (its group values) and in the result:
        // a changelog record or result that no topic the task writes would take fails every
        // commit, so the record is refused here.
        let stored = 2 * kb.len() + crate::runtime::topics::RECORD_OVERHEAD;
        let too_large = (stored > cx.record_max).then(|| {
            RecordError(format!(
                "its group key is {} bytes: the aggregate's changelog records and results hold it twice, about {stored} bytes, over the {} bytes the topics it writes take (max.message.bytes, message.max.bytes or embedded.max_message_bytes)",
                kb.len(),
                cx.record_max
            ))
        });
        if let Some(e) = too_large {
            // As with an evaluation error: a grouped table's row taken back was refused the
            // same way when it came (its key is the same), so there is nothing to take back.
            return if row.retract && self.spec.table { Ok(()) } else { Err(e) };
        }
        *cx.stream_time = (*cx.stream_time).max(ts);
        if !self.spec.table {
            let mut wcx = window_cx(&self.spec, &mut self.cache, cx);
            return self.windowing.add(&mut wcx, &self.group, &kb, ts, &self.args);
        }
        // A grouped table: a row this aggregate refused is remembered, and taking it back
        // takes nothing (its table task recorded it as the key's row all the same).
        let rk = refusal_key(&kb, &row);
        let refused = self.refusals(&rk, cx)?;
        if row.retract {
            if refused > 0 {
                self.set_refusals(rk, refused - 1, ts, cx);
                return Ok(());
            }
            return self.take_back(&kb, ts, cx);
        }
        let mut wcx = window_cx(&self.spec, &mut self.cache, cx);
        let r = self.windowing.add(&mut wcx, &self.group, &kb, ts, &self.args);
        if r.is_err() {
            self.set_refusals(rk, refused + 1, ts, cx);
        }
        r
    }

    /// How many rows like this one (the key `rk` of [`refusal_key`]) the grouped table's
    /// aggregate refused and were not taken back yet.
    fn refusals(&self, rk: &[u8], cx: &Ctx) -> Result<i64, RecordError> {
        let bytes = match self.refused.get(rk) {
            Some(n) => return Ok(*n),
            None => cx.stores.get(self.spec.store, rk),
        };
        match bytes.as_deref().map(<[u8; 8]>::try_from) {
            None => Ok(0),
            Some(Ok(b)) => Ok(i64::from_le_bytes(b)),
            Some(Err(_)) => Err(RecordError("damaged state entry: a refusal count is not 8 bytes".into())),
        }
    }

    fn set_refusals(&mut self, rk: Vec<u8>, n: i64, ts: i64, cx: &mut Ctx) {
        cx.changes.push(Change {
            store: self.spec.store,
            key: rk.clone(),
            value: (n > 0).then(|| n.to_le_bytes().to_vec()),
            timestamp: ts,
            existed: true,
        });
        self.refused.insert(rk, n);
    }

    /// A row's group values and aggregate arguments, into the buffers kept for the next
    /// record; its key's bytes as the store holds them.
    fn evaluate(&mut self, row: &Row) -> Result<Vec<u8>, RecordError> {
        let agg = &self.spec;
        let err = |e: String| RecordError(e);
        let (group, args) = (&mut self.group, &mut self.args);
        group.clear();
        for g in &agg.group {
            group.push(eval(g, row, &[]).map_err(err)?);
        }
        if group.iter().any(Value::is_null) {
            return Err(RecordError("the group key is null".into()));
        }
        let kb = match group.as_slice() {
            [one] => one.key_bytes(&agg.key_ty),
            _ => Value::List(Arc::new(group.clone())).key_bytes(&agg.key_ty),
        };
        args.resize_with(agg.aggs.len(), Vec::new);
        for (a, v) in agg.aggs.iter().zip(args.iter_mut()) {
            v.clear();
            for e in &a.args {
                v.push(eval(e, row, &[]).map_err(err)?);
            }
        }
        scoped(self.tenant_scoped, row.tenant.as_ref(), kb)
    }

    /// Take a grouped table's old row (its arguments in `self.args`) out of its group at time
    /// `ts`; a group left with no rows is deleted at the next flush.
    fn take_back(&mut self, kb: &[u8], ts: i64, cx: &mut Ctx) -> Result<(), RecordError> {
        let agg = &self.spec;
        let id = self.cache.slots.key_id(kb);
        let w = self.cache.slots.win(id, 0);
        if !self.cache.slots.contains(w) {
            let entry = match cx.stores.get(agg.store, &store_key(kb, None)) {
                Some(b) => Some(decode_entry(&b, agg).map_err(RecordError)?),
                None => None,
            };
            let stored = entry.is_some();
            self.cache.slots.insert(w, Slot::new(entry, stored));
        }
        let Some(slot) = self.cache.slots.get_mut(w) else { return Ok(()) };
        let entry =
            match &mut slot.entry {
                Some(e) if !slot.deleted && e.rows > 0 => e,
                _ => return Err(RecordError(
                    "the group holds no row to take back (under at_least_once, a repartition record delivered twice)"
                        .into(),
                )),
            };
        // All or nothing: the states as they were, to put back if an aggregate fails.
        let before = entry.states.clone();
        for ((a, st), argv) in agg.aggs.iter().zip(entry.states.iter_mut()).zip(&self.args) {
            if let Err(e) = retract_state(a, st, argv) {
                entry.states = before;
                return Err(RecordError(e));
            }
        }
        entry.max_ts = entry.max_ts.max(ts);
        // A group that loses its last row stays, with its aggregates as taking the rows back
        // left them (count 0, sum 0), as Kafka Streams' `KGroupedTable#aggregate` and ksqlDB
        // keep it: a `where` after the aggregate drops it downstream if wanted.
        entry.rows -= 1;
        if slot.touch() {
            self.cache.dirty.push(w);
        }
        if crate::runtime::lineage::on() {
            crate::runtime::lineage::unfold(agg.store, &store_key(kb, None));
        }
        Ok(())
    }

    /// Before a flush: with `close_all` (`--close-windows-at-end`) stream time moves past every
    /// window, for good; the window kind drops what no window can need any more.
    fn advance_time(&mut self, close_all: bool, cx: &mut Ctx) {
        // (A task that has seen no record has no window to close: its stream time stays unset,
        // so a later run's records are not all late.)
        if close_all && self.spec.window.is_some() && *cx.stream_time != i64::MIN {
            *cx.stream_time = i64::MAX;
        }
        let mut wcx = window_cx(&self.spec, &mut self.cache, cx);
        self.windowing.advance(&mut wcx);
    }
}

/// What the window kind works with: the aggregate's spec and cache, and the task's context.
fn window_cx<'a>(agg: &'a AggSpec, cache: &'a mut Cache, cx: &'a mut Ctx) -> Cx<'a> {
    Cx {
        agg,
        cache,
        stream_time: *cx.stream_time,
        counters: &mut *cx.counters,
        late_reason: &mut *cx.late_reason,
        changes: &mut *cx.changes,
        stores: cx.stores,
    }
}

impl Aggregate {
    /// Where windows close at `stream_time` (past every window without one).
    fn close_time(&self, stream_time: i64) -> i64 {
        match &self.spec.window {
            Some(w) => stream_time.saturating_sub(w.grace.0),
            None => i64::MIN,
        }
    }

    /// Flush the changed entries `dirty` of the record cache at `stream_time` (in first-change
    /// order): store changes to `changes`, what to emit to `emitted`.
    fn flush_dirty(
        &mut self,
        dirty: &[Win],
        stream_time: i64,
        stores: &dyn StoreRead,
        changes: &mut Vec<Change>,
        emitted: &mut Vec<Emitted>,
    ) {
        let agg = &self.spec;
        let close = self.close_time(stream_time);
        let emit_changes = agg.emit == EmitMode::Changes;
        let scoped = self.tenant_scoped;
        for &w in dirty {
            let sk = self.cache.slots.store_key(w);
            let Some(slot) = self.cache.slots.get_mut(w) else { continue };
            slot.dirty = false;
            if slot.deleted {
                // A session merged into another: deleted from the store and downstream.
                let (stored, was_emitted) = (slot.stored, slot.emitted);
                let old = self.cache.slots.remove(w).and_then(|s| s.entry);
                let ts = old.as_ref().map(|e| e.max_ts).unwrap_or(0);
                // The session as it was last sent (it may have grown since).
                if let (Some(bounds), true, Some(old)) = (was_emitted, emit_changes, old) {
                    if crate::runtime::lineage::on() {
                        self.traced.push_back(sk.clone());
                    }
                    emitted.push(deleted(&old, bounds, scoped, &sk));
                }
                if stored {
                    changes.push(Change { store: agg.store, key: sk, value: None, timestamp: ts, existed: true });
                }
                continue;
            }
            let Some(entry) = slot.entry.as_ref() else { continue };
            if emit_changes {
                let bounds = (entry.start, entry.end);
                // Keyed by window, a session sent with other bounds is another key: delete it.
                if let (true, Some(sent)) = (agg.windowed_key, slot.emitted.filter(|b| *b != bounds)) {
                    if crate::runtime::lineage::on() {
                        self.traced.push_back(sk.clone());
                    }
                    emitted.push(deleted(entry, sent, scoped, &sk));
                }
                slot.emitted = Some(bounds);
                let mut r = result(agg, entry, tenant_of(scoped, &sk));
                if let (Some(post), Emitted::Row(_, _, before)) = (&self.befores, &mut r) {
                    // The result last sent: of the entry the store holds (the last commit's).
                    *before = match slot.stored.then(|| stores.get(agg.store, &sk)).flatten() {
                        None => Before::NotSent,
                        Some(b) => match decode_entry(&b, agg).map(|e| result(agg, &e, tenant_of(scoped, &sk))) {
                            Ok(Emitted::Row(old, _, _)) => crate::runtime::ops::sent(post, old),
                            _ => Before::Unknown,
                        },
                    };
                }
                if crate::runtime::lineage::on() {
                    self.traced.push_back(sk.clone());
                }
                emitted.push(r);
            }
            // A window that closes in this flush and was never stored needs neither a store
            // write nor a tombstone: the state after the commit does not hold it.
            if slot.stored || agg.closes_at(entry.end) > close {
                let existed = std::mem::replace(&mut slot.stored, true);
                let value = slot.entry.as_ref().map(|e| encode_entry(e, agg));
                let timestamp = slot.entry.as_ref().map_or(0, |e| e.max_ts);
                changes.push(Change { store: agg.store, key: sk, value, timestamp, existed });
            }
        }
    }

    /// After a flush: the cache keeps clean entries for reuse, bounded by a quarter of the
    /// task's share of `statestore.cache.max.bytes` (windows stay: they expire by time).
    fn trim_cache(&mut self, cache_share: usize) {
        let most = record_cache_entries(cache_share);
        if self.spec.window.is_none() && self.cache.slots.len() > most {
            self.cache.slots.retain(|s| s.dirty);
        }
        // No list holds a window of a key that lost its last one: its id can go.
        self.cache.slots.sweep();
    }

    /// Close window `w`: its result (`emit final`), and its deletion from the store and
    /// changelog if it was stored.
    fn close_window(&mut self, w: Win, emitted: &mut Vec<Emitted>, changes: &mut Vec<Change>) {
        let agg = &self.spec;
        let sk = self.cache.slots.store_key(w);
        self.windowing.closed(&sk);
        let (entry, stored) = match self.cache.slots.remove(w) {
            Some(Slot { entry: Some(e), stored, .. }) => (Some(e), stored),
            _ => (None, false),
        };
        if agg.emit == EmitMode::Final {
            if let Some(e) = &entry {
                if crate::runtime::lineage::on() {
                    self.traced.push_back(sk.clone());
                }
                emitted.push(result(agg, e, tenant_of(self.tenant_scoped, &sk)));
            }
        }
        // Expired by stream time: deleted locally and in the changelog (a tombstone).
        if stored {
            changes.push(Change {
                store: agg.store,
                key: sk,
                value: None,
                timestamp: entry.map(|e| e.max_ts).unwrap_or(0),
                existed: true,
            });
        }
    }
}

/// The tenant of a store key (None in a task that is not tenant-scoped).
fn tenant_of(tenant_scoped: bool, sk: &[u8]) -> Option<Tenant> {
    if !tenant_scoped {
        return None;
    }
    tenant::split(key_part(sk)).map(|(t, _)| Arc::from(t))
}

impl Stateful for Aggregate {
    fn stores(&self) -> &[usize] {
        &self.stores
    }

    /// Windows (and a sliding window's records) are keyed by the length-prefixed scoped key.
    fn key_tenant<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        let key = key.strip_prefix(SLIDE_RECORDS).or_else(|| key.strip_prefix(REFUSED)).unwrap_or(key);
        tenant::split(key_part(key)).map(|(t, _)| t)
    }

    /// Every open window lives in the cache: a window not in it does not exist, so the hot path
    /// never asks the store. An unwindowed aggregate reads its entries from the store on demand.
    fn restore(&mut self, stores: &dyn StoreRead) {
        self.cache.windows.clear();
        let agg = &self.spec;
        if agg.window.is_none() {
            return;
        }
        for (k, v) in stores.entries(agg.store) {
            if self.windowing.restore_own(&k, &v, agg) {
                continue;
            }
            if let Ok(e) = decode_entry(&v, agg) {
                let w = self.cache.slots.win_of(&k);
                self.cache.windows.insert(agg.closes_at(e.end), w);
                self.windowing.restored(&k, &e);
                self.cache.slots.insert(w, Slot::new(Some(e), true));
            }
        }
        self.windowing.restored_all();
    }
}

impl Operator for Aggregate {
    fn held(&self) -> usize {
        // Its changed entries (keys, or windows): what a commit interval piles up, each a result
        // and a changelog record at the commit.
        self.cache.dirty.len()
    }

    fn changes_per_record(&self) -> usize {
        self.windowing.windows_per_record()
    }

    fn settle(&mut self, ok: bool) {
        self.cache.settle(ok);
    }

    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, _down: &mut Down) -> Result<(), RecordError> {
        self.add(row, ts, cx)
    }

    fn advance(&mut self, close_all: bool, cx: &mut Ctx, _down: &mut Down) {
        self.advance_time(close_all, cx);
    }

    /// The record cache's changes to the store, and its results down the rest of the query
    /// (`TaskSpec::post`), in order; an error computing or emitting one is reported with the
    /// commit.
    /// The record cache flushed, then the windows stream time has passed closed; what they
    /// emit goes downstream [`FLUSH_CHUNK`] results at a time, so that a flush of many changed
    /// entries never holds all their results at once.
    fn flush(&mut self, cx: &mut Ctx, down: &mut Down) {
        // The refusals changed are in the store from now on.
        self.refused.clear();
        let mut emitted = std::mem::take(&mut self.emitted);
        let dirty = std::mem::take(&mut self.cache.dirty);
        for chunk in dirty.chunks(FLUSH_CHUNK) {
            self.flush_dirty(chunk, *cx.stream_time, cx.stores, cx.changes, &mut emitted);
            self.send(&mut emitted, cx, down);
        }
        let mut dirty = dirty;
        dirty.clear();
        self.cache.dirty = dirty;
        if self.spec.window.is_some() {
            let close = self.close_time(*cx.stream_time);
            while let Some((_, wins)) = self.cache.pop_due(close) {
                for w in wins {
                    self.close_window(w, &mut emitted, cx.changes);
                }
                if emitted.len() >= FLUSH_CHUNK {
                    self.send(&mut emitted, cx, down);
                }
            }
            self.send(&mut emitted, cx, down);
        }
        self.trim_cache(cx.stores.cache_share());
        self.emitted = emitted;
    }
}

impl Aggregate {
    /// Results of a flush sent downstream, in order.
    fn send(&mut self, emitted: &mut Vec<Emitted>, cx: &mut Ctx, down: &mut Down) {
        for e in emitted.drain(..) {
            if let Some(sk) = self.traced.pop_front() {
                crate::runtime::lineage::result_of(self.spec.store, &sk);
            }
            match e {
                Emitted::Row(row, ts, before) => {
                    cx.before = before;
                    *cx.result_window = match row.value.as_slice() {
                        [Value::Ts(s), Value::Ts(e), ..] if self.spec.window.is_some() => Some((*s, *e)),
                        _ => None,
                    };
                    if let Err(e) = down.emit(row, ts, cx) {
                        cx.orphans.push(e);
                    }
                    cx.before = Before::Unknown;
                }
                Emitted::Error(e) => cx.orphans.push(e),
                Emitted::Deleted { key, start, end, ts, tenant } => {
                    let window = self.spec.window.is_some().then_some((start, end));
                    self.sinks.delete(&key, window, ts, tenant.as_deref(), cx)
                }
            }
        }
    }
}

/// Results a flush holds at most before it sends them downstream.
const FLUSH_CHUNK: usize = 1024;

/// Store-key prefix of a grouped table's refused rows (after it: the group's key as in an
/// entry's store key, then a hash of the row). Entry keys start with a length that is never this.
const REFUSED: &[u8] = b"\xff\xff\xff\xfdx";

/// Where a grouped table's aggregate counts the rows like `row` it refused in the group of key
/// bytes `kb`: a row is known by a hash (FNV-1a, 64 bits) of its encoding — the same for the row
/// and for that row taken back, which its table task sends as it kept it.
fn refusal_key(kb: &[u8], row: &Row) -> Vec<u8> {
    let mut k = REFUSED.to_vec();
    store_key_into(&mut k, kb, None);
    k.extend_from_slice(&crate::runtime::chaos::fnv(&encode_row(row)).to_be_bytes());
    k
}

/// The deletion downstream of `e`'s result as it was sent, with the bounds `(start, end)`.
fn deleted(e: &AggEntry, (start, end): (i64, i64), scoped: bool, sk: &[u8]) -> Emitted {
    Emitted::Deleted { key: group_value(&e.group), start, end, ts: e.max_ts, tenant: tenant_of(scoped, sk) }
}

/// The key of a result: the group value, or the list of group values.
fn group_value(group: &[Value]) -> Value {
    if group.len() == 1 {
        group[0].clone()
    } else {
        Value::List(Arc::new(group.to_vec()))
    }
}

/// The result row of an entry: window bounds (windowed), the group values, then each
/// aggregate's result.
fn result(agg: &AggSpec, e: &AggEntry, tenant: Option<Tenant>) -> Emitted {
    let value = match result_values(agg, e) {
        Ok(v) => v,
        Err(e) => return Emitted::Error(RecordError(e)),
    };
    Emitted::Row(
        Row { key: group_value(&e.group), value, joined: vec![], tenant, retract: false },
        e.max_ts,
        Before::Unknown,
    )
}

#[cfg(test)]
mod tests {
    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    /// The changed entries an aggregate holds back count each changed window (a hopping
    /// window's record changes several), are let go of by a flush, and one record's most is
    /// its windows per record.
    #[test]
    fn changed_windows_are_held_until_a_flush_and_a_hopping_record_changes_its_hops() {
        let program = |window: &str| {
            format!(
                r#"
stream trades from "trades" {{
  key    ticker
  value  json {{ ticker: string, size: int }}
}}
query per_ticker {{
  from trades
  group by ticker
  window {window}
  aggregate {{ n = count() }}
  emit changes
  to "counts"
}}
"#
            )
        };
        let mut h = Harness::new(&program("hopping 5s advance 1s"), 0);
        let mut chain = h.chain();
        let at = h.spec.ops.len() - 1;
        let agg = chain[at].as_mut();
        assert_eq!(agg.changes_per_record(), 5);
        let trade = |t: &str| row(Value::str(t), vec![Value::str(t), Value::Int(1)]);
        h.send(agg, trade("A"), 10_000).unwrap();
        assert_eq!(agg.held(), 5, "one record in five hopping windows");
        h.send(agg, trade("A"), 10_500).unwrap();
        assert_eq!(agg.held(), 5, "the same five windows, changed again");
        h.send(agg, trade("B"), 10_500).unwrap();
        assert_eq!(agg.held(), 10);
        h.flush(agg);
        assert_eq!(agg.held(), 0, "a flush lets them all go");
        let h = Harness::new(&program("hopping 1d advance 1s"), 0);
        let mut chain = h.chain();
        let at = h.spec.ops.len() - 1;
        assert_eq!(chain[at].as_mut().changes_per_record(), 86_400);
        let h = Harness::new(&program(r#"hopping 7d advance 1d tz "America/New_York""#), 0);
        let mut chain = h.chain();
        let at = h.spec.ops.len() - 1;
        assert_eq!(chain[at].as_mut().changes_per_record(), 7, "days in a time zone");
        let h = Harness::new(&program("tumbling 10s"), 0);
        let mut chain = h.chain();
        let at = h.spec.ops.len() - 1;
        assert_eq!(chain[at].as_mut().changes_per_record(), 1);
    }

    /// Rows are folded into their group's window as they come; a flush (a commit) sends one
    /// result per window changed since the last, with the window's fields, and writes the state
    /// of the windows still open; a record too late for its window is counted, not folded.
    #[test]
    fn a_flush_sends_each_changed_window_once_and_late_records_are_counted() {
        let program = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, size: int }
}
query per_ticker {
  from trades
  group by ticker
  window tumbling 10s
  aggregate { n = count(), volume = sum(size) }
  emit changes
  to "volumes"
}
"#;
        let mut h = Harness::new(program, 0);
        let mut chain = h.chain();
        let at = h.spec.ops.len() - 1;
        let agg = chain[at].as_mut();
        let trade = |t: &str, size: i64| row(Value::str(t), vec![Value::str(t), Value::Int(size)]);
        for (t, size, ts) in [("A", 1, 1_000), ("A", 2, 9_999), ("B", 5, 3_000), ("A", 4, 10_000)] {
            assert!(h.send(agg, trade(t, size), ts).unwrap().is_empty(), "nothing leaves before a flush");
        }
        let mut results: Vec<(String, Vec<Value>)> =
            h.flush(agg).into_iter().map(|(r, _)| (format!("{:?}", r.key), r.value)).collect();
        results.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        let window = |s: i64| vec![Value::Ts(s), Value::Ts(s + 10_000)];
        let with = |w: Vec<Value>, rest: Vec<Value>| w.into_iter().chain(rest).collect::<Vec<_>>();
        assert_eq!(
            results.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
            [
                with(window(0), vec![Value::str("A"), Value::Int(2), Value::Int(3)]),
                with(window(10_000), vec![Value::str("A"), Value::Int(1), Value::Int(4)]),
                with(window(0), vec![Value::str("B"), Value::Int(1), Value::Int(5)]),
            ]
        );
        // Stream time (10 s) closed both first windows (no grace) before the flush: only the
        // open one's state is written; a window that opened and closed between two flushes
        // writes none.
        let written: Vec<(Vec<u8>, bool)> = h.changes.iter().map(|c| (c.key.clone(), c.value.is_some())).collect();
        assert_eq!(written.len(), 1, "{written:?}");
        assert!(written[0].0.starts_with(b"\0\0\0\x01A") && written[0].1, "{written:?}");
        // Stream time is 10 s: a record of the first window (no grace) is late.
        assert!(h.send(agg, trade("A", 100), 500).unwrap().is_empty());
        assert!(h.flush(agg).is_empty(), "nothing changed");
        assert_eq!(h.counters.late, 1);
    }
}
