//! What every operator of a task sees: decoded input records, output records, store changes,
//! per-record errors, the task's counters, and read access to committed state.

use std::collections::BTreeMap;

use crate::eval::Row;
use crate::log::Record;

/// One decoded input record.
pub struct Input {
    pub row: Row,
    pub ts: i64,
    /// The record's offset in its partition (identifies it in join stores).
    pub offset: u64,
}

/// A record for the driver to write: topic, partition (None: by key), record.
#[derive(Debug)]
pub struct Output {
    pub topic: String,
    pub partition: Option<u32>,
    pub record: Record,
}

impl Output {
    /// The partition it goes to in a topic of `partitions`: its own, else its key's (murmur2,
    /// as Kafka's default partitioner), else 0.
    pub fn partition_in(&self, partitions: u32) -> u32 {
        self.partition.unwrap_or_else(|| {
            self.record.key.as_deref().map(|k| crate::log::partition_for(k, partitions)).unwrap_or(0)
        })
    }
}

/// Counters the task keeps for metrics and tests.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub records_in: u64,
    pub records_out: u64,
    pub late: u64,
    pub dead_letters: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Records that reached each operator, indexed like `TaskSpec::nodes` (`ops`, then `post`).
    pub ops_in: Vec<u64>,
    /// Per tenant (tenant-scoped tasks): records in, and records sent to the dead-letter topic.
    pub tenants: BTreeMap<Vec<u8>, TenantCounts>,
    /// The record being processed was counted in its tenant's `records_in` (the driver clears
    /// this before each record; a record refused before that is counted when it is refused).
    pub counted: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantCounts {
    pub records_in: u64,
    pub dead_letters: u64,
}

impl Counters {
    /// The counts of tenant `t`; the record being processed is now counted in.
    pub(crate) fn tenant(&mut self, t: &[u8]) -> &mut TenantCounts {
        self.counted = true;
        if !self.tenants.contains_key(t) {
            self.tenants.insert(t.to_vec(), TenantCounts::default());
        }
        self.tenants.get_mut(t).expect("just inserted")
    }
}

/// An error evaluating one record: it goes to the dead-letter topic (or fails the task).
#[derive(Debug)]
pub struct RecordError(pub String);

/// What the store layer offers a task: point reads of committed state.
pub trait StoreRead {
    fn get(&self, store: usize, key: &[u8]) -> Option<Vec<u8>>;
    /// Every entry of a store (used to rebuild the window index after a restore).
    fn entries(&self, store: usize) -> Vec<(Vec<u8>, Vec<u8>)>;
}

/// A change to one store entry, produced at flush.
#[derive(Debug)]
pub struct Change {
    pub store: usize,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    pub timestamp: i64,
    /// The key may already be in the store (false: created since the last flush).
    pub existed: bool,
}

/// No stores at all (a task with no state, or state not read yet).
pub struct NoStores;

impl StoreRead for NoStores {
    fn get(&self, _: usize, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn entries(&self, _: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        Vec::new()
    }
}
