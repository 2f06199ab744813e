//! Sliding windows, as Kafka Streams defines them: windows `[start, start + size]` (both ends
//! inclusive) begin where a record leaves the window, so every distinct set of records at most
//! `size` apart has one window. A key's recent records (their aggregate arguments, by time) are
//! kept, in the store too, to compute new windows from.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use super::{Cx, Windowing};
use crate::ast::Duration;
use crate::plan::physical::AggSpec;
use crate::runtime::agg::{
    apply_states, check_states, decode_slide_records, encode_slide_records, key_part, start_part, store_key,
    update_state, AggArgs, AggEntry, AggState, Slot, SLIDE_RECORDS,
};
use crate::runtime::lineage;
use crate::runtime::op::{Change, RecordError};
use crate::value::Value;

/// The store key of a key's recent records at time `t`.
fn recent_key(kb: &[u8], t: i64) -> Vec<u8> {
    let mut rk = SLIDE_RECORDS.to_vec();
    rk.extend_from_slice(&store_key(kb, Some(t)));
    rk
}

pub(crate) struct Sliding {
    size: i64,
    grace: i64,
    /// Each key's recent records, by time.
    records: FxHashMap<Vec<u8>, BTreeMap<i64, Vec<AggArgs>>>,
    /// The recent records by time, to expire them.
    expiry: BTreeSet<(i64, Vec<u8>)>,
    /// Each key's open windows' starts.
    windows: FxHashMap<Vec<u8>, BTreeSet<i64>>,
}

impl Sliding {
    pub(crate) fn new(size: i64, grace: i64) -> Sliding {
        Sliding { size, grace, records: FxHashMap::default(), expiry: BTreeSet::new(), windows: FxHashMap::default() }
    }
}

impl Sliding {
    /// The windows starting at `starts` that the key does not have yet and that are open, with
    /// their latest time and states computed from the key's recent records (nothing changes).
    fn new_windows(
        &self,
        kb: &[u8],
        starts: &[i64],
        open: &dyn Fn(i64) -> bool,
        agg: &AggSpec,
        cx: &Cx,
    ) -> Result<Vec<(i64, i64, Vec<AggState>)>, String> {
        let mut made = Vec::new();
        for &s in starts {
            let known = self.windows.get(kb).is_some_and(|w| w.contains(&s));
            if known || !open(s) {
                continue;
            }
            let Some(recs) = self.records.get(kb) else { continue };
            let mut states = cx.cache.init.clone()?;
            let mut max_ts = i64::MIN;
            for (t, list) in recs.range(s..=s.saturating_add(self.size)) {
                for argv in list {
                    for ((a, st), av) in agg.aggs.iter().zip(states.iter_mut()).zip(argv) {
                        update_state(a, st, av, *t)?;
                    }
                    max_ts = max_ts.max(*t);
                }
            }
            if max_ts != i64::MIN {
                made.push((s, max_ts, states));
            }
        }
        Ok(made)
    }
}

impl Windowing for Sliding {
    /// A record at `t` updates the open windows that contain it, and creates (from the key's
    /// recent records) its left window `[t − size, t]` (`[0, size]` if `t < size`), its right window `[t + 1, t + 1 + size]`
    /// when a later record falls in it, and the right windows of earlier records that it now
    /// populates.
    fn add(&mut self, cx: &mut Cx, group: &[Value], kb: &[u8], ts: i64, args: &AggArgs) -> Result<(), RecordError> {
        let (size, grace, agg) = (self.size, self.grace, cx.agg);
        let err = RecordError;
        let stream_time = cx.stream_time;
        let close = stream_time.saturating_sub(grace);
        // A window [s, s + size] is closed once s + size + 1 <= close.
        let open = |s: i64| s.saturating_add(size).saturating_add(1) > close;
        if !open(ts) {
            cx.late(|| {
                format!(
                    "late: every sliding window holding time {ts} closed at stream time {stream_time} (grace {})",
                    Duration(grace)
                )
            });
            return Ok(());
        }
        // 1. Open windows that contain the record: checked now, updated once nothing can fail
        // (a record is added to every window or to none).
        let existing: Vec<i64> =
            self.windows.get(kb).map(|w| w.range(ts.saturating_sub(size)..=ts).copied().collect()).unwrap_or_default();
        let mut update = Vec::with_capacity(existing.len());
        cx.cache.staged.clear();
        for s in &existing {
            if !open(*s) {
                cx.late(|| {
                    format!(
                        "late: sliding window [{s}, {}] closed at stream time {stream_time} (grace {})",
                        s.saturating_add(size),
                        Duration(grace)
                    )
                });
                continue;
            }
            let w = cx.cache.slots.win_of(&store_key(kb, Some(*s)));
            if let Some(Some(e)) = cx.cache.slots.get(w).map(|slot| slot.entry.as_ref()) {
                check_states(agg, &e.states, args, ts, &mut cx.cache.staged).map_err(err)?;
            }
            update.push(w);
        }
        // The record joins the key's recent records (taken out again if a window it brings
        // into being cannot be computed).
        let recs = self.records.entry(kb.to_vec()).or_default();
        let list = recs.entry(ts).or_default();
        let existed = !list.is_empty();
        list.push(args.clone());
        // 2–4. Windows the record brings into being. No window starts before the epoch (event
        // times are not negative): the left window of a record within `size` of 0 is
        // `[0, size]`, which holds every record up to `size`, as in Kafka Streams.
        let mut new_starts = vec![ts.saturating_sub(size).max(0)];
        let later = recs.range(ts.saturating_add(1)..=ts.saturating_add(1).saturating_add(size)).next().is_some();
        if later {
            new_starts.push(ts.saturating_add(1));
        }
        for t in recs.range(ts.saturating_sub(size).saturating_sub(1)..ts).map(|(t, _)| *t) {
            new_starts.push(t.saturating_add(1));
        }
        new_starts.sort_unstable();
        new_starts.dedup();
        let made = self.new_windows(kb, &new_starts, &open, agg, cx);
        let made = match made {
            Ok(m) => m,
            Err(e) => {
                if let Some(recs) = self.records.get_mut(kb) {
                    if let Some(list) = recs.get_mut(&ts) {
                        list.pop();
                        if list.is_empty() {
                            recs.remove(&ts);
                        }
                    }
                    if recs.is_empty() {
                        self.records.remove(kb);
                    }
                }
                return Err(err(e));
            }
        };
        if lineage::on() {
            // `streamc trace`: the record is in the windows it updates, and among the key's
            // recent records that new windows are made of.
            for s in existing.iter().filter(|s| open(**s)) {
                lineage::fold(agg.store, &store_key(kb, Some(*s)));
            }
            lineage::fold(agg.store, &recent_key(kb, ts));
        }
        for w in update {
            if let Some(Some(e)) = cx.cache.slots.get_mut(w).map(|slot| slot.entry.as_mut()) {
                e.max_ts = e.max_ts.max(ts);
                apply_states(agg, &mut e.states, args, ts, &mut cx.cache.staged, true).map_err(err)?;
            }
            cx.cache.mark_dirty(w);
        }
        let list = self.records.get(kb).and_then(|r| r.get(&ts)).map_or(&[][..], |l| l.as_slice());
        let value = encode_slide_records(list, agg);
        self.expiry.insert((ts, kb.to_vec()));
        let rk = recent_key(kb, ts);
        cx.changes.push(Change { store: agg.store, key: rk, value: Some(value), timestamp: ts, existed });
        for (s, max_ts, states) in made {
            let end = s.saturating_add(size);
            if lineage::on() {
                // `streamc trace`: a new window holds the key's recent records in its bounds.
                let into = store_key(kb, Some(s));
                for t in self.records.get(kb).into_iter().flat_map(|r| r.range(s..=end).map(|(t, _)| *t)) {
                    lineage::merge(agg.store, &into, &recent_key(kb, t));
                }
            }
            let w = cx.cache.slots.win_of(&store_key(kb, Some(s)));
            cx.cache.windows.insert(end.saturating_add(1), w);
            self.windows.entry(kb.to_vec()).or_default().insert(s);
            cx.cache.slots.insert(
                w,
                Slot::new(Some(AggEntry { group: group.to_vec(), start: s, end, max_ts, states, rows: 0 }), false),
            );
            cx.cache.mark_dirty(w);
        }
        Ok(())
    }

    /// Drop the recent records no window can need any more: a new window starts at most `size`
    /// before a record that is not late.
    fn advance(&mut self, cx: &mut Cx) {
        let horizon =
            cx.stream_time.saturating_sub(self.grace).saturating_sub(self.size.saturating_mul(2)).saturating_sub(1);
        while let Some((t, _)) = self.expiry.first() {
            if *t >= horizon {
                break;
            }
            let Some((t, kb)) = self.expiry.pop_first() else { break };
            if let Some(m) = self.records.get_mut(&kb) {
                m.remove(&t);
                if m.is_empty() {
                    self.records.remove(&kb);
                }
            }
            let mut rk = SLIDE_RECORDS.to_vec();
            rk.extend_from_slice(&store_key(&kb, Some(t)));
            cx.changes.push(Change { store: cx.agg.store, key: rk, value: None, timestamp: t, existed: true });
        }
    }

    fn closed(&mut self, sk: &[u8]) {
        let kb = key_part(sk);
        if let Some(set) = self.windows.get_mut(kb) {
            set.remove(&start_part(sk));
            if set.is_empty() {
                self.windows.remove(kb);
            }
        }
    }

    fn restore_own(&mut self, key: &[u8], value: &[u8], agg: &AggSpec) -> bool {
        let Some(rk) = key.strip_prefix(SLIDE_RECORDS) else { return false };
        let (kb, t) = (key_part(rk).to_vec(), start_part(rk));
        if let Ok(recs) = decode_slide_records(value, agg) {
            self.expiry.insert((t, kb.clone()));
            self.records.entry(kb).or_default().insert(t, recs);
        }
        true
    }

    fn restored(&mut self, sk: &[u8], e: &AggEntry) {
        self.windows.entry(key_part(sk).to_vec()).or_default().insert(e.start);
    }
}
