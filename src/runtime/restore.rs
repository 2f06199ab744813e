//! Restore, written once for both backends: a store brought up to its changelog from its local
//! checkpoint, in batches that each carry the checkpoint they reach; the correction of
//! changelog records written after a task's last commit; sweeps of removed stores.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use indicatif::ProgressBar;

use crate::record::{Append, Pos, Record};
use crate::runtime::backend::{Backend, Extent};
use crate::runtime::error::{state, RunError};
use crate::runtime::key_filter::KeyFilter;
use crate::runtime::metrics::RestoreMetrics;
use crate::runtime::options::{RestoreBoard, RunOptions};
use crate::runtime::pages::PagedTree;
use crate::runtime::run::{progress_bar, RECORDS};
use crate::runtime::state::{live_keys, open_tree, Pending, SledKeys};
use crate::runtime::writer::Flights;

/// `stores`: the names of the stores restored (as `explain` lists them).
pub(crate) fn log_restore(stores: &str, p: u32, restored: u64, started: Instant) {
    if restored > 0 {
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "restored {restored} records into {stores} partition {p} in {secs:.2}s ({:.0} records/s)",
            restored as f64 / secs.max(1e-9)
        );
    }
}

/// Who watches a restore: a progress bar labelled so (when stderr is a terminal), the metrics,
/// and the run's [`RestoreBoard`].
pub(crate) struct RestoreWatch {
    /// The task's share of `statestore.cache.max.bytes`.
    share: usize,
    label: Option<String>,
    metrics: Option<RestoreMetrics>,
    /// The run's board, and the task and store restored.
    board: Option<(Arc<RestoreBoard>, String, String)>,
}

impl RestoreWatch {
    pub(crate) fn new(opts: &RunOptions, task_id: &str, store: &str, p: u32) -> RestoreWatch {
        RestoreWatch {
            // (What the task's stores may hold: a quarter of its share is its record cache's.)
            share: {
                let share = crate::runtime::state::cache_share(opts.config.cache_max_bytes(), 1);
                share - share / 4
            },
            label: opts.progress.then(|| format!("restoring {store} partition {p}")),
            metrics: opts.metrics.as_ref().map(|m| m.restore(task_id, store)),
            board: Some((opts.restores.clone(), task_id.to_string(), store.to_string())),
        }
    }

    /// Nobody watches (a query bringing a stopped application's local state up to date).
    pub(crate) fn quiet(share: usize) -> RestoreWatch {
        RestoreWatch { share, label: None, metrics: None, board: None }
    }

    fn start(&self, total: u64) {
        if let Some(m) = &self.metrics {
            m.start(total);
        }
        if let Some((b, task, store)) = &self.board {
            b.start(task, store, total);
        }
    }

    /// `n` more records are written to local state.
    fn advance(&self, n: u64) {
        if let Some(m) = &self.metrics {
            m.advance(n);
        }
    }

    /// `n` more records were read (reported before they are written: a batch may hold many).
    fn read(&self, n: u64) {
        if let Some((b, task, store)) = &self.board {
            b.advance(task, store, n);
        }
    }

    /// The store is restored (possibly with nothing to replay).
    pub(crate) fn done(&self) {
        if let Some(m) = &self.metrics {
            m.done();
        }
        if let Some((b, task, store)) = &self.board {
            b.end(task, store);
        }
    }
}

/// Where a store's restore starts: its checkpoint if it is at or before the changelog's `end`,
/// else (no checkpoint, or local state ahead of the changelog) nothing: the local state is wiped.
pub(crate) fn restore_start(tree: &PagedTree, end: u64, deletions_from: u64) -> Result<Pos, RunError> {
    match tree.checkpoint() {
        // A checkpoint before the changelog's start may have missed deletions that compaction
        // (or retention) removed since: the store starts over, as Kafka Streams' does.
        Some(cp) if cp.offset <= end && (cp.offset >= deletions_from || cp.offset == 0) => Ok(cp),
        _ => {
            tree.clear().map_err(state("cannot reset local state"))?;
            Ok(Pos::default())
        }
    }
}

/// Applies changelog records to a store, in memory: records are coalesced by key (as commits
/// are, by `Pending`), so that a window put and later deleted by a tombstone never reaches sled.
/// While the keys come in ascending order, it hands them to the writer thread as it reads, a
/// flight every [`FLIGHT_RECORDS`] records, each with the checkpoint it reaches (so that an
/// interrupted restore resumes there): sled is written on another core while the changelog is
/// read, rather than all after it. (Keys in any other order would have each flight rewrite the
/// pages of the ones before: a 1 M-key restore in random key order ran 1.3 times as long so.
/// Once a key comes out of order, the rest is written after the restore.) The flights stay in
/// memory, layers of the store's rows, and go to the task with the changes read after the last
/// one ([`Restored::flights`]). A restore whose changes hold more than the task's share of
/// `statestore.cache.max.bytes` hands them over at once, waits for the writer when more than a
/// share is in flight, and lets go of what it wrote.
pub(crate) struct Restorer<'a> {
    tree: &'a PagedTree,
    watch: &'a RestoreWatch,
    bar: ProgressBar,
    pending: Pending,
    /// Handed to the writer, oldest first.
    flights: Flights,
    /// Records applied since the progress bar and metrics last heard.
    unwritten: u64,
    /// Records applied since the board last heard.
    unreported: u64,
    /// Records applied.
    pub(crate) n: u64,
    /// Records applied since the last flight.
    since_flight: u64,
    /// Every key so far came after the one before (flights then fall on pages of their own),
    /// and the last one.
    ascending: bool,
    last_key: Vec<u8>,
    /// Restoring from scratch into an empty tree.
    started_empty: bool,
    /// …and nothing handed to the writer yet: no key is in sled (a deletion of a key put only
    /// in memory is dropped, not written).
    from_empty: bool,
    /// Restoring from scratch, once a flight was let go of: the keys put, all that sled may
    /// hold besides the rows in memory.
    filter: Option<KeyFilter>,
}

/// The records a restore in key order reads before it hands a flight to the writer (those read
/// after the last one go in the task's first hand-over; see [`Restorer`]): the smaller, the less
/// is left to write when the restore ends, at an index insertion a row to take the flights in.
#[cfg(not(test))]
const FLIGHT_RECORDS: u64 = 100_000;
#[cfg(test)]
const FLIGHT_RECORDS: u64 = 100;

impl<'a> Restorer<'a> {
    /// `total`: the records expected (for the progress bar and metrics), if known.
    pub(crate) fn new(tree: &'a PagedTree, watch: &'a RestoreWatch, from: Pos, total: u64) -> Restorer<'a> {
        let bar = match &watch.label {
            Some(label) => progress_bar(total, RECORDS, label.clone()),
            None => ProgressBar::hidden(),
        };
        watch.start(total);
        // (A checkpoint at the start does not clear the tree: it may hold rows of a flight
        // cut short by a crash, whose deletions must then be written.)
        let empty = from == Pos::default() && tree.holds_no_rows();
        Restorer {
            tree,
            watch,
            bar,
            pending: Pending::default(),
            flights: Flights::default(),
            unwritten: 0,
            unreported: 0,
            n: 0,
            since_flight: 0,
            ascending: true,
            last_key: Vec::new(),
            started_empty: empty,
            from_empty: empty,
            filter: None,
        }
    }

    /// Apply one changelog record (a record without a key is counted and ignored).
    pub(crate) fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.n += 1;
        self.since_flight += 1;
        self.unwritten += 1;
        self.unreported += 1;
        let Some(k) = key else { return };
        if self.ascending {
            if !self.last_key.is_empty() && k <= self.last_key.as_slice() {
                self.ascending = false;
            } else {
                self.last_key.clear();
                self.last_key.extend_from_slice(k);
            }
        }
        self.pending.stage_slices(k, value, !self.from_empty);
    }

    /// After each batch read, at changelog position `at`: the board hears of it, and what is
    /// pending goes to the writer with checkpoint `at` once it holds a flight's records or more
    /// than the task's share.
    pub(crate) fn write(&mut self, at: &Pos) -> Result<(), RunError> {
        self.watch.read(std::mem::take(&mut self.unreported));
        let early = self.ascending && self.since_flight > FLIGHT_RECORDS;
        if early || self.pending.bytes_in_flight() > self.watch.share {
            let changes = std::mem::take(&mut self.pending);
            if let Some(f) = &mut self.filter {
                f.add_puts(&changes);
            }
            self.flights.send(self.tree, changes, *at);
            (self.from_empty, self.since_flight) = (false, 0);
            // At most about one share in flight besides the one being read into.
            while self.flights.bytes() > self.watch.share {
                self.land_oldest()?;
            }
        }
        self.advance();
        Ok(())
    }

    /// Wait for the oldest flight and let go of its rows (sled holds them): from scratch, the
    /// keys in memory become the filter of those sled may hold.
    fn land_oldest(&mut self) -> Result<(), RunError> {
        if self.started_empty && self.filter.is_none() {
            let layers = self.flights.layers().chain([&self.pending]);
            self.filter = Some(KeyFilter::of(layers));
        }
        if let Some(f) = self.flights.queue.pop_front() {
            f.wait().map_err(state("cannot restore local state"))?;
        }
        Ok(())
    }

    fn advance(&mut self) {
        self.bar.inc(self.unwritten);
        self.watch.advance(std::mem::take(&mut self.unwritten));
    }

    /// The restore reached checkpoint `at`: returns the records applied, the changes not
    /// handed to the writer (if none and no flight either, sled's checkpoint moves to `at`
    /// here), the flights still in memory, and what they tell of the keys sled holds: every one
    /// if it was restored from scratch and nothing was let go of, those of the filter if
    /// something was, else nothing.
    pub(crate) fn finish(mut self, at: &Pos) -> Result<(u64, Pending, Flights, SledKeys), RunError> {
        self.advance();
        if self.pending.is_empty() && self.n > 0 {
            if self.flights.queue.is_empty() {
                self.pending.write(self.tree, at).map_err(state("cannot restore local state"))?;
            } else {
                // After the flights (the writer writes them in order).
                self.flights.send(self.tree, Pending::default(), *at);
            }
        }
        self.bar.finish_and_clear();
        self.watch.done();
        let keys = match (self.started_empty, self.filter.take()) {
            (true, None) => SledKeys::InMemory,
            (true, Some(f)) => SledKeys::Filtered(f),
            (false, _) => SledKeys::Unknown,
        };
        let flights = std::mem::take(&mut self.flights);
        Ok((self.n, std::mem::take(&mut self.pending), flights, keys))
    }
}

/// What a restore did.
pub(crate) struct Restored {
    /// Changelog records applied.
    pub(crate) records: u64,
    /// The changelog position local state now reflects.
    pub(crate) checkpoint: Pos,
    /// Keys of the records after the committed end (not applied), with their timestamps.
    pub(crate) stale: BTreeMap<Vec<u8>, i64>,
    /// The restored changes not handed to the writer: local state is sled with the flights
    /// and these over it.
    pub(crate) pending: Pending,
    /// The restored changes handed to the writer, perhaps not written yet.
    pub(crate) flights: Flights,
    /// What `pending` tells of the keys sled holds: every one when the store was restored from
    /// scratch (or is empty) and all of it is in memory.
    pub(crate) keys: SledKeys,
}

/// Bring a store up to its changelog's end as of the task's last commit (`committed_end`;
/// None: the changelog's end as of now): from the local checkpoint when local state is
/// consistent with the changelog, else from the start. Records after the committed end
/// (written by an owner that died before committing its input positions, at least once) are
/// not applied; their keys are returned for [`correct_stale`]. The embedded log commits
/// changelog and positions in one step, so it never has any.
pub(crate) fn restore_store<B: Backend + ?Sized>(
    b: &B,
    tree: &PagedTree,
    changelog: &str,
    p: u32,
    committed_end: Option<u64>,
    watch: &RestoreWatch,
) -> Result<Restored, RunError> {
    let extent = b.changelog_extent(changelog, p)?.unwrap_or(Extent { low: 0, end: Pos::default(), deletions_from: 0 });
    let high = extent.end;
    let end = committed_end.map_or(high.offset, |e| e.min(high.offset));
    let from = restore_start(tree, end, extent.deletions_from)?;
    let mut stale = BTreeMap::new();
    if from.offset >= high.offset {
        watch.done();
        let keys = if tree.holds_no_rows() { SledKeys::InMemory } else { SledKeys::Unknown };
        return Ok(Restored {
            records: 0,
            checkpoint: from,
            stale,
            pending: Pending::default(),
            flights: Flights::default(),
            keys,
        });
    }
    let mut r = Restorer::new(tree, watch, from, end.saturating_sub(from.offset.max(extent.low)));
    // A compacted changelog may start after the checkpoint.
    let read_from = if from.offset < extent.low { Pos::at(extent.low) } else { from };
    let last = b.read_changelog(changelog, p, read_from, high, &mut |batch, after| {
        for s in batch {
            if s.offset >= end {
                if let Some(k) = s.key {
                    stale.insert(k.to_vec(), s.timestamp);
                }
                continue;
            }
            r.apply(s.key, s.value);
        }
        // The checkpoint never passes the committed end.
        let at = if after.offset > end { Pos::at(end) } else { after };
        r.write(&at)
    })?;
    // With stale records, local state reflects the committed end only.
    let checkpoint = if stale.is_empty() { last } else { Pos::at(end) };
    let (records, pending, flights, keys) = r.finish(&checkpoint)?;
    Ok(Restored { records, checkpoint, stale, pending, flights, keys })
}

impl Restored {
    /// Wait until the writer has written the flights, and let go of them: local state is sled
    /// with the pending changes over it (the keys in memory are no longer all of them).
    pub(crate) fn land(&mut self) -> Result<(), RunError> {
        if self.flights.queue.is_empty() {
            return Ok(());
        }
        if matches!(self.keys, SledKeys::InMemory) {
            self.keys = SledKeys::Unknown;
        }
        self.flights.land().map_err(state("cannot restore local state"))
    }
}

/// Changelog records after a task's last commit describe input that will be processed again:
/// [`restore_store`] skipped them, and here every key they touched is written again with its
/// committed value (or deleted), in one append of their own, so that any later restore ends at
/// the committed state too. `stores`: each store's tree, pending changes and flights (read
/// newest first). `checkpoints` (per store) move past the corrections.
pub(crate) fn correct_stale<B: Backend + ?Sized>(
    b: &B,
    task: &str,
    changelogs: &[String],
    p: u32,
    stores: &[(&PagedTree, &Pending, &Flights)],
    stale: Vec<BTreeMap<Vec<u8>, i64>>,
    checkpoints: &mut [Pos],
) -> Result<(), RunError> {
    if stale.iter().all(|s| s.is_empty()) {
        return Ok(());
    }
    let mut n = 0;
    let mut appends = Vec::new();
    let mut corrected = Vec::new();
    for (i, keys) in stale.into_iter().enumerate() {
        if keys.is_empty() {
            continue;
        }
        let mut records = Vec::new();
        let (tree, pending, flights) = stores[i];
        for (k, ts) in keys {
            let value = match pending.value(&k).or_else(|| flights.value(&k)) {
                Some(v) => v.map(<[u8]>::to_vec),
                None => tree.get(&k).map_err(state("cannot read local state"))?.map(|v| v.to_vec()),
            };
            records.push(Record { key: Some(k), value, timestamp: ts, headers: vec![] });
        }
        n += records.len();
        appends.push(Append::of(changelogs[i].clone(), p, &records));
        corrected.push(i);
    }
    for (i, end) in corrected.into_iter().zip(b.append_alone(appends)?) {
        if end.offset > checkpoints[i].offset {
            checkpoints[i] = end;
        }
    }
    eprintln!(
        "{task} partition {p}: {n} changelog records after the last commit rewritten with their committed values"
    );
    Ok(())
}

/// Delete a store partition that a control statement removed: its local tree cleared, and a
/// tombstone for every key its changelog still holds. Idempotent. Returns the keys deleted.
pub(crate) fn sweep<B: Backend + ?Sized>(
    b: &B,
    db: &sled::Db,
    store: &str,
    changelog: &str,
    p: u32,
) -> Result<usize, RunError> {
    open_tree(db, store, p)?.clear().map_err(state(format!("cannot clear local state of {store}")))?;
    let Some(extent) = b.changelog_extent(changelog, p)? else { return Ok(0) };
    let mut live = BTreeMap::new();
    b.read_changelog(changelog, p, Pos::at(extent.low), extent.end, &mut |batch, _| {
        live_keys(&mut live, batch);
        Ok(())
    })?;
    let n = live.len();
    if n > 0 {
        let records: Vec<Record> = live
            .into_iter()
            .map(|(k, ts)| Record { key: Some(k), value: None, timestamp: ts, headers: vec![] })
            .collect();
        b.append_alone(vec![Append::of(changelog, p, &records)])?;
        eprintln!("{store} partition {p}: removed by a control statement, {n} keys deleted");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    //! Restore, correction and sweep over an in-memory backend whose changelog may hold records
    //! past the last commit and may start after offset 0 (compacted); expected states come from
    //! a plain fold of the records written here.

    use super::*;
    use crate::config::Config;
    use crate::plan::physical::TaskSpec;
    use crate::record::{Entry, Stored};
    use crate::runtime::run::testing::{options, NoFeed};
    use std::cell::RefCell;

    /// One changelog partition: the records from offset `low` on.
    struct Mem {
        low: u64,
        records: RefCell<Vec<Record>>,
    }

    impl Backend for Mem {
        type Feed = NoFeed;
        fn feed(&self, _: &TaskSpec, _: u32, _: &BTreeMap<String, Pos>) -> Result<NoFeed, RunError> {
            Ok(NoFeed)
        }
        fn changelog_extent(&self, _: &str, _: u32) -> Result<Option<Extent>, RunError> {
            let end = self.low + self.records.borrow().len() as u64;
            Ok(Some(Extent { low: self.low, end: Pos::at(end), deletions_from: self.low }))
        }
        fn read_changelog(
            &self,
            _: &str,
            _: u32,
            from: Pos,
            end: Pos,
            visit: &mut crate::runtime::backend::Visit<'_>,
        ) -> Result<Pos, RunError> {
            assert!(from.offset >= self.low, "read from {} before the changelog's start {}", from.offset, self.low);
            let all = self.records.borrow().clone();
            let mut at = from.offset;
            // Batches of 2, so that restore writes in several steps.
            while at < end.offset {
                let upto = (at + 2).min(end.offset);
                let batch: Vec<Stored> = (at..upto)
                    .map(|o| Stored { offset: o, next: Pos::at(o + 1), record: all[(o - self.low) as usize].clone() })
                    .collect();
                at = upto;
                let entries: Vec<Entry<'_>> = batch.iter().map(Stored::entry).collect();
                visit(&entries, Pos::at(at))?;
            }
            Ok(Pos::at(at))
        }
        fn changelog_may_pass_commit(&self) -> bool {
            true
        }
        fn append_alone(&self, appends: Vec<Append>) -> Result<Vec<Pos>, RunError> {
            let mut r = self.records.borrow_mut();
            Ok(appends
                .into_iter()
                .map(|a| {
                    r.extend(a.records());
                    Pos::at(self.low + r.len() as u64)
                })
                .collect())
        }
    }

    fn rec(k: &str, v: Option<&str>, ts: i64) -> Record {
        Record {
            key: Some(k.as_bytes().to_vec()),
            value: v.map(|v| v.as_bytes().to_vec()),
            timestamp: ts,
            headers: vec![],
        }
    }

    /// The state a changelog's records describe, folded in order.
    fn fold(records: &[Record]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        for r in records {
            let k = r.key.clone().unwrap();
            match &r.value {
                Some(v) => m.insert(k, v.clone()),
                None => m.remove(&k),
            };
        }
        m
    }

    fn contents(tree: &PagedTree) -> BTreeMap<Vec<u8>, Vec<u8>> {
        tree.rows().map(|e| e.unwrap()).collect()
    }

    fn watch() -> RestoreWatch {
        let mut config = Config::default();
        // No cache: every batch read goes to the writer, and the restore waits for it at its
        // end; the tree alone holds the restored state.
        config.statestore.cache.max.bytes = 0;
        let opts = options("t", config);
        RestoreWatch::new(&opts, "0_0", "s", 0)
    }

    /// The board shows a restore from start to end; an ended task is shown once more (so a
    /// restore shorter than a report's period is still reported), then taken off.
    #[test]
    fn the_restore_board_shows_each_restore_until_it_is_taken_after_its_end() {
        let b = RestoreBoard::default();
        b.start("0_1", "a", 100);
        b.start("0_1", "b", 10);
        b.advance("0_1", "a", 40);
        b.advance("0_2", "a", 5); // not started: nothing
        b.end("0_1", "b");
        let p = |restored, total, ended| crate::runtime::options::Progress { restored, total, ended };
        let now = b.take();
        assert_eq!(now.len(), 1);
        assert_eq!(now["0_1"]["a"], p(40, 100, false));
        assert_eq!(now["0_1"]["b"], p(0, 10, true));
        assert_eq!(b.take(), now, "a task with a store still restoring stays");
        b.advance("0_1", "a", 60);
        b.end("0_1", "a");
        assert_eq!(b.take()["0_1"]["a"], p(100, 100, true));
        assert!(b.take().is_empty(), "an ended task is taken once");
    }

    #[test]
    fn restore_stops_at_the_commit_and_the_correction_makes_the_changelog_say_the_committed_state() {
        let committed = vec![rec("a", Some("1"), 1), rec("b", Some("2"), 2), rec("a", Some("3"), 3)];
        let past = vec![rec("c", Some("4"), 4), rec("b", None, 5)];
        let b = Mem { low: 0, records: RefCell::new([committed.clone(), past].concat()) };
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        let w = watch();
        let r = restore_store(&b, &tree, "s", 0, Some(3), &w).unwrap();
        assert_eq!(contents(&tree), fold(&committed));
        assert_eq!(r.records, 3);
        assert_eq!(r.checkpoint.offset, 3, "local state reflects the committed end only");
        assert_eq!(r.stale.keys().cloned().collect::<Vec<_>>(), vec![b"b".to_vec(), b"c".to_vec()]);

        let mut cps = vec![r.checkpoint];
        let stores = [(&tree, &r.pending, &r.flights)];
        correct_stale(&b, "t", &["s".to_string()], 0, &stores, vec![r.stale], &mut cps).unwrap();
        assert_eq!(cps[0].offset, 7, "the checkpoint moves past the corrections");
        // The whole changelog now folds to the committed state: a restore from scratch agrees.
        assert_eq!(fold(&b.records.borrow()), fold(&committed));
        let fresh = PagedTree::open(&db, "s#1").unwrap();
        let r = restore_store(&b, &fresh, "s", 0, None, &w).unwrap();
        assert_eq!(contents(&fresh), fold(&committed));
        assert_eq!(r.checkpoint.offset, 7);
    }

    #[test]
    fn restore_of_a_compacted_changelog_starts_where_it_starts_and_a_checkpoint_resumes() {
        let records = vec![rec("x", Some("1"), 1), rec("y", Some("2"), 2), rec("x", None, 3), rec("z", Some("9"), 4)];
        let b = Mem { low: 10, records: RefCell::new(records.clone()) };
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        let w = watch();
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!(contents(&tree), fold(&records));
        assert_eq!((r.records, r.checkpoint.offset), (4, 14));
        // Two more records: a second restore replays only those.
        b.records.borrow_mut().extend([rec("y", None, 5), rec("w", Some("5"), 6)]);
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!((r.records, r.checkpoint.offset), (2, 16));
        assert_eq!(contents(&tree), fold(&b.records.borrow()));
    }

    /// Write `n` of the pending changes (in key order) to the tree without a checkpoint, as a
    /// writer stopped part way through a flight would have.
    fn write_some(tree: &PagedTree, pending: &Pending, n: usize) {
        let mut changes: Vec<_> = pending.changes().collect();
        changes.sort();
        for (k, v) in changes.into_iter().take(n) {
            match v {
                Some(v) => tree.put(k, Some(v)).unwrap(),
                None => tree.put(k, None).unwrap(),
            };
        }
    }

    /// sled with the pending changes over it, as a task reads its store.
    fn state(tree: &PagedTree, pending: &Pending) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = contents(tree);
        pending.overlay(b"", &mut m);
        m
    }

    /// With write-behind (the default), a restore leaves sled alone and hands the changes over;
    /// sled written only partly (a run stopped while writing behind) still restores to the
    /// changelog's state, from scratch or from a checkpoint.
    #[test]
    fn a_restore_replays_into_memory_and_sled_written_partly_still_restores_exactly() {
        let w = RestoreWatch::new(&options("t", Config::default()), "0_0", "s", 0);
        let first: Vec<Record> = (0..40)
            .map(|i| rec(&format!("k{}", i % 13), (i % 7 != 3).then(|| format!("v{i}")).as_deref(), i))
            .collect();
        let b = Mem { low: 0, records: RefCell::new(first.clone()) };
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!((r.records, r.checkpoint.offset), (40, 40));
        assert!(contents(&tree).is_empty(), "nothing written to sled yet");
        assert_eq!(state(&tree, &r.pending), fold(&first));
        // Two keys written, without the checkpoint: sled has none, so the next restore starts
        // over (and clears them).
        assert!(matches!(r.keys, SledKeys::InMemory), "restored from scratch, all in memory");
        write_some(&tree, &r.pending, 2);
        assert_eq!(contents(&tree).len(), 2);
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!(r.records, 40);
        assert_eq!(state(&tree, &r.pending), fold(&first));
        crate::runtime::writer::write(&tree, &r.pending, Some(&r.checkpoint)).unwrap();
        assert_eq!(contents(&tree), fold(&first));
        assert_eq!(tree.checkpoint().map(|c| c.offset), Some(40));

        // A tail: overwrites, deletions, new keys; a part of it written without the checkpoint.
        let tail: Vec<Record> = (40..70)
            .map(|i| rec(&format!("k{}", i % 17), (i % 5 != 0).then(|| format!("w{i}")).as_deref(), i))
            .collect();
        b.records.borrow_mut().extend(tail.iter().cloned());
        let all = fold(&b.records.borrow());
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!((r.records, r.checkpoint.offset), (30, 70));
        assert_eq!(state(&tree, &r.pending), all);
        assert!(matches!(r.keys, SledKeys::Unknown), "replayed over what sled holds");
        write_some(&tree, &r.pending, 5);
        assert_eq!(tree.checkpoint().map(|c| c.offset), Some(40));
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!(r.records, 30, "replayed from the old checkpoint");
        assert_eq!(state(&tree, &r.pending), all);
    }

    /// A changelog of `records` and an empty tree to restore it into (the database kept with it).
    fn fresh(records: &[Record]) -> (Mem, sled::Db, PagedTree) {
        let b = Mem { low: 0, records: RefCell::new(records.to_vec()) };
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        (b, db, tree)
    }

    /// A restore of many records in key order hands flights to the writer as it reads (each
    /// with the checkpoint it reaches) and keeps them in memory: the store is sled with the
    /// flights and the pending changes over it, every row in memory. Interrupted after its
    /// flights landed, the next restore resumes at the last one's checkpoint.
    #[test]
    fn a_long_restore_writes_flights_as_it_reads_and_keeps_them() {
        let w = RestoreWatch::new(&options("t", Config::default()), "0_0", "s", 0);
        let records: Vec<Record> =
            (0..1000).map(|i| rec(&format!("k{i:04}"), (i % 11 != 5).then(|| format!("v{i}")).as_deref(), i)).collect();
        let (b, _db, tree) = fresh(&records);
        let mut r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!((r.records, r.checkpoint.offset), (1000, 1000));
        assert_eq!(r.flights.queue.len(), 9, "a flight every 102 records, the rest pending");
        assert!(matches!(r.keys, SledKeys::InMemory), "the flights stay in memory");
        let mut layered = contents(&tree);
        for f in &r.flights.queue {
            f.changes.overlay(b"", &mut layered);
        }
        r.pending.overlay(b"", &mut layered);
        assert_eq!(layered, fold(&records));
        r.land().unwrap();
        assert!(matches!(r.keys, SledKeys::Unknown), "let go of: sled holds keys memory does not");
        assert_eq!(state(&tree, &r.pending), fold(&records));
        let cp = tree.checkpoint().map_or(0, |c| c.offset);
        assert_eq!(cp, 918, "the last flight's checkpoint (a flight past 100 records, read in batches of 2)");
        // The pending changes never written (a crash): the next restore replays the rest.
        let mut r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert_eq!(r.records, 1000 - cp);
        assert!(matches!(r.keys, SledKeys::Unknown), "replayed over what sled holds");
        r.land().unwrap();
        assert_eq!(state(&tree, &r.pending), fold(&records));
    }

    /// A task opened over a restore that kept flights reads their rows from the start: what its
    /// operators rebuild their indexes from (`entries`, `keys`) is the whole store.
    #[test]
    fn a_task_opened_over_kept_flights_reads_their_rows() {
        use crate::runtime::op::StoreRead;
        let w = RestoreWatch::new(&options("t", Config::default()), "0_0", "s", 0);
        let records: Vec<Record> =
            (0..1000).map(|i| rec(&format!("k{i:04}"), (i % 7 != 3).then(|| format!("v{i}")).as_deref(), i)).collect();
        let (b, _db, tree) = fresh(&records);
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert!(!r.flights.queue.is_empty());
        let trees = crate::runtime::state::Trees::new(vec![(tree, r.pending, r.keys, r.flights)], 1 << 30);
        let all = fold(&records);
        assert_eq!(trees.entries(0).into_iter().collect::<BTreeMap<_, _>>(), all);
        assert_eq!(trees.keys(0), all.keys().cloned().collect::<Vec<_>>());
        for (k, v) in &all {
            assert_eq!(trees.get(0, k).as_ref(), Some(v));
        }
    }

    /// Keys out of order: flights would rewrite each other's pages, so the restore keeps its
    /// rows until the end (and the task hands them over at once).
    #[test]
    fn a_long_restore_out_of_key_order_writes_after_it_ends() {
        let w = RestoreWatch::new(&options("t", Config::default()), "0_0", "s", 0);
        let records: Vec<Record> = (0..1000).map(|i| rec(&format!("k{}", (i * 7919) % 1000), Some("v"), i)).collect();
        let (b, _db, tree) = fresh(&records);
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert!(r.flights.queue.is_empty());
        assert!(matches!(r.keys, SledKeys::InMemory));
        assert_eq!(state(&tree, &r.pending), fold(&records));
    }

    /// The memory bound: pending changes pass the task's share of `statestore.cache.max.bytes`,
    /// and the restore hands them to the writer (with the checkpoint reached) as it goes, with a
    /// filter of the keys it put there.
    #[test]
    fn a_restore_past_the_memory_bound_writes_as_it_goes() {
        let mut config = Config::default();
        // (The share is this or less, when other tests' tasks are alive.)
        config.statestore.cache.max.bytes = 500;
        let w = RestoreWatch::new(&options("t", config), "0_0", "s", 0);
        let records: Vec<Record> = (0..60).map(|i| rec(&format!("key{i}"), Some("some value"), i)).collect();
        let (b, _db, tree) = fresh(&records);
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert!(r.pending.bytes() <= 500 && r.pending.len() < 10, "{} pending", r.pending.len());
        let SledKeys::Filtered(filter) = &r.keys else {
            panic!("restored from scratch in flights: a filter of their keys")
        };
        assert!(contents(&tree).len() > 50);
        assert!(contents(&tree).keys().all(|k| filter.may_hold(k)), "every key sled holds passes the filter");
        assert!(tree.checkpoint().is_some_and(|c| c.offset > 50 && c.offset <= 60));
        assert_eq!(state(&tree, &r.pending), fold(&records));
    }

    /// A tree checkpointed at the start that holds a row (a flight cut short by a crash after
    /// its first batch): the restore does not take the tree for empty, so the changelog's
    /// deletion of that row reaches sled and the store is not complete.
    #[test]
    fn a_checkpoint_at_the_start_over_rows_is_not_an_empty_tree() {
        let w = RestoreWatch::new(&options("t", Config::default()), "0_0", "s", 0);
        let b = Mem { low: 0, records: RefCell::new(vec![rec("k", Some("1"), 1), rec("k", None, 2)]) };
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = PagedTree::open(&db, "s#0").unwrap();
        Pending::default().write(&tree, &Pos::default()).unwrap();
        tree.put(b"k", Some(b"1")).unwrap();
        let r = restore_store(&b, &tree, "s", 0, None, &w).unwrap();
        assert!(matches!(r.keys, SledKeys::Unknown), "sled holds a row the restore did not put");
        assert_eq!(r.pending.value(b"k"), Some(None), "the deletion is kept for sled");
        crate::runtime::writer::write(&tree, &r.pending, Some(&r.checkpoint)).unwrap();
        assert!(contents(&tree).is_empty());
    }

    #[test]
    fn sweep_tombstones_every_live_key_and_clears_local_state() {
        let records = vec![rec("a", Some("1"), 1), rec("b", Some("2"), 2), rec("a", None, 3), rec("c", Some("3"), 4)];
        let b = Mem { low: 0, records: RefCell::new(records) };
        let db = sled::Config::new().temporary(true).open().unwrap();
        PagedTree::open(&db, "s#0").unwrap().put(b"b", Some(b"2")).unwrap();
        assert_eq!(sweep(&b, &db, "s", "s", 0).unwrap(), 2);
        assert!(fold(&b.records.borrow()).is_empty());
        assert!(PagedTree::open(&db, "s#0").unwrap().holds_no_rows());
        assert_eq!(sweep(&b, &db, "s", "s", 0).unwrap(), 0, "a second sweep has nothing to delete");
    }
}
