//! Writing local state: the writer, one
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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::record::Pos;
use crate::runtime::pages::PagedTree;
pub(crate) use crate::runtime::pending::Pending;

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
                lower_priority();
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

/// A store's changes handed to the writer and not taken in yet, oldest first, and the flag the
/// writer sets when one of them failed (the later ones are then not written).
#[derive(Default)]
pub(crate) struct Flights {
    pub(crate) queue: VecDeque<Flight>,
    pub(crate) failed: Arc<AtomicBool>,
}

impl Drop for Flights {
    fn drop(&mut self) {
        // Flights let go of without being taken up (an error while a task opened): written
        // before anyone reads or clears the tree again (a late one would write rows, and a
        // checkpoint, into a tree a new restore took for empty). Every one is waited for.
        while self.land().is_err() {}
    }
}

impl Flights {
    /// Wait until the writer has written each of them, oldest first, and let go of them; the
    /// first error stops it (the rest stay queued).
    pub(crate) fn land(&mut self) -> Result<(), sled::Error> {
        while let Some(f) = self.queue.pop_front() {
            f.wait()?;
        }
        Ok(())
    }

    /// Hand `changes` to the writer for `tree`, with the checkpoint `cp` written with them.
    pub(crate) fn send(&mut self, tree: &PagedTree, changes: Pending, cp: Pos) {
        self.queue.push_back(Flight::send(tree, &self.failed, changes, Some(cp)));
    }

    /// Their changes, oldest first: layers of the store's rows until they land.
    pub(crate) fn layers(&self) -> impl Iterator<Item = &Pending> + Clone + '_ {
        self.queue.iter().map(|f| &*f.changes)
    }

    /// The latest change of `key` among them, if any.
    pub(crate) fn value(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.queue.iter().rev().find_map(|f| f.changes.value(key))
    }

    pub(crate) fn bytes(&self) -> usize {
        self.queue.iter().map(|f| f.changes.bytes_in_flight()).sum()
    }
}

/// The writer works behind the processing threads and yields to them: on a machine with as many
/// busy threads as cores, a restore's reads and a task's processing go first, and local state is
/// written with what is left. (Linux: the calling thread's nice value. Elsewhere: nothing.)
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` and `setpriority` take and return plain integers; a failure only leaves
    // the priority as it was.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WRITER_NICE);
    }
}

/// The writer thread's nice value (0 is the processing threads'). At 10 a 1 M-key restore read
/// as fast as without the writer, but a thread that waits for the writer (a task at its memory
/// bound) while another keeps the other core busy would wait about ten times as long; at 5 the
/// restore's whole run was 3 % slower than at 10 (10 pairs).
#[cfg(target_os = "linux")]
const WRITER_NICE: libc::c_int = 5;

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

/// The changes a flight's write turns from positions into slices at a time (see
/// [`Pending::order`]).
#[cfg(not(test))]
const WINDOW: usize = 65_536;
/// (Small in tests, so that flights are written in several windows.)
#[cfg(test)]
const WINDOW: usize = 70;

/// Write `changes` to `tree` in batches, `checkpoint` with the last (see [`PagedTree::write`]):
/// sorted as positions, written a window at a time (a page that two windows fall in is
/// rewritten by each).
pub(crate) fn write(tree: &PagedTree, changes: &Pending, checkpoint: Option<&Pos>) -> Result<(), sled::Error> {
    let order = changes.order();
    if order.is_empty() {
        return tree.write(&[], checkpoint, false);
    }
    let mut window = Vec::with_capacity(WINDOW.min(order.len()));
    let mut parts = order.chunks(WINDOW).peekable();
    while let Some(part) = parts.next() {
        window.clear();
        changes.changes_at(part, &mut window);
        tree.write(&window, if parts.peek().is_none() { checkpoint } else { None }, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
