//! What the runtime core needs of a log, and nothing more: the embedded log
//! ([`crate::runtime::embedded`]) and Kafka ([`crate::runtime::kafka`]) each implement
//! [`Backend`] in a folder of their own. Opening a task, restore, the correction of changelog
//! records written after a task's last commit, and sweeps of removed stores are written once, in
//! the core, over this interface; the commit protocol's steps are in `runtime::run::commit`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::plan::physical::TaskSpec;
use crate::record::{Append, Entry, Pos};
use crate::runtime::error::RunError;
use crate::runtime::run::Feed;
use crate::runtime::topics::{SizeLimits, TimestampLimits};

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

/// What [`Backend::read_changelog`] hands each batch of changelog records to, with the
/// position after the batch.
pub(crate) type Visit<'a> = dyn FnMut(&[Entry<'_>], Pos) -> Result<(), RunError> + 'a;

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
    /// batches: `visit` gets each batch, borrowed, with the position after it. Returns the
    /// position after the last record read (on Kafka possibly past transaction markers after it).
    fn read_changelog(&self, topic: &str, p: u32, from: Pos, end: Pos, visit: &mut Visit<'_>) -> Result<Pos, RunError>;

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

    /// The largest record each topic a task writes takes. The embedded log: one bound,
    /// `embedded.max_message_bytes`.
    fn size_limits(&self, _spec: &TaskSpec, config: &crate::config::Config) -> SizeLimits {
        let max = usize::try_from(config.embedded.max_message_bytes).unwrap_or(usize::MAX);
        SizeLimits::uniform(max, "embedded.max_message_bytes")
    }

    /// Append records outside any task's commit, all or none (one transaction under
    /// exactly-once on Kafka): the tombstones of a sweep, the corrections of a restore. Returns,
    /// per append, the position after its last record.
    fn append_alone(&self, appends: Vec<Append>) -> Result<Vec<Pos>, RunError>;
}

/// Group membership: which partitions of the application's main inputs this instance runs.
/// The embedded log has one process, which owns every partition; on Kafka the consumer group
/// decides, and its rebalance callbacks say when that changes (a revocation commits and closes
/// the partition's tasks inside the callback, before the partitions move).
pub(crate) trait Membership {
    /// The main-input partitions (topic, partition) this instance owns now.
    fn owned(&self) -> Result<BTreeSet<(String, u32)>, RunError>;
}

/// The tasks an instance runs on the partitions it owns: for each sub-topology of the plan, in
/// plan order, one task per owned partition of its main input, in partition order. Written once
/// for both backends.
pub(crate) fn tasks_on(specs: &[Arc<TaskSpec>], owned: &BTreeSet<(String, u32)>) -> Vec<(Arc<TaskSpec>, u32)> {
    let mut tasks = Vec::new();
    for spec in specs {
        for (_, p) in owned.range((spec.main.topic.clone(), 0)..=(spec.main.topic.clone(), u32::MAX)) {
            tasks.push((spec.clone(), *p));
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_on_owned_partitions_in_plan_then_partition_order() {
        let program = crate::compile(
            r#"
stream a from "a" { key k value json { k: string, v: int } }
stream b from "b" { key k value json { k: string, v: int } }
query qa { from a to "oa" }
query qb { from b to "ob" }
query qc { from a where v > 1 to "oc" }
"#,
        )
        .unwrap_or_else(|d| panic!("{d:?}"));
        let topo = crate::plan::lower(&program, "app");
        let specs: Vec<Arc<TaskSpec>> =
            crate::plan::physical::specs(&program, &topo).unwrap().into_iter().map(Arc::new).collect();
        let owned: BTreeSet<(String, u32)> =
            [("a".to_string(), 2), ("a".to_string(), 0), ("b".to_string(), 1), ("c".to_string(), 0)].into();
        let got: Vec<(String, String, u32)> =
            tasks_on(&specs, &owned).into_iter().map(|(s, p)| (s.query.clone(), s.main.topic.clone(), p)).collect();
        let mut want = Vec::new();
        for s in &specs {
            let ps: &[u32] = match s.main.topic.as_str() {
                "a" => &[0, 2],
                "b" => &[1],
                _ => &[],
            };
            for p in ps {
                want.push((s.query.clone(), s.main.topic.clone(), *p));
            }
        }
        assert_eq!(got, want);
        assert_eq!(got.len(), 5);
    }
}
