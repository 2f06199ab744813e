//! A foreign-key join's state in its middle and end tasks (see `plan::NodeKind::ForeignJoin`
//! and `ForeignGate`): the subscriptions (per foreign key, the rows of the query's table that
//! name it, each with the offset of the update that sent it) and, at the end, each row key's
//! latest update offset. Both live in changelogged stores; entries written since the last
//! flush are kept here until the stores hold them, and the middle task keeps an index of the
//! subscriptions' keys by foreign key, read from its store on first use after an open or a
//! restore, so that an update of the other table finds the rows it concerns.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use crate::plan::physical::TaskSpec;
use crate::runtime::op::{Change, RecordError, Stateful, StoreRead};

#[derive(Default)]
pub(crate) struct Foreign {
    /// Its stores: the subscriptions (middle task) or the offsets (end task).
    stores: Vec<usize>,
    /// Per foreign key (its key bytes), the key bytes of the rows subscribed to it; None until
    /// read from the store.
    index: Option<BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>>,
    /// Entries of its store changed since the last flush, by key (None: deleted). A task has
    /// one such store (the subscriptions or the offsets), so the key alone names an entry.
    pending: FxHashMap<Vec<u8>, Option<Vec<u8>>>,
}

/// A subscription's store key: the foreign key's length (u32, little-endian), its bytes, then
/// the row key's bytes (so that one foreign key's subscriptions are adjacent).
pub(crate) fn subscription_key(fk: &[u8], k: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + fk.len() + k.len());
    out.extend_from_slice(&(fk.len() as u32).to_le_bytes());
    out.extend_from_slice(fk);
    out.extend_from_slice(k);
    out
}

fn split_subscription_key(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let rest = &b[4..];
    (n <= rest.len()).then(|| rest.split_at(n))
}

/// A stored offset (little-endian) and what follows it.
pub(crate) fn split_offset(b: &[u8]) -> Result<(i64, &[u8]), RecordError> {
    let head = b.get(..8).ok_or_else(|| RecordError("damaged foreign-key join entry: cut short".into()))?;
    let off = i64::from_le_bytes(head.try_into().map_err(|_| RecordError("damaged foreign-key join entry".into()))?);
    Ok((off, &b[8..]))
}

impl Stateful for Foreign {
    fn stores(&self) -> &[usize] {
        &self.stores
    }

    /// After an open or a restore: the stores hold everything; the index is read again.
    fn restore(&mut self, _stores: &dyn StoreRead) {
        self.index = None;
        self.pending.clear();
    }
}

impl Foreign {
    pub(crate) fn new(spec: &TaskSpec) -> Foreign {
        let stores = spec.foreign.as_ref().map(|f| f.subscriptions).into_iter().chain(spec.foreign_gate).collect();
        Foreign { stores, ..Foreign::default() }
    }

    /// The stores now hold what the flush wrote.
    pub(crate) fn flushed(&mut self) {
        self.pending.clear();
    }

    pub(crate) fn get(&self, store: usize, key: &[u8], stores: &dyn StoreRead) -> Option<Vec<u8>> {
        debug_assert_eq!(self.stores, [store]);
        match self.pending.get(key) {
            Some(v) => v.clone(),
            None => stores.get(store, key),
        }
    }

    pub(crate) fn set(
        &mut self,
        store: usize,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        timestamp: i64,
        changes: &mut Vec<Change>,
    ) {
        changes.push(Change { store, key: key.clone(), value: value.clone(), timestamp, existed: true });
        self.pending.insert(key, value);
    }

    /// The index of the subscriptions in `store`, read from it if not yet.
    fn index(&mut self, store: usize, stores: &dyn StoreRead) -> &mut BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> {
        self.index.get_or_insert_with(|| {
            let mut index: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> = BTreeMap::new();
            for key in stores.keys(store) {
                if let Some((fk, k)) = split_subscription_key(&key) {
                    index.entry(fk.to_vec()).or_default().insert(k.to_vec());
                }
            }
            index
        })
    }

    /// Subscribe the row `k` to the foreign key `fk`: `entry` is its offset and row.
    pub(crate) fn subscribe(
        &mut self,
        store: usize,
        (fk, k): (&[u8], &[u8]),
        entry: Vec<u8>,
        timestamp: i64,
        stores: &dyn StoreRead,
        changes: &mut Vec<Change>,
    ) {
        self.index(store, stores).entry(fk.to_vec()).or_default().insert(k.to_vec());
        self.set(store, subscription_key(fk, k), Some(entry), timestamp, changes);
    }

    pub(crate) fn unsubscribe(
        &mut self,
        store: usize,
        (fk, k): (&[u8], &[u8]),
        timestamp: i64,
        stores: &dyn StoreRead,
        changes: &mut Vec<Change>,
    ) {
        let index = self.index(store, stores);
        if let Some(ks) = index.get_mut(fk) {
            ks.remove(k);
            if ks.is_empty() {
                index.remove(fk);
            }
        }
        self.set(store, subscription_key(fk, k), None, timestamp, changes);
    }

    /// The keys of the rows subscribed to `fk`, in key-byte order.
    pub(crate) fn subscribers(&mut self, store: usize, fk: &[u8], stores: &dyn StoreRead) -> Vec<Vec<u8>> {
        self.index(store, stores).get(fk).map(|ks| ks.iter().cloned().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_keys_split_back_and_keep_foreign_keys_apart() {
        let key = subscription_key(b"ab", b"c");
        assert_eq!(split_subscription_key(&key), Some((&b"ab"[..], &b"c"[..])));
        // "a" + "bc" and "ab" + "c" are different subscriptions.
        assert_ne!(subscription_key(b"a", b"bc"), key);
        assert_eq!(split_subscription_key(&[9, 0, 0, 0, 1]), None);
        assert_eq!(split_subscription_key(&[1, 0]), None);
    }
}
