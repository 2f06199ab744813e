//! What every operator of a task sees: decoded input records, output records, store changes,
//! per-record errors, the task's counters, read access to committed state, and what an
//! operator's state is ([`Stateful`]). The operators themselves are in `runtime::ops`.

use std::collections::BTreeMap;

use crate::eval::{Row, Tenant};
use crate::log::Record;

/// One decoded input record.
pub struct Input {
    pub row: Row,
    pub ts: i64,
    /// The record's offset in its partition (identifies it in join stores).
    pub offset: u64,
}

/// A record for the driver to write: topic, the partition it goes to, record.
#[derive(Debug)]
pub struct Output {
    pub topic: String,
    pub route: Route,
    pub record: Record,
}

/// Which partition of its topic an output record goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Its key's (no key: partition 0).
    Key,
    /// This one.
    Partition(u32),
    /// These bytes' (a windowed key goes where its key without the window goes, as Kafka
    /// Streams' windowed partitioner does, so every window of a key is in one partition).
    Bytes(Vec<u8>),
}

impl Output {
    /// The partition it goes to in a topic of `partitions` (murmur2 of the bytes routed by, as
    /// Kafka's default partitioner).
    pub fn partition_in(&self, partitions: u32) -> u32 {
        let by = match &self.route {
            Route::Partition(p) => return *p,
            Route::Key => self.record.key.as_deref(),
            Route::Bytes(b) => Some(b.as_slice()),
        };
        by.map(|k| crate::log::partition_for(k, partitions)).unwrap_or(0)
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
    /// Every key of a store, in order (an index needing no values: a foreign-key join's).
    fn keys(&self, store: usize) -> Vec<Vec<u8>> {
        self.entries(store).into_iter().map(|(k, _)| k).collect()
    }
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

/// The state an operator keeps, if any: it declares the stores it keeps, as the physical plan
/// assigned them, knows how their keys are laid out, and rebuilds what it holds in memory from
/// them when the task opens (after a restore) or is rebuilt (a control statement applied).
/// Stateless operators keep the defaults. The task's side inputs — its topic-fed tables
/// (`runtime::tables::TableInputs`) and the other sides of its stream–stream joins (`runtime::stream_join::StreamJoins`) — are
/// state of this kind that takes records of their own inputs, not rows of the chain.
pub(crate) trait Stateful {
    /// The stores it keeps (indices into `TaskSpec::stores`).
    fn stores(&self) -> &[usize] {
        &[]
    }

    /// Rebuild its in-memory state from the committed stores.
    fn restore(&mut self, _stores: &dyn StoreRead) {}

    /// In a tenant-scoped task: the tenant a key of one of its stores belongs to.
    fn key_tenant<'a>(&self, _key: &'a [u8]) -> Option<&'a [u8]> {
        None
    }
}

/// A key's bytes as the task's stores hold them: scoped to the record's tenant in a
/// tenant-scoped task (`tenant_scoped`).
pub(crate) fn scoped(tenant_scoped: bool, tenant: Option<&Tenant>, kb: Vec<u8>) -> Result<Vec<u8>, RecordError> {
    match (tenant_scoped, tenant) {
        (false, _) => Ok(kb),
        (true, Some(t)) => Ok(crate::runtime::tenant::scope(t, &kb)),
        (true, None) => Err(RecordError("the record has no tenant".into())),
    }
}
