//! Changes to one store that are not in sled yet ([`Pending`]), packed: each entry's key, value
//! and flags in one run of bytes of a few large buffers, found through a hash table of their
//! positions. Used by commits, restores, standbys and the clean rows kept in memory alike.
//!
//! A map of `Vec` keys to `Vec` values held each row in three allocations and a 56-byte slot
//! (about 190 bytes for a 13-byte key and a 60-byte value, twice that while its table grew):
//! packed, the same row takes its bytes, a 12-byte header and an 8-byte slot.

use std::collections::BTreeMap;
use std::hash::Hasher;

use hashbrown::HashTable;
use rustc_hash::FxHasher;

use crate::runtime::pages::PagedTree;

/// What one entry costs beyond its key and value bytes, at most about: its header (12 bytes) and
/// its slot in the index ([`SLOT`] bytes at a load of 7/16: up to 30 bytes).
pub(crate) const ENTRY_COST: usize = HEADER + 2 * 8 * SLOT / 7;

/// An entry's header: the key's length (its top bit: the key may already be in sled), the room
/// for the value (its top bit: the entry is gone), the value's length ([`DELETED`]: a deletion).
const HEADER: usize = 12;
/// The top bit of the key's length (the key may be in sled) and of the room (the entry is gone).
const FLAG: u32 = 1 << 31;
const DELETED: u32 = u32::MAX;
/// The first buffer's size; each next one is twice the last, up to [`LARGEST`] (an entry larger
/// than that gets a buffer of its own).
const SMALLEST: usize = 4 << 10;
/// What a slot of the index costs: 12 bytes and a control byte (counted per slot the table
/// has, at 8/7 of its capacity; the slots of a table made larger ahead of a restore are not
/// resident until written, so this is the most it holds).
const SLOT: usize = 13;
const LARGEST: usize = 1 << 20;

/// Changes to one store not in sled yet, coalesced by key: key → value or deletion, and whether
/// the key may already be in sled (a deletion of a key that cannot be is dropped, not kept).
#[derive(Default)]
pub(crate) struct Pending {
    /// The entries' bytes, in buffers that never move (a buffer is never grown past the capacity
    /// it was made with): [`Pos`] = buffer index << 32 | offset.
    chunks: Vec<Vec<u8>>,
    /// The position of each live entry, by the hash of its key.
    index: HashTable<Slot>,
    /// Bytes of the buffers held by entries replaced or forgotten (given back by `compact`).
    dead: usize,
    /// Bytes of the buffers held by entries, live or dead.
    used: usize,
    /// The buffers' capacity.
    held: usize,
    /// Live entries that are deletions.
    deletions: usize,
}

/// Where an entry starts: its buffer's index (high 32 bits) and its offset in it.
type Pos = u64;

/// An entry in the index: 32 bits of its key's hash (so that the table grows, and most
/// mismatches are told apart, without reading the entry) and its position.
#[derive(Clone, Copy)]
struct Slot {
    hash: u32,
    chunk: u32,
    at: u32,
}

impl Slot {
    fn new(hash: u32, pos: Pos) -> Slot {
        Slot { hash, chunk: (pos >> 32) as u32, at: pos as u32 }
    }

    fn pos(self) -> Pos {
        (self.chunk as u64) << 32 | self.at as u64
    }
}

fn hash(key: &[u8]) -> u32 {
    let mut h = FxHasher::default();
    h.write(key);
    let h = h.finish();
    (h ^ (h >> 32)) as u32
}

/// The table's hash of a slot's 32 bits: spread over 64 (the table takes its buckets from the
/// low bits and its tags from the top 7).
fn spread(hash: u32) -> u64 {
    (hash as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One entry, read in place.
struct Entry<'a> {
    key: &'a [u8],
    value: Option<&'a [u8]>,
    may_exist: bool,
    /// The room for the value (its bytes, up to which a new value is written in place).
    room: usize,
    /// Replaced or forgotten: no longer in the index, its bytes given back by `compact`.
    gone: bool,
}

impl Entry<'_> {
    /// The bytes it takes in its buffer.
    fn size(&self) -> usize {
        HEADER + self.key.len() + self.room
    }
}

fn len32(n: usize) -> u32 {
    // (Records are bounded far below this: embedded.max_message_bytes is at most 1 GiB.)
    u32::try_from(n).ok().filter(|n| *n < FLAG).expect("a key or value under 2 GiB")
}

/// The entry at offset `at` of buffer `b`.
fn entry_in(b: &[u8], at: usize) -> Entry<'_> {
    let b = &b[at..];
    let k = u32_at(b, 0);
    let r = u32_at(b, 4);
    let vlen = u32_at(b, 8);
    let klen = (k & !FLAG) as usize;
    let key = &b[HEADER..HEADER + klen];
    let value = (vlen != DELETED).then(|| &b[HEADER + klen..HEADER + klen + vlen as usize]);
    Entry { key, value, may_exist: k & FLAG != 0, room: (r & !FLAG) as usize, gone: r & FLAG != 0 }
}

/// The entry at `pos`.
fn entry(chunks: &[Vec<u8>], pos: Pos) -> Entry<'_> {
    entry_in(&chunks[(pos >> 32) as usize], pos as u32 as usize)
}

fn key_at(chunks: &[Vec<u8>], pos: Pos) -> &[u8] {
    entry(chunks, pos).key
}

/// Mark the entry at `pos` gone (see [`Entry::gone`]).
fn mark_gone(chunks: &mut [Vec<u8>], pos: Pos) {
    let b = &mut chunks[(pos >> 32) as usize];
    let at = pos as u32 as usize + 4;
    let r = u32_at(b, at) | FLAG;
    b[at..at + 4].copy_from_slice(&r.to_le_bytes());
}

/// Every entry not gone, in the order they were written (read in the order of the memory they
/// are in, not of the index: a walk of a large store through its index missed the processor's
/// cache at almost every entry).
fn live(chunks: &[Vec<u8>]) -> impl Iterator<Item = (Pos, Entry<'_>)> {
    chunks.iter().enumerate().flat_map(|(i, c)| {
        let mut at = 0;
        std::iter::from_fn(move || {
            while at < c.len() {
                let pos = (i as u64) << 32 | at as u64;
                let e = entry_in(c, at);
                at += e.size();
                if !e.gone {
                    return Some((pos, e));
                }
            }
            None
        })
    })
}

/// Append an entry to the buffers; its position. A new buffer, when one is needed, is `next`
/// bytes (or the entry's size, if larger).
fn push(
    chunks: &mut Vec<Vec<u8>>,
    (used, held): (&mut usize, &mut usize),
    next: usize,
    key: &[u8],
    value: Option<&[u8]>,
    may_exist: bool,
) -> Pos {
    let room = value.map_or(0, <[u8]>::len);
    let size = HEADER + key.len() + room;
    let fits = chunks.last().is_some_and(|c| c.capacity() - c.len() >= size);
    if !fits {
        chunks.push(Vec::with_capacity(next.max(size)));
        *held += chunks[chunks.len() - 1].capacity();
    }
    let i = chunks.len() - 1;
    let c = &mut chunks[i];
    let at = c.len();
    c.extend_from_slice(&(len32(key.len()) | if may_exist { FLAG } else { 0 }).to_le_bytes());
    c.extend_from_slice(&len32(room).to_le_bytes());
    c.extend_from_slice(&value.map_or(DELETED, |v| len32(v.len())).to_le_bytes());
    c.extend_from_slice(key);
    if let Some(v) = value {
        c.extend_from_slice(v);
    }
    *used += size;
    ((i as u64) << 32) | at as u64
}

impl Pending {
    /// The size of the next buffer: twice the last one, from [`SMALLEST`] up to [`LARGEST`].
    fn next_buffer(&self) -> usize {
        self.chunks.last().map_or(SMALLEST, |c| (c.capacity() * 2).min(LARGEST))
    }

    /// Append an entry; its position.
    fn push(&mut self, key: &[u8], value: Option<&[u8]>, may_exist: bool) -> Pos {
        let next = self.next_buffer();
        push(&mut self.chunks, (&mut self.used, &mut self.held), next, key, value, may_exist)
    }

    fn find(&self, key: &[u8]) -> Option<Pos> {
        let chunks = &self.chunks;
        let h = hash(key);
        self.index.find(spread(h), |s| s.hash == h && key_at(chunks, s.pos()) == key).map(|s| s.pos())
    }

    /// Take the entry at `pos` out: gone from the index and marked so.
    fn take_out(&mut self, hash: u32, pos: Pos) {
        if let Ok(slot) = self.index.find_entry(spread(hash), |s| s.pos() == pos) {
            slot.remove();
        }
        let e = entry(&self.chunks, pos);
        self.dead += e.size();
        self.deletions -= usize::from(e.value.is_none());
        mark_gone(&mut self.chunks, pos);
    }

    /// Set the value of the entry at `pos` (the key's entry), in place if it fits its room,
    /// else as a new entry (with the same flag) that takes the old one's place in the index.
    fn set(&mut self, pos: Pos, key: &[u8], value: Option<&[u8]>) {
        let e = entry(&self.chunks, pos);
        let (room, may_exist, old_size, was_deletion) = (e.room, e.may_exist, e.size(), e.value.is_none());
        self.deletions = self.deletions - usize::from(was_deletion) + usize::from(value.is_none());
        match value {
            Some(v) if v.len() > room => {
                let new = self.push(key, Some(v), may_exist);
                self.dead += old_size;
                mark_gone(&mut self.chunks, pos);
                let h = hash(key);
                if let Some(slot) = self.index.find_mut(spread(h), |s| s.pos() == pos) {
                    *slot = Slot::new(h, new);
                }
                self.compact_if_due();
            }
            _ => {
                let b = &mut self.chunks[(pos >> 32) as usize];
                let at = pos as u32 as usize;
                let vlen = value.map_or(DELETED, |v| v.len() as u32);
                b[at + 8..at + 12].copy_from_slice(&vlen.to_le_bytes());
                if let Some(v) = value {
                    let from = at + HEADER + key.len();
                    b[from..from + v.len()].copy_from_slice(v);
                }
            }
        }
    }

    fn insert(&mut self, key: &[u8], value: Option<&[u8]>, may_exist: bool) {
        let pos = self.push(key, value, may_exist);
        self.deletions += usize::from(value.is_none());
        let h = hash(key);
        self.index.insert_unique(spread(h), Slot::new(h, pos), |s| spread(s.hash));
    }

    /// Record a change. A key created and deleted while pending never reaches sled.
    pub(crate) fn stage(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, may_exist: bool) {
        self.stage_slices(&key, value.as_deref(), may_exist);
    }

    /// [`Pending::stage`], from borrowed bytes.
    pub(crate) fn stage_slices(&mut self, key: &[u8], value: Option<&[u8]>, may_exist: bool) {
        match self.find(key) {
            Some(pos) if value.is_none() && !entry(&self.chunks, pos).may_exist => {
                self.take_out(hash(key), pos);
                self.compact_if_due();
            }
            Some(pos) => self.set(pos, key, value),
            None if value.is_some() || may_exist => self.insert(key, value, may_exist),
            None => {}
        }
    }

    /// The pending change of `key`, if any: its new value, or None for its deletion.
    pub(crate) fn value(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.find(key).map(|p| entry(&self.chunks, p).value)
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// About the memory the pending changes hold, in bytes: the buffers' capacity (live
    /// entries, those not given back yet, room) and the index's slots (see [`SLOT`]).
    pub(crate) fn bytes(&self) -> usize {
        self.held + self.index.capacity() * 8 / 7 * SLOT
    }

    /// [`Pending::bytes`], and what the writer needs beside the changes to write them: the
    /// sorted list of their positions ([`Pending::order`]), [`SORTED`] bytes an entry (and a
    /// window of slices, bounded). Counted for the changes handed to the writer, so that a
    /// share of flights holds its rows and their writing.
    pub(crate) fn bytes_in_flight(&self) -> usize {
        self.bytes() + self.len() * SORTED
    }

    /// Set `key`'s row to `value` (the clean rows' use: no deletion is kept).
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        match self.find(key) {
            Some(pos) => self.set(pos, key, Some(value)),
            None => self.insert(key, Some(value), true),
        }
    }

    /// Forget `key`, if it is here.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        if let Some(pos) = self.find(key) {
            self.take_out(hash(key), pos);
            self.compact_if_due();
        }
    }

    /// Forget the deletions, keeping the rows put.
    pub(crate) fn drop_deletions(&mut self) {
        if self.deletions == 0 {
            return;
        }
        let out: Vec<(u32, Pos)> =
            live(&self.chunks).filter(|(_, e)| e.value.is_none()).map(|(pos, e)| (hash(e.key), pos)).collect();
        for (h, pos) in out {
            self.take_out(h, pos);
        }
        self.compact_if_due();
    }

    /// Forget entries, the earliest written first, until at most about `target` bytes are held
    /// (each entry counted at its bytes and [`ENTRY_COST`]; the buffers are then compacted).
    pub(crate) fn shrink_to(&mut self, target: usize) {
        let mut held = self.used - self.dead + self.index.len() * ENTRY_COST;
        let mut out = Vec::new();
        for (pos, e) in live(&self.chunks) {
            if held <= target {
                break;
            }
            held = held.saturating_sub(e.size() - HEADER + ENTRY_COST);
            out.push((hash(e.key), pos));
        }
        for (h, pos) in out {
            self.take_out(h, pos);
        }
        // A table left much larger than its rows (after removals that did not call for a
        // compaction) would hold the memory the rows dropped held.
        if self.index.len() < self.index.capacity() / 2 {
            self.index.shrink_to_fit(|s| spread(s.hash));
        }
        self.compact();
    }

    /// Give back the bytes of dead entries once they are more than the live ones.
    fn compact_if_due(&mut self) {
        if self.dead > SMALLEST && self.dead * 2 > self.used {
            self.compact();
        }
    }

    /// Copy the live entries into new buffers, in order, dropping the gone ones, and index
    /// them anew (a table about their size: one left much larger than its rows would hold the
    /// memory the rows dropped held).
    fn compact(&mut self) {
        if self.dead == 0 {
            return;
        }
        let old = std::mem::take(&mut self.chunks);
        let n = self.index.len();
        self.index = HashTable::new();
        // Buffers as large as the live entries need (up to the largest size each), so that
        // no room is left over.
        let mut left = self.used - self.dead;
        let (mut chunks, mut used, mut held) = (Vec::new(), 0, 0);
        let mut index = HashTable::with_capacity(n);
        for (_, e) in live(&old) {
            let pos = push(&mut chunks, (&mut used, &mut held), left.min(LARGEST), e.key, e.value, e.may_exist);
            let h = hash(e.key);
            index.insert_unique(spread(h), Slot::new(h, pos), |s: &Slot| spread(s.hash));
            left -= e.size();
        }
        (self.chunks, self.index, self.used, self.held, self.dead) = (chunks, index, used, held, 0);
    }

    /// Every pending change: key → new value or deletion (None), in no particular order.
    pub(crate) fn changes(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        live(&self.chunks).map(|(_, e)| (e.key, e.value))
    }

    /// Take in the rows of `other`, without copying them: its buffers join these, and its
    /// entries join the index. `other_newer`: its rows replace these and its deletions remove
    /// them; else a row of `other` whose key is here is left out. Deletions are not kept (the
    /// clean rows' use: rows only). The cost is an index insertion an entry of `other`, walked
    /// in the order of its memory.
    pub(crate) fn absorb(&mut self, other: Pending, other_newer: bool) {
        let base = self.chunks.len();
        let n = other.index.len();
        self.chunks.extend(other.chunks);
        (self.held, self.used, self.dead) = (self.held + other.held, self.used + other.used, self.dead + other.dead);
        self.index.reserve(n, |s| spread(s.hash));
        for c in base..self.chunks.len() {
            let mut at = 0;
            while at < self.chunks[c].len() {
                let pos = (c as u64) << 32 | at as u64;
                let e = entry_in(&self.chunks[c], at);
                at += e.size();
                if e.gone {
                    continue;
                }
                let (h, size, deletion) = (hash(e.key), e.size(), e.value.is_none());
                let key = e.key;
                let here = self
                    .index
                    .find(spread(h), |s| s.hash == h && key_at(&self.chunks, s.pos()) == key)
                    .map(|s| s.pos());
                let keep = !deletion && (other_newer || here.is_none());
                if let (Some(old), true) = (here, other_newer) {
                    self.take_out(h, old);
                }
                if keep {
                    self.index.insert_unique(spread(h), Slot::new(h, pos), |s| spread(s.hash));
                } else {
                    self.dead += size;
                    mark_gone(&mut self.chunks, pos);
                }
            }
        }
        self.compact_if_due();
    }

    /// Apply the changes to keys starting with `prefix` to `entries` (read from sled).
    pub(crate) fn overlay(&self, prefix: &[u8], entries: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        for (k, v) in self.changes().filter(|(k, _)| k.starts_with(prefix)) {
            match v {
                Some(v) => entries.insert(k.to_vec(), v.to_vec()),
                None => entries.remove(k),
            };
        }
    }

    /// Every change's position in the keys' order, [`SORTED`] bytes an entry: ordered by the
    /// keys' first 16 bytes as numbers first (zero-padded: the same order as the bytes', ties
    /// broken by the whole keys), so that most comparisons are integer comparisons instead of
    /// calls to compare bytes (a third of the writer's time at 1 M keys went to sorting). The
    /// writer turns it into changes a window at a time ([`Pending::changes_at`]): 80 bytes an
    /// entry were held at once, then 48, now 24.
    pub(crate) fn order(&self) -> Vec<Sorted> {
        let mut entries = Vec::with_capacity(self.len());
        entries.extend(live(&self.chunks).map(|(pos, e)| (prefix(e.key), pos)));
        let chunks = &self.chunks;
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| key_at(chunks, a.1).cmp(key_at(chunks, b.1))));
        entries
    }

    /// The changes at the positions of `order` (a part of [`Pending::order`]'s), appended to
    /// `into`.
    pub(crate) fn changes_at<'a>(&'a self, order: &[Sorted], into: &mut Vec<crate::runtime::pages::Change<'a>>) {
        into.extend(order.iter().map(|(_, pos)| {
            let e = entry(&self.chunks, *pos);
            (e.key, e.value)
        }));
    }

    /// Every change, sorted by key.
    pub(crate) fn sorted(&self) -> Vec<crate::runtime::pages::Change<'_>> {
        let order = self.order();
        let mut changes = Vec::with_capacity(order.len());
        self.changes_at(&order, &mut changes);
        changes
    }
}

impl Pending {
    /// Write every change and the checkpoint to the tree in one atomic batch (a standby's copy,
    /// whose changes may pass its task's last commit: sled must hold exactly its checkpoint).
    pub(crate) fn write(&mut self, tree: &PagedTree, checkpoint: &crate::record::Pos) -> Result<(), sled::Error> {
        tree.write(&self.sorted(), Some(checkpoint), true)?;
        *self = Pending::default();
        Ok(())
    }
}

/// An entry of [`Pending::order`]: its key's prefix (see [`prefix`]) and its position.
pub(crate) type Sorted = ([u64; 2], Pos);

/// The bytes an entry of [`Pending::order`]'s list takes.
const SORTED: usize = std::mem::size_of::<Sorted>();

/// A key's first 16 bytes, zero-padded, as two big-endian numbers: two keys' prefixes compare
/// as the keys do, or are equal.
fn prefix(key: &[u8]) -> [u64; 2] {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    let v = u128::from_be_bytes(b);
    [(v >> 64) as u64, v as u64]
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Pending {
        fn clone_for_test(&self) -> Pending {
            let mut p = Pending::default();
            for (k, v) in self.changes() {
                p.stage_slices(k, v, true);
            }
            p
        }
    }

    /// Changes come out in the keys' byte order: keys that share their first 16 bytes, that
    /// end in zero bytes, shorter and longer than 16 bytes.
    #[test]
    fn changes_are_sorted_in_the_keys_byte_order() {
        let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![1], vec![255; 20]];
        let mut x = 7u64;
        for _ in 0..2_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = (x >> 58) as usize % 24;
            // Few distinct bytes, so that many keys share long prefixes and zeros.
            let key: Vec<u8> = (0..len).map(|i| [0u8, 1, 255][((x >> (i % 40)) % 3) as usize]).collect();
            keys.push(key);
        }
        let mut p = Pending::default();
        for (i, k) in keys.iter().enumerate() {
            p.stage(k.clone(), (i % 5 != 0).then(|| vec![i as u8]), true);
        }
        let sorted = p.sorted();
        let got: Vec<Vec<u8>> = sorted.iter().map(|(k, _)| k.to_vec()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(got, keys);
    }

    /// What the packed changes say equals a plain map fed the same operations, through values
    /// that grow, shrink and vanish, deletions of keys that may or may not be in sled,
    /// removals, dropped deletions and trims (each compacting the buffers): the model is
    /// written here, independently, as `stage`'s contract states it.
    #[test]
    fn packed_changes_equal_a_plain_map_fed_the_same_operations() {
        // key → (value or deletion, may exist in sled)
        let mut model: BTreeMap<Vec<u8>, (Option<Vec<u8>>, bool)> = BTreeMap::new();
        let mut p = Pending::default();
        let mut x = 11u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 33
        };
        let mut trims = 0;
        for round in 0..60_000u64 {
            let r = next();
            let key = format!("k{}", r % 3_000).into_bytes();
            let len = (next() % 3 == 0).then(|| (next() % 300) as usize);
            let value = len.map(|n| vec![(round % 251) as u8; n]);
            // (Every 1,000th round drops the deletions and every 5,000th trims to half: on a
            // fixed schedule, so that both run whatever the random draws.)
            if round % 1_000 == 999 {
                p.drop_deletions();
                model.retain(|_, (v, _)| v.is_some());
            }
            if round % 5_000 == 4_999 {
                let target = p.bytes() / 2;
                p.shrink_to(target);
                assert!(p.bytes() <= target, "{} held after a trim to {target}", p.bytes());
                // Which entries went is the packing's choice: the model keeps the others.
                model.retain(|k, _| p.value(k).is_some());
                trims += 1;
            }
            match next() % 20 {
                0 => {
                    p.remove(&key);
                    model.remove(&key);
                }
                3 => {
                    if let Some(v) = &value {
                        p.put(&key, v);
                        match model.get_mut(&key) {
                            Some(e) => e.0 = Some(v.clone()),
                            None => {
                                model.insert(key.clone(), (Some(v.clone()), true));
                            }
                        }
                    }
                }
                _ => {
                    let may_exist = next() % 2 == 0;
                    p.stage(key.clone(), value.clone(), may_exist);
                    match model.get_mut(&key) {
                        Some(e) if value.is_none() && !e.1 => {
                            model.remove(&key);
                        }
                        Some(e) => e.0 = value.clone(),
                        None if value.is_some() || may_exist => {
                            model.insert(key.clone(), (value.clone(), may_exist));
                        }
                        None => {}
                    }
                }
            }
            if round % 997 == 0 {
                let got: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
                    p.changes().map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec))).collect();
                let want: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
                    model.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect();
                assert_eq!(got, want, "round {round}");
                assert_eq!(p.len(), model.len());
                assert_eq!(p.deletions, model.values().filter(|(v, _)| v.is_none()).count());
                // Dead entries never hold more than the live ones for long.
                assert!(p.dead <= (p.used - p.dead).max(SMALLEST) + 400, "{} dead of {}", p.dead, p.used);
            }
            assert_eq!(p.value(&key).map(|v| v.map(<[u8]>::to_vec)), model.get(&key).map(|(v, _)| v.clone()));
        }
        assert_eq!(trims, 12);
    }

    /// A value larger than the largest buffer gets one of its own; the empty key and value.
    /// Rows taken in by moving buffers agree with a plain map fed the same layers, newer over
    /// older and older under newer; deletions remove rows and are not kept; the result is still
    /// a working map (staged into, compacted).
    #[test]
    fn absorbed_rows_equal_a_plain_map_of_the_layers() {
        let layer = |seed: u64, n: usize| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
            let mut x = seed;
            (0..n)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let key = format!("k{}", (x >> 40) % 300).into_bytes();
                    let value = (!(x >> 20).is_multiple_of(4)).then(|| vec![b'v'; ((x >> 8) % 40) as usize]);
                    (key, value)
                })
                .collect()
        };
        let pending = |rows: &[(Vec<u8>, Option<Vec<u8>>)]| {
            let mut p = Pending::default();
            for (k, v) in rows {
                p.stage(k.clone(), v.clone(), true);
            }
            p
        };
        let rows_of = |p: &Pending| -> BTreeMap<Vec<u8>, Vec<u8>> {
            p.changes().filter_map(|(k, v)| Some((k.to_vec(), v?.to_vec()))).collect()
        };
        let (old, new) = (layer(1, 500), layer(2, 200));
        let mut model = BTreeMap::new();
        for (k, v) in old.iter().chain(&new) {
            match v {
                Some(v) => model.insert(k.clone(), v.clone()),
                None => model.remove(k),
            };
        }
        let mut older = pending(&old);
        older.drop_deletions();
        let mut under = older.clone_for_test();
        under.absorb(pending(&new), true);
        assert_eq!(rows_of(&under), model, "newer over older");
        assert_eq!(under.changes().count(), model.len(), "no deletion kept");
        let mut over = pending(&new);
        over.absorb(older, false);
        over.drop_deletions();
        assert_eq!(rows_of(&over), model, "older under newer");
        for (k, v) in &model {
            assert_eq!(under.value(k), Some(Some(v.as_slice())));
        }
        under.stage(b"k1".to_vec(), Some(b"x".to_vec()), true);
        under.remove(b"k2");
        under.compact();
        model.insert(b"k1".to_vec(), b"x".to_vec());
        model.remove(b"k2".as_slice());
        assert_eq!(rows_of(&under), model);
    }

    #[test]
    fn large_values_and_empty_keys() {
        let mut p = Pending::default();
        let big = vec![7u8; LARGEST * 2 + 3];
        p.stage(b"big".to_vec(), Some(big.clone()), false);
        p.stage(Vec::new(), Some(Vec::new()), false);
        p.stage(b"small".to_vec(), Some(b"s".to_vec()), false);
        assert_eq!(p.value(b"big"), Some(Some(&big[..])));
        assert_eq!(p.value(b""), Some(Some(&b""[..])));
        p.stage(b"big".to_vec(), Some(b"now small".to_vec()), false);
        assert_eq!(p.value(b"big"), Some(Some(&b"now small"[..])));
        p.stage(b"small".to_vec(), None, false);
        assert_eq!(p.value(b"small"), None, "a key that cannot be in sled is forgotten, not deleted");
        assert_eq!(p.len(), 2);
    }
}
