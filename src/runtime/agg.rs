//! An aggregate's state in a task: one entry per (group key, window), its encoding in the store,
//! and the record cache every window kind works on (entries, the keys changed since the last
//! flush in first-change order, and the open windows by the time they close).

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use crate::ast::WindowKind;
use crate::eval::{uda_init, uda_merge, uda_result, uda_undo, uda_update};
use crate::hir::{self, AggFunc};
use crate::plan::physical::AggSpec;
use crate::runtime::bin;
use crate::types::Type;
use crate::value::{decode_value, Value};

/// The state of one (key, window) of an aggregate.
#[derive(Clone, Debug)]
pub(crate) struct AggEntry {
    pub(crate) group: Vec<Value>,
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) max_ts: i64,
    pub(crate) states: Vec<AggState>,
    /// A grouped table's aggregate: how many rows the group holds (at 0 it is deleted). Stored
    /// only for those ([`AggSpec::table`]).
    pub(crate) rows: i64,
}

#[derive(Clone, Debug)]
pub(crate) enum AggState {
    /// A built-in aggregate's state, a value of its call's `state_ty`.
    Native(Value),
    User(Vec<Value>),
}

/// One record's aggregate arguments: per aggregate call, its argument values.
pub(crate) type AggArgs = Vec<Vec<Value>>;

pub(crate) struct Slot {
    pub(crate) entry: Option<AggEntry>,
    pub(crate) dirty: bool,
    /// The entry is in the local store and its changelog (so closing it needs a tombstone).
    pub(crate) stored: bool,
    /// The bounds the entry was last sent downstream with (so deleting it, or a session
    /// moving to other bounds, needs a tombstone there naming them).
    pub(crate) emitted: Option<(i64, i64)>,
    /// A session merged into another: deleted at the next flush (`entry` keeps its bounds).
    pub(crate) deleted: bool,
}

impl Slot {
    pub(crate) fn new(entry: Option<AggEntry>, stored: bool) -> Slot {
        // A stored entry was sent as stored (with `emit changes` a flush sends what it stores).
        let emitted = entry.as_ref().filter(|_| stored).map(|e| (e.start, e.end));
        Slot { entry, dirty: false, stored, emitted, deleted: false }
    }

    /// Mark the slot changed since the last flush; true the first time (its key then goes on
    /// the first-change list).
    pub(crate) fn touch(&mut self) -> bool {
        !std::mem::replace(&mut self.dirty, true)
    }
}

/// Store keys: the key's bytes, length-prefixed, then for windows the start (big-endian, sign
/// flipped) so that one key's windows sort by start.
pub(crate) fn store_key(kb: &[u8], start: Option<i64>) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + kb.len() + 8);
    store_key_into(&mut k, kb, start);
    k
}

pub(crate) fn store_key_into(k: &mut Vec<u8>, kb: &[u8], start: Option<i64>) {
    k.extend_from_slice(&(kb.len() as u32).to_be_bytes());
    k.extend_from_slice(kb);
    if let Some(s) = start {
        k.extend_from_slice(&((s as u64) ^ (1 << 63)).to_be_bytes());
    }
}

/// Store-key prefix of a sliding-window aggregate's recent records (after it: the key and time
/// as in a window's store key). Window keys start with a length that is never this.
pub(crate) const SLIDE_RECORDS: &[u8] = b"\xff\xff\xff\xfer";

/// Recent records at one time as stored: `[[arguments of each aggregate, flattened], …]`.
pub(crate) fn encode_slide_records(list: &[Vec<Vec<Value>>], agg: &AggSpec) -> Vec<u8> {
    let mut o = Vec::with_capacity(32 * list.len());
    o.push(b'[');
    for (i, rec) in list.iter().enumerate() {
        if i > 0 {
            o.push(b',');
        }
        o.push(b'[');
        let mut first = true;
        for (argv, a) in rec.iter().zip(&agg.aggs) {
            for (v, e) in argv.iter().zip(&a.args) {
                if !first {
                    o.push(b',');
                }
                first = false;
                v.write_json(&e.ty, &mut o);
            }
        }
        o.extend_from_slice(b"]");
    }
    o.push(b']');
    o
}

pub(crate) fn decode_slide_records(b: &[u8], agg: &AggSpec) -> Result<Vec<Vec<Vec<Value>>>, String> {
    let raw: Vec<Vec<&serde_json::value::RawValue>> =
        serde_json::from_slice(b).map_err(|e| format!("damaged window records: {e}"))?;
    raw.iter()
        .map(|flat| {
            let mut it = flat.iter();
            agg.aggs
                .iter()
                .map(|a| {
                    a.args
                        .iter()
                        .map(|e| decode_value(it.next().ok_or("missing argument")?.get().as_bytes(), &e.ty))
                        .collect::<Result<Vec<_>, String>>()
                })
                .collect()
        })
        .collect()
}

/// The key bytes of a store key.
pub(crate) fn key_part(sk: &[u8]) -> &[u8] {
    let n = sk.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize).unwrap_or(0);
    sk.get(4..4 + n).unwrap_or(&[])
}

/// The window start of a windowed store key.
pub(crate) fn start_part(sk: &[u8]) -> i64 {
    let n = sk.len();
    match sk.get(n.saturating_sub(8)..) {
        Some(b) if n >= 12 => (u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) ^ (1 << 63)) as i64,
        _ => 0,
    }
}

/// Combine a second state into the first (sessions that merge).
pub(crate) fn merge_states(agg: &AggSpec, into: &mut [AggState], other: Vec<AggState>) -> Result<(), String> {
    for ((a, st), o) in agg.aggs.iter().zip(into.iter_mut()).zip(other) {
        match (&a.func, st, o) {
            (AggFunc::Native(n), AggState::Native(s), AggState::Native(o)) => n.merge(s, o)?,
            (AggFunc::User(d), AggState::User(s), AggState::User(o)) => uda_merge(d, s, o)?,
            _ => return Err("aggregate state does not match its function".into()),
        }
    }
    Ok(())
}

fn init_states(agg: &AggSpec) -> Result<Vec<AggState>, String> {
    agg.aggs
        .iter()
        .map(|a| {
            Ok(match &a.func {
                AggFunc::Native(n) => AggState::Native(n.init()),
                AggFunc::User(d) => AggState::User(uda_init(d)?),
            })
        })
        .collect()
}

/// Take one record's arguments back out of an aggregate's state (a grouped table's old row).
pub(crate) fn retract_state(a: &hir::AggCall, st: &mut AggState, args: &[Value]) -> Result<(), String> {
    match (&a.func, st) {
        (AggFunc::Native(n), AggState::Native(s)) => n.retract(s, args),
        (AggFunc::User(d), AggState::User(s)) => uda_undo(d, s, args),
        _ => Err("aggregate state does not match its function".into()),
    }
}

/// Add one record's arguments (at event time `ts`) to an aggregate's state.
pub(crate) fn update_state(a: &hir::AggCall, st: &mut AggState, args: &[Value], ts: i64) -> Result<(), String> {
    match (&a.func, st) {
        (AggFunc::Native(n), AggState::Native(s)) => n.update(s, args, ts),
        (AggFunc::User(d), AggState::User(s)) => uda_update(d, s, args),
        _ => Err("aggregate state does not match its function".into()),
    }
}

pub(crate) fn state_result(a: &hir::AggCall, st: &AggState) -> Result<Value, String> {
    Ok(match (&a.func, st) {
        (AggFunc::Native(n), AggState::Native(s)) => n.result(s),
        (AggFunc::User(d), AggState::User(s)) => uda_result(d, s)?,
        _ => Value::Null,
    })
}

/// The values of an entry's result row: window bounds (windowed), the group values, then each
/// aggregate's result.
pub(crate) fn result_values(agg: &AggSpec, e: &AggEntry) -> Result<Vec<Value>, String> {
    let mut value = Vec::with_capacity(2 + e.group.len() + e.states.len());
    if agg.window.is_some() {
        value.push(Value::Ts(e.start));
        value.push(Value::Ts(e.end));
    }
    value.extend(e.group.iter().cloned());
    for (a, st) in agg.aggs.iter().zip(&e.states) {
        value.push(state_result(a, st)?);
    }
    Ok(value)
}

/// The first byte of an entry in the binary encoding (version 1). Entries written before it are
/// JSON (their first byte is `{`) and are still read.
const ENTRY_V1: u8 = 1;

/// Entries are stored (locally and in the changelog) in a binary encoding ([`crate::runtime::bin`]):
/// the version byte 1; start, end and the latest event time (i64 LE each); the group values
/// (a count, then each); a count of states, then each state: 0 and its value (a built-in
/// aggregate's) or 1 and its values (a user-defined aggregate's); for a grouped table's
/// aggregate, last, the group's row count (i64 LE).
pub(crate) fn encode_entry(e: &AggEntry, agg: &AggSpec) -> Vec<u8> {
    let mut o = Vec::with_capacity(96);
    o.push(ENTRY_V1);
    for t in [e.start, e.end, e.max_ts] {
        o.extend_from_slice(&t.to_le_bytes());
    }
    bin::write_values(&e.group, &mut o);
    bin::write_len(&mut o, e.states.len());
    for st in &e.states {
        match st {
            AggState::Native(v) => {
                o.push(0);
                bin::write_value(v, &mut o);
            }
            AggState::User(vals) => {
                o.push(1);
                bin::write_values(vals, &mut o);
            }
        }
    }
    if agg.table {
        o.extend_from_slice(&e.rows.to_le_bytes());
    }
    o
}

/// An entry in the binary encoding, checked against the aggregate's shape (group values,
/// aggregates, each state's kind and size).
fn decode_entry_v1(b: &[u8], agg: &AggSpec) -> Result<AggEntry, String> {
    let mut r = bin::Reader { b };
    let (start, end, max_ts) = (r.i64()?, r.i64()?, r.i64()?);
    let group = r.values()?;
    if group.len() != agg.group.len() {
        return Err(format!("{} group values, not {}", group.len(), agg.group.len()));
    }
    let n = r.len()?;
    if n != agg.aggs.len() {
        return Err(format!("{n} aggregate states, not {}", agg.aggs.len()));
    }
    let mut states = Vec::with_capacity(n);
    for c in &agg.aggs {
        states.push(match (r.u8()?, &c.func) {
            (0, AggFunc::Native(_)) => AggState::Native(r.value()?),
            (1, AggFunc::User(d)) => {
                let vals = r.values()?;
                if vals.len() != d.state.len() {
                    return Err(format!("`{}` has {} state values, not {}", c.name, vals.len(), d.state.len()));
                }
                AggState::User(vals)
            }
            (k, _) => return Err(format!("state kind {k} does not match `{}`", c.name)),
        });
    }
    let rows = if agg.table { r.i64()? } else { 0 };
    if !r.is_empty() {
        return Err("bytes after the entry".into());
    }
    Ok(AggEntry { group, start, end, max_ts, states, rows })
}

/// The stored form of an entry, parsed once; each part is then decoded by its type.
#[derive(serde::Deserialize)]
pub(crate) struct StoredEntry<'a> {
    #[serde(borrow)]
    pub(crate) g: Vec<&'a serde_json::value::RawValue>,
    pub(crate) s: i64,
    pub(crate) e: i64,
    pub(crate) t: i64,
    #[serde(borrow)]
    pub(crate) a: Vec<&'a serde_json::value::RawValue>,
}

pub(crate) fn decode_entry(b: &[u8], agg: &AggSpec) -> Result<AggEntry, String> {
    match b.first() {
        Some(&ENTRY_V1) => decode_entry_v1(&b[1..], agg).map_err(|e| format!("damaged state entry: {e}")),
        _ => decode_entry_json(b, agg),
    }
}

/// An entry as JSON, as it was stored before the binary encoding:
/// `{"g": [group values], "s": start, "e": end, "t": max event time, "a": [states]}`.
fn decode_entry_json(b: &[u8], agg: &AggSpec) -> Result<AggEntry, String> {
    let raw: StoredEntry = serde_json::from_slice(b).map_err(|e| format!("damaged state entry: {e}"))?;
    let part = |r: &serde_json::value::RawValue, ty: &Type| decode_value(r.get().as_bytes(), ty);
    let group = raw.g.iter().zip(&agg.group).map(|(x, e)| part(x, &e.ty)).collect::<Result<Vec<_>, _>>()?;
    let states = raw
        .a
        .iter()
        .zip(&agg.aggs)
        .map(|(x, c)| {
            Ok(match &c.func {
                AggFunc::Native(_) => AggState::Native(part(x, &c.state_ty)?),
                AggFunc::User(d) => {
                    let vals: Vec<&serde_json::value::RawValue> =
                        serde_json::from_str(x.get()).map_err(|e| format!("bad aggregate state: {e}"))?;
                    AggState::User(
                        vals.iter().zip(&d.state).map(|(v, (_, t))| part(v, t)).collect::<Result<Vec<_>, String>>()?,
                    )
                }
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(AggEntry { group, start: raw.s, end: raw.e, max_ts: raw.t, states, rows: 0 })
}

/// A store key as the record cache holds it: inline up to 24 bytes (a short key and a window
/// start), so that finding an entry compares bytes in the table itself instead of following a
/// pointer to each candidate's key (a cache miss per lookup, several per record).
pub(crate) type SlotKey = smallvec::SmallVec<[u8; 24]>;

/// The cache's form of a store key.
pub(crate) fn slot_key(sk: &[u8]) -> SlotKey {
    SlotKey::from_slice(sk)
}

/// An aggregate's record cache: every open window (loaded at start, so a window missing from
/// it does not exist) and recently used unwindowed entries.
pub(crate) struct Cache {
    pub(crate) slots: FxHashMap<SlotKey, Slot>,
    /// Keys changed since the last flush, in first-change order.
    pub(crate) dirty: Vec<SlotKey>,
    /// Open windows by the time they close (end [+ gap for sessions, + 1 for sliding]).
    pub(crate) windows: Expiry,
    /// Scratch space for store keys on the hot path.
    pub(crate) key_buf: Vec<u8>,
    /// The states of a new entry (`init` is constant: evaluated once, here).
    pub(crate) init: Result<Vec<AggState>, String>,
}

impl Cache {
    pub(crate) fn new(agg: &AggSpec) -> Cache {
        let sessions = matches!(agg.window.map(|w| w.kind), Some(WindowKind::Session { .. }));
        Cache {
            slots: FxHashMap::default(),
            dirty: Vec::new(),
            windows: Expiry { movable: sessions, buckets: BTreeMap::new(), sets: BTreeMap::new() },
            key_buf: Vec::new(),
            init: init_states(agg),
        }
    }
}

/// Store keys of open windows by the time they close. Windows whose close time never changes
/// (tumbling, hopping, sliding) go in one bucket per time: adding one compares no keys, and a
/// bucket is sorted by key when it closes (so windows close in (time, key) order; a key added
/// twice is one). Sessions, whose close time moves as they grow or merge, go in an ordered set
/// per time that they are removed from ([`Expiry::remove`]).
pub(crate) struct Expiry {
    /// Close times move (sessions): keys are kept in `sets`, not `buckets`.
    movable: bool,
    buckets: BTreeMap<i64, Vec<SlotKey>>,
    sets: BTreeMap<i64, BTreeSet<SlotKey>>,
}

impl Expiry {
    /// The window stored at `sk` closes at `at`.
    pub(crate) fn insert(&mut self, at: i64, sk: &[u8]) {
        if self.movable {
            self.sets.entry(at).or_default().insert(slot_key(sk));
        } else {
            self.buckets.entry(at).or_default().push(slot_key(sk));
        }
    }

    /// The window stored at `sk` no longer closes at `at` (a session that grew or merged).
    pub(crate) fn remove(&mut self, at: i64, sk: &[u8]) {
        if let Some(set) = self.sets.get_mut(&at) {
            set.remove(sk);
            if set.is_empty() {
                self.sets.remove(&at);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.buckets.clear();
        self.sets.clear();
    }

    /// The windows of the first close time if it is at or before `close`: that time and their
    /// keys, sorted, each once.
    pub(crate) fn pop_due(&mut self, close: i64) -> Option<(i64, Vec<SlotKey>)> {
        if self.movable {
            let at = *self.sets.first_key_value().filter(|(at, _)| **at <= close)?.0;
            return self.sets.remove(&at).map(|set| (at, set.into_iter().collect()));
        }
        let at = *self.buckets.first_key_value().filter(|(at, _)| **at <= close)?.0;
        let mut keys = self.buckets.remove(&at)?;
        keys.sort_unstable();
        keys.dedup();
        Some((at, keys))
    }
}

impl Cache {
    /// Mark a cached entry changed since the last flush.
    pub(crate) fn mark_dirty(&mut self, sk: &[u8]) {
        if self.slots.get_mut(sk).is_some_and(Slot::touch) {
            self.dirty.push(slot_key(sk));
        }
    }
}
