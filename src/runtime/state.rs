//! Local state: one sled tree per store and partition, the committed changes not written to it
//! yet, and the checkpoint (the changelog position the tree reflects) written with them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::record::{Entry, Pos};
use crate::runtime::error::{state, RunError};
use crate::runtime::key_filter::KeyFilter;
pub(crate) use crate::runtime::pages::PagedTree;
pub(crate) use crate::runtime::pending::Pending;
use crate::runtime::pending::ENTRY_COST;
use crate::runtime::task::{Change, StoreRead, Task};
use crate::runtime::writer::Flights;

/// The committed local state of one task: per store, a sled tree under three layers in memory,
/// newest first: the committed changes not handed to the writer yet (`pending`), those handed
/// to it and not yet written (`flights`), and rows sled holds, kept for reads (`clean`). A read
/// looks in that order and goes to sled only when the layers do not hold every row of the store
/// ([`SledKeys`]): a store that starts empty (a first run, a restore from scratch) and fits its
/// share of `statestore.cache.max.bytes` never reads sled at all, and once it outgrows it,
/// reads sled only for keys it may have written there.
///
/// Local state is written behind the commits, by the writer thread ([`crate::runtime::writer`]):
/// every few commits the pending changes go to it as one flight with the changelog ends they
/// reach. A window created and expired in between costs no sled write at all. sled holds the
/// state of its checkpoint plus possibly some committed changes after it, all of which a
/// restore from that checkpoint replays, so the changelog tail after the checkpoint covers the
/// rest after a crash.
pub(crate) struct Trees {
    pub(crate) trees: Vec<PagedTree>,
    /// Per store: key → (value or deletion, whether the key may be in sled).
    pub(crate) pending: Vec<Pending>,
    /// Per store: the changes handed to the writer, oldest first, and the flag the writer sets
    /// once one of them failed (the later ones are then not written, so no checkpoint passes
    /// the gap).
    flights: Vec<Flights>,
    /// Per store: rows sled holds, kept in memory.
    clean: Vec<Clean>,
    /// Commits since local state was last handed to the writer.
    pub(crate) commits: u32,
    /// Changes staged since local state was last handed to the writer (each change counts,
    /// also one to a key already pending): what a restore after a crash replays at most.
    staged: usize,
    /// Keys per tenant over every store, in a tenant-scoped task (None otherwise): counted once
    /// when the task opens, then kept up to date as changes are staged.
    pub(crate) tenant_keys: Option<BTreeMap<Vec<u8>, i64>>,
    /// `statestore.cache.max.bytes`: the memory the local state of all of the process's tasks
    /// may hold, shared out evenly over the tasks alive.
    cache_max: usize,
    /// The first read of sled that failed since it was last taken (the store's name, the
    /// error): the row was taken as absent, so nothing worked out since may be committed
    /// (`take_read_error`, before every commit).
    read_error: std::sync::Mutex<Option<(String, sled::Error)>>,
    _live: LiveTask,
}

/// Rows sled holds, kept in memory so that reads need not go to sled.
#[derive(Default)]
struct Clean {
    /// (A `Pending` of puts only: a flight that lands on an empty store becomes it whole.)
    rows: Pending,
    /// What the layers know of the keys sled holds.
    keys: SledKeys,
}

/// What the layers in memory (pending, flights, clean rows) know of the keys a store's sled
/// tree holds.
#[derive(Default)]
pub(crate) enum SledKeys {
    /// Every one: the layers hold every row of the store, and a key they do not have is not in
    /// sled either. Lost for good once a row is dropped for want of memory…
    InMemory,
    /// …when they become this filter of the keys the layers held (and of those put since): a
    /// key it rules out is not in sled.
    Filtered(KeyFilter),
    /// Nothing: a key the layers do not have is looked for in sled (a store opened over rows
    /// of an earlier run).
    #[default]
    Unknown,
}

impl SledKeys {
    /// The layers hold every row.
    fn in_memory(&self) -> bool {
        matches!(self, SledKeys::InMemory)
    }

    /// Whether a key the layers do not have may be in sled.
    fn may_hold(&self, key: &[u8]) -> bool {
        match self {
            SledKeys::InMemory => false,
            SledKeys::Filtered(f) => f.may_hold(key),
            SledKeys::Unknown => true,
        }
    }

    /// Rows are about to be dropped from the layers, which hold `layers` besides the clean
    /// rows: their keys become the filter (if the layers held every row).
    fn dropping<'a>(&mut self, layers: impl IntoIterator<Item = &'a Pending> + Clone) {
        if self.in_memory() {
            *self = SledKeys::Filtered(KeyFilter::of(layers));
        }
    }

    /// `changes` are handed to the writer: a filter takes in the keys they put.
    fn handing(&mut self, changes: &Pending) {
        if let SledKeys::Filtered(f) = self {
            f.add_puts(changes);
        }
    }

    fn bytes(&self) -> usize {
        match self {
            SledKeys::Filtered(f) => f.bytes(),
            _ => 0,
        }
    }
}

/// The tasks alive in the process, among which `statestore.cache.max.bytes` is shared.
static LIVE_TASKS: AtomicUsize = AtomicUsize::new(0);

/// Counts a task among the live ones while it exists.
struct LiveTask;

impl LiveTask {
    fn new() -> LiveTask {
        LIVE_TASKS.fetch_add(1, Ordering::Relaxed);
        LiveTask
    }
}

impl Drop for LiveTask {
    fn drop(&mut self) {
        LIVE_TASKS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A task's share of `statestore.cache.max.bytes` (`cache_max`) while `others` more tasks than
/// those alive are about to be.
pub(crate) fn cache_share(cache_max: usize, others: usize) -> usize {
    cache_max / (LIVE_TASKS.load(Ordering::Relaxed) + others).max(1)
}

/// Local state is handed to the writer when the pending changes hold a quarter of the task's
/// share of memory, and otherwise: when not all of the task's rows are in memory, every this
/// many commits…
pub(crate) const LOCAL_WRITE_COMMITS: u32 = 8;

/// …or once this many changes are pending; when all of them are (every store complete), once
/// the changes staged since the last hand-over (each one counted) are at least half as many as
/// the rows, and at most every [`LOCAL_WRITE_COMMITS`] commits. A flight rewrites every page of
/// sled its changes fall in, which for keys spread over the store is every page: flights that
/// grow with the store rewrite each row a bounded number of times over a first run (about
/// three), where flights of a fixed size rewrote the whole store at each one (at 1 M keys, 10
/// times). A restart after a crash replays about as many changelog records as were staged.
pub(crate) const LOCAL_WRITE_PENDING: usize = 100_000;

impl Trees {
    /// A task's stores: each sled tree with the changes not written to it yet (a restore's: those
    /// not handed to the writer, and the flights it handed over), and what they tell of the keys
    /// the tree holds. The flights are layers from the start: anything that reads the stores (the
    /// operators' indexes, the tenant counts) sees their rows.
    pub(crate) fn new(stores: Vec<(PagedTree, Pending, SledKeys, Flights)>, cache_max: usize) -> Trees {
        let mut trees = Trees {
            trees: Vec::new(),
            pending: Vec::new(),
            flights: Vec::new(),
            clean: Vec::new(),
            commits: 0,
            staged: 0,
            tenant_keys: None,
            cache_max,
            read_error: std::sync::Mutex::new(None),
            _live: LiveTask::new(),
        };
        for (tree, pending, keys, flights) in stores {
            trees.push(tree, pending, keys);
            // (A restore's: layers from the start.)
            *trees.flights.last_mut().expect("pushed") = flights;
        }
        trees
    }

    /// A read of sled that failed since the last call: the error to end the run with before
    /// anything worked out from the rows read meanwhile (taken as absent) is committed.
    pub(crate) fn take_read_error(&self) -> Option<RunError> {
        let (store, source) = self.read_error.lock().ok()?.take()?;
        Some(RunError::State { doing: format!("reading the local state of store {store}"), source })
    }

    /// A sled read's value; a failed read is remembered (see [`Self::take_read_error`]).
    fn noted<T>(&self, store: usize, r: sled::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if let Ok(mut first) = self.read_error.lock() {
                    first.get_or_insert_with(|| (self.trees[store].name(), e));
                }
                None
            }
        }
    }

    /// Add a store.
    pub(crate) fn push(&mut self, tree: PagedTree, pending: Pending, keys: SledKeys) {
        self.trees.push(tree);
        self.pending.push(pending);
        self.flights.push(Flights::default());
        self.clean.push(Clean { keys, ..Clean::default() });
    }

    /// Take every store out, settled (nothing in flight): (tree, pending changes).
    pub(crate) fn take_stores(&mut self) -> Result<Vec<(PagedTree, Pending)>, RunError> {
        self.settle()?;
        self.flights.clear();
        self.clean.clear();
        Ok(std::mem::take(&mut self.trees).into_iter().zip(std::mem::take(&mut self.pending)).collect())
    }

    /// Empty every store (see [`empty_store`]): its tree cleared, nothing pending or in memory,
    /// a tombstone queued for each key it held.
    pub(crate) fn empty_all(&mut self, stream_time: i64, changes: &mut Vec<Change>) -> Result<(), RunError> {
        self.settle()?;
        for (i, (tree, pending)) in self.trees.iter().zip(self.pending.iter_mut()).enumerate() {
            empty_store(i, tree, pending, stream_time, changes)?;
            self.clean[i] = Clean { keys: SledKeys::InMemory, ..Clean::default() };
        }
        Ok(())
    }

    /// Record the changes of a commit; written to sled later by [`Trees::write`].
    pub(crate) fn stage(&mut self, changes: &mut Vec<Change>, task: &Task) {
        for ch in changes.drain(..) {
            if self.tenant_keys.is_some() {
                if let Some(t) = task.key_tenant(ch.store, &ch.key) {
                    let before = self.get(ch.store, &ch.key).is_some();
                    let delta = ch.value.is_some() as i64 - before as i64;
                    if delta != 0 {
                        if let Some(m) = self.tenant_keys.as_mut() {
                            *m.entry(t.to_vec()).or_default() += delta;
                        }
                    }
                }
            }
            self.pending[ch.store].stage(ch.key, ch.value, ch.existed);
            self.staged += 1;
        }
    }

    /// Count every tenant's keys (a tenant-scoped task), or stop counting.
    pub(crate) fn count_tenants(&mut self, task: &Task) {
        if !task.spec.tenant {
            self.tenant_keys = None;
            return;
        }
        let mut m: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for i in 0..self.trees.len() {
            // (Every layer over sled: a task just opened may hold a restore's flights.)
            let layers: Vec<&Pending> = self.overlays(i).collect();
            let counted = live_store_keys(&self.trees[i], &layers, |k| {
                if let Some(t) = task.key_tenant(i, k) {
                    *m.entry(t.to_vec()).or_default() += 1;
                }
            });
            // (Counts short of a key are wrong: the next commit refuses.)
            self.noted(i, counted);
        }
        self.tenant_keys = Some(m);
    }

    /// Delete every key of the given tenants from every store, and queue a tombstone each in
    /// `changes` for the changelogs. Returns how many. The deletions are pending, like a
    /// commit's changes: they reach sled only after the log commit that carries the tombstones
    /// (a commit that fails reopens the task from committed state, and the purge runs again).
    pub(crate) fn purge(
        &mut self,
        tenants: &[&[u8]],
        task: &Task,
        stream_time: i64,
        changes: &mut Vec<Change>,
    ) -> Result<u64, RunError> {
        self.settle()?;
        let mut n = 0;
        for (i, (tree, pending)) in self.trees.iter().zip(self.pending.iter_mut()).enumerate() {
            let mut keys = Vec::new();
            live_store_keys(tree, &[pending], |k| {
                if task.key_tenant(i, k).is_some_and(|t| tenants.contains(&t)) {
                    keys.push(k.to_vec());
                }
            })
            .map_err(state("cannot read local state to purge a tenant"))?;
            for k in &keys {
                pending.stage_slices(k, None, true);
            }
            n += keys.len() as u64;
            changes.extend(keys.into_iter().map(|key| Change {
                store: i,
                key,
                value: None,
                timestamp: stream_time.max(0),
                existed: true,
            }));
        }
        Ok(n)
    }

    /// Hand every store's pending changes to the writer with its checkpoint (the changelog end
    /// of the last commit) and wait until everything is written: local state reflects the last
    /// commit (a task closing, the end of a run).
    pub(crate) fn write(&mut self, checkpoints: &[Pos]) -> Result<(), RunError> {
        for (i, cp) in checkpoints.iter().enumerate().take(self.trees.len()) {
            self.send(i, *cp);
        }
        (self.commits, self.staged) = (0, 0);
        // The task is closing: the rows written are not kept in memory (taking a first run's
        // last flight into the clean rows was a fifth of a second at 1 M keys, for nothing).
        self.reap(Reap::AllDropped)
    }

    /// Hand the pending changes of every store that has some to the writer, with its
    /// checkpoint, once [`Trees::due`]; take in what the writer has written since; and keep
    /// the memory within the task's share of `statestore.cache.max.bytes`. True if changes
    /// were handed over.
    pub(crate) fn write_behind(&mut self, checkpoints: &[Pos]) -> Result<bool, RunError> {
        self.reap(Reap::Landed)?;
        let due = self.due();
        if due {
            self.hand_over(checkpoints);
        }
        self.bound()?;
        Ok(due)
    }

    /// Hand the pending changes of every store that has some to the writer now, with its
    /// checkpoint: when due, and for a task just restored (its rows are written while it runs,
    /// and while the next task restores, rather than at its first write; once written they stay
    /// in memory as its clean rows).
    pub(crate) fn hand_over(&mut self, checkpoints: &[Pos]) {
        for (i, cp) in checkpoints.iter().enumerate().take(self.trees.len()) {
            if !self.pending[i].is_empty() {
                self.send(i, *cp);
            }
        }
        (self.commits, self.staged) = (0, 0);
    }

    /// Hand store `i`'s pending changes to the writer with checkpoint `cp`.
    fn send(&mut self, i: usize, cp: Pos) {
        let changes = std::mem::take(&mut self.pending[i]);
        self.clean[i].keys.handing(&changes);
        self.flights[i].send(&self.trees[i], changes, cp);
    }

    /// Wait until the writer has written every flight, and take them in.
    pub(crate) fn settle(&mut self) -> Result<(), RunError> {
        self.reap(Reap::All)
    }

    /// Take in the flights the writer is through with (see [`Reap`]): their rows join the clean
    /// layer while the task's share allows, else the store's rows are no longer all in memory.
    fn reap(&mut self, how: Reap) -> Result<(), RunError> {
        let share = self.share();
        let mut used = self.memory();
        let mut first_error = None;
        for i in 0..self.trees.len() {
            while self.flights[i].queue.front().is_some_and(|f| how != Reap::Landed || f.landed()) {
                let Some(f) = self.flights[i].queue.pop_front() else { break };
                let clean = &mut self.clean[i];
                let written = match f.wait() {
                    Ok(w) => w,
                    Err(e) => {
                        // (Every flight is waited for all the same: none is left behind. Which
                        // keys the failed one wrote is not known.)
                        first_error.get_or_insert(e);
                        clean.keys = SledKeys::Unknown;
                        continue;
                    }
                };
                let (Some(mut written), false) = (written, how == Reap::AllDropped) else {
                    // Its rows cannot be taken in (the clean rows they changed would be
                    // stale), or are not wanted (and then neither are their keys).
                    used -= clean.rows.bytes();
                    clean.rows = Pending::default();
                    clean.keys = SledKeys::Unknown;
                    continue;
                };
                // (`memory` counted it with what its writing took: see `Pending::bytes_in_flight`.)
                used = used.saturating_sub(written.bytes_in_flight());
                if written.len() >= clean.rows.len() {
                    // The rows as they are (no copy, no second map): a restore's or a first
                    // run's state, written, stays in memory in the map it was built in. The
                    // fewer clean rows it did not change join it.
                    used -= clean.rows.bytes();
                    written.absorb(std::mem::take(&mut clean.rows), false);
                    written.drop_deletions();
                    if used + written.bytes() > share {
                        let later = self.flights[i].layers();
                        clean.keys.dropping(later.chain([&self.pending[i], &written]));
                        written.shrink_to(share.saturating_sub(used));
                    }
                    used += written.bytes();
                    clean.rows = written;
                    continue;
                }
                if used + written.bytes() <= share {
                    // Within the share: its rows over the clean ones, without a copy.
                    let before = clean.rows.bytes();
                    clean.rows.absorb(written, true);
                    used = used + clean.rows.bytes() - before;
                    continue;
                }
                for (k, v) in written.changes() {
                    let before = clean.rows.bytes();
                    match v {
                        Some(v) if used + k.len() + v.len() + ENTRY_COST <= share => clean.rows.put(k, v),
                        Some(_) => {
                            let later = self.flights[i].layers();
                            clean.keys.dropping(later.chain([&self.pending[i], &written, &clean.rows]));
                            clean.rows.remove(k);
                        }
                        None => clean.rows.remove(k),
                    }
                    used = used + clean.rows.bytes() - before;
                }
            }
        }
        match first_error {
            Some(e) => Err(state("cannot write local state")(e)),
            None => Ok(()),
        }
    }

    /// Keep the memory the layers hold within the task's share: give up a filter of the keys
    /// past a quarter of it, drop clean rows (a quarter of the share below it, so that this is
    /// not done at every commit), then wait for the writer while the changes in flight and
    /// pending still hold more.
    fn bound(&mut self) -> Result<(), RunError> {
        let share = self.share();
        for clean in &mut self.clean {
            if clean.keys.bytes() > share / 4 {
                // A filter of more keys than the share can afford (some 6 M keys with 64 MiB)
                // is given up: misses read sled again.
                clean.keys = SledKeys::Unknown;
            }
        }
        if self.memory() <= share {
            return Ok(());
        }
        let target = share - share / 4;
        let mut used = self.memory();
        for (i, clean) in self.clean.iter_mut().enumerate() {
            if used <= target {
                break;
            }
            let before = clean.rows.bytes();
            let layers = self.flights[i].layers().chain([&self.pending[i], &clean.rows]);
            clean.keys.dropping(layers);
            clean.rows.shrink_to(before.saturating_sub(used - target));
            used -= before - clean.rows.bytes();
        }
        // Still over: the writer is behind. Wait for its oldest flights (the processing thread
        // slows down to sled's pace rather than hold more).
        while self.memory() > share {
            let Some(i) = (0..self.trees.len()).find(|i| !self.flights[*i].queue.is_empty()) else { break };
            let f = self.flights[i].queue.pop_front().expect("not empty");
            let clean = &mut self.clean[i];
            let layers = self.flights[i].layers().chain([&*f.changes, &self.pending[i], &clean.rows]);
            clean.keys.dropping(layers);
            f.wait().map_err(state("cannot write local state"))?;
        }
        Ok(())
    }

    /// What the task's stores may hold in memory: its share of `statestore.cache.max.bytes`,
    /// less the quarter its aggregate's record cache may hold.
    fn share(&self) -> usize {
        let share = cache_share(self.cache_max, 0);
        share - share / 4
    }

    /// About the memory the layers hold.
    pub(crate) fn memory(&self) -> usize {
        self.pending.iter().map(|p| p.bytes()).sum::<usize>()
            + self.flights.iter().map(Flights::bytes).sum::<usize>()
            + self.clean.iter().map(|c| c.rows.bytes() + c.keys.bytes()).sum::<usize>()
    }

    /// Whether the pending changes are due to be handed to the writer (see
    /// [`LOCAL_WRITE_PENDING`]).
    pub(crate) fn due(&self) -> bool {
        if self.pending.iter().map(|p| p.bytes()).sum::<usize>() > self.share() / 4 {
            return true;
        }
        if self.clean.iter().all(|c| c.keys.in_memory()) {
            let rows = self.clean.iter().map(|c| c.rows.len()).sum::<usize>();
            self.commits >= LOCAL_WRITE_COMMITS && self.staged >= rows / 2
        } else {
            let pending = self.pending.iter().map(|p| p.len()).sum::<usize>();
            self.commits >= LOCAL_WRITE_COMMITS || pending >= LOCAL_WRITE_PENDING
        }
    }

    /// Whether every change is written (nothing pending, nothing in flight).
    pub(crate) fn is_settled(&self) -> bool {
        self.pending.iter().all(|p| p.is_empty()) && self.flights.iter().all(|f| f.queue.is_empty())
    }

    /// Store `i` as a query reads it: its tree, and the changes not written to it over it,
    /// oldest first (in flight, then pending).
    pub(crate) fn view(&self, i: usize) -> Option<(&PagedTree, Vec<&Pending>)> {
        Some((self.trees.get(i)?, self.overlays(i).collect()))
    }

    /// Every layer over sled of store `i`, oldest first: the flights, then the pending changes.
    fn overlays(&self, store: usize) -> impl Iterator<Item = &Pending> {
        self.flights.get(store).into_iter().flat_map(Flights::layers).chain(self.pending.get(store))
    }
}

/// Which flights [`Trees::reap`] takes in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reap {
    /// Those the writer is through with.
    Landed,
    /// Every one, waiting for the writer.
    All,
    /// Every one, waiting for the writer, without keeping their rows in memory (a task closing).
    AllDropped,
}

impl Drop for Trees {
    fn drop(&mut self) {
        // A task reopened or moved: its flights must be written before anyone reads the trees
        // again (a restore from scratch clears a tree, and a late write would come back).
        let _ = self.settle();
    }
}

impl StoreRead for Trees {
    fn cache_share(&self) -> usize {
        cache_share(self.cache_max, 0)
    }
    fn get(&self, store: usize, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(v) = self.pending.get(store)?.value(key) {
            return v.map(<[u8]>::to_vec);
        }
        if let Some(v) = self.flights[store].value(key) {
            return v.map(<[u8]>::to_vec);
        }
        let clean = &self.clean[store];
        if let Some(v) = clean.rows.value(key) {
            return v.map(<[u8]>::to_vec);
        }
        if !clean.keys.may_hold(key) {
            return None;
        }
        self.noted(store, self.trees.get(store)?.get(key)).flatten()
    }
    fn entries(&self, store: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        // Called when a task starts: after a restore or after a control statement replaced its
        // query (committed changes may be pending or in flight).
        let Some(t) = self.trees.get(store) else { return Vec::new() };
        let mut all: BTreeMap<Vec<u8>, Vec<u8>> = if self.clean[store].keys.in_memory() {
            let mut rows = BTreeMap::new();
            self.clean[store].rows.overlay(b"", &mut rows);
            rows
        } else {
            t.rows().filter_map(|r| self.noted(store, r)).collect()
        };
        for p in self.overlays(store) {
            p.overlay(b"", &mut all);
        }
        all.into_iter().collect()
    }

    fn keys(&self, store: usize) -> Vec<Vec<u8>> {
        // As `entries`, without copying the values.
        let Some(t) = self.trees.get(store) else { return Vec::new() };
        let mut all: std::collections::BTreeSet<Vec<u8>> = if self.clean[store].keys.in_memory() {
            self.clean[store].rows.changes().map(|(k, _)| k.to_vec()).collect()
        } else {
            t.rows().filter_map(|r| self.noted(store, r)).map(|(k, _)| k).collect()
        };
        for p in self.overlays(store) {
            for (k, v) in p.changes() {
                match v {
                    Some(_) => all.insert(k.to_vec()),
                    None => all.remove(k),
                };
            }
        }
        all.into_iter().collect()
    }
}

/// Open the sled tree of one store's shard.
pub(crate) fn open_tree(db: &sled::Db, store: &str, p: u32) -> Result<PagedTree, RunError> {
    PagedTree::open(db, &format!("{store}#{p}")).map_err(state(format!("cannot open store {store}")))
}

/// Open the local state. It is a cache of the changelogs: if sled cannot open it or read it
/// through (damage after an abrupt stop, or bytes overwritten), it is wiped and every store is
/// restored from its changelog. Only a lock held by another process is an error.
/// `cache`: sled's page cache, in bytes (`Config::sled_cache_bytes`).
///
/// The read-through (`pages::verify`) is skipped when the last run closed the local state and
/// sled's files are as it left them ([`mark_closed`]): reading all of it costs time and, since
/// sled 0.34 keeps much of what it reads beyond its cache, memory (276 MB for 3 M rows).
pub(crate) fn open_local_state(path: &Path, app: &str, cache: u64) -> Result<sled::Db, RunError> {
    let marker = closed_marker(path);
    let closed = std::fs::read_to_string(&marker).ok().is_some_and(|m| m == fingerprint(path));
    // Gone before anything can change the files (a marker left behind would vouch for them).
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(RunError::Io { doing: format!("cannot remove {}", marker.display()), source: e });
        }
        _ => {}
    }
    let open = || {
        let db = sled::Config::new().path(path).cache_capacity(cache).open()?;
        if !closed {
            crate::runtime::pages::verify(&db)?;
        }
        Ok(db)
    };
    let damage = match open_catching_panics(open) {
        Ok(Ok(db)) => return Ok(db),
        Ok(Err(e)) if e.to_string().contains("lock") => {
            return Err(RunError::Locked { path: path.display().to_string(), app: app.to_string(), source: e });
        }
        Ok(Err(e)) => e.to_string(),
        Err(panic) => format!("its files are damaged: {panic}"),
    };
    eprintln!(
        "local state {} cannot be opened ({damage}): wiping it; the stores are restored from their changelogs",
        path.display()
    );
    std::fs::remove_dir_all(path).map_err(|source| RunError::Io {
        doing: format!("cannot remove damaged local state {}", path.display()),
        source,
    })?;
    open().map_err(state(format!("cannot open local state {}", path.display())))
}

/// Say that the local state at `path` was closed cleanly: its database flushed and closed (no
/// handle of it left in the process, so sled writes nothing more), and no write of it failed.
/// The next open skips reading it through if sled's files still have the sizes and
/// modification times they have now. (Best effort: a marker that cannot be written only costs
/// the next open the read-through.)
pub(crate) fn mark_closed(path: &Path) {
    if !crate::runtime::writer::a_write_failed() {
        write_closed_marker(path);
    }
}

fn write_closed_marker(path: &Path) {
    let _ = std::fs::write(closed_marker(path), fingerprint(path));
}

/// The file beside the local state's directory that [`mark_closed`] writes.
fn closed_marker(path: &Path) -> std::path::PathBuf {
    path.with_extension("closed")
}

/// The size and modification time of every file under `path`, one line each, by name.
fn fingerprint(path: &Path) -> String {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                walk(&e.path(), out);
            } else {
                let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                out.push(format!("{} {} {:?}", e.path().display(), meta.len(), modified));
            }
        }
    }
    let mut files = Vec::new();
    walk(path, &mut files);
    files.sort();
    files.join("\n")
}

/// `open()`, or the message of the panic it stopped with: sled 0.34 panics on some damaged
/// files instead of returning an error ("tried to serialize Uninitialized" while it reads its
/// snapshot). The panic is not printed.
fn open_catching_panics(open: impl Fn() -> sled::Result<sled::Db>) -> Result<sled::Result<sled::Db>, String> {
    // The panic hook is the process's: one swap at a time, so that the default one always comes
    // back (a panic elsewhere during an open goes unprinted, not uncaught).
    static SWAP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = SWAP.lock().unwrap_or_else(|p| p.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&open));
    std::panic::set_hook(hook);
    r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "sled stopped".into())
    })
}

/// Empty store `i` of a task: its local tree cleared, its pending changes dropped, and a
/// tombstone queued for every key it held, to be committed to the changelog. Returns how many.
pub(crate) fn empty_store(
    i: usize,
    tree: &PagedTree,
    pending: &mut Pending,
    stream_time: i64,
    changes: &mut Vec<Change>,
) -> Result<u64, RunError> {
    let mut keys = Vec::new();
    // (Every key read before anything is cleared: a key left unread would get no tombstone and
    // come back from the changelog.)
    live_store_keys(tree, &[pending], |k| keys.push(k.to_vec()))
        .map_err(state("cannot read local state to empty it"))?;
    *pending = Pending::default();
    tree.clear().map_err(state("cannot clear local state"))?;
    let n = keys.len() as u64;
    changes.extend(keys.into_iter().map(|key| Change {
        store: i,
        key,
        value: None,
        timestamp: stream_time.max(0),
        existed: false,
    }));
    Ok(n)
}

/// Every key a store holds, in key order: those in sled that no layer over it changes, and those
/// the layers put (`layers`: oldest first; the newest that changes a key decides it; sled's
/// checkpoint is not a key).
/// A read of sled that fails stops the walk with its error (what was given to `f` is then not
/// every key).
pub(crate) fn live_store_keys(tree: &PagedTree, layers: &[&Pending], mut f: impl FnMut(&[u8])) -> sled::Result<()> {
    // Each key the layers change: put (true) or deleted.
    let mut decided: BTreeMap<&[u8], bool> = BTreeMap::new();
    for layer in layers.iter().rev() {
        for (k, v) in layer.changes() {
            decided.entry(k).or_insert(v.is_some());
        }
    }
    let mut puts = decided.iter().filter(|(_, put)| **put).map(|(k, _)| *k).peekable();
    for row in tree.rows() {
        let (k, _) = row?;
        // The layers' puts before this key, then the key itself unless the layers decide it.
        while let Some(p) = puts.next_if(|p| *p < &k[..]) {
            f(p);
        }
        if decided.contains_key(&k[..]) {
            continue;
        }
        f(&k);
    }
    for p in puts {
        f(p);
    }
    Ok(())
}

/// Fold changelog records, in order, into the keys the changelog still holds a value for (the
/// last record of each key is not a tombstone), with that record's timestamp.
pub(crate) fn live_keys(live: &mut BTreeMap<Vec<u8>, i64>, records: &[Entry<'_>]) {
    for s in records {
        if let Some(k) = s.key {
            match s.value {
                Some(_) => live.insert(k.to_vec(), s.timestamp),
                None => live.remove(k),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's rows as a task reads them through every layer, for the keys `keys`.
    fn read_all(t: &Trees, keys: &[Vec<u8>]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        keys.iter().filter_map(|k| Some((k.clone(), t.get(0, k)?))).collect()
    }

    /// A read of sled that fails is an absent row to the operator that asked, and the error
    /// the next commit ends the run with (once), naming the store.
    #[test]
    fn a_failed_read_of_sled_is_kept_for_the_commit_to_refuse() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "app-agg#0").unwrap();
        let t = Trees::new(vec![(tree, Pending::default(), SledKeys::Unknown, Flights::default())], 1 << 20);
        assert!(t.take_read_error().is_none());
        assert_eq!(t.noted(0, Err::<u8, _>(sled::Error::Unsupported("damaged page".into()))), None);
        // A later failure does not replace the first.
        assert_eq!(t.noted(0, Err::<u8, _>(sled::Error::Unsupported("second".into()))), None);
        assert_eq!(t.noted(0, Ok(7u8)), Some(7));
        let e = t.take_read_error().expect("the failed read is kept").to_string();
        assert!(e.contains("reading the local state of store app-agg#0") && e.contains("damaged page"), "{e}");
        assert!(t.take_read_error().is_none(), "taken once");
    }

    /// Commits of random puts and deletions over 400 keys, written behind through the writer
    /// with a cache far smaller than the rows: every read (point reads, `entries`) equals a plain
    /// map of the changes at every commit, the memory stays near the share, and after the last
    /// write sled alone holds exactly the rows with the last checkpoint.
    #[test]
    fn reads_through_the_layers_equal_the_changes_whatever_the_cache_keeps() {
        for cache in [0usize, 6_000, 20_000, 1 << 30] {
            let db = sled::Config::new().temporary(true).open().unwrap();
            let tree = PagedTree::open(&db, "s#0").unwrap();
            let mut t =
                Trees::new(vec![(tree.clone(), Pending::default(), SledKeys::InMemory, Flights::default())], cache);
            let keys: Vec<Vec<u8>> = (0..400).map(|i| format!("key{i:04}").into_bytes()).collect();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut rng = 0x9E3779B97F4A7C15u64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            for commit in 0..60u64 {
                let mut changes = Vec::new();
                for _ in 0..50 {
                    let k = keys[(next() % 400) as usize].clone();
                    let value = (next() % 4 != 0).then(|| format!("value {commit} {}", next() % 1000).into_bytes());
                    match &value {
                        Some(v) => model.insert(k.clone(), v.clone()),
                        None => model.remove(&k),
                    };
                    changes.retain(|c: &Change| c.key != k);
                    changes.push(Change { store: 0, key: k, value, timestamp: 0, existed: true });
                }
                for ch in changes {
                    t.pending[0].stage(ch.key, ch.value, ch.existed);
                }
                t.commits += 1;
                t.write_behind(&[Pos::at(commit + 1)]).unwrap();
                assert_eq!(read_all(&t, &keys), model, "cache {cache}, commit {commit}");
                assert!(t.memory() <= cache.max(4_000) + 50 * 120, "cache {cache}: {} bytes held", t.memory());
            }
            let entries: BTreeMap<Vec<u8>, Vec<u8>> = t.entries(0).into_iter().collect();
            assert_eq!(entries, model, "cache {cache}");
            if cache < 1 << 20 {
                assert!(!t.clean[0].keys.in_memory(), "cache {cache}: rows were dropped, so misses may read sled");
                // (A filter larger than a quarter of a tiny share is given up.)
                assert_eq!(
                    matches!(t.clean[0].keys, SledKeys::Filtered(_)),
                    cache == 20_000,
                    "cache {cache}: misses are checked against a filter of the keys written"
                );
            }
            t.write(&[Pos::at(60)]).unwrap();
            drop(t);
            let sled_rows: BTreeMap<Vec<u8>, Vec<u8>> = tree.rows().map(|e| e.unwrap()).collect();
            assert_eq!(sled_rows, model, "cache {cache}");
            assert_eq!(tree.checkpoint().map(|c| c.offset), Some(60));
        }
    }

    /// The closed marker matches while the files are as they were, and not once one of them was
    /// written, even with bytes of the same length (the damage a read-through is for).
    #[test]
    fn the_closed_marker_matches_only_files_left_as_they_were() {
        let dir = std::env::temp_dir().join(format!("streamc-closed-{}", std::process::id()));
        let path = dir.join("state");
        std::fs::create_dir_all(path.join("blobs")).unwrap();
        std::fs::write(path.join("db"), b"0123456789").unwrap();
        std::fs::write(path.join("blobs").join("1"), b"blob").unwrap();
        // (As `mark_closed` does when no write of local state failed in the process; another
        // test here makes one fail on purpose.)
        write_closed_marker(&path);
        let matches = || std::fs::read_to_string(closed_marker(&path)).ok() == Some(fingerprint(&path));
        assert!(matches());
        // (Written with bytes of the same length; its modification time set apart from the
        // first, whatever the file system's clock granularity.)
        let before = std::fs::metadata(path.join("db")).unwrap().modified().unwrap();
        std::fs::write(path.join("db"), b"0123456780").unwrap();
        let f = std::fs::File::options().write(true).open(path.join("db")).unwrap();
        f.set_modified(before + std::time::Duration::from_secs(2)).unwrap();
        assert!(!matches());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A store wholly in memory is written once the changes staged since its last flight are
    /// half as many as its rows, however few keys they fall on: a few hot keys updated over and
    /// over still reach sled (and the checkpoint moves), so that a restart after a crash never
    /// replays more than about that many changes.
    #[test]
    fn hot_keys_of_a_store_in_memory_reach_sled_once_half_its_rows_of_changes_are_staged() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        let mut t =
            Trees::new(vec![(tree.clone(), Pending::default(), SledKeys::InMemory, Flights::default())], 1 << 30);
        for i in 0..1_000u32 {
            t.pending[0].stage(i.to_be_bytes().to_vec(), Some(b"0".to_vec()), false);
        }
        t.commits = LOCAL_WRITE_COMMITS;
        assert!(t.write_behind(&[Pos::at(1_000)]).unwrap());
        t.settle().unwrap();
        assert!(t.clean[0].keys.in_memory());
        // Ten keys, ten changes each commit (as `stage` counts them).
        let mut offset = 1_000;
        let mut handed_at = None;
        for commit in 1..=100 {
            for i in 0..10u32 {
                t.pending[0].stage(i.to_be_bytes().to_vec(), Some(commit.to_string().into_bytes()), true);
                t.staged += 1;
                offset += 1;
            }
            t.commits += 1;
            if t.write_behind(&[Pos::at(offset)]).unwrap() {
                handed_at = Some(commit);
                break;
            }
        }
        assert_eq!(handed_at, Some(50), "500 changes staged: half of the 1,000 rows");
        t.settle().unwrap();
        assert_eq!(tree.checkpoint().map(|c| c.offset), Some(1_500));
        assert_eq!(tree.get(&3u32.to_be_bytes()).unwrap().as_deref(), Some(&b"50"[..]));
    }

    /// A store that starts empty and fits its share never reads sled: rows sled does not have
    /// (written behind its back) stay invisible while the store is in memory, and once rows have
    /// been dropped for want of memory, while the keys' filter rules them out; a store opened
    /// over an earlier run's rows reads sled at every miss.
    #[test]
    fn a_complete_store_answers_misses_from_memory() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        let mut t =
            Trees::new(vec![(tree.clone(), Pending::default(), SledKeys::InMemory, Flights::default())], 1 << 30);
        t.pending[0].stage(b"a".to_vec(), Some(b"1".to_vec()), false);
        t.commits = LOCAL_WRITE_COMMITS;
        assert!(t.write_behind(&[Pos::at(1)]).unwrap(), "due");
        t.settle().unwrap();
        tree.put(b"b", Some(b"behind its back")).unwrap();
        assert_eq!(t.get(0, b"a").as_deref(), Some(&b"1"[..]), "from the clean rows");
        assert_eq!(t.get(0, b"b"), None, "in memory: a miss is absent");
        let layers = [&t.clean[0].rows];
        t.clean[0].keys = SledKeys::Filtered(KeyFilter::of(layers));
        assert_eq!(t.get(0, b"b"), None, "ruled out by the filter of the keys written");
        tree.put(b"a", Some(b"2, behind its back")).unwrap();
        t.clean[0].rows = Pending::default();
        assert_eq!(t.get(0, b"a").as_deref(), Some(&b"2, behind its back"[..]), "a key written: read from sled");
        t.clean[0].keys = SledKeys::Unknown;
        assert_eq!(t.get(0, b"b").as_deref(), Some(&b"behind its back"[..]));
    }
}
