//! Stream–stream joins, one operator per joined stream: the records of both sides still inside
//! their join windows, by key and time, mirrored in two changelogged stores (`StreamInput`'s
//! `left_store` and `right_store`); the joins' stream time; the numbering of main-side rows. A
//! record joins the other side's records within `within` of it; records expire at
//! `t + 2 × within`, when a left join emits its unmatched main-side records once and for good.
//! The task runs the joined rows down the rest of its operator chain.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::codec::decode_visible;
use crate::eval::Row;
use crate::plan::physical::{StreamInput, TaskSpec};
use crate::runtime::agg::{key_part, store_key};
use crate::runtime::op::{Change, Operator, StoreRead};
use crate::runtime::wire::{decode_key, split_wire, unscope, wire_row, write_record};
use crate::value::{decode_record, Value};

/// The stream–stream joins of a task.
pub(crate) struct StreamJoins {
    /// Per joined stream.
    sides: Vec<JoinState>,
    /// Stream time of the joins.
    pub(crate) time: i64,
    /// Number of the next main-side row stored (committed).
    pub(crate) seq: u64,
    spec: Arc<TaskSpec>,
    /// Per join: its main side's store, then its joined stream's.
    stores: Vec<usize>,
}

impl StreamJoins {
    pub(crate) fn new(spec: Arc<TaskSpec>) -> StreamJoins {
        let stores = spec.streams.iter().flat_map(|si| [si.left_store, si.right_store]).collect();
        StreamJoins {
            sides: spec.streams.iter().map(|_| JoinState::default()).collect(),
            time: i64::MIN,
            seq: 0,
            spec,
            stores,
        }
    }
}

impl Operator for StreamJoins {
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
            *js = JoinState::default();
            for (k, v) in stores.entries(si.left_store) {
                let Some((kb, t, off)) = join_key_parts(&k) else { continue };
                if let Ok(e) = decode_left(&v, kb, si, spec.tenant) {
                    js.expiry.insert((t, 0, kb.to_vec(), off));
                    js.left.entry(kb.to_vec()).or_default().insert((t, off), e);
                }
            }
            for (k, v) in stores.entries(si.right_store) {
                let Some((kb, t, off)) = join_key_parts(&k) else { continue };
                let Ok((_, inner)) = unscope(kb, spec.tenant) else { continue };
                let (Ok(key), Ok(row)) = (decode_key(Some(inner), &si.on.ty), decode_visible(&si.source, &v)) else {
                    continue;
                };
                js.expiry.insert((t, 1, kb.to_vec(), off));
                js.right.entry(kb.to_vec()).or_default().insert((t, off), (key, Arc::new(row)));
            }
        }
    }
}

impl StreamJoins {
    /// Stream time moves to `ts`; true if a record at `ts` is late for a join of `within`.
    pub(crate) fn advance(&mut self, ts: i64, within: i64) -> bool {
        self.time = self.time.max(ts);
        ts.saturating_add(within) <= self.time
    }

    /// A record of joined stream `side` (key bytes `kb`, key, value, raw value bytes, time,
    /// input offset): stored, and the main-side rows within `within` of it marked matched and
    /// returned joined with it, in (time, offset) order, each with the time to emit it at.
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
    ) -> Vec<(Row, i64)> {
        changes.push(Change {
            store: si.right_store,
            key: join_store_key(&kb, ts, offset),
            value: raw,
            timestamp: ts,
            existed: false,
        });
        let js = &mut self.sides[side];
        js.expiry.insert((ts, 1, kb.clone(), offset));
        js.right.entry(kb.clone()).or_default().insert((ts, offset), (key.clone(), value.clone()));
        let mut matched = Vec::new();
        if let Some(m) = js.left.get_mut(&kb) {
            for ((lt, loff), e) in
                m.range_mut((ts.saturating_sub(si.within), 0)..=(ts.saturating_add(si.within), u64::MAX))
            {
                let mut row = e.row.clone();
                row.joined.push(Some((key.clone(), value.clone())));
                matched.push((row, (*lt).max(ts)));
                if !e.matched {
                    e.matched = true;
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
        matched
    }

    /// A main-side row of join `side` (key bytes `kb`, time): numbered (main-side rows come
    /// from either input, or from an earlier join: no input offset identifies them; the
    /// counter is committed), stored, and returned joined with every record of the other side
    /// within `within`, each with the time to emit it at.
    pub(crate) fn left(
        &mut self,
        side: usize,
        si: &StreamInput,
        kb: Vec<u8>,
        row: Row,
        ts: i64,
        changes: &mut Vec<Change>,
    ) -> Vec<(Row, i64)> {
        let offset = self.seq;
        self.seq += 1;
        let js = &mut self.sides[side];
        let matches: Vec<(i64, Value, Arc<Vec<Value>>)> = match js.right.get(&kb) {
            Some(m) => m
                .range((ts.saturating_sub(si.within), 0)..=(ts.saturating_add(si.within), u64::MAX))
                .map(|((t, _), (k, v))| (*t, k.clone(), v.clone()))
                .collect(),
            None => Vec::new(),
        };
        let entry = LeftEntry { row: row.clone(), matched: !matches.is_empty() };
        let v = encode_left(&entry.row, entry.matched, si);
        js.expiry.insert((ts, 0, kb.clone(), offset));
        js.left.entry(kb.clone()).or_default().insert((ts, offset), entry);
        changes.push(Change {
            store: si.left_store,
            key: join_store_key(&kb, ts, offset),
            value: Some(v),
            timestamp: ts,
            existed: false,
        });
        matches
            .into_iter()
            .map(|(rt, rk, rv)| {
                let mut r = row.clone();
                r.joined.push(Some((rk, rv)));
                (r, ts.max(rt))
            })
            .collect()
    }

    /// The next stored record of join `side` no later record can match any more (time +
    /// 2 × within ≤ stream time: a record that could match it would be late): removed, with a
    /// store tombstone. `Some(Some((row, t)))` for an unmatched main-side record of a left join,
    /// to emit now; `Some(None)` for any other; None when nothing expires.
    pub(crate) fn expire_next(
        &mut self,
        side: usize,
        si: &StreamInput,
        changes: &mut Vec<Change>,
    ) -> Option<Option<(Row, i64)>> {
        let horizon = self.time.saturating_sub(si.within.saturating_mul(2));
        let js = &mut self.sides[side];
        let (t, _, _, _) = js.expiry.first()?;
        if *t > horizon {
            return None;
        }
        let (t, which, kb, off) = js.expiry.pop_first()?;
        let store = if which == 0 { si.left_store } else { si.right_store };
        changes.push(Change { store, key: join_store_key(&kb, t, off), value: None, timestamp: t, existed: true });
        if which == 1 {
            if let Some(m) = js.right.get_mut(&kb) {
                m.remove(&(t, off));
                if m.is_empty() {
                    js.right.remove(&kb);
                }
            }
            return Some(None);
        }
        let mut entry = None;
        if let Some(m) = js.left.get_mut(&kb) {
            entry = m.remove(&(t, off));
            if m.is_empty() {
                js.left.remove(&kb);
            }
        }
        Some(entry.filter(|e| si.left && !e.matched).map(|e| {
            let mut r = e.row;
            r.joined.push(None);
            (r, t)
        }))
    }
}

/// A main-side record kept for a stream–stream join.
#[derive(Clone, Debug)]
struct LeftEntry {
    row: Row,
    /// Joined with at least one record of the other side (a left join then emits no null row).
    matched: bool,
}

/// A joined stream's record kept for a join: its key and value.
type RightEntry = (Value, Arc<Vec<Value>>);

/// Both sides of one stream–stream join, by key bytes then (time, offset).
#[derive(Default)]
struct JoinState {
    left: FxHashMap<Vec<u8>, BTreeMap<(i64, u64), LeftEntry>>,
    right: FxHashMap<Vec<u8>, BTreeMap<(i64, u64), RightEntry>>,
    /// Every stored record by (time, side: 0 main / 1 other, key bytes, offset).
    expiry: BTreeSet<(i64, u8, Vec<u8>, u64)>,
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
    write_record(&wire_row(row, &si.wire), &si.wire, &mut o);
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
    Ok(LeftEntry { row: Row { key, value, joined, tenant }, matched: raw.m })
}
