//! An aggregate's state in a task: one entry per (group key, window), its encoding in the store,
//! and the record cache every window kind works on (entries, the keys changed since the last
//! flush in first-change order, and the open windows by the time they close).

use std::collections::BTreeMap;

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

#[derive(Clone)]
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

/// The next states of a record's user-defined aggregate calls, computed by [`check_states`]
/// and put in place by [`apply_states`], in the same order (the vectors are reused).
pub(crate) struct Staged {
    /// The calls [`check_states`] checks: the user-defined ones and the built-in ones that
    /// can fail ([`crate::aggregate::Native::infallible`]), by index.
    checked: Vec<usize>,
    /// `checked` is one built-in call.
    one_native: bool,
    next: Vec<Vec<Value>>,
    used: usize,
    spare: Vec<Vec<Value>>,
}

impl Staged {
    pub(crate) fn new(agg: &AggSpec) -> Staged {
        let checked: Vec<usize> = (0..agg.aggs.len())
            .filter(|&i| !matches!(&agg.aggs[i].func, AggFunc::Native(n) if n.infallible()))
            .collect();
        let one_native = matches!(checked.as_slice(), [i] if matches!(agg.aggs[*i].func, AggFunc::Native(_)));
        Staged { checked, one_native, next: Vec::new(), used: 0, spare: Vec::new() }
    }

    /// A record going to `windows` windows needs no check before it is applied: one window, and
    /// at most one call that can fail, a built-in one (which changes nothing when it fails), and
    /// [`apply_states`] applies it first.
    pub(crate) fn one_check(&self, windows: usize) -> bool {
        windows == 1 && (self.checked.is_empty() || self.one_native)
    }

    /// No call of the aggregate needs checking.
    pub(crate) fn nothing_to_check(&self) -> bool {
        self.checked.is_empty()
    }

    /// Start a record: what the last one staged (the states it replaced) is reused.
    pub(crate) fn clear(&mut self) {
        self.spare.append(&mut self.next);
        self.used = 0;
    }
}

/// Whether adding one record's arguments (at event time `ts`) to each of an entry's states
/// would succeed, nothing changed: a record is applied to all of an aggregate's calls and
/// windows or to none of them, so every state is checked before any is updated. A
/// user-defined aggregate's next state is computed here, into `staged`.
pub(crate) fn check_states(
    agg: &AggSpec,
    states: &[AggState],
    args: &AggArgs,
    ts: i64,
    staged: &mut Staged,
) -> Result<(), String> {
    for &i in &staged.checked {
        let (Some(a), Some(st), Some(argv)) = (agg.aggs.get(i), states.get(i), args.get(i)) else { continue };
        match (&a.func, st) {
            (AggFunc::Native(n), AggState::Native(s)) => n.check(s, argv, ts)?,
            (AggFunc::User(d), AggState::User(s)) => {
                let mut next = staged.spare.pop().unwrap_or_default();
                next.clear();
                next.extend_from_slice(s);
                uda_update(d, &mut next, argv)?;
                staged.next.push(next);
            }
            _ => return Err("aggregate state does not match its function".into()),
        }
    }
    Ok(())
}

/// Add one record's arguments to each of an entry's states, after [`check_states`] passed
/// over the same states (`checked`; a user-defined aggregate's next state is taken from
/// `staged`); or unchecked when [`Staged::one_check`] says a failure cannot leave the entry half
/// updated: the one call that can fail goes first.
pub(crate) fn apply_states(
    agg: &AggSpec,
    states: &mut [AggState],
    args: &AggArgs,
    ts: i64,
    staged: &mut Staged,
    checked: bool,
) -> Result<(), String> {
    let first = match (checked, staged.checked.first()) {
        (false, Some(&i)) => {
            if let (Some(a), Some(st), Some(argv)) = (agg.aggs.get(i), states.get_mut(i), args.get(i)) {
                update_state(a, st, argv, ts)?;
            }
            Some(i)
        }
        _ => None,
    };
    for (i, ((a, st), argv)) in agg.aggs.iter().zip(states.iter_mut()).zip(args).enumerate() {
        if Some(i) == first {
            continue;
        }
        match (&a.func, st) {
            (AggFunc::Native(n), AggState::Native(s)) => n.update(s, argv, ts)?,
            (AggFunc::User(_), AggState::User(s)) => {
                let next = staged.next.get_mut(staged.used).ok_or("internal: a user aggregate's state not staged")?;
                std::mem::swap(s, next);
                staged.used += 1;
            }
            _ => return Err("aggregate state does not match its function".into()),
        }
    }
    Ok(())
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

/// A key's bytes as the record cache holds them: inline up to 24 bytes, so that finding a key
/// compares bytes in the table itself instead of following a pointer to each candidate's bytes.
pub(crate) type KeyBytes = smallvec::SmallVec<[u8; 24]>;

/// A window (or an unwindowed aggregate's entry) in the record cache: its key, by the id the
/// cache gave the key's bytes, and its start (0 unwindowed). Copied freely: the first-change
/// list and the close-time buckets hold these, not store keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Win {
    key: u32,
    pub(crate) start: i64,
}

/// One key's entries in the record cache: its windows by start, sorted.
struct KeySlots {
    bytes: KeyBytes,
    starts: smallvec::SmallVec<[i64; 6]>,
    slots: Vec<Slot>,
}

/// The record cache's entries. Each key's bytes are looked up once per record (hashed once,
/// compared once) and get an id; a key's windows sit together under it, found by start. A key
/// that has lost its last window keeps its id until [`Slots::sweep`] (at the end of a flush, when
/// no list holds a [`Win`] of it any more).
pub(crate) struct Slots {
    /// The store keys of windowed entries end with the start.
    windowed: bool,
    ids: FxHashMap<KeyBytes, u32>,
    keys: Vec<KeySlots>,
    free: Vec<u32>,
    /// Keys that lost their last window since the last sweep.
    emptied: Vec<u32>,
    len: usize,
}

impl Slots {
    fn new(windowed: bool) -> Slots {
        Slots { windowed, ids: FxHashMap::default(), keys: Vec::new(), free: Vec::new(), emptied: Vec::new(), len: 0 }
    }

    /// Entries in the cache.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The id of a key's bytes, given one if it has none.
    pub(crate) fn key_id(&mut self, kb: &[u8]) -> u32 {
        if let Some(id) = self.ids.get(kb) {
            return *id;
        }
        let ks = KeySlots { bytes: KeyBytes::from_slice(kb), starts: Default::default(), slots: Vec::new() };
        let id = match self.free.pop() {
            Some(id) => {
                self.keys[id as usize] = ks;
                id
            }
            None => {
                self.keys.push(ks);
                (self.keys.len() - 1) as u32
            }
        };
        self.ids.insert(KeyBytes::from_slice(kb), id);
        id
    }

    /// The window of key `id` at `start` (its id need not have an entry there).
    pub(crate) fn win(&self, id: u32, start: i64) -> Win {
        Win { key: id, start: if self.windowed { start } else { 0 } }
    }

    /// The window a store key names, its key given an id if it has none.
    pub(crate) fn win_of(&mut self, sk: &[u8]) -> Win {
        let id = self.key_id(key_part(sk));
        self.win(id, start_part(sk))
    }

    fn at(&self, w: Win) -> Option<(&KeySlots, usize)> {
        let ks = self.keys.get(w.key as usize)?;
        let i = ks.starts.binary_search(&w.start).ok()?;
        Some((ks, i))
    }

    pub(crate) fn get(&self, w: Win) -> Option<&Slot> {
        self.at(w).map(|(ks, i)| &ks.slots[i])
    }

    pub(crate) fn get_mut(&mut self, w: Win) -> Option<&mut Slot> {
        let ks = self.keys.get_mut(w.key as usize)?;
        let i = ks.starts.binary_search(&w.start).ok()?;
        Some(&mut ks.slots[i])
    }

    pub(crate) fn contains(&self, w: Win) -> bool {
        self.at(w).is_some()
    }

    /// The entry of `w`, made by `make` if it has none (true: made now).
    pub(crate) fn get_or_insert_with(&mut self, w: Win, make: impl FnOnce() -> Slot) -> (&mut Slot, bool) {
        let ks = &mut self.keys[w.key as usize];
        match ks.starts.binary_search(&w.start) {
            Ok(i) => (&mut ks.slots[i], false),
            Err(i) => {
                ks.starts.insert(i, w.start);
                ks.slots.insert(i, make());
                self.len += 1;
                (&mut ks.slots[i], true)
            }
        }
    }

    /// Put `slot` at `w`, replacing what was there.
    pub(crate) fn insert(&mut self, w: Win, slot: Slot) {
        let mut slot = Some(slot);
        let (s, _) = self.get_or_insert_with(w, || slot.take().unwrap_or_else(|| Slot::new(None, false)));
        if let Some(slot) = slot {
            *s = slot;
        }
    }

    pub(crate) fn remove(&mut self, w: Win) -> Option<Slot> {
        let ks = self.keys.get_mut(w.key as usize)?;
        let i = ks.starts.binary_search(&w.start).ok()?;
        ks.starts.remove(i);
        let slot = ks.slots.remove(i);
        self.len -= 1;
        if ks.starts.is_empty() {
            self.emptied.push(w.key);
        }
        Some(slot)
    }

    /// Keep only the entries `keep` says to keep.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Slot) -> bool) {
        for (id, ks) in self.keys.iter_mut().enumerate() {
            if ks.starts.is_empty() {
                continue;
            }
            let mut i = 0;
            while i < ks.slots.len() {
                if keep(&ks.slots[i]) {
                    i += 1;
                } else {
                    ks.slots.remove(i);
                    ks.starts.remove(i);
                    self.len -= 1;
                }
            }
            if ks.starts.is_empty() {
                self.emptied.push(id as u32);
            }
        }
    }

    /// Forget the keys that have no window any more (none of their [`Win`]s may be held
    /// anywhere: a flush has run).
    pub(crate) fn sweep(&mut self) {
        for id in std::mem::take(&mut self.emptied) {
            let Some(ks) = self.keys.get_mut(id as usize) else { continue };
            // (Listed twice, or given windows again since: nothing to do.)
            if ks.starts.is_empty() && self.ids.get(&ks.bytes[..]) == Some(&id) {
                self.ids.remove(&ks.bytes[..]);
                ks.bytes = KeyBytes::new();
                ks.slots = Vec::new();
                self.free.push(id);
            }
        }
    }

    /// The key bytes of a window's key.
    pub(crate) fn key_bytes(&self, w: Win) -> &[u8] {
        self.keys.get(w.key as usize).map_or(&[][..], |ks| &ks.bytes[..])
    }

    /// The store key of a window (see [`store_key`]).
    pub(crate) fn store_key(&self, w: Win) -> Vec<u8> {
        store_key(self.key_bytes(w), self.windowed.then_some(w.start))
    }

    /// Windows in the order of their store keys: by key (length first, as the store key's length
    /// prefix sorts), then start.
    fn cmp(&self, a: &Win, b: &Win) -> std::cmp::Ordering {
        let (ka, kb) = (self.key_bytes(*a), self.key_bytes(*b));
        ka.len().cmp(&kb.len()).then_with(|| ka.cmp(kb)).then(a.start.cmp(&b.start))
    }
}

/// An aggregate's record cache: every open window (loaded at start, so a window missing from
/// it does not exist) and recently used unwindowed entries.
pub(crate) struct Cache {
    pub(crate) slots: Slots,
    /// Windows changed since the last flush, in first-change order.
    pub(crate) dirty: Vec<Win>,
    /// Open windows by the time they close (end [+ gap for sessions, + 1 for sliding]).
    pub(crate) windows: Expiry,
    /// The states of a new entry (`init` is constant: evaluated once, here).
    pub(crate) init: Result<Vec<AggState>, String>,
    /// The record being added's next user-aggregate states ([`check_states`]).
    pub(crate) staged: Staged,
    /// When one input record can bring several rows (after an `explode` or a stream–stream
    /// join; tumbling, hopping and unwindowed aggregates): the windows the record being
    /// processed changed, each as it was before, and the length of `dirty` then; see
    /// [`Cache::settle`].
    pub(crate) journal: Option<Journal>,
}

#[derive(Default)]
pub(crate) struct Journal {
    before: Vec<(Win, Option<Slot>)>,
    /// The windows in `before`.
    seen: rustc_hash::FxHashSet<Win>,
    dirty: Option<usize>,
}

impl Cache {
    pub(crate) fn new(agg: &AggSpec) -> Cache {
        let sessions = matches!(agg.window.map(|w| w.kind), Some(WindowKind::Session { .. }));
        Cache {
            slots: Slots::new(agg.window.is_some()),
            dirty: Vec::new(),
            windows: Expiry { movable: sessions, buckets: BTreeMap::new() },
            init: init_states(agg),
            staged: Staged::new(agg),
            journal: None,
        }
    }

    /// Window `w` is about to change: kept as it is, the first time for the record.
    pub(crate) fn journal(&mut self, w: Win) {
        let Some(j) = &mut self.journal else { return };
        if !j.seen.insert(w) {
            return;
        }
        j.dirty.get_or_insert(self.dirty.len());
        j.before.push((w, self.slots.get(w).cloned()));
    }

    /// The record being processed is through (`ok`): what it changed stays; or it failed, and
    /// every window it changed is as it was before it.
    pub(crate) fn settle(&mut self, ok: bool) {
        let Some(j) = &mut self.journal else { return };
        let dirty = j.dirty.take();
        j.seen.clear();
        if ok {
            j.before.clear();
            return;
        }
        let before: Vec<(Win, Option<Slot>)> = j.before.drain(..).collect();
        for (w, slot) in before.into_iter().rev() {
            match slot {
                Some(s) => self.slots.insert(w, s),
                None => {
                    self.slots.remove(w);
                }
            }
        }
        if let Some(n) = dirty {
            self.dirty.truncate(n);
        }
    }

    /// Mark a cached entry changed since the last flush.
    pub(crate) fn mark_dirty(&mut self, w: Win) {
        if self.slots.get_mut(w).is_some_and(Slot::touch) {
            self.dirty.push(w);
        }
    }

    /// The windows of the first close time if it is at or before `close`: that time and the
    /// windows, in store-key order, each once.
    pub(crate) fn pop_due(&mut self, close: i64) -> Option<(i64, Vec<Win>)> {
        let at = *self.windows.buckets.first_key_value().filter(|(at, _)| **at <= close)?.0;
        let mut wins = self.windows.buckets.remove(&at)?;
        wins.sort_unstable_by(|a, b| self.slots.cmp(a, b));
        wins.dedup();
        Some((at, wins))
    }
}

/// Open windows by the time they close, a bucket per time: adding one compares nothing, and a
/// bucket is sorted by store key when it closes (so windows close in (time, key) order; a window
/// added twice is one). Sessions, whose close time moves as they grow or merge, are taken out of
/// their bucket when it does ([`Expiry::remove`]).
pub(crate) struct Expiry {
    /// Close times move (sessions).
    movable: bool,
    buckets: BTreeMap<i64, Vec<Win>>,
}

impl Expiry {
    /// Window `w` closes at `at`.
    pub(crate) fn insert(&mut self, at: i64, w: Win) {
        self.buckets.entry(at).or_default().push(w);
    }

    /// Window `w` no longer closes at `at` (a session that grew or merged).
    pub(crate) fn remove(&mut self, at: i64, w: Win) {
        if !self.movable {
            return;
        }
        if let Some(b) = self.buckets.get_mut(&at) {
            b.retain(|x| *x != w);
            if b.is_empty() {
                self.buckets.remove(&at);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.buckets.clear();
    }
}
