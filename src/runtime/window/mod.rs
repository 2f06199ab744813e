//! Window kinds: each is one type implementing [`Windowing`] over the aggregate's record cache
//! ([`Cache`]), in a file of its own. A kind assigns a record to its windows (creating,
//! updating, merging them), keeps whatever index of its own it needs (sessions per key, the
//! recent records of sliding windows), forgets a window stream time closed, and rebuilds its
//! index from the store after a restore. Closing windows by stream time, results and writing
//! the store are the aggregate operator's flush (`runtime/ops/aggregate.rs`), the same
//! for every kind.
//!
//! Adding a window kind: its syntax and checks in the front end (`ast::WindowKind`), then one
//! file here and one arm in [`for_agg`], and a case in `tests/runs/`.

mod fixed;
mod none;
mod session;
mod sliding;

use crate::ast::WindowKind;
use crate::plan::physical::AggSpec;
use crate::runtime::agg::{apply_states, check_states, decode_entry, store_key, AggArgs, AggEntry, Cache, Slot};
use crate::runtime::op::{Change, Counters, RecordError, StoreRead};
use crate::value::Value;

/// What a window kind works with while it adds a record or advances.
pub(crate) struct Cx<'a> {
    pub(crate) agg: &'a AggSpec,
    pub(crate) cache: &'a mut Cache,
    /// The aggregate's stream time, the record just added included.
    pub(crate) stream_time: i64,
    pub(crate) counters: &'a mut Counters,
    /// Why the record being processed is late, if it is.
    pub(crate) late_reason: &'a mut Option<String>,
    /// Store changes of a kind's own (sliding windows' recent records), flushed in order.
    pub(crate) changes: &'a mut Vec<Change>,
    pub(crate) stores: &'a dyn StoreRead,
}

impl Cx<'_> {
    /// Count the record (or one of its windows) as late; the first reason is kept.
    /// The record being added is late for a window: counted once per record however many of
    /// its windows closed (a late record is one record dropped), the first reason kept.
    pub(crate) fn late(&mut self, reason: impl FnOnce() -> String) {
        if self.late_reason.is_none() {
            self.counters.late += 1;
            *self.late_reason = Some(reason());
        }
    }

    /// Add a record to the entries of windows `(start, end)` of its key (an unwindowed
    /// aggregate: one entry, no start): created when missing (every open window is in the
    /// cache, so only an unwindowed entry is ever read from the store), updated, and marked
    /// changed. All or nothing: every window's every aggregate call is checked first, so a
    /// record one of them refuses (an overflow, a failing user aggregate) changes none.
    pub(crate) fn update_windows(
        &mut self,
        windows: &[(i64, i64)],
        group: &[Value],
        kb: &[u8],
        ts: i64,
        args: &AggArgs,
    ) -> Result<(), RecordError> {
        let agg = self.agg;
        let err = RecordError;
        // The key is looked up once; its windows are found by start under it.
        let id = self.cache.slots.key_id(kb);
        let cache = &mut *self.cache;
        cache.staged.clear();
        let check = !cache.staged.nothing_to_check() && (agg.table || !cache.staged.one_check(windows.len()));
        for &(start, _) in windows {
            let w = cache.slots.win(id, start);
            if cache.slots.get(w).is_some() {
                self.counters.cache_hits += 1;
            } else {
                self.counters.cache_misses += 1;
                // Every open window is in the cache: only an unwindowed entry is read (and
                // kept, clean: also when the store has none).
                if agg.window.is_none() {
                    let entry = match self.stores.get(agg.store, &store_key(kb, None)) {
                        Some(b) => Some(decode_entry(&b, agg).map_err(err)?),
                        None => None,
                    };
                    let stored = entry.is_some();
                    cache.slots.insert(w, Slot::new(entry, stored));
                }
            }
            if !check {
                continue;
            }
            // A missing window, or a grouped table's group left with no rows since the last
            // flush, starts from the initial states.
            let states = match cache.slots.get(w) {
                Some(slot) if !(slot.deleted && agg.table) => slot.entry.as_ref().map(|e| &e.states),
                _ => None,
            };
            let states = match states {
                Some(s) => s,
                None => cache.init.as_ref().map_err(|e| err(e.clone()))?,
            };
            check_states(agg, states, args, ts, &mut cache.staged).map_err(err)?;
        }
        for &(start, end) in windows {
            let w = cache.slots.win(id, start);
            cache.journal(w);
            let (slot, _) = cache.slots.get_or_insert_with(w, || Slot::new(None, false));
            if slot.deleted && agg.table {
                // A grouped table's group left with no rows since the last flush: it starts
                // again from nothing.
                slot.deleted = false;
                slot.entry = None;
            }
            let created = slot.entry.is_none();
            let entry = match &mut slot.entry {
                Some(e) => e,
                None => slot.entry.insert(AggEntry {
                    group: group.to_vec(),
                    start,
                    end,
                    max_ts: i64::MIN,
                    states: cache.init.clone().map_err(err)?,
                    rows: 0,
                }),
            };
            // Checked above, or (one window, one call that can fail, applied first and changing
            // nothing when it does) unchecked.
            if let Err(e) = apply_states(agg, &mut entry.states, args, ts, &mut cache.staged, check) {
                if !created {
                    // Unchecked, the one call that can fail changed nothing. Checked, only if a
                    // check let through what its update refuses: the store is to hold what the
                    // cache holds, so that a restart computes the same.
                    if check && slot.touch() {
                        cache.dirty.push(w);
                    }
                } else if agg.window.is_some() {
                    cache.slots.remove(w);
                } else {
                    slot.entry = None;
                }
                return Err(err(e));
            }
            entry.max_ts = entry.max_ts.max(ts);
            entry.rows += 1;
            if created && agg.window.is_some() {
                cache.windows.insert(end, w);
            }
            if slot.touch() {
                cache.dirty.push(w);
            }
            if crate::runtime::lineage::on() {
                crate::runtime::lineage::fold(agg.store, &cache.slots.store_key(w));
            }
        }
        Ok(())
    }
}

/// One window kind of an aggregate.
pub(crate) trait Windowing: Send {
    /// Add a record (its group values, its key's bytes as the store holds them, its event time
    /// and its aggregate arguments) to its windows.
    fn add(&mut self, cx: &mut Cx, group: &[Value], kb: &[u8], ts: i64, args: &AggArgs) -> Result<(), RecordError>;

    /// Before a flush, stream time having advanced: drop what no window can need any more.
    fn advance(&mut self, _cx: &mut Cx) {}

    /// The most windows one record is added to (a hopping window's size over its advance).
    fn windows_per_record(&self) -> usize {
        1
    }

    /// Stream time closed the window stored at `sk`.
    fn closed(&mut self, _sk: &[u8]) {}

    /// At restore, a store entry that is not a window (a record of the kind's own): taken,
    /// true; else false.
    fn restore_own(&mut self, _key: &[u8], _value: &[u8], _agg: &AggSpec) -> bool {
        false
    }

    /// At restore, an open window read back from the store.
    fn restored(&mut self, _sk: &[u8], _e: &AggEntry) {}

    /// Every entry is restored.
    fn restored_all(&mut self) {}
}

/// The window kind of an aggregate.
pub(crate) fn for_agg(agg: &AggSpec) -> Box<dyn Windowing> {
    let Some(w) = agg.window else { return Box::new(none::Unwindowed) };
    let grace = w.grace.0;
    match (w.kind, w.tz) {
        (WindowKind::Tumbling { size }, Some(tz)) => Box::new(fixed::Zoned::new(size.0, size.0, w.grace, tz)),
        (WindowKind::Hopping { size, advance }, Some(tz)) => {
            Box::new(fixed::Zoned::new(size.0, advance.0, w.grace, tz))
        }
        (WindowKind::Tumbling { size }, _) => Box::new(fixed::Fixed::new(size.0, size.0, w.grace)),
        (WindowKind::Hopping { size, advance }, _) => Box::new(fixed::Fixed::new(size.0, advance.0, w.grace)),
        (WindowKind::Session { gap }, _) => Box::new(session::Session::new(gap.0, grace)),
        (WindowKind::Sliding { size }, _) => Box::new(sliding::Sliding::new(size.0, grace)),
    }
}
