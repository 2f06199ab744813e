//! The compactor: one thread per process that compacts the partitions of compacted topics
//! (changelogs) a commit found due ([`EmbeddedLog::compact_committed`]), as Kafka's log
//! cleaner runs beside the broker's request handlers: a compaction scans the whole partition,
//! twice, which inside the commit cost a first run at 1 M keys a fifth of its processing
//! thread. A partition is queued once however many commits find it due meanwhile; one whose
//! compaction failed (a full disk) is tried again once it has grown by another
//! [`COMPACT_MIN_BYTES`], not at every commit.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::{EmbeddedLog, Pos, COMPACT_MIN_BYTES};

/// A partition of one log: (the log's directory, topic, partition).
type Key = (PathBuf, String, u32);

struct Queue {
    /// Partitions queued or being compacted.
    busy: BTreeSet<Key>,
    /// What the thread is to do, oldest first: the partition, and its committed end when asked.
    jobs: VecDeque<(EmbeddedLog, Key, Pos)>,
    /// Partitions whose last compaction failed, with their end then.
    failed: BTreeMap<Key, Pos>,
}

static QUEUE: Mutex<Queue> =
    Mutex::new(Queue { busy: BTreeSet::new(), jobs: VecDeque::new(), failed: BTreeMap::new() });
/// Signalled when a job is queued and when one is done.
static CHANGED: Condvar = Condvar::new();
/// Whether the thread runs (it starts on the first request).
static STARTED: OnceLock<bool> = OnceLock::new();

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ask for a partition of `log`, committed up to `end`, to be compacted.
pub(super) fn request(log: &EmbeddedLog, topic: &str, p: u32, end: Pos) {
    let key = (log.dir.clone(), topic.to_string(), p);
    {
        let mut q = queue();
        if q.busy.contains(&key) || q.failed.get(&key).is_some_and(|at| end.byte < at.byte + COMPACT_MIN_BYTES) {
            return;
        }
        q.busy.insert(key.clone());
        q.jobs.push_back((log.clone(), key, end));
    }
    CHANGED.notify_all();
    if !started() {
        // No thread (it could not start): compact here, as a commit did before.
        loop {
            // (The queue's lock is let go of before the job runs: `run` takes it again.)
            let job = queue().jobs.pop_front();
            let Some(job) = job else { break };
            run(job);
        }
    }
}

fn started() -> bool {
    *STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("streamc-compactor".into())
            .spawn(|| loop {
                let job = {
                    let mut q = queue();
                    loop {
                        match q.jobs.pop_front() {
                            Some(job) => break job,
                            None => q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner()),
                        }
                    }
                };
                run(job);
            })
            .is_ok()
    })
}

/// Compact one partition and mark it done; a failure is reported and remembered.
fn run((log, key, end): (EmbeddedLog, Key, Pos)) {
    let (_, topic, p) = &key;
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.compact_committed(topic, *p))) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("the compaction panicked".to_string()),
    };
    let mut q = queue();
    match &result {
        Ok(_) => q.failed.remove(&key),
        Err(_) => q.failed.insert(key.clone(), end),
    };
    q.busy.remove(&key);
    let idle = q.jobs.is_empty();
    drop(q);
    CHANGED.notify_all();
    if idle {
        // About to wait: what the compactions freed goes back to the system.
        crate::memory::release_freed_memory();
    }
    if let Err(e) = result {
        // (Not `eprintln!`, which panics when standard error is gone.)
        let _ = writeln!(
            std::io::stderr(),
            "warning: cannot compact {topic}/{p} of the embedded log (it is tried again once it has grown): {e}"
        );
    }
}

/// Wait until no partition of `log` (or only `partition`, if given) is queued or being
/// compacted.
pub(super) fn settle(log: &EmbeddedLog, partition: Option<(&str, u32)>) {
    let mut q = queue();
    while q.busy.iter().any(|(dir, t, p)| *dir == log.dir && partition.is_none_or(|(topic, n)| t == topic && *p == n)) {
        q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}
