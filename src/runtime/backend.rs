//! What the runtime core needs of a log, and nothing more: the embedded log
//! ([`crate::runtime::embedded`]) and Kafka ([`crate::runtime::kafka`]) each implement
//! [`Backend`] in a folder of their own. Opening a task, restore, the correction of changelog
//! records written after a task's last commit, and sweeps of removed stores are written once, in
//! the core, over this interface; the commit protocol's steps are in `runtime::commit`.

use std::collections::BTreeMap;

use crate::log::{Append, Pos, Stored};
use crate::plan::physical::TaskSpec;
use crate::runtime::error::RunError;
use crate::runtime::run::Feed;
use crate::runtime::topics::TimestampLimits;

/// A changelog partition's extent, as far as committed records go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Extent {
    /// The first offset still held (later than 0 once a compacted topic was cleaned).
    pub(crate) low: u64,
    /// The position after the last committed record.
    pub(crate) end: Pos,
    /// Every deletion from this offset on is still held (compaction may drop older
    /// tombstones): a local checkpoint before it cannot be brought up to date.
    pub(crate) deletions_from: u64,
}

/// A log that tasks run over.
pub(crate) trait Backend {
    /// How a task reads its inputs on this backend.
    type Feed: Feed;

    /// Readers of a task's inputs (its main input, then its side inputs) from `positions`
    /// (`topic/partition` → the position after the last record processed).
    fn feed(&self, spec: &TaskSpec, p: u32, positions: &BTreeMap<String, Pos>) -> Result<Self::Feed, RunError>;

    /// The extent of partition `p` of a changelog; None if the topic or the partition does not
    /// exist.
    fn changelog_extent(&self, topic: &str, p: u32) -> Result<Option<Extent>, RunError>;

    /// Read the committed records of partition `p` of a changelog from `from` up to `end`, in
    /// batches: `visit` gets each batch with the position after it. Returns the position after
    /// the last record read (on Kafka possibly past transaction markers after it).
    fn read_changelog(
        &self,
        topic: &str,
        p: u32,
        from: Pos,
        end: Pos,
        visit: &mut dyn FnMut(Vec<Stored>, Pos) -> Result<(), RunError>,
    ) -> Result<Pos, RunError>;

    /// Whether a changelog may hold records after its task's last commit (Kafka at least once:
    /// outputs and changelog are produced before the input offsets are committed). The embedded
    /// log commits them in one step.
    fn changelog_may_pass_commit(&self) -> bool;

    /// How far from the clock the event times of a task's records may be for the topics it
    /// writes to take their results (Kafka: the topics' `message.timestamp.*.max.ms`); None:
    /// no bound (the embedded log).
    fn timestamp_limits(&self, _spec: &TaskSpec) -> Option<TimestampLimits> {
        None
    }

    /// Append records outside any task's commit, all or none (one transaction under
    /// exactly-once on Kafka): the tombstones of a sweep, the corrections of a restore. Returns,
    /// per append, the position after its last record.
    fn append_alone(&self, appends: Vec<Append>) -> Result<Vec<Pos>, RunError>;
}
