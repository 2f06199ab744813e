//! What every operator of a task sees: decoded input records, output records, store changes,
//! per-record errors, the task's counters, read access to committed state, and what an
//! operator's state is ([`Stateful`]). The operators themselves are in `runtime::ops`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::eval::{Row, Tenant};
use crate::record::Record;

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
        by.map(|k| crate::record::partition_for(k, partitions)).unwrap_or(0)
    }
}

/// Where one part of an output record is in [`Outputs`]' buffer.
#[derive(Clone, Copy, Debug)]
struct Part {
    start: usize,
    end: usize,
}

/// How an output record in [`Outputs`] is routed ([`Route`], its bytes in the buffer).
#[derive(Clone, Copy, Debug)]
enum Routed {
    Key,
    Partition(u32),
    Bytes(Part),
}

#[derive(Debug)]
struct Entry {
    topic: Arc<str>,
    route: Routed,
    key: Option<Part>,
    value: Option<Part>,
    timestamp: i64,
    /// Its headers: `headers[h.0..h.1]`.
    headers: (usize, usize),
}

/// The records a task writes until its next commit, in the order it made them, encoded into one
/// buffer as they are made: keys, values, header values and routing bytes back to back, and per
/// record where its parts are. A record needs no allocation of its own (its topic name is shared);
/// the backend reads each as an [`OutRef`] borrowed from here, and the task keeps the buffer for
/// its next commit.
#[derive(Debug, Default)]
pub struct Outputs {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    headers: Vec<(Cow<'static, str>, Part)>,
    /// Where the buffers ended when the record being processed began (or when what it made so
    /// far was kept): what [`Outputs::drop_record`] truncates to.
    record: (usize, usize, usize),
}

impl Outputs {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bytes of the records' keys, values and header values.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forget every record, keeping the buffers (shrunk if one commit made them far larger
    /// than they usually need to be).
    pub fn clear(&mut self) {
        let used = self.bytes.len();
        self.bytes.clear();
        if self.bytes.capacity() > (64 << 20).max(4 * used) {
            self.bytes.shrink_to(used.max(1 << 20));
        }
        self.entries.clear();
        self.headers.clear();
        self.record = (0, 0, 0);
    }

    /// A record's processing begins: what it makes from here can be dropped.
    pub fn begin_record(&mut self) {
        crate::runtime::lineage::begin_record();
        self.record = (self.entries.len(), self.bytes.len(), self.headers.len());
    }

    /// What was made so far is kept whatever becomes of the record (rows that are not its own,
    /// such as a left join's pending rows its time passed on).
    pub fn keep_so_far(&mut self) {
        self.begin_record();
    }

    /// The records the record being processed made so far.
    pub fn made_by_record(&self) -> impl Iterator<Item = OutRef<'_>> + '_ {
        self.entries[self.record.0.min(self.entries.len())..].iter().map(move |e| OutRef { out: self, e })
    }

    /// The record being processed failed: the records it made are dropped (a record is applied
    /// all or nothing). How many were.
    pub fn drop_record(&mut self) -> usize {
        crate::runtime::lineage::drop_record();
        let (entries, bytes, headers) = self.record;
        let dropped = self.entries.len().saturating_sub(entries);
        self.entries.truncate(entries);
        self.bytes.truncate(bytes);
        self.headers.truncate(headers);
        dropped
    }

    /// Add a record made elsewhere (dead letters, late records, repartition records).
    pub fn push(&mut self, o: Output) {
        let mut b = self.record(&Arc::from(o.topic.as_str()), o.record.timestamp);
        if let Some(k) = &o.record.key {
            b.key(k);
        }
        if let Some(v) = &o.record.value {
            b.value(v);
        }
        for (n, v) in &o.record.headers {
            b.header(Cow::Owned(n.clone()), v);
        }
        match &o.route {
            Route::Key => {}
            Route::Partition(p) => b.partition(*p),
            Route::Bytes(r) => b.route_bytes(|out| out.extend_from_slice(r)),
        }
        b.done();
    }

    /// Begin a record to `topic` at `timestamp`: its parts are written through the returned
    /// [`Building`] straight into the buffer, and the record is added by [`Building::done`] (a
    /// record dropped before that leaves nothing). No key, no value and no headers unless given;
    /// routed by its key unless told otherwise.
    pub fn record(&mut self, topic: &Arc<str>, timestamp: i64) -> Building<'_> {
        let (bytes, headers) = (self.bytes.len(), self.headers.len());
        let entry = Entry {
            topic: topic.clone(),
            route: Routed::Key,
            key: None,
            value: None,
            timestamp,
            headers: (headers, headers),
        };
        Building { out: self, entry: Some(entry), bytes }
    }

    /// The records, in the order they were made.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = OutRef<'_>> + '_ {
        self.entries.iter().map(move |e| OutRef { out: self, e })
    }
}

/// A record being written into [`Outputs`] (see [`Outputs::record`]).
pub struct Building<'a> {
    out: &'a mut Outputs,
    /// The record so far (taken by [`Building::done`]).
    entry: Option<Entry>,
    /// Where the buffer ended when the record began (what dropping it truncates to).
    bytes: usize,
}

impl Building<'_> {
    fn part(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Part {
        let start = self.out.bytes.len();
        write(&mut self.out.bytes);
        Part { start, end: self.out.bytes.len() }
    }

    /// Change the record (always there until [`Building::done`] takes it).
    fn set(&mut self, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = self.entry.as_mut() {
            f(e);
        }
    }

    /// Its key is these bytes.
    pub fn key(&mut self, k: &[u8]) {
        self.key_with(|b| b.extend_from_slice(k));
    }

    /// Its key is what `write` appends to the buffer.
    pub fn key_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let p = self.part(write);
        self.set(|e| e.key = Some(p));
    }

    /// Its value is these bytes.
    pub fn value(&mut self, v: &[u8]) {
        self.value_with(|b| b.extend_from_slice(v));
    }

    /// Its value is what `write` appends to the buffer.
    pub fn value_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let p = self.part(write);
        self.set(|e| e.value = Some(p));
    }

    /// Its value is what `write` appends to the buffer, if it says there is one (true); an
    /// error leaves the record as it was.
    pub fn try_value_with<E>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> Result<bool, E>) -> Result<(), E> {
        let start = self.out.bytes.len();
        match write(&mut self.out.bytes) {
            Ok(true) => {
                let p = Part { start, end: self.out.bytes.len() };
                self.set(|e| e.value = Some(p));
                Ok(())
            }
            Ok(false) => {
                self.out.bytes.truncate(start);
                Ok(())
            }
            Err(e) => {
                self.out.bytes.truncate(start);
                Err(e)
            }
        }
    }

    /// A header (headers keep the order they are added in).
    pub fn header(&mut self, name: Cow<'static, str>, v: &[u8]) {
        let part = self.part(|b| b.extend_from_slice(v));
        self.out.headers.push((name, part));
        let n = self.out.headers.len();
        self.set(|e| e.headers.1 = n);
    }

    /// A header whose value is what `write` appends to the buffer.
    pub fn header_with(&mut self, name: &'static str, write: impl FnOnce(&mut Vec<u8>)) {
        let part = self.part(write);
        self.out.headers.push((Cow::Borrowed(name), part));
        let n = self.out.headers.len();
        self.set(|e| e.headers.1 = n);
    }

    /// It goes to this partition.
    pub fn partition(&mut self, p: u32) {
        self.set(|e| e.route = Routed::Partition(p));
    }

    /// It goes where the bytes `write` appends go (as [`Route::Bytes`]).
    pub fn route_bytes(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let p = self.part(write);
        self.set(|e| e.route = Routed::Bytes(p));
    }

    /// Add the record.
    pub fn done(mut self) {
        if let Some(e) = self.entry.take() {
            if crate::runtime::lineage::on() {
                let bytes = &self.out.bytes;
                let part = |p: Option<Part>| p.map(|p| &bytes[p.start..p.end]);
                let headers = || {
                    self.out.headers[e.headers.0..e.headers.1]
                        .iter()
                        .map(|(n, p)| (n.to_string(), bytes[p.start..p.end].to_vec()))
                        .collect()
                };
                if crate::runtime::lineage::output(&e.topic, part(e.key), part(e.value), e.timestamp, headers) {
                    // (Its topic holds the application's records in a replay.)
                    self.out.bytes.truncate(self.bytes);
                    self.out.headers.truncate(e.headers.0);
                    return;
                }
            }
            self.out.entries.push(e);
        }
    }
}

impl Drop for Building<'_> {
    /// A record not done leaves nothing behind.
    fn drop(&mut self) {
        if let Some(e) = &self.entry {
            self.out.bytes.truncate(self.bytes);
            self.out.headers.truncate(e.headers.0);
        }
    }
}

/// One record of [`Outputs`], borrowed.
#[derive(Clone, Copy)]
pub struct OutRef<'a> {
    out: &'a Outputs,
    e: &'a Entry,
}

impl<'a> OutRef<'a> {
    fn bytes(&self, p: Part) -> &'a [u8] {
        &self.out.bytes[p.start..p.end]
    }

    /// About the bytes it takes in a topic: key, value and headers, with the overhead of a
    /// record batch of one ([`crate::runtime::topics::RECORD_OVERHEAD`]).
    pub fn size(&self) -> usize {
        use crate::runtime::topics::{HEADER_OVERHEAD, RECORD_OVERHEAD};
        let headers: usize = self.headers().map(|(n, v)| n.len() + v.len() + HEADER_OVERHEAD).sum();
        self.key().map_or(0, <[u8]>::len) + self.value().map_or(0, <[u8]>::len) + headers + RECORD_OVERHEAD
    }

    pub fn topic(&self) -> &'a str {
        &self.e.topic
    }

    /// The topic's name, shared.
    pub fn topic_arc(&self) -> &'a Arc<str> {
        &self.e.topic
    }

    pub fn key(&self) -> Option<&'a [u8]> {
        self.e.key.map(|p| self.bytes(p))
    }

    pub fn value(&self) -> Option<&'a [u8]> {
        self.e.value.map(|p| self.bytes(p))
    }

    pub fn timestamp(&self) -> i64 {
        self.e.timestamp
    }

    pub fn headers(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a [u8])> + 'a {
        let out = self.out;
        out.headers[self.e.headers.0..self.e.headers.1]
            .iter()
            .map(move |(n, p)| (n.as_ref(), &out.bytes[p.start..p.end]))
    }

    /// The partition it goes to in a topic of `partitions` (as [`Output::partition_in`]).
    pub fn partition_in(&self, partitions: u32) -> u32 {
        let by = match self.e.route {
            Routed::Partition(p) => return p,
            Routed::Key => self.key(),
            Routed::Bytes(p) => Some(self.bytes(p)),
        };
        by.map(|k| crate::record::partition_for(k, partitions)).unwrap_or(0)
    }

    /// The record, owned.
    pub fn to_record(&self) -> Record {
        Record {
            key: self.key().map(<[u8]>::to_vec),
            value: self.value().map(<[u8]>::to_vec),
            timestamp: self.timestamp(),
            headers: self.headers().map(|(n, v)| (n.to_string(), v.to_vec())).collect(),
        }
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
    /// The task's share of `statestore.cache.max.bytes`: a quarter of it bounds an aggregate's
    /// record cache, the rest the stores' rows in memory.
    fn cache_share(&self) -> usize {
        usize::MAX
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
