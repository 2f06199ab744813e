//! Writing local state: the changes not in sled yet ([`Pending`]), and the writer, one
//! background thread per process that writes committed changes to sled behind the tasks, so
//! that sled's cost is off the processing threads and on another core. sled runs every batch of
//! the process one at a time anyway, so one thread is all it can use.
//!
//! A task hands the writer a [`Flight`]: its committed changes not yet in sled, coalesced by key,
//! with the changelog position they reach. The writer sorts them and rewrites the pages they fall
//! in ([`PagedTree::write`]), in batches, the checkpoint with the last. Flights of one tree are
//! written in the order they were handed over. Until a flight is written, sled holds the state of its last
//! checkpoint plus possibly some changes after it, all of them in the committed changelog after
//! that checkpoint: a restore from there replays them over whatever sled holds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use rustc_hash::FxHashMap;

use crate::record::Pos;
use crate::runtime::pages::PagedTree;

/// Changes to one store that are not in sled yet, coalesced by key: key → (value or deletion,
/// whether the key may already be in sled). Used by commits, restores and standbys alike.
#[derive(Default)]
pub(crate) struct Pending {
    map: FxHashMap<Vec<u8>, Staged>,
    /// About the memory the entries hold: their keys, values and a fixed cost each.
    bytes: usize,
}

/// One pending change: the new value (None: a deletion) and whether the key may be in sled.
type Staged = (Option<Vec<u8>>, bool);

/// What one pending entry costs beyond its key and value bytes, roughly: the map's slot (56
/// bytes and a control byte, at a load of 7/16 to 7/8 of the table, so up to about 130 bytes a
/// row) and the allocator's rounding of the key and value.
pub(crate) const ENTRY_COST: usize = 128;

fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, |v| v.len()) + ENTRY_COST
}

impl Pending {
    /// Record a change. A key created and deleted while pending never reaches sled.
    pub(crate) fn stage(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, may_exist: bool) {
        match self.map.get_mut(&key) {
            Some(slot) if value.is_none() && !slot.1 => {
                if let Some((k, (v, _))) = self.map.remove_entry(&key) {
                    self.bytes -= entry_bytes(&k, &v);
                }
            }
            Some(slot) => {
                self.bytes =
                    self.bytes + value.as_ref().map_or(0, |v| v.len()) - slot.0.as_ref().map_or(0, |v| v.len());
                slot.0 = value;
            }
            None if value.is_some() || may_exist => {
                self.bytes += entry_bytes(&key, &value);
                self.map.insert(key, (value, may_exist));
            }
            None => {}
        }
    }

    /// The pending change of `key`, if any: its new value or its deletion (None).
    pub(crate) fn value(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.map.get(key).map(|(v, _)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// About the memory the pending changes hold, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Set `key`'s row to `value` (the clean rows' use: no deletion is kept).
    pub(crate) fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        let len = value.len();
        match self.map.get_mut(&key) {
            Some(slot) => {
                self.bytes = self.bytes + len - slot.0.as_ref().map_or(0, |v| v.len());
                slot.0 = Some(value);
            }
            None => {
                self.bytes += entry_bytes(&key, &None) + len;
                self.map.insert(key, (Some(value), true));
            }
        }
    }

    /// Set `key`'s row to `value` unless the key is here already (the clean rows' use).
    pub(crate) fn put_if_absent(&mut self, key: Vec<u8>, value: Vec<u8>) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.map.entry(key) {
            self.bytes += entry_bytes(e.key(), &None) + value.len();
            e.insert((Some(value), true));
        }
    }

    /// Forget `key`, if it is here.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        if let Some((k, (v, _))) = self.map.remove_entry(key) {
            self.bytes -= entry_bytes(&k, &v);
        }
    }

    /// Forget the deletions, keeping the rows put.
    pub(crate) fn drop_deletions(&mut self) {
        let mut freed = 0;
        self.map.retain(|k, (v, _)| {
            if v.is_none() {
                freed += entry_bytes(k, &None);
            }
            v.is_some()
        });
        self.bytes -= freed;
    }

    /// Forget entries (in no particular order) until at most `target` bytes are held.
    pub(crate) fn shrink_to(&mut self, target: usize) {
        let mut held = self.bytes;
        self.map.retain(|k, (v, _)| {
            if held <= target {
                return true;
            }
            held -= entry_bytes(k, v);
            false
        });
        self.bytes = held;
        // A table left much larger than its rows would hold the memory the rows dropped held;
        // one about their size stays (it fills up again, and a new one beside the old would
        // double the table's memory for a moment, a peak every time the cache is trimmed).
        // (Below half: `ENTRY_COST` counts a table loaded at least 7/16.)
        if self.map.len() < self.map.capacity() / 2 {
            self.map.shrink_to_fit();
        }
    }

    /// Every change, taken: key → new value or deletion (None), in no particular order.
    pub(crate) fn into_changes(self) -> impl Iterator<Item = (Vec<u8>, Option<Vec<u8>>)> {
        self.map.into_iter().map(|(k, (v, _))| (k, v))
    }

    /// Every pending change: key → new value or deletion (None), in no particular order.
    pub(crate) fn changes(&self) -> impl Iterator<Item = (&Vec<u8>, &Option<Vec<u8>>)> {
        self.map.iter().map(|(k, (v, _))| (k, v))
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    /// Apply the changes to keys starting with `prefix` to `entries` (read from sled).
    pub(crate) fn overlay(&self, prefix: &[u8], entries: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        for (k, v) in self.changes().filter(|(k, _)| k.starts_with(prefix)) {
            match v {
                Some(v) => entries.insert(k.clone(), v.clone()),
                None => entries.remove(k),
            };
        }
    }

    /// Every change, sorted by key.
    fn sorted(&self) -> Vec<crate::runtime::pages::Change<'_>> {
        // Ordered by the keys' first 16 bytes as a number first (zero-padded: the same order
        // as the bytes', ties broken by the whole keys), so that most comparisons are one
        // integer comparison instead of a call to compare bytes: a third of the writer's time
        // at 1 M keys went to sorting.
        let mut entries: Vec<_> = self.map.iter().map(|(k, (v, _))| (prefix(k), k.as_slice(), v.as_deref())).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        entries.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// Write every change and the checkpoint to the tree in one atomic batch (a standby's copy,
    /// whose changes may pass its task's last commit: sled must hold exactly its checkpoint).
    pub(crate) fn write(&mut self, tree: &PagedTree, checkpoint: &Pos) -> Result<(), sled::Error> {
        tree.write(&self.sorted(), Some(checkpoint), true)?;
        *self = Pending::default();
        Ok(())
    }

    /// Write every change to the tree here and now, in batches, the checkpoint with the last.
    pub(crate) fn write_all(&mut self, tree: &PagedTree, checkpoint: &Pos) -> Result<(), sled::Error> {
        write(tree, self, Some(checkpoint))?;
        *self = Pending::default();
        Ok(())
    }
}

/// A key's first 16 bytes, zero-padded, as a big-endian number: two keys' prefixes compare as
/// the keys do, or are equal.
fn prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

/// Changes handed to the writer, readable by the task until they are written.
pub(crate) struct Flight {
    pub(crate) changes: Arc<Pending>,
    done: Arc<Done>,
}

/// A flight's outcome, once the writer is through with it.
#[derive(Default)]
struct Done {
    result: Mutex<Option<Result<(), sled::Error>>>,
    cv: Condvar,
}

struct Job {
    /// (Let go of before the waiter hears the job is done: the last handle of a database
    /// closes it, which must not happen here after the run that opened it has moved on.)
    tree: Option<PagedTree>,
    changes: Arc<Pending>,
    checkpoint: Option<Pos>,
    done: Arc<Done>,
    /// Shared by the flights of one store: set once one failed, so that no later one (and no
    /// later checkpoint) is written over the gap it left.
    failed: Arc<AtomicBool>,
}

impl Job {
    /// Write it, unless an earlier flight of its store failed; a panic in sled is an error.
    fn run(&self) -> Result<(), sled::Error> {
        if self.failed.load(Ordering::Acquire) {
            return Err(sled::Error::ReportableBug("an earlier write of this store failed".into()));
        }
        let Some(tree) = &self.tree else { return Ok(()) };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write(tree, &self.changes, self.checkpoint.as_ref())
        }))
        .unwrap_or_else(|p| {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(sled::Error::ReportableBug(format!("sled stopped writing: {why}")))
        });
        if r.is_err() {
            self.failed.store(true, Ordering::Release);
            WRITE_FAILED.store(true, Ordering::Release);
        }
        r
    }

    fn finish(&self, result: Result<(), sled::Error>) {
        *self.done.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        self.done.cv.notify_all();
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // A job dropped unwritten (the writer thread gone): its waiter hears of it.
        let mut r = self.done.result.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_none() {
            *r = Some(Err(sled::Error::ReportableBug("the local-state writer stopped".into())));
            self.done.cv.notify_all();
        }
    }
}

/// Set once any write of local state failed in this process (a failed write is not always
/// waited for: a task dropped after a lost partition): its local state is then not marked as
/// closed cleanly ([`crate::runtime::state::mark_closed`]).
static WRITE_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether any write of local state failed in this process.
pub(crate) fn a_write_failed() -> bool {
    WRITE_FAILED.load(Ordering::Acquire)
}

fn writer() -> &'static Mutex<Sender<Job>> {
    static WRITER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("streamc-state-writer".into())
            .spawn(move || {
                for mut job in rx {
                    let result = job.run();
                    // The writer lets go of the changes before it says it is done, so that the
                    // task gets them back whole (`Flight::wait`), and of the tree.
                    job.changes = Arc::new(Pending::default());
                    job.tree = None;
                    job.finish(result);
                    // What the job freed goes back to the system (after each job, not only when
                    // idle: a writer kept busy by a memory-bound run would otherwise never hand
                    // anything back; 181 against 190 MiB in the 3 M-key run with 64 MiB).
                    crate::memory::release_freed_memory();
                }
            })
            .expect("the local-state writer thread starts");
        Mutex::new(tx)
    })
}

impl Flight {
    /// Hand `changes` to the writer for `tree`, with the checkpoint they reach (None: sled's
    /// checkpoint stays where it is); `failed` is shared by the flights of the store.
    pub(crate) fn send(
        tree: &PagedTree,
        failed: &Arc<AtomicBool>,
        changes: Pending,
        checkpoint: Option<Pos>,
    ) -> Flight {
        let changes = Arc::new(changes);
        let done = Arc::new(Done::default());
        let job = Job {
            tree: Some(tree.clone()),
            changes: changes.clone(),
            checkpoint,
            done: done.clone(),
            failed: failed.clone(),
        };
        let sent = writer().lock().unwrap_or_else(|p| p.into_inner()).send(job);
        if let Err(e) = sent {
            // The writer thread is gone (it never stops by itself): write here instead.
            let mut job = e.0;
            let result = job.run();
            job.changes = Arc::new(Pending::default());
            job.tree = None;
            job.finish(result);
        }
        Flight { changes, done }
    }

    /// Whether the writer is through with it.
    pub(crate) fn landed(&self) -> bool {
        self.done.result.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Wait until it is written; its changes back (None if something else still holds them),
    /// or sled's error.
    pub(crate) fn wait(self) -> Result<Option<Pending>, sled::Error> {
        let mut r = self.done.result.lock().unwrap_or_else(|p| p.into_inner());
        while r.is_none() {
            r = self.done.cv.wait(r).unwrap_or_else(|p| p.into_inner());
        }
        let result = r.take().unwrap_or(Ok(()));
        drop(r);
        result?;
        // The writer dropped its reference before it said it was done.
        Ok(Arc::try_unwrap(self.changes).ok())
    }
}

/// Write `changes` to `tree` in batches, `checkpoint` with the last (see [`PagedTree::write`]).
pub(crate) fn write(tree: &PagedTree, changes: &Pending, checkpoint: Option<&Pos>) -> Result<(), sled::Error> {
    tree.write(&changes.sorted(), checkpoint, false)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let got: Vec<Vec<u8>> = p.sorted().iter().map(|(k, _)| k.to_vec()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(got, keys);
    }

    /// Once a flight of a store failed, its later flights are not written: no checkpoint
    /// passes the changes the failed one did not write.
    #[test]
    fn after_a_failed_flight_no_later_one_of_its_store_is_written() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        let failed = Arc::new(AtomicBool::new(false));
        let mut p = Pending::default();
        p.stage(b"a".to_vec(), Some(b"1".to_vec()), false);
        Flight::send(&tree, &failed, p, Some(Pos::at(1))).wait().unwrap();
        // (As the writer marks a store whose write failed.)
        failed.store(true, Ordering::Release);
        let mut p = Pending::default();
        p.stage(b"b".to_vec(), Some(b"2".to_vec()), false);
        assert!(Flight::send(&tree, &failed, p, Some(Pos::at(2))).wait().is_err());
        assert_eq!(tree.get(b"b").unwrap(), None);
        assert_eq!(tree.checkpoint().map(|c| c.offset), Some(1), "the checkpoint stays before the gap");
        // Another store's flights go on.
        let other = PagedTree::open(&db, "s#1").unwrap();
        let mut p = Pending::default();
        p.stage(b"c".to_vec(), Some(b"3".to_vec()), false);
        Flight::send(&other, &Arc::default(), p, None).wait().unwrap();
        assert_eq!(other.get(b"c").unwrap().as_deref(), Some(&b"3"[..]));
    }
}
