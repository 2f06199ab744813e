//! Session windows: a key's records at most `gap` apart form one session `[first, last]`; a
//! record between two sessions merges them (the merged-away session is deleted from the store
//! and downstream at the next flush). A session closes once stream time passes
//! `last + gap + grace` (on the boundary it is still open, as in Kafka Streams).

use rustc_hash::FxHashMap;

use super::{Cx, Windowing};
use crate::ast::Duration;
use crate::runtime::agg::{key_part, merge_states, start_part, store_key, update_state, AggArgs, AggEntry, Slot};
use crate::runtime::op::RecordError;
use crate::value::Value;

pub(crate) struct Session {
    gap: i64,
    grace: i64,
    /// Open sessions per key bytes: (start, end), by start.
    sessions: FxHashMap<Vec<u8>, Vec<(i64, i64)>>,
}

impl Session {
    pub(crate) fn new(gap: i64, grace: i64) -> Session {
        Session { gap, grace, sessions: FxHashMap::default() }
    }
}

impl Windowing for Session {
    /// A new session, or the merge of every open session within `gap` of the record.
    fn add(&mut self, cx: &mut Cx, group: &[Value], kb: &[u8], ts: i64, args: &AggArgs) -> Result<(), RecordError> {
        let (gap, grace, agg) = (self.gap, self.grace, cx.agg);
        let err = RecordError;
        let close = cx.stream_time.saturating_sub(grace);
        let open: &[(i64, i64)] = self.sessions.get(kb).map(|v| v.as_slice()).unwrap_or(&[]);
        // Sessions within `gap` of the record, closed ones excepted (they may not have been
        // flushed yet: results must not depend on where commits fall).
        let near: Vec<(i64, i64)> = open
            .iter()
            .copied()
            .filter(|(s, e)| *e >= ts.saturating_sub(gap) && *s <= ts.saturating_add(gap) && agg.closes_at(*e) > close)
            .collect();
        let start = near.iter().map(|x| x.0).fold(ts, i64::min);
        let end = near.iter().map(|x| x.1).fold(ts, i64::max);
        if agg.closes_at(end) <= close {
            let stream_time = cx.stream_time;
            cx.late(|| {
                format!(
                    "late: its session [{start}, {end}] closed at stream time {stream_time} (gap {}, grace {})",
                    Duration(gap),
                    Duration(grace)
                )
            });
            return Ok(());
        }
        // The merged entry, computed before anything changes, so that an error (overflow, a
        // failing user aggregate) leaves the key's sessions as they were.
        let id = cx.cache.slots.key_id(kb);
        let mut merged: Option<AggEntry> = None;
        for (s, _) in &near {
            let Some(Some(old)) = cx.cache.slots.get(cx.cache.slots.win(id, *s)).map(|slot| slot.entry.clone()) else {
                continue;
            };
            merged = Some(match merged {
                None => old,
                Some(mut m) => {
                    merge_states(agg, &mut m.states, old.states).map_err(err)?;
                    m.max_ts = m.max_ts.max(old.max_ts);
                    m
                }
            });
        }
        let mut entry = match merged {
            Some(m) => m,
            None => AggEntry {
                group: group.to_vec(),
                start,
                end,
                max_ts: i64::MIN,
                states: cx.cache.init.clone().map_err(err)?,
                rows: 0,
            },
        };
        entry.start = start;
        entry.end = end;
        entry.max_ts = entry.max_ts.max(ts);
        for ((a, st), argv) in agg.aggs.iter().zip(entry.states.iter_mut()).zip(args) {
            update_state(a, st, argv, ts).map_err(err)?;
        }
        if crate::runtime::lineage::on() {
            // `streamc trace`: the session gathers the records of those it merges, and this one.
            let into = store_key(kb, Some(start));
            for (s, _) in near.iter().filter(|(s, _)| *s != start) {
                crate::runtime::lineage::merge(agg.store, &into, &store_key(kb, Some(*s)));
            }
            crate::runtime::lineage::fold(agg.store, &into);
        }
        // Now the indexes: merged-away sessions are deleted (at the next flush).
        let mut rest: Vec<(i64, i64)> = open.iter().copied().filter(|x| !near.contains(x)).collect();
        let cache = &mut *cx.cache;
        for (s, e) in &near {
            let w = cache.slots.win(id, *s);
            cache.windows.remove(agg.closes_at(*e), w);
            if *s == start {
                continue;
            }
            let Some(slot) = cache.slots.get_mut(w) else { continue };
            if !slot.stored && slot.emitted.is_none() {
                cache.slots.remove(w);
            } else {
                slot.deleted = true;
                if slot.touch() {
                    cache.dirty.push(w);
                }
            }
        }
        let w = cache.slots.win(id, start);
        cache.windows.insert(agg.closes_at(end), w);
        let (slot, _) = cache.slots.get_or_insert_with(w, || Slot::new(None, false));
        slot.entry = Some(entry);
        slot.deleted = false;
        if slot.touch() {
            cache.dirty.push(w);
        }
        rest.push((start, end));
        rest.sort_unstable();
        self.sessions.insert(kb.to_vec(), rest);
        Ok(())
    }

    fn closed(&mut self, sk: &[u8]) {
        let kb = key_part(sk);
        if let Some(list) = self.sessions.get_mut(kb) {
            let start = start_part(sk);
            list.retain(|(s, _)| *s != start);
            if list.is_empty() {
                self.sessions.remove(kb);
            }
        }
    }

    fn restored(&mut self, sk: &[u8], e: &AggEntry) {
        self.sessions.entry(key_part(sk).to_vec()).or_default().push((e.start, e.end));
    }

    fn restored_all(&mut self) {
        for v in self.sessions.values_mut() {
            v.sort_unstable();
        }
    }
}
