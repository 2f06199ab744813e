//! The commit protocol of a task, written once for both backends (ARCHITECTURE.md,
//! "Invariants"):
//!
//! 1. [`TaskRun::flush_for_commit`]: the record cache becomes output records and changelog
//!    changes (emission errors are counted, logged and committed past);
//! 2. the backend makes the batch durable in one step: the outputs (each to its
//!    `Output::partition_in`), the changelog records ([`TaskRun::changelog_records`]) and the
//!    task's commit record ([`TaskRun::meta`]: input positions, stream times, control offset) —
//!    one `log.commit` on the embedded log, one transaction or produce-then-commit-offsets on
//!    Kafka;
//! 3. [`TaskRun::mark_committed`]: the task's work is committed (what a reopened task starts
//!    from);
//! 4. [`TaskRun::stage_local`]: the committed changes are staged for local state, which is
//!    written every few commits with the changelog ends it reflects as its checkpoint.
//!
//! A backend adds only step 2 and where its changelog ends come from.

use crate::log::Pos;
use crate::runtime::error::RunError;
use crate::runtime::run::{Feed, TaskRun};
use crate::runtime::task::Change;

impl<F: Feed> TaskRun<F> {
    /// Flush the task's record cache into its outputs and changes (`close_all`: close every
    /// window). True if there is anything to commit.
    pub(crate) fn flush_for_commit(&mut self, close_all: bool) -> bool {
        let errors = self.task.flush(&mut self.out, &mut self.changes, close_all, &self.trees);
        for e in errors {
            // Emission errors (evaluating a table filter, …) have no input record: log and count.
            self.task.counters.dead_letters += 1;
            self.bar.suspend(|| eprintln!("error emitting a result of {}: {}", self.task.spec.name, e.0));
        }
        self.work = self.uncommitted > 0 || !self.out.is_empty() || !self.changes.is_empty() || self.meta_changed;
        self.work
    }

    /// The changelog records of the pending changes: (changelog topic, partition, change).
    pub(crate) fn changelog_records(&self) -> impl Iterator<Item = (&str, u32, &Change)> {
        let p = self.task.partition;
        self.changes.iter().map(move |ch| (self.task.spec.stores[ch.store].changelog.as_str(), p, ch))
    }

    /// The backend made the batch durable: nothing of the task is uncommitted any more. A
    /// commit counts (summary, metrics) for a task when it carried something of the task.
    pub(crate) fn mark_committed(&mut self) {
        if std::mem::take(&mut self.work) {
            self.commits += 1;
        }
        self.uncommitted = 0;
        self.meta_changed = false;
        self.at_commit = (self.task.counters.clone(), self.skipped, self.read);
    }

    /// Stage the committed changes for local state, and write local state when it is due (or
    /// `force`), checkpointed at `ends(store)`: each changelog's end once this commit is in.
    /// True if local state was written.
    pub(crate) fn stage_local(&mut self, ends: &dyn Fn(usize) -> Pos, force: bool) -> Result<bool, RunError> {
        self.trees.stage(&mut self.changes, &self.task);
        self.trees.commits += 1;
        if !(force || self.trees.due()) {
            return Ok(false);
        }
        let cps: Vec<Pos> = (0..self.task.spec.stores.len()).map(ends).collect();
        self.trees.write(&cps)?;
        Ok(true)
    }
}
