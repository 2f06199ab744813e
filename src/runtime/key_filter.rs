//! Which keys a store's sled tree may hold, once the task no longer keeps all of the store's
//! rows in memory: a Bloom filter that grows with the keys (`growable-bloom-filter`), so that
//! a key the store never held — every key of a first pass over new keys — is answered as
//! absent from memory, not looked for in sled.
//!
//! A read of sled is about half a first run's time once the rows outgrow the cache, and it is
//! most of its memory: sled 0.34 keeps what reads pull in far beyond its `cache_capacity`. Its
//! LRU has 256 shards and takes a shard's accesses in only once 64 are queued in it, so a tree
//! of fewer than about 16 K nodes (each up to 16 of our pages, some 48 KB) is in practice never
//! evicted: reading misses of 1.5 M keys in random order pulled 80 MB of it into memory against
//! a cache of 8 MiB.

use growable_bloom_filter::GrowableBloom;

use crate::runtime::pending::Pending;

/// A read of sled that finds nothing, per key the store never held, for the filter's first
/// part (as it grows, the parts' odds tighten, and the whole filter's stay within a few
/// percent).
const FALSE_POSITIVES: f64 = 0.01;

/// Keys a store's sled tree may hold: every key put in it since it was empty (a key deleted
/// since stays in, and costs only a read that finds nothing).
pub(crate) struct KeyFilter(GrowableBloom);

impl KeyFilter {
    /// A filter of the keys put in `layers` (their deletions left out).
    pub(crate) fn of<'a>(layers: impl IntoIterator<Item = &'a Pending> + Clone) -> KeyFilter {
        let keys: usize = layers.clone().into_iter().map(Pending::len).sum();
        let mut filter = KeyFilter(GrowableBloom::new(FALSE_POSITIVES, keys.max(1 << 10)));
        for layer in layers {
            filter.add_puts(layer);
        }
        filter
    }

    /// Add the keys `changes` puts.
    pub(crate) fn add_puts(&mut self, changes: &Pending) {
        for (k, v) in changes.changes() {
            if v.is_some() {
                self.0.insert(k);
            }
        }
    }

    /// False if sled holds no row of `key`.
    pub(crate) fn may_hold(&self, key: &[u8]) -> bool {
        self.0.contains(key)
    }

    /// About the memory it takes: some 10 to 13 bits a key of its capacity at these odds.
    pub(crate) fn bytes(&self) -> usize {
        self.0.capacity() * 3 / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_put_is_held_and_most_others_are_ruled_out() {
        let mut first = Pending::default();
        for i in 0..50_000u32 {
            first.stage(format!("k{i}").into_bytes(), Some(b"v".to_vec()), false);
        }
        first.stage(b"gone".to_vec(), None, true);
        let mut f = KeyFilter::of([&first]);
        let mut later = Pending::default();
        for i in 50_000..300_000u32 {
            later.stage(format!("k{i}").into_bytes(), Some(b"v".to_vec()), false);
        }
        f.add_puts(&later);
        assert!((0..300_000u32).all(|i| f.may_hold(format!("k{i}").as_bytes())), "no false negative");
        let others = (0..100_000u32).filter(|i| f.may_hold(format!("other{i}").as_bytes())).count();
        assert!(others < 3_000, "{others} of 100,000 keys never put read as maybe held");
        assert!(f.bytes() >= 300_000 && f.bytes() < 2_000_000, "{} bytes", f.bytes());
    }
}
