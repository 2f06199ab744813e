//! The commit protocol of a task, written once for both backends (ARCHITECTURE.md,
//! "Invariants"). [`commit`] runs it over one or more tasks:
//!
//! 1. [`TaskRun::flush_for_commit`]: the record cache becomes output records and changelog
//!    changes (emission errors are counted, logged and committed past);
//! 2. the backend makes every task's [`Share`] durable in one step ([`Commit::commit`]): the
//!    outputs (each to its `OutRef::partition_in`), the changelog records and the task's commit
//!    record ([`TaskRun::meta`]: input positions, stream times, control offset) — one
//!    `log.commit` on the embedded log, one transaction or produce-then-commit-offsets on Kafka;
//! 3. [`TaskRun::mark_committed`]: the task's work is committed (what a reopened task starts
//!    from), with the changelog ends the commit left;
//! 4. [`TaskRun::stage_local`]: the committed changes are staged for local state, which is
//!    written every few commits with the changelog ends it reflects as its checkpoint.
//!
//! Faults injected by `--chaos` are injected here, between the steps, whatever the backend.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::plan::physical::TaskSpec;
use crate::record::Pos;
use crate::runtime::chaos::FailPoint;
use crate::runtime::error::RunError;
use crate::runtime::run::{Feed, TaskRun};
use crate::runtime::task::{Change, Outputs};

/// One task's part of a commit: its commit record and, borrowed from the task, its outputs (the
/// task clears them once the backend has committed or failed, and keeps the buffer for its next
/// commit), its changelog changes, positions and changelog ends as of its last commit.
pub(crate) struct Share<'a> {
    pub(crate) spec: &'a TaskSpec,
    pub(crate) partition: u32,
    /// The task's name in the log's commit records (the embedded log's consumer group).
    pub(crate) group: &'a str,
    pub(crate) outputs: &'a Outputs,
    pub(crate) changes: &'a [Change],
    /// `topic/partition` → the position after the last record processed.
    pub(crate) positions: &'a BTreeMap<String, Pos>,
    /// The task's commit record.
    pub(crate) meta: serde_json::Value,
    /// Per store: the changelog's end as of the task's last commit.
    pub(crate) ends: &'a [Pos],
}

impl Share<'_> {
    /// The changelog records of the changes: (changelog topic, change), each to partition
    /// `self.partition` of its changelog.
    pub(crate) fn changelog(&self) -> impl Iterator<Item = (&str, &Change)> {
        self.changes.iter().map(move |ch| (self.spec.stores[ch.store].changelog.as_str(), ch))
    }
}

/// The durable step of a commit, as a backend makes it.
pub(crate) trait Commit {
    /// Make every share durable in one step, all or nothing. Returns, per share, per store of
    /// its task, where the store's changelog ends once the commit is in.
    fn commit(&mut self, shares: Vec<Share<'_>>) -> Result<Vec<Vec<Pos>>, RunError>;

    /// Where a task's changelogs end now (`known`: as of its last commit), to write its local
    /// state at the end of a run that has nothing left to commit.
    fn ends_now(&self, spec: &TaskSpec, p: u32, known: &[Pos]) -> Result<Vec<Pos>, RunError>;
}

/// How a commit is made.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct How {
    /// Close every window first (the end of a run with `close_windows_at_end`).
    pub(crate) close_all: bool,
    /// Commit even when no task has anything to commit (the backend writes something of its
    /// own with it, or the run closes windows).
    pub(crate) force: bool,
    /// The final commit of the run: no faults are injected (so a run always ends) and local
    /// state is written whatever is due.
    pub(crate) last: bool,
}

/// Commit `tasks` together through `backend` (the steps above). True if a commit was made;
/// false if there was nothing to commit or a fault was injected (a task with `failed` set must
/// be reopened from its last commit). After an error from the backend the tasks' outputs are
/// gone and nothing of their work counts as committed: the caller reopens them from their last
/// commit (Kafka) or ends the run (the embedded log).
pub(crate) fn commit<F: Feed, C: Commit + ?Sized>(
    backend: &mut C,
    tasks: &mut [&mut TaskRun<F>],
    how: How,
) -> Result<bool, RunError> {
    let started = Instant::now();
    let mut any = false;
    for t in tasks.iter_mut() {
        any |= t.flush_for_commit(how.close_all);
    }
    for t in tasks.iter() {
        if let Some(e) = t.trees.take_read_error() {
            // Local state could not be read (a damaged or unreadable sled file): what was
            // worked out since the last commit may rest on rows taken as absent; nothing of it
            // is committed, and the run stops with the reason.
            return Err(e);
        }
    }
    if let Some(why) = crate::format::schema_tables::take_failure() {
        // A result written at the flush needed the schema registry, which could not be asked:
        // nothing of this commit is committed; the run stops and resumes from the last one.
        return Err(RunError::Registry(format!("the schema registry, at a commit: {why}")));
    }
    if !any && !how.force {
        if how.last {
            for t in tasks.iter_mut().filter(|t| !t.trees.is_settled()) {
                let ends = backend.ends_now(&t.task.spec, t.task.partition, &t.ends)?;
                t.trees.write(&ends)?;
            }
        }
        publish(tasks);
        return Ok(false);
    }
    if !how.last {
        // Every task draws (no short cut), so that a seed injects the same faults each time.
        let mut fault = false;
        for t in tasks.iter_mut() {
            fault |= t.inject(FailPoint::BeforeLogCommit);
        }
        if fault {
            publish(tasks);
            return Ok(false);
        }
    }
    let metas: Vec<serde_json::Value> = tasks.iter().map(|t| t.meta()).collect();
    let shares = tasks
        .iter_mut()
        .zip(metas)
        .map(|(t, meta)| Share {
            spec: &t.task.spec,
            partition: t.task.partition,
            group: &t.group,
            outputs: &t.out,
            changes: &t.changes,
            positions: &t.positions,
            meta,
            ends: &t.ends,
        })
        .collect();
    let ends = backend.commit(shares);
    for t in tasks.iter_mut() {
        // Committed, or (the backend failed) not committed at all: gone either way; the task
        // keeps the buffer for its next commit.
        t.out.clear();
    }
    let ends = ends?;
    // Whose commit carried something (`mark_committed` takes it), for the latency histogram.
    let worked: Vec<bool> = tasks.iter().map(|t| t.work).collect();
    for (t, ends) in tasks.iter_mut().zip(ends) {
        t.mark_committed(ends);
        if !how.last && t.inject(FailPoint::AfterLogCommit) {
            continue;
        }
        let wrote = t.stage_local(how.last)?;
        if wrote && !how.last {
            t.inject(FailPoint::AfterStoreWrite);
        }
    }
    for t in tasks.iter() {
        if let Some(e) = t.trees.take_read_error() {
            // Staging read local state (a tenant-scoped task counts its tenants' keys): what
            // was committed stands, and the run stops with the reason.
            return Err(e);
        }
    }
    // The whole commit, local state included.
    let seconds = started.elapsed().as_secs_f64();
    for (t, worked) in tasks.iter().zip(worked) {
        if let (true, Some(m)) = (worked, &t.metrics) {
            m.observe_commit(seconds);
        }
    }
    publish(tasks);
    Ok(true)
}

fn publish<F: Feed>(tasks: &mut [&mut TaskRun<F>]) {
    for t in tasks.iter_mut() {
        t.publish();
    }
}

impl<F: Feed> TaskRun<F> {
    /// Flush the task's record cache into its outputs and changes (`close_all`: close every
    /// window). True if there is anything to commit.
    pub(crate) fn flush_for_commit(&mut self, close_all: bool) -> bool {
        crate::runtime::lineage::enter(&self.task.spec.name, self.task.partition);
        let errors = self.task.flush(&mut self.out, &mut self.changes, close_all, &self.trees);
        for e in errors {
            // Emission errors (evaluating a table filter, …) have no input record: log and count.
            self.task.counters.dead_letters += 1;
            self.bar.suspend(|| eprintln!("error emitting a result of {}: {}", self.task.spec.name, e.0));
        }
        self.work = self.uncommitted > 0 || !self.out.is_empty() || !self.changes.is_empty() || self.meta_changed;
        self.work
    }

    /// The backend made the batch durable, leaving the task's changelogs at `ends`: nothing of
    /// the task is uncommitted any more. A commit counts (summary, metrics) for a task when it
    /// carried something of the task.
    pub(crate) fn mark_committed(&mut self, ends: Vec<Pos>) {
        if std::mem::take(&mut self.work) {
            self.commits += 1;
        }
        self.ends = ends;
        self.uncommitted = 0;
        self.meta_changed = false;
        self.at_commit = (self.task.counters.clone(), self.skipped, self.read);
    }

    /// Stage the committed changes for local state, and hand them to the writer when it is
    /// due (see [`crate::runtime::state::Trees::write_behind`]), checkpointed at the changelog
    /// ends of the last commit; `force`: write local state and wait for it (a run's last
    /// commit). True if changes were handed over.
    pub(crate) fn stage_local(&mut self, force: bool) -> Result<bool, RunError> {
        self.trees.stage(&mut self.changes, &self.task);
        self.trees.commits += 1;
        if force {
            self.trees.write(&self.ends)?;
            return Ok(true);
        }
        self.trees.write_behind(&self.ends)
    }

    /// Write local state as of the last commit (a task closing: revoked, or the run's end).
    pub(crate) fn write_local(&mut self) -> Result<(), RunError> {
        self.trees.write(&self.ends)
    }
}

#[cfg(test)]
mod tests {
    //! The protocol over a backend written here: what it is handed, and what a task holds after
    //! a refused, a successful and an empty commit.

    use super::*;
    use crate::runtime::run::testing::task;

    /// Refuses every commit, or keeps what it is handed and puts each changelog's end one past
    /// the changes it got.
    #[derive(Default)]
    struct Mem {
        refuse: bool,
        commits: usize,
        /// Every change handed over.
        changelog: Vec<Handed>,
        metas: Vec<(String, serde_json::Value)>,
        /// The topics of the outputs handed over.
        outputs: Vec<String>,
    }

    /// (changelog, partition, key, value).
    type Handed = (String, u32, Vec<u8>, Option<Vec<u8>>);

    impl Commit for Mem {
        fn commit(&mut self, shares: Vec<Share<'_>>) -> Result<Vec<Vec<Pos>>, RunError> {
            if self.refuse {
                return Err(RunError::Backend("refused".into()));
            }
            self.commits += 1;
            let mut all = Vec::new();
            for s in shares {
                self.outputs.extend(s.outputs.iter().map(|o| o.topic().to_string()));
                let mut ends = s.ends.to_vec();
                for (changelog, ch) in s.changelog() {
                    self.changelog.push((changelog.to_string(), s.partition, ch.key.clone(), ch.value.clone()));
                    ends[ch.store].offset += 1;
                }
                self.metas.push((s.group.to_string(), s.meta));
                all.push(ends);
            }
            Ok(all)
        }
        fn ends_now(&self, _: &TaskSpec, _: u32, known: &[Pos]) -> Result<Vec<Pos>, RunError> {
            Ok(known.to_vec())
        }
    }

    fn output(topic: &str) -> crate::runtime::task::Output {
        let record = crate::record::Record { key: Some(b"k".to_vec()), value: None, timestamp: 5, headers: vec![] };
        crate::runtime::task::Output { topic: topic.into(), route: crate::runtime::op::Route::Key, record }
    }

    fn change(key: &[u8], value: &[u8]) -> Change {
        Change { store: 0, key: key.to_vec(), value: Some(value.to_vec()), timestamp: 5, existed: false }
    }

    #[test]
    fn a_refused_commit_leaves_the_work_uncommitted_and_a_kept_one_moves_the_ends() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let mut t = task(&db, 0);
        t.changes.push(change(b"k", b"1"));
        t.out.push(output("counts"));
        t.uncommitted = 1;
        let how = How::default();

        let mut refusing = Mem { refuse: true, ..Mem::default() };
        assert!(commit(&mut refusing, &mut [&mut t], how).is_err());
        assert_eq!((t.uncommitted, t.commits, t.changes.len()), (1, 0, 1), "nothing of it committed");
        assert_eq!(t.ends, vec![Pos::default()]);
        assert!(t.out.is_empty(), "a refused commit's outputs are gone (the task is reopened)");

        t.out.push(output("counts"));
        let mut mem = Mem::default();
        assert!(commit(&mut mem, &mut [&mut t], how).unwrap());
        assert_eq!(mem.outputs, vec!["counts".to_string()]);
        assert!(t.out.is_empty(), "the committed outputs are cleared");
        let changelog = t.task.spec.stores[0].changelog.clone();
        assert_eq!(mem.changelog, vec![(changelog, 0, b"k".to_vec(), Some(b"1".to_vec()))]);
        assert_eq!(mem.metas.len(), 1);
        assert_eq!(mem.metas[0].0, "g0");
        assert_eq!(mem.metas[0].1["inputs"]["clicks/0"]["offset"], 3, "the commit record holds the positions");
        assert_eq!((t.uncommitted, t.commits), (0, 1));
        assert_eq!(t.ends, vec![Pos::at(1)], "the ends the backend reported");
        assert!(t.changes.is_empty(), "the changes are staged for local state");
        assert_eq!(t.trees.pending[0].len(), 1);

        // Nothing to commit: the backend is not called.
        assert!(!commit(&mut mem, &mut [&mut t], how).unwrap());
        assert_eq!((mem.commits, t.commits), (1, 1));

        // The run's end with nothing to commit: local state is written at the ends so far.
        assert!(!commit(&mut mem, &mut [&mut t], How { last: true, ..how }).unwrap());
        assert_eq!(mem.commits, 1);
        assert_eq!(t.trees.pending[0].len(), 0, "written");
        let tree = crate::runtime::pages::PagedTree::open(&db, "store-0").unwrap();
        assert_eq!(tree.get(b"k").unwrap().as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn a_forced_commit_carries_the_commit_record_without_work() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let mut t = task(&db, 0);
        let mut mem = Mem::default();
        assert!(commit(&mut mem, &mut [&mut t], How { force: true, ..How::default() }).unwrap());
        assert_eq!(mem.commits, 1);
        assert_eq!(t.commits, 0, "a commit counts for a task only when it carried something of it");
    }
}
