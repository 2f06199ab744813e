//! Stream–stream joins, one operator per joined stream, with Kafka Streams' semantics
//! (`JoinWindows.ofTimeDifferenceAndGrace(D, grace)`, with `before`/`after` bounds): each side
//! keeps its records for `before + after + grace` of its own stream time, mirrored in two
//! changelogged stores (`StreamInput`'s `left_store` and `right_store`). A record — however
//! late — joins every record the other side still keeps within its bounds (a main-side record at
//! `t` the other side's in `[t − before, t + after]`). A left join's main-side record with no
//! match is passed on with a null other side at once if its window already closed, otherwise
//! once stream time passes its time + after + grace (unless a match came first), at the next
//! pass over the pending records that Kafka Streams' gate allows (see `closed_pending`). The
//! task runs the joined rows down the rest of its operator chain.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::eval::Row;
use crate::format::decode_visible;
use crate::format::json::write_row;
use crate::plan::physical::{StreamInput, TaskSpec};
use crate::runtime::agg::{key_part, store_key};
use crate::runtime::lineage;
use crate::runtime::op::{Change, Stateful, StoreRead};
use crate::runtime::wire::{decode_key, split_wire, unscope};
use crate::value::{decode_record, Value};

/// The stream–stream joins of a task.
pub(crate) struct StreamJoins {
    /// Per joined stream.
    sides: Vec<JoinState>,
    /// Number of the next main-side row stored (committed).
    pub(crate) seq: u64,
    spec: Arc<TaskSpec>,
    /// Per join: its main side's store, then its joined stream's.
    stores: Vec<usize>,
    /// What the record being processed stored and matched, to take back if it fails (a record
    /// is applied all or nothing): see [`StreamJoins::undo`].
    journal: Vec<Undo>,
}

/// Take the entry at (`t`, `off`) of key `kb` out of one side's rows.
fn unstore<E>(rows: &mut FxHashMap<Vec<u8>, BTreeMap<(i64, u64), E>>, kb: &[u8], t: i64, off: u64) {
    if let Some(m) = rows.get_mut(kb) {
        m.remove(&(t, off));
        if m.is_empty() {
            rows.remove(kb);
        }
    }
}

/// One change a record made to a join's state, as [`StreamJoins::undo`] takes it back.
enum Undo {
    /// A row stored at (key, time, number) on the main side (`main`) or the joined stream's,
    /// pending or kept for expiry as said; the pass gate, and the main side's row counter, as
    /// they were before.
    Stored {
        side: usize,
        main: bool,
        kb: Vec<u8>,
        t: i64,
        off: u64,
        pending: bool,
        expiry: bool,
        seq: Option<u64>,
        min_time: i64,
    },
    /// A pending main-side row it matched.
    MatchedLeft { side: usize, kb: Vec<u8>, t: i64, off: u64 },
    /// A pending record of the joined stream it matched.
    MatchedRight { side: usize, kb: Vec<u8>, t: i64, off: u64 },
}

impl StreamJoins {
    pub(crate) fn new(spec: Arc<TaskSpec>) -> StreamJoins {
        let stores = spec.streams.iter().flat_map(|si| [si.left_store, si.right_store]).collect();
        let sides = spec.streams.iter().map(|_| JoinState::default()).collect();
        StreamJoins { sides, seq: 0, spec, stores, journal: Vec::new() }
    }

    /// The record being processed is through: what it did stays.
    pub(crate) fn forget(&mut self) {
        self.journal.clear();
    }

    /// The record being processed failed: every row it stored is deleted and every pending
    /// row it matched is pending again, in its join's state and (by changes after its own) in
    /// the stores. What its time did (expiry, a pass over pending rows) is not its own and stays.
    pub(crate) fn undo(&mut self, changes: &mut Vec<Change>) {
        let spec = self.spec.clone();
        while let Some(u) = self.journal.pop() {
            match u {
                Undo::Stored { side, main, kb, t, off, pending, expiry, seq, min_time } => {
                    let (si, js) = (&spec.streams[side], &mut self.sides[side]);
                    if main {
                        unstore(&mut js.left, &kb, t, off);
                    } else {
                        unstore(&mut js.right, &kb, t, off);
                    }
                    let (waiting, expiring, store) = match main {
                        true => (&mut js.pending, &mut js.main_expiry, si.left_store),
                        false => (&mut js.other_pending, &mut js.other_expiry, si.right_store),
                    };
                    let at = (t, kb, off);
                    if pending {
                        waiting.remove(&at);
                    }
                    if expiry {
                        expiring.remove(&at);
                    }
                    js.min_time = min_time;
                    if let Some(seq) = seq {
                        self.seq = seq;
                    }
                    let key = join_store_key(&at.1, t, off);
                    changes.push(Change { store, key, value: None, timestamp: t, existed: true });
                }
                Undo::MatchedLeft { side, kb, t, off } => {
                    let (si, js) = (&spec.streams[side], &mut self.sides[side]);
                    let Some(e) = js.left.get_mut(&kb).and_then(|m| m.get_mut(&(t, off))) else { continue };
                    e.matched = false;
                    let value = Some(encode_left(&e.row, false, si));
                    let key = join_store_key(&kb, t, off);
                    js.pending.insert((t, kb, off));
                    changes.push(Change { store: si.left_store, key, value, timestamp: t, existed: true });
                }
                Undo::MatchedRight { side, kb, t, off } => {
                    let (si, js) = (&spec.streams[side], &mut self.sides[side]);
                    let Some(e) = js.right.get_mut(&kb).and_then(|m| m.get_mut(&(t, off))) else { continue };
                    e.matched = false;
                    let value = encode_right(e, si);
                    let key = join_store_key(&kb, t, off);
                    js.other_pending.insert((t, kb, off));
                    changes.push(Change { store: si.right_store, key, value, timestamp: t, existed: true });
                }
            }
        }
    }
}

impl Stateful for StreamJoins {
    fn stores(&self) -> &[usize] {
        &self.stores
    }

    /// Both sides are keyed by the length-prefixed scoped key, then time and offset.
    fn key_tenant<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        crate::runtime::tenant::split(key_part(key)).map(|(t, _)| t)
    }

    /// Rebuild both sides of every join from their stores.
    fn restore(&mut self, stores: &dyn StoreRead) {
        let spec = self.spec.clone();
        for (side, si) in spec.streams.iter().enumerate() {
            let js = &mut self.sides[side];
            *js = JoinState { time: js.time, min_time: js.min_time, ..JoinState::default() };
            let lefts = stores.entries(si.left_store);
            js.main_time =
                lefts.iter().filter_map(|(k, _)| join_key_parts(k)).map(|(_, t, _)| t).max().unwrap_or(i64::MIN);
            for (k, v) in lefts {
                let Some((kb, t, off)) = join_key_parts(&k) else { continue };
                if let Ok(mut e) = decode_left(&v, kb, si, spec.tenant) {
                    // Past its side's retention: kept only while a null row is still owed.
                    e.expired = !kept(t, js.main_time, si);
                    if e.expired && e.matched {
                        continue;
                    }
                    if !e.expired {
                        js.main_expiry.insert((t, kb.to_vec(), off));
                    }
                    if !e.matched {
                        js.pending.insert((t, kb.to_vec(), off));
                    }
                    js.left.entry(kb.to_vec()).or_default().insert((t, off), e);
                }
            }
            let rights = stores.entries(si.right_store);
            js.other_time =
                rights.iter().filter_map(|(k, _)| join_key_parts(k)).map(|(_, t, _)| t).max().unwrap_or(i64::MIN);
            for (k, v) in rights {
                let Some((kb, t, off)) = join_key_parts(&k) else { continue };
                let Ok((_, inner)) = unscope(kb, spec.tenant) else { continue };
                // An outer join's records carry whether a null row is still owed for them.
                let (matched, raw) = match (si.outer, v.split_first()) {
                    (true, Some((flag, raw))) => (*flag == MATCHED, raw),
                    _ => (true, &v[..]),
                };
                let (Ok(key), Ok(row)) = (decode_key(Some(inner), &si.on.ty), decode_visible(&si.source, raw)) else {
                    continue;
                };
                let expired = !kept(t, js.other_time, si);
                if expired && matched {
                    continue;
                }
                if !expired {
                    js.other_expiry.insert((t, kb.to_vec(), off));
                }
                if !matched {
                    js.other_pending.insert((t, kb.to_vec(), off));
                }
                let raw = si.outer.then(|| raw.to_vec());
                js.right
                    .entry(kb.to_vec())
                    .or_default()
                    .insert((t, off), RightEntry { key, value: Arc::new(row), raw, matched, expired });
            }
        }
    }
}

/// How long a side keeps a record, measured by that side's stream time (Kafka Streams' join
/// store retention): `before + after + grace`, at least 1 ms (a record at its side's stream
/// time is kept, also with `within 0ms`).
fn retention(si: &StreamInput) -> i64 {
    si.before.saturating_add(si.after).saturating_add(si.grace).max(1)
}

/// A side whose stream time is `side_time` still keeps (and matches against) a record at `t`.
fn kept(t: i64, side_time: i64, si: &StreamInput) -> bool {
    t.saturating_add(retention(si)) > side_time
}

impl StreamJoins {
    /// A record of either side of join `side` arrives at `ts`: the join's stream time (the
    /// largest time of either side, one per join as in Kafka Streams) moves to it if it is
    /// later. True if it is at the join's stream time (Kafka Streams then passes on the
    /// unmatched records whose windows closed). A side's own time moves when it stores a record.
    pub(crate) fn observe(&mut self, side: usize, ts: i64) -> bool {
        let js = &mut self.sides[side];
        js.time = js.time.max(ts);
        ts == js.time
    }

    /// The stream time of join `side`.
    pub(crate) fn time(&self, side: usize) -> i64 {
        self.sides[side].time
    }

    /// Every join's stream time (committed with the task).
    /// Each by the name of its main side's store, as state is kept by store name across a
    /// changed query.
    pub(crate) fn times(&self) -> BTreeMap<String, i64> {
        self.spec
            .streams
            .iter()
            .zip(&self.sides)
            .map(|(si, js)| (self.spec.stores[si.left_store].name.clone(), js.time))
            .collect()
    }

    /// Every join's pass gate (`JoinState::min_time`), by the same names (committed too).
    pub(crate) fn min_times(&self) -> BTreeMap<String, i64> {
        self.spec
            .streams
            .iter()
            .zip(&self.sides)
            .map(|(si, js)| (self.spec.stores[si.left_store].name.clone(), js.min_time))
            .collect()
    }

    /// Set the joins' stream times and pass gates from a commit record (by store name; a join
    /// with none starts from nothing), or the time from the single one an earlier streamc
    /// committed for all (its gate then open, as after a Kafka Streams restart).
    pub(crate) fn set_times(
        &mut self,
        times: &BTreeMap<String, i64>,
        min_times: &BTreeMap<String, i64>,
        all: Option<i64>,
    ) {
        for (si, js) in self.spec.streams.iter().zip(self.sides.iter_mut()) {
            let name = &self.spec.stores[si.left_store].name;
            js.time = times.get(name).copied().or(all).unwrap_or(i64::MIN);
            js.min_time = min_times.get(name).copied().unwrap_or(i64::MAX);
        }
    }

    /// End of a finite input (`--close-windows-at-end`): every window of join `side` closes.
    pub(crate) fn close(&mut self, side: usize) {
        let js = &mut self.sides[side];
        if js.time == i64::MIN {
            // No record yet: no window to close (closed now, every later record would be late).
            return;
        }
        js.time = i64::MAX;
        js.main_time = i64::MAX;
        js.other_time = i64::MAX;
    }

    /// A record of joined stream `side` (key bytes `kb`, key, value, raw value bytes, time,
    /// input offset): stored if its side still keeps records that old, and joined with the
    /// main-side records whose bounds hold it (a main-side record at `t` matches `[t − before,
    /// t + after]`), in (time, offset) order, each with the time to
    /// emit it at. A main-side record it matches is no longer pending. Also whether it was stored.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn right(
        &mut self,
        side: usize,
        si: &StreamInput,
        kb: Vec<u8>,
        key: Value,
        value: Arc<Vec<Value>>,
        raw: Option<Vec<u8>>,
        ts: i64,
        offset: u64,
        changes: &mut Vec<Change>,
    ) -> (Vec<(Row, i64)>, bool) {
        let js = &mut self.sides[side];
        js.other_time = js.other_time.max(ts);
        let time = js.time;
        let stored = kept(ts, js.other_time, si);
        let mut matched = Vec::new();
        if let Some(m) = js.left.get_mut(&kb) {
            for ((lt, loff), e) in m
                .range_mut((ts.saturating_sub(si.after), 0)..=(ts.saturating_add(si.before), u64::MAX))
                .filter(|(_, e)| !e.expired)
            {
                let mut row = e.row.clone();
                row.joined.push(Some((key.clone(), value.clone())));
                matched.push((row, (*lt).max(ts)));
                if lineage::on() {
                    lineage::queue(Some((si.left_store, &join_store_key(&kb, *lt, *loff))));
                }
                if !e.matched {
                    e.matched = true;
                    js.pending.remove(&(*lt, kb.clone(), *loff));
                    self.journal.push(Undo::MatchedLeft { side, kb: kb.clone(), t: *lt, off: *loff });
                    changes.push(Change {
                        store: si.left_store,
                        key: join_store_key(&kb, *lt, *loff),
                        value: Some(encode_left(&e.row, true, si)),
                        timestamp: *lt,
                        existed: true,
                    });
                }
            }
        }
        // An outer join passes an unmatched record on with the main side null: at once if its
        // window already closed, else once it closes (unless a match comes first).
        let unmatched = si.outer && matched.is_empty();
        // Its window: main-side records up to `before` later match it. Too old for its side to
        // keep but with its window open, it is owed a row all the same (Kafka Streams keeps it
        // in the outer join's own store): it waits for a pass, matching nothing.
        let now = unmatched && ts.saturating_add(si.before) < time;
        let entry = RightEntry {
            key,
            value,
            raw: if si.outer { raw.clone() } else { None },
            matched: !unmatched || now,
            expired: !stored,
        };
        if now {
            matched.push((other_only(si, &kb, &entry, self.spec.tenant), ts));
            lineage::queue(None);
        }
        let kept = stored || !entry.matched;
        if kept {
            self.journal.push(Undo::Stored {
                side,
                main: false,
                seq: None,
                kb: kb.clone(),
                t: ts,
                off: offset,
                pending: !entry.matched,
                expiry: stored,
                min_time: js.min_time,
            });
            let key = join_store_key(&kb, ts, offset);
            lineage::put(si.right_store, &key);
            changes.push(Change {
                store: si.right_store,
                key,
                value: if si.outer { encode_right(&entry, si) } else { raw },
                timestamp: ts,
                existed: false,
            });
            if stored {
                js.other_expiry.insert((ts, kb.clone(), offset));
            }
            if !entry.matched {
                js.other_pending.insert((ts, kb.clone(), offset));
                js.min_time = js.min_time.min(ts);
            }
            js.right.entry(kb).or_default().insert((ts, offset), entry);
        }
        (matched, kept)
    }

    /// A main-side row of join `side` (key bytes `kb`, time): numbered (main-side rows come
    /// from either input, or from an earlier join: no input offset identifies them; the
    /// counter is committed), stored if its side still keeps records that old, and returned
    /// joined with every record of the other side in `[t − before, t + after]`, each with the time to emit
    /// it at. A left join's row with no match is passed on at once, with a null other side, if
    /// its window already closed (time + after before the joins' stream time); otherwise it
    /// is pending until its window closes or a match arrives. Also whether it was stored.
    pub(crate) fn left(
        &mut self,
        side: usize,
        si: &StreamInput,
        kb: Vec<u8>,
        row: Row,
        ts: i64,
        changes: &mut Vec<Change>,
    ) -> (Vec<(Row, i64)>, bool) {
        let offset = self.seq;
        let js = &mut self.sides[side];
        let time = js.time;
        js.main_time = js.main_time.max(ts);
        let mut out: Vec<(Row, i64)> = Vec::new();
        if let Some(m) = js.right.get_mut(&kb) {
            for ((t, off), e) in m
                .range_mut((ts.saturating_sub(si.before), 0)..=(ts.saturating_add(si.after), u64::MAX))
                .filter(|(_, e)| !e.expired)
            {
                let mut r = row.clone();
                r.joined.push(Some((e.key.clone(), e.value.clone())));
                out.push((r, ts.max(*t)));
                if lineage::on() {
                    lineage::queue(Some((si.right_store, &join_store_key(&kb, *t, *off))));
                }
                if !e.matched {
                    // An outer join's pending record of the other side: matched now.
                    e.matched = true;
                    js.other_pending.remove(&(*t, kb.clone(), *off));
                    self.journal.push(Undo::MatchedRight { side, kb: kb.clone(), t: *t, off: *off });
                    changes.push(Change {
                        store: si.right_store,
                        key: join_store_key(&kb, *t, *off),
                        value: encode_right(e, si),
                        timestamp: *t,
                        existed: true,
                    });
                }
            }
        }
        let unmatched = si.left && out.is_empty();
        let now = unmatched && ts.saturating_add(si.after) < time;
        if now {
            out.push((main_only(row.clone()), ts));
            lineage::queue(None);
        }
        let stored = kept(ts, js.main_time, si);
        // Too old for its side to keep but with its window open (its side ran ahead of the
        // other), an unmatched record is owed a null row all the same (Kafka Streams keeps it in
        // the outer join's own store): it is kept, matching nothing, until a pass.
        let owed = unmatched && !now;
        if stored || owed {
            self.journal.push(Undo::Stored {
                side,
                main: true,
                kb: kb.clone(),
                t: ts,
                off: offset,
                pending: owed,
                expiry: stored,
                seq: Some(self.seq),
                min_time: js.min_time,
            });
            self.seq += 1;
            // `matched`: no null row is owed for it (matched, passed on already, or inner join).
            let entry = LeftEntry { row, matched: !owed, expired: !stored };
            if owed {
                js.pending.insert((ts, kb.clone(), offset));
                js.min_time = js.min_time.min(ts);
            }
            let key = join_store_key(&kb, ts, offset);
            lineage::put(si.left_store, &key);
            changes.push(Change {
                store: si.left_store,
                key,
                value: Some(encode_left(&entry.row, entry.matched, si)),
                timestamp: ts,
                existed: false,
            });
            if stored {
                js.main_expiry.insert((ts, kb.clone(), offset));
            }
            js.left.entry(kb).or_default().insert((ts, offset), entry);
        }
        (out, stored || owed)
    }

    /// A pass over the pending records of join `side` (a record at the join's stream time
    /// came; `main`: of the main side): those whose windows closed (a main-side record's time +
    /// after + grace, the other side's time + before + grace, before the stream time) are
    /// passed on with the other side null, in time order, and no longer pending.
    ///
    /// As in Kafka Streams (`KStreamKStreamJoin`, with its wall-clock throttle
    /// `__emit.interval.ms.kstreams.outer.join.spurious.results.fix__` at 0), a pass runs only
    /// when `min_time + grace` plus the triggering side's own bound (`after` for the main side,
    /// `before` for the other) is before the stream time, and leaves `min_time` at the
    /// time of the last pending record it looked at (records in time order; it stops at the
    /// first record once both sides have one whose window is open, and a left join has only
    /// one side). So a record whose window closed can wait for a later pass, and a match that
    /// arrives meanwhile still takes it: results equal Kafka Streams', record for record.
    pub(crate) fn closed_pending(
        &mut self,
        side: usize,
        si: &StreamInput,
        main: bool,
        changes: &mut Vec<Change>,
    ) -> Vec<(Row, i64)> {
        let js = &mut self.sides[side];
        let gate = if main { si.after } else { si.before }.saturating_add(si.grace);
        // `min_time` unset (no pending record since the last pass found none): the gate is open.
        if js.min_time != i64::MAX && js.min_time.saturating_add(gate) >= js.time {
            return Vec::new();
        }
        js.min_time = i64::MAX;
        // Both sides' pending records merged in time order, the other side first on ties.
        let mut due: Vec<(i64, bool, Vec<u8>, u64)> = Vec::new();
        let (mut main_open, mut other_open) = (false, false);
        let mut main = js.pending.iter().peekable();
        let mut other = js.other_pending.iter().peekable();
        loop {
            let is_main = match (main.peek(), other.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(m), Some(o)) => m.0 < o.0,
            };
            let (t, kb, off) = if is_main { main.next() } else { other.next() }.unwrap();
            js.min_time = *t;
            if main_open && other_open {
                break;
            }
            let bound = if is_main { si.after } else { si.before };
            if t.saturating_add(bound).saturating_add(si.grace) >= js.time {
                if is_main {
                    main_open = true;
                } else {
                    other_open = true;
                }
                continue;
            }
            due.push((*t, is_main, kb.clone(), *off));
        }
        let mut out = Vec::new();
        for (t, is_main, kb, off) in due {
            if is_main {
                js.pending.remove(&(t, kb.clone(), off));
                let Some(e) = js.left.get_mut(&kb).and_then(|m| m.get_mut(&(t, off))) else { continue };
                if e.expired {
                    // Past its side's retention: nothing keeps it once its row is sent.
                    let e = take(&mut js.left, &kb, t, off).expect("looked up above");
                    changes.push(tombstone(si.left_store, &kb, t, off));
                    if lineage::on() {
                        lineage::queue_entry(si.left_store, &join_store_key(&kb, t, off));
                    }
                    out.push((main_only(e.row), t));
                    continue;
                }
                e.matched = true;
                changes.push(Change {
                    store: si.left_store,
                    key: join_store_key(&kb, t, off),
                    value: Some(encode_left(&e.row, true, si)),
                    timestamp: t,
                    existed: true,
                });
                if lineage::on() {
                    lineage::queue_entry(si.left_store, &join_store_key(&kb, t, off));
                }
                out.push((main_only(e.row.clone()), t));
            } else {
                js.other_pending.remove(&(t, kb.clone(), off));
                let Some(e) = js.right.get_mut(&kb).and_then(|m| m.get_mut(&(t, off))) else { continue };
                if e.expired {
                    let e = take(&mut js.right, &kb, t, off).expect("looked up above");
                    changes.push(tombstone(si.right_store, &kb, t, off));
                    if lineage::on() {
                        lineage::queue_entry(si.right_store, &join_store_key(&kb, t, off));
                    }
                    out.push((other_only(si, &kb, &e, self.spec.tenant), t));
                    continue;
                }
                e.matched = true;
                changes.push(Change {
                    store: si.right_store,
                    key: join_store_key(&kb, t, off),
                    value: encode_right(e, si),
                    timestamp: t,
                    existed: true,
                });
                if lineage::on() {
                    lineage::queue_entry(si.right_store, &join_store_key(&kb, t, off));
                }
                out.push((other_only(si, &kb, e, self.spec.tenant), t));
            }
        }
        out
    }

    /// Drop the records each side of join `side` no longer keeps (older than `before + after +
    /// grace` before that side's stream time), with a store tombstone. A record still pending
    /// then (its window closed, but no pass has come since) stays, matching nothing, until a
    /// pass sends its null row: Kafka Streams keeps such records in the outer join's own store,
    /// which has no retention.
    pub(crate) fn expire(&mut self, side: usize, si: &StreamInput, changes: &mut Vec<Change>) {
        let js = &mut self.sides[side];
        let (main_time, other_time) = (js.main_time, js.other_time);
        for (t, kb, off) in pop_while(&mut js.other_expiry, |t| !kept(t, other_time, si)) {
            // Pending (owed a row): its `matched` flag says so, no set lookup needed otherwise.
            match js.right.get_mut(&kb).and_then(|m| m.get_mut(&(t, off))) {
                Some(e) if !e.matched => e.expired = true,
                _ => {
                    changes.push(tombstone(si.right_store, &kb, t, off));
                    take(&mut js.right, &kb, t, off);
                }
            }
        }
        for (t, kb, off) in pop_while(&mut js.main_expiry, |t| !kept(t, main_time, si)) {
            match js.left.get_mut(&kb).and_then(|m| m.get_mut(&(t, off))) {
                Some(e) if !e.matched => e.expired = true,
                _ => {
                    changes.push(tombstone(si.left_store, &kb, t, off));
                    take(&mut js.left, &kb, t, off);
                }
            }
        }
    }
}

/// Take the leading entries of a (time, key bytes, offset) set while `due(time)`.
fn pop_while(set: &mut BTreeSet<(i64, Vec<u8>, u64)>, due: impl Fn(i64) -> bool) -> Vec<(i64, Vec<u8>, u64)> {
    let mut out = Vec::new();
    while set.first().is_some_and(|(t, _, _)| due(*t)) {
        out.extend(set.pop_first());
    }
    out
}

/// Remove one stored record of a side (and its key's map once empty).
fn take<E>(side: &mut FxHashMap<Vec<u8>, BTreeMap<(i64, u64), E>>, kb: &[u8], t: i64, off: u64) -> Option<E> {
    let m = side.get_mut(kb)?;
    let e = m.remove(&(t, off));
    if m.is_empty() {
        side.remove(kb);
    }
    e
}

/// The store tombstone of an expired join record.
fn tombstone(store: usize, kb: &[u8], t: i64, off: u64) -> Change {
    Change { store, key: join_store_key(kb, t, off), value: None, timestamp: t, existed: true }
}

/// A main-side row passed on unmatched: the other side null.
fn main_only(mut row: Row) -> Row {
    row.joined.push(None);
    row
}

/// A main-side record kept for a stream–stream join.
#[derive(Clone, Debug)]
struct LeftEntry {
    row: Row,
    /// No null row is owed for it: it was joined, or passed on with a null other side already,
    /// or the join is inner. (False: pending in a left join.)
    matched: bool,
    /// Past its side's retention (kept only while pending): it matches nothing.
    expired: bool,
}

/// A joined stream's record kept for a join: its key and value; in an outer join also its raw
/// value (to rewrite its store entry) and whether a null row is no longer owed for it.
struct RightEntry {
    key: Value,
    value: Arc<Vec<Value>>,
    raw: Option<Vec<u8>>,
    matched: bool,
    /// Past its side's retention (kept only while pending): it matches nothing.
    expired: bool,
}

/// The first byte of an outer join's stored other-side record: no null row is owed for it
/// (`PENDING`: one is, if nothing matches it before its window closes).
const MATCHED: u8 = b'm';
const PENDING: u8 = b'p';

/// An outer join's other-side record as stored: a flag byte, then its raw value.
fn encode_right(e: &RightEntry, si: &StreamInput) -> Option<Vec<u8>> {
    let raw = e.raw.as_deref()?;
    debug_assert!(si.outer, "only an outer join keeps its other side's raw values");
    let mut v = Vec::with_capacity(raw.len() + 1);
    v.push(if e.matched { MATCHED } else { PENDING });
    v.extend_from_slice(raw);
    Some(v)
}

/// The row an outer join passes on for an unmatched record of the other side: the main side's
/// fields (and the joins before it) null, the other side's record joined, keyed by its key.
fn other_only(si: &StreamInput, kb: &[u8], e: &RightEntry, scoped: bool) -> Row {
    let tenant = unscope(kb, scoped).ok().and_then(|(t, _)| t);
    let mut joined: Vec<Option<(Value, Arc<Vec<Value>>)>> = vec![None; si.joined_keys.len()];
    joined.push(Some((e.key.clone(), e.value.clone())));
    let mut value = vec![Value::Null; si.nvalue];
    // The main side's key field is its key, which is the join key: it holds the key here too.
    if let Some(v) = si.key_field.and_then(|i| value.get_mut(i)) {
        *v = e.key.clone();
    }
    Row { key: e.key.clone(), value, joined, tenant, retract: false }
}

/// Both sides of one stream–stream join, by key bytes then (time, offset).
struct JoinState {
    left: FxHashMap<Vec<u8>, BTreeMap<(i64, u64), LeftEntry>>,
    right: FxHashMap<Vec<u8>, BTreeMap<(i64, u64), RightEntry>>,
    /// Each side's stored records by (time, key bytes, offset), to expire them.
    main_expiry: BTreeSet<(i64, Vec<u8>, u64)>,
    other_expiry: BTreeSet<(i64, Vec<u8>, u64)>,
    /// A left join's main-side records owed a null row if nothing matches them before their
    /// window closes.
    pending: BTreeSet<(i64, Vec<u8>, u64)>,
    /// An outer join's other-side records owed a row with the main side null likewise.
    other_pending: BTreeSet<(i64, Vec<u8>, u64)>,
    /// Each side's stream time (the largest time of its own records): how long it keeps its
    /// records is measured by it, as a Kafka Streams join store's retention is.
    main_time: i64,
    other_time: i64,
    /// The join's stream time: the largest time of either side's records.
    time: i64,
    /// Kafka Streams' gate on passes over the pending records (its shared time tracker's
    /// `minTime`): lowered to each record made pending, set by each pass (`closed_pending`);
    /// `i64::MAX` when unset.
    min_time: i64,
}

impl Default for JoinState {
    fn default() -> JoinState {
        JoinState {
            left: FxHashMap::default(),
            right: FxHashMap::default(),
            main_expiry: BTreeSet::new(),
            other_expiry: BTreeSet::new(),
            pending: BTreeSet::new(),
            other_pending: BTreeSet::new(),
            main_time: i64::MIN,
            other_time: i64::MIN,
            time: i64::MIN,
            min_time: i64::MAX,
        }
    }
}

/// Join store keys: the key bytes (length-prefixed), the time (sign-flipped big-endian) and the
/// record's offset, so one key's records sort by time.
fn join_store_key(kb: &[u8], t: i64, off: u64) -> Vec<u8> {
    let mut k = store_key(kb, Some(t));
    k.extend_from_slice(&off.to_be_bytes());
    k
}

fn join_key_parts(sk: &[u8]) -> Option<(&[u8], i64, u64)> {
    let kb = key_part(sk);
    let rest = sk.get(4 + kb.len()..)?;
    if rest.len() != 16 {
        return None;
    }
    let t = (u64::from_be_bytes(rest[..8].try_into().ok()?) ^ (1 << 63)) as i64;
    let off = u64::from_be_bytes(rest[8..].try_into().ok()?);
    Some((kb, t, off))
}

/// A main-side join record as stored: `{"m": matched, "r": the row as on a repartition topic}`.
fn encode_left(row: &Row, matched: bool, si: &StreamInput) -> Vec<u8> {
    let mut o = Vec::with_capacity(128);
    o.extend_from_slice(if matched { b"{\"m\":true,\"r\":" } else { b"{\"m\":false,\"r\":" });
    write_row(row, &si.wire, &mut o);
    o.push(b'}');
    o
}

#[derive(serde::Deserialize)]
struct StoredLeft<'a> {
    m: bool,
    #[serde(borrow)]
    r: &'a serde_json::value::RawValue,
}

fn decode_left(b: &[u8], kb: &[u8], si: &StreamInput, scoped: bool) -> Result<LeftEntry, String> {
    let raw: StoredLeft = serde_json::from_slice(b).map_err(|e| format!("damaged join entry: {e}"))?;
    let fields = decode_record(raw.r.get().as_bytes(), &si.wire)?;
    let (value, joined) = split_wire(fields, si.nvalue, &si.joined_keys);
    // The main side is keyed by the join key (co-partitioned, or repartitioned by it), scoped
    // to its tenant.
    let (tenant, kb) = unscope(kb, scoped)?;
    let key = decode_key(Some(kb), &si.on.ty).map_err(|e| e.0)?;
    Ok(LeftEntry { row: Row { key, value, joined, tenant, retract: false }, matched: raw.m, expired: false })
}
