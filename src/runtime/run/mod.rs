//! A running task, whatever the backend: its feed of input records, its stores, the work done
//! since its last commit, and the steps of processing (event-time order across inputs, bad and
//! late records, control statements applied at commit boundaries).

pub(crate) mod commit;
pub(crate) mod driver;
pub(crate) mod open;

use std::collections::BTreeMap;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::OnError;
use crate::plan::physical::{Decode, InputRole, TaskSpec};
use crate::record::{Pos, Record, Stored};
use crate::runtime::chaos::{Chaos, FailPoint};
use crate::runtime::error::RunError;
use crate::runtime::metrics::{TaskCounts, TaskMetrics};
use crate::runtime::options::RunOptions;
use crate::runtime::pages::PagedTree;
use crate::runtime::state::{empty_store, Pending, SledKeys, Trees};
use crate::runtime::task::{
    self, Change, Input, Output, Outputs, RecordError, Route, Task, H_ERROR, H_OFFSET, H_PARTITION, H_TOPIC,
};
use crate::runtime::topics::{SizeLimits, TimestampLimits};

/// What a run did, for the CLI and tests.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub records_in: u64,
    pub records_out: u64,
    pub late: u64,
    pub dead_letters: u64,
    pub skipped: u64,
    pub restored: u64,
    pub commits: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Faults injected by `--chaos`.
    pub faults: u64,
    /// Stopped by SIGINT or SIGTERM (an embedded run): what it processed is committed, but with
    /// `--drain` its input may not have been read to the end.
    pub interrupted: bool,
    /// How long the busiest processing thread spent in rounds that did work (processing,
    /// committing, restoring), not waiting for input: what a rate is worked out over.
    pub busy: std::time::Duration,
}

impl Summary {
    pub(crate) fn add_from(&mut self, o: &Summary) {
        self.records_in += o.records_in;
        self.records_out += o.records_out;
        self.late += o.late;
        self.dead_letters += o.dead_letters;
        self.skipped += o.skipped;
        self.restored += o.restored;
        self.commits += o.commits;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
        self.faults += o.faults;
        self.interrupted |= o.interrupted;
        self.busy = self.busy.max(o.busy);
    }
}

pub(crate) const BYTES: &str = "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}";

pub(crate) const RECORDS: &str = "{msg} [{bar:40}] {human_pos}/{human_len} records {rate} eta {eta}";

/// A progress bar on stderr; callers make one only when stderr is a terminal
/// (`RunOptions::progress`) and use [`ProgressBar::hidden`], which draws nothing, otherwise.
pub(crate) fn progress_bar(len: u64, template: &str, msg: String) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("rate", |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", s.per_sec());
        })
        .progress_chars("=> ");
    ProgressBar::new(len).with_style(style).with_message(msg)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Where a task's records come from: input 0 is the main input, then the side inputs in
/// [`TaskSpec::side_topics`] order.
pub(crate) trait Feed {
    /// What is next on input `i`, without taking it.
    fn peek(&mut self, i: usize) -> Result<Next, RunError>;
    /// Take the record [`Feed::peek`] saw.
    fn take(&mut self, i: usize) -> Option<Stored>;
    /// The record [`Feed::peek`] saw, if it saw one.
    fn peeked(&self, i: usize) -> Option<&Stored>;
    /// Per input partition (`topic/partition`): the records after the task's position, as far
    /// as the backend knows without asking (the last end offset it saw).
    fn lags(&self) -> Vec<(String, u64)>;
}

/// The next record of an input, as far as the backend knows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Next {
    /// A record with this timestamp.
    Record(i64),
    /// Nothing more for now: the input is at its end.
    End,
    /// Not known yet (a fetch is on its way): the task must wait, so that records are still
    /// processed in timestamp order across its inputs.
    Unknown,
}

/// One task with its feed, stores and uncommitted work.
pub(crate) struct TaskRun<F: Feed> {
    task: Task,
    group: String,
    feed: F,
    trees: Trees,
    out: Outputs,
    changes: Vec<Change>,
    uncommitted: u64,
    /// `topic/partition` → the position after the last record processed.
    positions: BTreeMap<String, Pos>,
    skipped: u64,
    restored: u64,
    commits: u64,
    /// Records read from every input (bad ones included), for metrics.
    read: u64,
    metrics: Option<TaskMetrics>,
    /// The `--drain` progress bar, shared by every task (hidden unless shown).
    bar: ProgressBar,
    chaos: Option<Chaos>,
    /// A fault was injected: the task must be reopened from its committed state.
    failed: bool,
    /// The counts as of the last commit (what a reopened task starts from).
    at_commit: (task::Counters, u64, u64),
    /// The control offset applied: every control record before it is reflected in the task.
    control: u64,
    /// The commit record must be written even with nothing else to commit (a control
    /// statement was applied).
    meta_changed: bool,
    /// The control records the process has read (`Evaluator::next`) and the latest stage's
    /// offset, set by the driver before each step: a repartition record from a newer version
    /// makes the task wait only while that version is still to be read or applied.
    control_seen: (u64, u64),
    /// Per input: the event time of the record at its head (by offset), so that a head that
    /// waits while other inputs go first is decoded for its time once.
    head_times: Vec<Option<(u64, i64)>>,
    /// The commit in progress carries something of the task (set by `flush_for_commit`).
    work: bool,
    /// Per store: the changelog's end as of the last commit (what local state is checkpointed
    /// at).
    ends: Vec<Pos>,
    /// The timestamp bounds of the topics the task's results go to (`Backend::timestamp_limits`):
    /// an external record whose event time lies beyond them is a dead letter.
    limits: Option<TimestampLimits>,
    /// The largest record each topic the task writes takes (`Backend::size_limits`): a record
    /// whose results would be larger is a dead letter. Set with [`TaskRun::set_limits`].
    sizes: SizeLimits,
    /// Set by the driver before a step: the main input is a repartition topic that a task still
    /// at work may write to. At its end the task then waits rather than let its side inputs run
    /// ahead (as Kafka Streams waits on an empty partition with known lag), so a repartitioned
    /// stream meets a table as of its records' event times.
    main_may_grow: bool,
    /// The last step stopped because every input was at its end.
    drained: bool,
    /// `emit final idle D`: the wall-clock time of the task's last record or idle advance.
    idle_since: Option<i64>,
}

/// `emit final idle D` (`after` = D): a step at wall-clock time `now` that processed `records`
/// and stopped at the end of every input (`drained`) or not. Once the task has had no record for
/// D, stream time moves on by the wall-clock time elapsed since its last record (or since it
/// last moved this way): the returned ms. The only place the clock moves stream time
/// (docs/language.md, "Aggregation and emit modes").
pub(crate) fn idle_advance(since: &mut Option<i64>, after: i64, now: i64, records: u64, drained: bool) -> Option<i64> {
    if records > 0 {
        *since = Some(now);
        return None;
    }
    // Waiting on a fetch is not idleness.
    if !drained {
        return None;
    }
    let last = *since.get_or_insert(now);
    let elapsed = now.saturating_sub(last);
    if elapsed >= after {
        *since = Some(now);
        Some(elapsed)
    } else {
        None
    }
}

/// Record that input `key` (`topic/partition`) is read up to `pos`.
fn set_position(positions: &mut BTreeMap<String, Pos>, key: &str, pos: Pos) {
    match positions.get_mut(key) {
        Some(v) => *v = pos,
        None => {
            positions.insert(key.to_string(), pos);
        }
    }
}

/// Each input's committed position (`topic/partition` → position) from a task's commit record.
pub(crate) fn positions_of(spec: &TaskSpec, p: u32, meta: &serde_json::Value) -> BTreeMap<String, Pos> {
    let mut topics = vec![spec.main.topic.clone()];
    topics.extend(spec.side_topics());
    topics
        .iter()
        .map(|t| {
            let k = format!("{t}/{p}");
            let pos = meta
                .get("inputs")
                .and_then(|i| i.get(&k))
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            (k, pos)
        })
        .collect()
}

/// A tenant-scoped task's state must have been written with tenant-scoped keys: state committed
/// by a streamc that did not scope them (its commit record does not say `tenant_scoped`) cannot
/// be read as such.
pub(crate) fn check_tenant_layout(spec: &TaskSpec, meta: &serde_json::Value) -> Result<(), RunError> {
    let committed = meta.get("inputs").and_then(|i| i.as_object()).is_some_and(|o| !o.is_empty());
    if spec.tenant
        && !spec.stores.is_empty()
        && committed
        && meta.get("tenant_scoped").and_then(|v| v.as_bool()) != Some(true)
    {
        return Err(RunError::Incompatible(format!("{}: its state was written without tenant scoping (by an older streamc): start the application over with `streamc run --reset`", spec.name)));
    }
    Ok(())
}

/// The records whose changes a task may always hold back before it commits on Kafka (see
/// [`TaskRun::cache_full`]).
const CHANGES_FLOOR_RECORDS: usize = 64;

/// What a driver reads of a task and tells it between steps; everything else about the task is
/// its own.
impl<F: Feed> TaskRun<F> {
    pub(crate) fn spec(&self) -> &Arc<TaskSpec> {
        &self.task.spec
    }

    pub(crate) fn partition(&self) -> u32 {
        self.task.partition
    }

    /// (Sub-topology input node, partition): the task's name in a run.
    pub(crate) fn id(&self) -> (String, u32) {
        (self.task.spec.name.clone(), self.task.partition)
    }

    pub(crate) fn feed(&self) -> &F {
        &self.feed
    }

    pub(crate) fn feed_mut(&mut self) -> &mut F {
        &mut self.feed
    }

    /// The control offset the task has applied.
    pub(crate) fn control(&self) -> u64 {
        self.control
    }

    /// Records processed since the last commit.
    pub(crate) fn uncommitted(&self) -> u64 {
        self.uncommitted
    }

    /// A fault was injected: the task must be reopened from its committed state.
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// A commit point has something to commit: records, or a control statement applied.
    pub(crate) fn has_work(&self) -> bool {
        self.uncommitted > 0 || self.meta_changed
    }

    /// Records processed or results held that a commit has not taken yet.
    pub(crate) fn holds_results(&self) -> bool {
        self.uncommitted > 0 || !self.out.is_empty()
    }

    /// At the end of every input, committed, and not waiting on a repartition topic's writers.
    pub(crate) fn idle(&self) -> bool {
        self.drained && self.uncommitted == 0 && !self.failed && !self.main_may_grow
    }

    /// Records read from every input, bad ones included.
    pub(crate) fn records_read(&self) -> u64 {
        self.read
    }

    /// Set by the driver before a step: the control records the process has read and the
    /// latest stage's offset ([`TaskRun::control_seen`]).
    pub(crate) fn set_control_seen(&mut self, seen: (u64, u64)) {
        self.control_seen = seen;
    }

    /// Set by the driver before a step: a task still at work may write to the main input
    /// ([`TaskRun::main_may_grow`]).
    pub(crate) fn set_main_may_grow(&mut self, may: bool) {
        self.main_may_grow = may;
    }

    pub(crate) fn set_bar(&mut self, bar: ProgressBar) {
        self.bar = bar;
    }

    /// The timestamp bounds and record sizes the topics the task writes take.
    pub(crate) fn set_limits(&mut self, limits: Option<TimestampLimits>, sizes: SizeLimits) {
        self.limits = limits;
        self.task.record_max = sizes.tightest();
        self.sizes = sizes;
    }

    /// Reopened as committed before its dropped query's control statement: the driver retires
    /// it again.
    pub(crate) fn forget_control(&mut self) {
        self.control = 0;
    }

    /// Positions on Kafka are offsets only: the changelog ends drop their byte positions.
    pub(crate) fn offsets_only(&mut self) {
        for e in &mut self.ends {
            e.byte = 0;
        }
    }

    /// Move the task's input positions forward to where its feed has read (`to`: topic and
    /// offset, for the task's partition), past records never delivered (transaction markers).
    /// True if any moved: the task then has a commit to make.
    pub(crate) fn move_positions(&mut self, to: &[(String, u64)]) -> bool {
        let p = self.task.partition;
        let mut moved = false;
        for (topic, next) in to {
            let pos = self.positions.entry(format!("{topic}/{p}")).or_default();
            if *next > pos.offset {
                pos.offset = *next;
                moved = true;
            }
        }
        if moved {
            self.uncommitted = self.uncommitted.max(1);
        }
        moved
    }

    /// The position after the last record processed of `topic`, for the task's partition.
    pub(crate) fn position(&self, topic: &str) -> Option<&Pos> {
        self.positions.get(&format!("{topic}/{}", self.task.partition))
    }

    /// The store named `store`: its sled tree and the layers of changes over it.
    pub(crate) fn store_view(&self, store: &str) -> Option<(&PagedTree, Vec<&Pending>)> {
        self.task.spec.stores.iter().position(|s| s.name == store).and_then(|i| self.trees.view(i))
    }

    /// Wait until every flight of its stores is written.
    pub(crate) fn settle(&mut self) -> Result<(), RunError> {
        self.trees.settle()
    }

    /// The summary of a task closed without committing what it did since its last commit.
    pub(crate) fn summary_as_committed(mut self) -> Summary {
        (self.task.counters, self.skipped, self.read) = self.at_commit.clone();
        self.summary()
    }
}

impl<F: Feed> TaskRun<F> {
    /// A task over `feed` with its restored stores, resuming from its commit record `meta`
    /// (stream times, join state) at `positions`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        spec: Arc<TaskSpec>,
        p: u32,
        group: String,
        feed: F,
        stores: Vec<(PagedTree, Pending, SledKeys, crate::runtime::writer::Flights)>,
        meta: &serde_json::Value,
        positions: BTreeMap<String, Pos>,
        restored: u64,
        opts: &RunOptions,
    ) -> TaskRun<F> {
        let task_id = format!("{}_{p}", spec.sub);
        let metrics =
            opts.metrics.as_ref().map(|m| m.task(&task_id, &spec.nodes, spec.agg.as_ref().map(|a| a.node.as_str())));
        let mut trees = Trees::new(stores, opts.config.cache_max_bytes());
        let chaos = opts.chaos.map(|c| Chaos::new(c, &group));
        let mut task = Task::new(spec, p, meta.get("stream_time").and_then(|v| v.as_i64()).unwrap_or(i64::MIN));
        let join_times: BTreeMap<String, i64> =
            meta.get("join_times").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default();
        let min_times: BTreeMap<String, i64> =
            meta.get("join_min_times").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default();
        task.joins.set_times(&join_times, &min_times, meta.get("join_time").and_then(|v| v.as_i64()));
        task.joins.seq = meta.get("join_seq").and_then(|v| v.as_u64()).unwrap_or(0);
        task.restore_index(&trees);
        trees.count_tenants(&task);
        let ends = vec![Pos::default(); trees.trees.len()];
        TaskRun {
            task,
            group,
            feed,
            trees,
            out: Outputs::default(),
            changes: Vec::new(),
            uncommitted: 0,
            positions,
            skipped: 0,
            restored,
            commits: 0,
            read: 0,
            metrics,
            bar: ProgressBar::hidden(),
            chaos,
            failed: false,
            at_commit: Default::default(),
            control: meta.get("control").and_then(|v| v.as_u64()).unwrap_or(0),
            meta_changed: false,
            control_seen: (0, 0),
            head_times: Vec::new(),
            work: false,
            ends,
            limits: None,
            sizes: SizeLimits::uniform(usize::MAX, "none"),
            main_may_grow: false,
            drained: false,
            idle_since: None,
        }
    }

    /// Read from a new feed (the task's inputs or positions changed).
    pub(crate) fn set_feed(&mut self, feed: F) {
        self.feed = feed;
        self.head_times.clear();
    }

    /// The commit record of the task: input positions, stream time and join state.
    pub(crate) fn meta(&self) -> serde_json::Value {
        let mut m = serde_json::json!({
            "inputs": self.positions,
            "stream_time": self.task.stream_time,
            "join_times": self.task.joins.times(),
            "join_min_times": self.task.joins.min_times(),
            "join_seq": self.task.joins.seq,
            "control": self.control,
            "version": self.task.spec.version,
        });
        if self.task.spec.tenant {
            // Only when true: on Kafka the commit records share the offset metadata's 4 KB.
            m["tenant_scoped"] = true.into();
        }
        m
    }
}

impl<F: Feed> TaskRun<F> {
    /// Apply control statements at a commit boundary (nothing uncommitted): run `spec`, the
    /// task's sub-topology as of `stage`. Stores with the same name are kept as they are (not
    /// reopened, not restored); with `restart` every store starts empty and every input is
    /// read again from the start; stores in `fresh`, and stores the task did not have, start
    /// empty. Emptying a store deletes its keys locally and queues a tombstone per key for the
    /// changelog, committed with the new control offset. Stores the task no longer has are
    /// removed locally. True if the inputs changed: the driver must give the task a new feed
    /// at its positions.
    pub(crate) fn upgrade(
        &mut self,
        spec: Arc<TaskSpec>,
        stage: &crate::control::Stage,
        restart: bool,
        fresh: &[String],
        open: &dyn Fn(&str) -> Result<PagedTree, RunError>,
        opts: &RunOptions,
    ) -> Result<bool, RunError> {
        let old = self.task.spec.clone();
        let p = self.task.partition;
        let mut old_trees: Vec<Option<(PagedTree, Pending)>> =
            self.trees.take_stores()?.into_iter().map(Some).collect();
        let mut trees = Vec::new();
        let mut ends = Vec::new();
        let mut emptied = 0u64;
        for (i, st) in spec.stores.iter().enumerate() {
            let j = old.stores.iter().position(|o| o.name == st.name);
            // A store the task did not have: nothing of it committed yet.
            ends.push(j.and_then(|j| self.ends.get(j).copied()).unwrap_or_default());
            let existing = j.and_then(|j| old_trees[j].take());
            let new_store = existing.is_none();
            let (tree, mut pend) = match existing {
                Some(x) => x,
                None => (open(&st.name)?, Pending::default()),
            };
            if restart || new_store || fresh.contains(&st.name) {
                emptied += empty_store(i, &tree, &mut pend, self.task.stream_time, &mut self.changes)?;
            }
            trees.push((tree, pend));
        }
        for (tree, _) in old_trees.into_iter().flatten() {
            // A store the query no longer has.
            let _ = tree.clear();
        }
        for (tree, pend) in trees {
            // (What sled holds of the store is not in memory.)
            self.trees.push(tree, pend, SledKeys::Unknown);
        }
        self.ends = ends;
        let topics = |s: &TaskSpec| -> Vec<String> {
            let mut t = vec![s.main.topic.clone()];
            t.extend(s.side_topics());
            t
        };
        let inputs_changed = restart || topics(&old) != topics(&spec);
        if restart {
            self.positions.clear();
        }
        let mut positions = BTreeMap::new();
        for t in topics(&spec) {
            let k = format!("{t}/{p}");
            positions.insert(k.clone(), self.positions.get(&k).copied().unwrap_or_default());
        }
        self.positions = positions;
        self.rebuild_task(spec.clone(), stage, restart);
        if let Some(m) = &opts.metrics {
            let mut fresh =
                m.task(&format!("{}_{p}", spec.sub), &spec.nodes, spec.agg.as_ref().map(|a| a.node.as_str()));
            // The counts carry over to the new task: so do the totals already published.
            if let Some(old) = &self.metrics {
                fresh.keep_totals(old);
            }
            self.metrics = Some(fresh);
        }
        self.control = stage.next;
        self.meta_changed = true;
        if old.version != spec.version || emptied > 0 {
            self.bar.suspend(|| {
                eprintln!(
                    "{} partition {p}: now query version {}{}{}",
                    spec.name,
                    spec.version,
                    if restart { ", reading its input again from the start" } else { "" },
                    if emptied > 0 { format!(", {emptied} keys deleted") } else { String::new() }
                )
            });
        }
        Ok(inputs_changed)
    }

    /// Replace the task by one running `spec` over the stores as they are now (pending changes
    /// included), its in-memory state rebuilt from them. Counts carry over (per-operator counts
    /// only for the same spec); stream and join times too, unless `restart`.
    fn rebuild_task(&mut self, spec: Arc<TaskSpec>, stage: &crate::control::Stage, restart: bool) {
        let old = &self.task;
        let mut task = Task::new(spec.clone(), old.partition, if restart { i64::MIN } else { old.stream_time });
        if !restart {
            task.joins.set_times(&old.joins.times(), &old.joins.min_times(), None);
            task.joins.seq = old.joins.seq;
        }
        let ops_in =
            if Arc::ptr_eq(&spec, &old.spec) { old.counters.ops_in.clone() } else { task.counters.ops_in.clone() };
        task.counters = task::Counters { ops_in, ..old.counters.clone() };
        task.globals = stage.tables.clone();
        task.restore_index(&self.trees);
        self.trees.count_tenants(&task);
        self.task = task;
    }

    /// Apply the `for tenant "t" purge` statements the task has not applied yet (at control
    /// offsets from `self.control` on): every key of those tenants leaves every store, with a
    /// tombstone each for the changelogs, committed with the new control offset; other tenants'
    /// keys are not touched. The task's in-memory state is rebuilt from the stores. Call at a
    /// commit boundary, before `self.control` moves on.
    pub(crate) fn purge_since(&mut self, stage: &crate::control::Stage) -> Result<u64, RunError> {
        if !self.task.spec.tenant {
            return Ok(0);
        }
        let tenants: Vec<&[u8]> =
            stage.purges.iter().filter(|(offset, _)| *offset >= self.control).map(|(_, t)| t.as_bytes()).collect();
        if tenants.is_empty() {
            return Ok(0);
        }
        let n = self.trees.purge(&tenants, &self.task, self.task.stream_time, &mut self.changes)?;
        self.rebuild_task(self.task.spec.clone(), stage, false);
        self.meta_changed = true;
        let names: Vec<String> = tenants.iter().map(|t| crate::runtime::tenant::display(t)).collect();
        self.bar.suspend(|| {
            eprintln!(
                "{} partition {}: purged tenant {}: {n} keys deleted",
                self.task.spec.name,
                self.task.partition,
                names.join(", ")
            )
        });
        Ok(n)
    }

    /// The task's query was dropped: delete every key of its stores (tombstones to be
    /// committed, local state cleared). The driver commits, then forgets the task.
    pub(crate) fn retire(&mut self) -> Result<(), RunError> {
        self.trees.empty_all(self.task.stream_time, &mut self.changes)?;
        self.out.clear();
        self.meta_changed = true;
        self.bar.suspend(|| {
            eprintln!(
                "{} partition {}: query {} dropped",
                self.task.spec.name, self.task.partition, self.task.spec.query
            )
        });
        Ok(())
    }

    /// Carry what outlives a reopened task (fault injection, metrics, counts as of the last
    /// commit) over to `fresh`, its replacement, and become it.
    pub(crate) fn replace_with(&mut self, mut fresh: TaskRun<F>) {
        fresh.chaos = self.chaos.take();
        fresh.metrics = self.metrics.take();
        fresh.bar = self.bar.clone();
        fresh.restored += self.restored;
        fresh.commits = self.commits;
        (fresh.task.counters, fresh.skipped, fresh.read) = self.at_commit.clone();
        fresh.at_commit = std::mem::take(&mut self.at_commit);
        *self = fresh;
    }

    /// Whether the task's aggregate holds back more changed entries (keys, or windows) than it
    /// may (see [`crate::runtime::ops::changed_entries_max`]): on Kafka, where commits come by
    /// time, it then commits early (where Kafka Streams evicts from a full cache and sends), so
    /// that the entries, and the results and changelog records their flush makes, stay bounded
    /// however many records a commit interval brings. (The embedded log commits every
    /// `commit.records` records.)
    pub(crate) fn cache_full(&self) -> bool {
        self.task.held() > self.changed_max()
    }

    /// At least [`CHANGES_FLOOR_RECORDS`] records' worth of changes (a day-long window hopping
    /// by the second changes 86,400 windows a record): never a commit per record.
    fn changed_max(&self) -> usize {
        use crate::runtime::op::StoreRead;
        let floor = self.task.changes_per_record().saturating_mul(CHANGES_FLOOR_RECORDS);
        crate::runtime::ops::changed_entries_max(self.trees.cache_share()).max(floor)
    }

    /// Process up to `max` records in timestamp order across the inputs (side inputs first on
    /// ties); returns how many were processed. Stops early when an input's next record is not
    /// known yet, and with `until_full` once [`Self::cache_full`].
    pub(crate) fn step(&mut self, opts: &RunOptions, max: u64, until_full: bool) -> Result<u64, RunError> {
        let p = self.task.partition;
        let spec = self.task.spec.clone();
        let main_internal = matches!(spec.main.decode, Decode::Internal { .. });
        let mut topics = vec![spec.main.topic.clone()];
        topics.extend(spec.side_topics());
        // Each input's key in `positions` (made once per step, not per record).
        let keys: Vec<String> = topics.iter().map(|t| format!("{t}/{p}")).collect();
        let mut n = 0;
        // Records of external inputs, for the progress bar.
        let mut external = 0;
        let budget = max.saturating_sub(self.uncommitted).max(1);
        // The clock, read once per step, for the broker's timestamp bounds (their margin is far
        // longer than a step).
        let now = if self.limits.is_some() { now_ms() } else { 0 };
        // Across several inputs, records go in event-time order (docs/language.md, "Joins"): the time
        // of each input's head is its declared time field (`TaskSpec::time_fields`), else its record
        // timestamp.
        self.head_times.resize(topics.len(), None);
        // Inputs of avro or protobuf values (from the spec the task runs now: a statement may
        // change it).
        let registry_inputs = spec.registry_inputs();
        let registry_keys = spec.registry_keys();
        let roles = spec.input_roles();
        self.drained = false;
        crate::runtime::lineage::enter(&spec.name, p);
        let most = if until_full { self.changed_max() } else { usize::MAX };
        'records: while n < budget && (most == usize::MAX || self.task.held() <= most) {
            if self.chaos.as_mut().is_some_and(|c| c.redeliver()) {
                // Redelivery: everything read since the last commit will be read again.
                self.failed = true;
                break;
            }
            // The earliest record next (by event time): a side input before a later side input or
            // the main input on ties.
            let mut pick: Option<(i64, usize)> = None;
            for i in (1..topics.len()).chain([0]) {
                match self.feed.peek(i)? {
                    Next::Record(ts) => {
                        // Its writer schemas (value, key) before the record is read (the registry
                        // down: the run stops, and resumes from its last commit).
                        if let Some(Some(format)) = registry_inputs.get(i).copied() {
                            let value = self.feed.peeked(i).and_then(|s| s.record.value.as_deref());
                            let what = format!("topic `{}`", topics[i]);
                            crate::runtime::schemas::prefetch(&opts.config, &what, value, format)?;
                        }
                        if let Some(Some(format)) = registry_keys.get(i).copied() {
                            let key = self.feed.peeked(i).and_then(|s| s.record.key.as_deref());
                            let what = format!("the keys of topic `{}`", topics[i]);
                            crate::runtime::schemas::prefetch(&opts.config, &what, key, format)?;
                        }
                        let ts = match (spec.time_fields.get(i), self.feed.peeked(i)) {
                            (Some(Some(rt)), Some(head)) => match self.head_times[i] {
                                Some((offset, t)) if offset == head.offset => t,
                                _ => {
                                    let t = event_time(rt, &head.record).unwrap_or(ts);
                                    self.head_times[i] = Some((head.offset, t));
                                    t
                                }
                            },
                            _ => ts,
                        };
                        if pick.is_none_or(|(t, _)| ts < t) {
                            pick = Some((ts, i));
                        }
                    }
                    // The repartition topic may still grow: side records wait for it.
                    Next::End if i == 0 && self.main_may_grow && topics.len() > 1 => break 'records,
                    Next::End => {}
                    Next::Unknown => break 'records,
                }
            }
            let Some((head_time, i)) = pick else {
                self.drained = true;
                break;
            };
            if i == 0 && main_internal {
                // Repartition records carry the version of the query that wrote them.
                let v = self
                    .feed
                    .peeked(0)
                    .and_then(|s| s.record.headers.iter().find(|(k, _)| k == task::H_VERSION))
                    .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u64>().ok());
                if let Some(v) = v {
                    // Versions are control offsets: a version the process has read and the task
                    // has applied is not ahead (a changed program file can leave such records).
                    let (seen, latest) = self.control_seen;
                    if v > spec.version && (v > seen || self.control < latest) {
                        // Written by a newer form of this query: apply the control log first.
                        break;
                    }
                    if v < spec.epoch {
                        // Written for a form of the query whose state was started over.
                        if let Some(s) = self.feed.take(0) {
                            set_position(&mut self.positions, &keys[0], s.next);
                            self.skipped += 1;
                            self.uncommitted += 1;
                            n += 1;
                        }
                        continue;
                    }
                }
            }
            if crate::runtime::lineage::on() {
                // `streamc trace`: a record of a topic the replay writes waits for its writer's.
                let head = self.feed.peeked(i);
                let (k, v) = (head.and_then(|s| s.record.key.as_deref()), head.and_then(|s| s.record.value.as_deref()));
                if !crate::runtime::lineage::ready(&topics[i], k, v) {
                    break;
                }
            }
            let Some(s) = self.feed.take(i) else { break };
            let topic = &topics[i];
            if i > 0 || !main_internal {
                external += 1;
            }
            set_position(&mut self.positions, &keys[i], s.next);
            self.task.counters.counted = false;
            self.task.late_reason = None;
            self.task.fk =
                crate::runtime::ops::FkMarks { offset: s.offset as i64, deleted: false, ..Default::default() };
            if crate::runtime::lineage::on() {
                crate::runtime::lineage::input(topic, p, s.offset, s.record.key.as_deref(), s.record.value.as_deref());
            }
            self.out.begin_record();
            let res = self.dispatch(roles[i], i, &s, topic, head_time, now);
            if let Some(why) = crate::format::schema_tables::take_failure() {
                // The registry could not be asked for this record (a schema not fetched ahead):
                // the run stops before its commit, and the record is read again next time.
                return Err(RunError::Registry(format!("the schema registry, for a record of topic `{topic}`: {why}")));
            }
            if let Err(e) = self.settle_record(res) {
                self.bad_record(topic, &s, e, opts)?;
            }
            self.late_record(topic, &s, opts);
            n += 1;
            self.uncommitted += 1;
        }
        self.read += n;
        self.bar.inc(external);
        // `emit final idle D` (not with `--drain`, which reads a finite input to its end).
        if let (Some(after), false) = (spec.agg.as_ref().and_then(|a| a.idle), opts.drain) {
            if let Some(elapsed) = idle_advance(&mut self.idle_since, after, now_ms(), n, self.drained) {
                if self.task.stream_time != i64::MIN {
                    self.task.stream_time = self.task.stream_time.saturating_add(elapsed);
                    // Committed (and flushed: the windows stream time has passed close).
                    self.meta_changed = true;
                }
            }
        }
        Ok(n)
    }

    /// A record of input `i` (0: the main input; then the tables, the joined streams, the merged
    /// streams: `TaskSpec::side_topics`), read at `head_time` (its event time), through what the
    /// task does with a record of that input (`role`).
    fn dispatch(
        &mut self,
        role: InputRole,
        i: usize,
        s: &Stored,
        topic: &str,
        head_time: i64,
        now: i64,
    ) -> Result<(), RecordError> {
        if let Some(e) = self.too_large_to_keep(i, &s.record) {
            // A table's or a joined stream's record is kept whole in a store: one its
            // changelog would not take fails every commit.
            return Err(e);
        }
        match role {
            // A foreign-key join's middle: a subscription (its time was checked where the row
            // came in: refused here, an unsubscription would be lost), or a row of the other
            // table.
            InputRole::Foreign(side) => match side.and_then(|_| self.refused(head_time, now)) {
                Some(e) => Err(e),
                None => self.task.foreign(side, &s.record, head_time, &mut self.out, &self.trees),
            },
            // A foreign-key join's end: a result, passed on if it answers the row's latest update.
            InputRole::ForeignGate => self.task.foreign_gate(&s.record, &mut self.out, &self.trees),
            // Any table of a table–table join (ordered by their records' times); each gives
            // results at its time, which the topics written must take.
            InputRole::Mutual(side) => match self.refused(head_time, now) {
                Some(e) => Err(e),
                None => self.task.mutual_join(side, &s.record, head_time, &mut self.out, &self.trees),
            },
            InputRole::Main => {
                if let Some(r) = self.task.table_deletion(&s.record, &mut self.out, &self.trees) {
                    return r;
                }
                self.task.decode_main(&s.record).and_then(|mut input| {
                    // (A repartition record too: this task's topics may bound more tightly.)
                    if let Some(e) = self.refused(input.ts, now) {
                        return Err(e);
                    }
                    input.offset = s.offset;
                    let old = self.task.decode_old(&s.record, &input.row).transpose()?;
                    // In a self-join the record is the other side's too, whatever became of it
                    // on the query's side (an error there is this side's only).
                    let main = self.task.process_update(old, input, &mut self.out, &self.trees);
                    let main = self.settle_record(main);
                    let joined = self.task.self_joins(topic, &s.record, s.offset, &mut self.out, &self.trees);
                    main.and(self.settle_record(joined))
                })
            }
            // A stream merged with the main input: through the query like the main input's.
            InputRole::Merged(k) => self.task.decode_merged(k, &s.record).and_then(|mut input| {
                if let Some(e) = self.refused(input.ts, now) {
                    return Err(e);
                }
                input.offset = s.offset;
                // In a self-join the record is the other side's too, whatever became of it on
                // the query's side (an error there is this side's only).
                let main = self.process(input);
                let main = self.settle_record(main);
                let joined = self.task.self_joins(topic, &s.record, s.offset, &mut self.out, &self.trees);
                main.and(self.settle_record(joined))
            }),
            // A joined stream's record (its head time is its event time: a task with several
            // inputs reads their time fields to order them).
            InputRole::JoinedStream(_) => match self.refused(head_time, now) {
                Some(e) => Err(e),
                None => self.task.process_side(i - 1, &s.record, s.offset, &mut self.out, &self.trees),
            },
            // A table's record is stamped with its own timestamp in the table's changelog,
            // which its topic took.
            InputRole::Table(k) => self.task.process_side(k, &s.record, s.offset, &mut self.out, &self.trees),
        }
    }

    /// Why a record of event time `ts` is refused, if the topics the task writes would refuse
    /// its results: the broker's clock (`now`) bounds the timestamps it takes. On Kafka this is
    /// the one reading of the clock in the result path (docs/conventions.md, "Timestamps the
    /// broker refuses").
    fn refused(&self, ts: i64, now: i64) -> Option<RecordError> {
        self.limits.as_ref()?.check(ts, now).err().map(RecordError)
    }

    /// The record being processed is through (`res`): what it made is kept; or it failed, or
    /// made a record larger than its topic takes, and (all or nothing) what it made is dropped,
    /// not written. Either way what follows is another record's.
    fn settle_record(&mut self, res: Result<(), RecordError>) -> Result<(), RecordError> {
        let res = res.and_then(|()| {
            let sizes = &self.sizes;
            self.out.made_by_record().try_for_each(|o| sizes.check(o.topic(), o.size())).map_err(RecordError)
        });
        if res.is_err() {
            let dropped = self.out.drop_record();
            self.task.counters.records_out = self.task.counters.records_out.saturating_sub(dropped as u64);
        }
        self.task.settle(res.is_ok());
        self.out.keep_so_far();
        res
    }

    /// Why record `rec` of input `i` is too large for the task to keep, if it is: a side
    /// input's records (tables, joined streams), and the main input's when the task keeps its
    /// rows (a stream–stream join, a grouped table, a table–table or foreign-key join), are
    /// kept whole in a store, whose changelog takes no record over [`SizeLimits::tightest`]. (A
    /// stream merged with the main input is not kept.)
    fn too_large_to_keep(&self, i: usize, rec: &Record) -> Option<RecordError> {
        let size = rec.key.as_ref().map_or(0, Vec::len)
            + rec.value.as_ref().map_or(0, Vec::len)
            + crate::runtime::topics::RECORD_OVERHEAD;
        let max = self.task.record_max;
        if size <= max {
            return None;
        }
        let spec = &self.task.spec;
        let kept = match i {
            0 => {
                !spec.streams.is_empty()
                    || spec.table_group.is_some()
                    || spec.mutual.is_some()
                    || spec.foreign.is_some()
                    || spec.table_sink.is_some()
            }
            i => i <= spec.tables.len() + spec.read_streams().count(),
        };
        kept.then(|| {
            RecordError(format!(
                "the record is about {size} bytes and is kept whole in a store, whose changelog takes at most {max} (max.message.bytes, message.max.bytes or embedded.max_message_bytes)"
            ))
        })
    }

    fn process(&mut self, input: Input) -> Result<(), RecordError> {
        self.task.process(input, &mut self.out, &self.trees)
    }

    /// Bring the shared metrics up to this task's counts.
    pub(crate) fn publish(&mut self) {
        let Some(m) = &mut self.metrics else { return };
        let c = &self.task.counters;
        m.publish(&TaskCounts {
            records_in: self.read,
            records_out: c.records_out,
            dead_letters: c.dead_letters,
            skipped: self.skipped,
            commits: self.commits,
            late: c.late,
            cache_hits: c.cache_hits,
            cache_misses: c.cache_misses,
            processors: c.ops_in.clone(),
            lags: self.feed.lags(),
            tenants: c.tenants.clone(),
            tenant_keys: self.trees.tenant_keys.clone().unwrap_or_default(),
        });
    }

    pub(crate) fn summary(&self) -> Summary {
        let c = &self.task.counters;
        Summary {
            records_in: c.records_in,
            records_out: c.records_out,
            late: c.late,
            dead_letters: c.dead_letters,
            skipped: self.skipped,
            restored: self.restored,
            commits: self.commits,
            cache_hits: c.cache_hits,
            cache_misses: c.cache_misses,
            faults: self.chaos.as_ref().map_or(0, |c| c.faults),
            interrupted: false,
            busy: std::time::Duration::ZERO,
        }
    }

    /// Whether `topic` is an input written by producers (not a repartition topic of the task).
    fn external_input(&self, topic: &str) -> bool {
        !(topic == self.task.spec.main.topic && matches!(self.task.spec.main.decode, Decode::Internal { .. }))
    }

    /// If the record just processed was late, write it to `<app>-late` (with `late.to_topic`).
    fn late_record(&mut self, topic: &str, s: &crate::record::Stored, opts: &RunOptions) {
        if let Some(reason) = self.task.late_reason.take() {
            if opts.config.late.to_topic {
                let external = self.external_input(topic);
                let rec = with_source_headers(&s.record, reason, topic, self.task.partition, s.offset, external);
                self.out.push(Output { topic: format!("{}-late", opts.app), route: Route::Partition(0), record: rec });
            }
        }
    }

    fn bad_record(
        &mut self,
        topic: &str,
        s: &crate::record::Stored,
        e: RecordError,
        opts: &RunOptions,
    ) -> Result<(), RunError> {
        let p = self.task.partition;
        match opts.config.on_error {
            OnError::Fail => Err(RunError::BadRecord(format!("{topic} partition {p} offset {}: {}", s.offset, e.0))),
            OnError::Skip => {
                self.skipped += 1;
                self.bar.suspend(|| eprintln!("skipped {topic} partition {p} offset {}: {}", s.offset, e.0));
                Ok(())
            }
            OnError::DeadLetter => {
                let tenant = self.task.record_tenant(topic, &s.record);
                self.task.dead_letter(tenant.as_deref());
                if let Some(m) = &opts.metrics {
                    m.console.dead_letter(&e.0, topic, p, s.offset, s.record.timestamp);
                }
                let rec = with_source_headers(&s.record, e.0, topic, p, s.offset, self.external_input(topic));
                self.out.push(Output { topic: format!("{}-dlq", opts.app), route: Route::Partition(0), record: rec });
                Ok(())
            }
        }
    }
}

impl<F: Feed> TaskRun<F> {
    /// Should the task fail here? Marks it failed (the worker reopens it) if so.
    pub(crate) fn inject(&mut self, at: FailPoint) -> bool {
        if self.chaos.as_mut().is_some_and(|c| c.fail(at)) {
            self.failed = true;
        }
        self.failed
    }
}

/// A copy of an input record for the dead-letter or late topic: the reason and where it came from
/// in headers (the input's own `streamc.*` headers renamed `original.streamc.*`).
///
/// The copy always fits a broker's default message size (1 MB): a value longer than
/// [`COPY_VALUE_MAX`] bytes or a key longer than [`COPY_KEY_MAX`] is cut there, with its
/// original size and SHA-256 in headers (`streamc.value.size`, `streamc.value.sha256`, and
/// likewise for the key), and the reason is cut at [`REASON_MAX`] bytes.
pub(crate) fn with_source_headers(
    r: &Record,
    reason: String,
    topic: &str,
    p: u32,
    offset: u64,
    external: bool,
) -> Record {
    // An external input's own `streamc.*` headers (its producer may write any) are kept under
    // `original.`, so that the copy's `streamc.*` headers are streamc's alone; a repartition
    // topic's are streamc's already. Headers past COPY_HEADERS_MAX bytes are dropped and counted.
    let mut headers = Vec::with_capacity(r.headers.len() + 6);
    let (mut bytes, mut dropped) = (0usize, 0usize);
    for (k, v) in &r.headers {
        bytes += k.len() + v.len();
        if bytes > COPY_HEADERS_MAX {
            dropped += 1;
            continue;
        }
        let k = if external && k.starts_with("streamc.") { format!("original.{k}") } else { k.clone() };
        headers.push((k, v.clone()));
    }
    if dropped > 0 {
        headers.push(("streamc.headers.dropped".to_string(), dropped.to_string().into_bytes()));
    }
    let mut rec = Record { key: None, value: None, timestamp: r.timestamp, headers };
    rec.key = r.key.as_deref().map(|k| cut(k, COPY_KEY_MAX, "key", &mut rec.headers));
    rec.value = r.value.as_deref().map(|v| cut(v, COPY_VALUE_MAX, "value", &mut rec.headers));
    let mut reason = reason;
    if reason.len() > REASON_MAX {
        let mut at = REASON_MAX;
        while !reason.is_char_boundary(at) {
            at -= 1;
        }
        reason.truncate(at);
        reason.push('…');
    }
    rec.headers.push((H_ERROR.into(), reason.into_bytes()));
    rec.headers.push((H_TOPIC.into(), topic.as_bytes().to_vec()));
    rec.headers.push((H_PARTITION.into(), p.to_string().into_bytes()));
    rec.headers.push((H_OFFSET.into(), offset.to_string().into_bytes()));
    rec
}

/// The most bytes of a record's value a dead letter or late record copies.
pub(crate) const COPY_VALUE_MAX: usize = 256 * 1024;
/// The most bytes of a record's key a dead letter or late record copies.
pub(crate) const COPY_KEY_MAX: usize = 16 * 1024;
/// The most bytes of a record's headers (names and values) a dead letter or late record copies.
pub(crate) const COPY_HEADERS_MAX: usize = 64 * 1024;
/// The most bytes of a dead letter's reason.
pub(crate) const REASON_MAX: usize = 4 * 1024;

/// `bytes`, or its first `max` bytes with its size and SHA-256 (hex) in headers
/// `streamc.<what>.size` and `streamc.<what>.sha256`.
fn cut(bytes: &[u8], max: usize, what: &str, headers: &mut Vec<(String, Vec<u8>)>) -> Vec<u8> {
    if bytes.len() <= max {
        return bytes.to_vec();
    }
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(bytes));
    headers.push((format!("streamc.{what}.size"), bytes.len().to_string().into_bytes()));
    headers.push((format!("streamc.{what}.sha256"), digest.into_bytes()));
    bytes[..max].to_vec()
}

/// A record's event time from its time field; None if it cannot be read (the record is then
/// ordered by its timestamp, and goes to the dead-letter topic when it is processed).
pub(crate) fn event_time(field: &crate::plan::physical::TimeField, rec: &Record) -> Option<i64> {
    field.read(rec.value.as_deref()?)
}

/// What unit tests of the core share: a feed with nothing to read, and run options.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::config::Config;

    /// A feed at the end of every input.
    pub(crate) struct NoFeed;

    impl Feed for NoFeed {
        fn peek(&mut self, _: usize) -> Result<Next, RunError> {
            Ok(Next::End)
        }
        fn take(&mut self, _: usize) -> Option<Stored> {
            None
        }
        fn peeked(&self, _: usize) -> Option<&Stored> {
            None
        }
        fn lags(&self) -> Vec<(String, u64)> {
            Vec::new()
        }
    }

    /// A task of a one-query program (a count per user of `clicks`) on partition `p`, with its
    /// store's tree in `db`, read up to offset 3 and at the end of its input.
    pub(crate) fn task(db: &sled::Db, p: u32) -> TaskRun<NoFeed> {
        let program = crate::compile(
            r#"
stream clicks from "clicks" {
  key user
  value json { user: string, ts: timestamp }
  time ts
}
query per_user {
  from clicks
  group by user
  aggregate { n = count() }
  to "counts"
}
"#,
        )
        .unwrap();
        let topo = crate::plan::lower(&program, "app");
        let spec = Arc::new(crate::plan::physical::specs(&program, &topo).unwrap().remove(0));
        assert_eq!(spec.stores.len(), 1, "the aggregate has one store");
        let tree = PagedTree::open(db, &format!("store-{p}")).unwrap();
        let opts = options("app", Config::default());
        let positions = BTreeMap::from([(format!("clicks/{p}"), Pos::at(3))]);
        TaskRun::new(
            spec,
            p,
            format!("g{p}"),
            NoFeed,
            vec![(tree, Pending::default(), SledKeys::InMemory, Default::default())],
            &serde_json::Value::Null,
            positions,
            0,
            &opts,
        )
    }

    /// The options of a `--drain` run of application `app` with `config`.
    pub(crate) fn options(app: &str, config: Config) -> RunOptions {
        RunOptions {
            state_dir: Default::default(),
            app: app.into(),
            threads: 1,
            drain: true,
            close_windows_at_end: false,
            inputs: vec![],
            config,
            metrics: None,
            progress: false,
            chaos: None,
            restores: Default::default(),
            program_text: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `emit final idle D` with an injected clock: stream time moves only after D without
    /// records at the end of every input, by the time elapsed, then again every D; a record
    /// starts the count over; waiting on a fetch is not idleness.
    #[test]
    fn idle_time_moves_stream_time_by_the_clock() {
        let mut since = None;
        let d = 30_000;
        assert_eq!(idle_advance(&mut since, d, 1_000, 5, true), None);
        assert_eq!(idle_advance(&mut since, d, 20_000, 0, true), None);
        // Not at the end of its inputs: not idle, however long.
        assert_eq!(idle_advance(&mut since, d, 90_000, 0, false), None);
        assert_eq!(idle_advance(&mut since, d, 91_000, 0, true), Some(90_000));
        assert_eq!(idle_advance(&mut since, d, 100_000, 0, true), None);
        assert_eq!(idle_advance(&mut since, d, 121_000, 0, true), Some(30_000));
        // A record: the count starts over.
        assert_eq!(idle_advance(&mut since, d, 130_000, 1, true), None);
        assert_eq!(idle_advance(&mut since, d, 159_999, 0, true), None);
        assert_eq!(idle_advance(&mut since, d, 160_000, 0, true), Some(30_000));
        // A task that starts idle counts from its first step.
        let mut fresh = None;
        assert_eq!(idle_advance(&mut fresh, d, 5_000, 0, true), None);
        assert_eq!(idle_advance(&mut fresh, d, 35_000, 0, true), Some(30_000));
    }
}
