//! Standby replicas (`num.standby.replicas`, Kafka Streams' name): an instance keeps a warm copy
//! of the stores of tasks it does not own by following their changelogs into its local state,
//! with the checkpoint each copy reaches. When the group gives it such a task (its owner failed
//! or left), the task opens from that checkpoint and restores only the tail.
//!
//! Which instances keep a task's standby: among the group's members other than the task's
//! owner, the `num.standby.replicas` that rank first for the task (rendezvous hashing of the
//! member's client id and the task), so every instance reaches the same choice from the group's
//! description alone. The choice is made again every few seconds, and when the assignment
//! changes.
//!
//! Local state stays a cache of the changelogs: a copy is written with the changelog offset it
//! reflects, exactly like a restore's batches, so opening the task later checks it against the
//! task's committed changelog end as any restore does (a copy that read past it, records of an
//! owner that died before committing under at-least-once, is wiped and restored from scratch).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::control::Stage;
use crate::kafka::Kafka;
use crate::record::Pos;
use crate::runtime::error::RunError;
use crate::runtime::kafka::peers::GroupPeers;
use crate::runtime::metrics::Metrics;
use crate::runtime::pages::PagedTree;
use crate::runtime::restore::restore_start;
use crate::runtime::state::{open_tree, Pending};

/// How often the choice of standbys is made again (and the changelogs' ends read for the lag).
const PLAN_EVERY: Duration = Duration::from_secs(3);
/// How often a copy's pending records are written to sled with their checkpoint (and when it
/// is released, closed, or its task opens here).
const WRITE_EVERY: Duration = Duration::from_secs(5);
/// Pending keys that make a copy write at once.
const WRITE_PENDING: usize = 20_000;
/// Records applied per turn of the driver's loop at most (the active tasks come first).
const PER_TURN: usize = 20_000;
/// How often a warm-up looks at the group and the changelogs' ends.
const WARM_UP_PLAN_EVERY: Duration = Duration::from_secs(1);
/// A warm-up joins anyway when no lookup of the group and the changelogs succeeded, or the
/// copies came no closer to the changelogs' ends, for this long.
const WARM_UP_GIVE_UP: Duration = Duration::from_secs(60);

/// One store's partition kept warm.
struct Copy {
    /// The task (`<sub>_<partition>`) and store, for metrics and status.
    task: String,
    store: String,
    tree: PagedTree,
    pending: Pending,
    /// The offset after the last record applied: the checkpoint. (Not the reader's position,
    /// which moves past a transaction's commit marker: a commit records the marker's offset as
    /// the changelog's end, and a checkpoint past it would not fit that commit.)
    next: u64,
    /// The reader's position when last read (for the lag only).
    position: u64,
    /// The changelog's end when last read.
    end: u64,
    written: Instant,
}

impl Copy {
    fn write(&mut self) -> Result<(), RunError> {
        self.pending
            .write(&self.tree, &Pos::at(self.next))
            .map_err(crate::runtime::error::state("cannot write a standby replica"))?;
        self.written = Instant::now();
        Ok(())
    }

    fn lag(&self) -> u64 {
        self.end.saturating_sub(self.next.max(self.position))
    }
}

pub(crate) struct Standbys {
    replicas: u32,
    /// This instance's client id in the group.
    me: String,
    peers: Arc<GroupPeers>,
    reader: BaseConsumer,
    /// Asks for the changelogs' ends (see [`Kafka::watermarks`]: the reader's connection
    /// waits on its fetches).
    kafka: Kafka,
    metrics: Option<Arc<Metrics>>,
    /// (changelog topic, partition) → its copy.
    copies: BTreeMap<(String, u32), Copy>,
    /// (sub-topology input node, partition) → the changelog partitions kept for it.
    tasks: BTreeMap<(String, u32), Vec<(String, u32)>>,
    planned: Option<Instant>,
    /// Warming up before joining the group ([`Standbys::warm_up`]): every task is copied.
    warming: bool,
    /// The copies changed (or the last assignment of the reader failed): assign it again.
    needs_assign: bool,
}

impl Standbys {
    pub(crate) fn new(
        replicas: u32,
        me: &str,
        peers: Arc<GroupPeers>,
        reader: BaseConsumer,
        kafka: Kafka,
        metrics: Option<Arc<Metrics>>,
    ) -> Standbys {
        Standbys {
            replicas,
            me: me.to_string(),
            peers,
            reader,
            kafka,
            metrics,
            copies: BTreeMap::new(),
            tasks: BTreeMap::new(),
            planned: None,
            warming: false,
            needs_assign: false,
        }
    }

    /// Before this instance joins the group: while other members run the application, copy
    /// every task's changelogs into local state until each copy is within `lag` records of its
    /// changelog's end (`acceptable.recovery.lag`), so that the tasks the group then moves here
    /// restore only that tail, and the instances running them keep them meanwhile (Kafka
    /// Streams' warm-up replicas). Every task, because the assignor (librdkafka's
    /// cooperative-sticky), not this instance, picks which tasks move. Returns at once when no
    /// member of the group runs a task (there is nothing to take over, and nobody would run
    /// the input meanwhile), when the group still gives this instance's client id partitions
    /// (it restarted within its session timeout: its state for them is here), and when `stop`
    /// is set; gives up (and joins) when the group or the changelogs cannot be looked up, or
    /// the copies come no closer to the ends, for [`WARM_UP_GIVE_UP`].
    pub(crate) fn warm_up(
        &mut self,
        stage: &Stage,
        db: &sled::Db,
        lag: u64,
        stop: &AtomicBool,
    ) -> Result<(), RunError> {
        self.warming = true;
        let started = Instant::now();
        let mut said = Instant::now();
        // Since when no lookup succeeded (the group rebalances, or the broker refuses).
        let mut failing: Option<Instant> = None;
        // The least total lag yet, and when it was reached.
        let mut best: (u64, Instant) = (u64::MAX, Instant::now());
        let r = loop {
            if stop.load(Ordering::Relaxed) {
                break Ok(());
            }
            if self.planned.is_none_or(|at| at.elapsed() >= WARM_UP_PLAN_EVERY) {
                self.planned = Some(Instant::now());
                let planned = self.peers.group().and_then(|group| {
                    if group.values().all(Vec::is_empty) {
                        if !self.copies.is_empty() {
                            eprintln!("warm-up: no instance runs a task now; joining the group");
                        }
                        return Ok(None);
                    }
                    if group.get(&self.me).is_some_and(|p| !p.is_empty()) {
                        return Ok(None);
                    }
                    self.plan(stage, db, &BTreeSet::new(), &group).map(Some)
                });
                match planned {
                    Ok(None) => break Ok(()),
                    Ok(Some(wanted)) => {
                        failing = None;
                        self.read_ends();
                        let lags: Vec<u64> = self.copies.values().map(Copy::lag).collect();
                        let behind: Vec<u64> = lags.iter().copied().filter(|l| *l > lag).collect();
                        if behind.is_empty() {
                            if wanted > 0 {
                                eprintln!(
                                    "warm-up: copies of {wanted} task{} within {lag} records of their changelogs' ends after {:.1} s; joining the group",
                                    if wanted == 1 { "" } else { "s" },
                                    started.elapsed().as_secs_f64()
                                );
                            }
                            break Ok(());
                        }
                        let total: u64 = lags.iter().sum();
                        if total < best.0 {
                            best = (total, Instant::now());
                        } else if best.1.elapsed() >= WARM_UP_GIVE_UP {
                            eprintln!(
                                "warm-up: the copies came no closer to the changelogs' ends in {} s ({total} records behind); joining the group",
                                WARM_UP_GIVE_UP.as_secs()
                            );
                            break Ok(());
                        }
                        if said.elapsed() >= Duration::from_secs(10) {
                            said = Instant::now();
                            eprintln!(
                                "warm-up: {} of {} changelog copies more than {lag} records behind (at most {}), before joining the group",
                                behind.len(),
                                self.copies.len(),
                                behind.iter().max().unwrap_or(&0)
                            );
                        }
                    }
                    Err(e) => match failing {
                        Some(since) if since.elapsed() >= WARM_UP_GIVE_UP => {
                            eprintln!("warm-up: {e} for {} s; joining the group", WARM_UP_GIVE_UP.as_secs());
                            break Ok(());
                        }
                        Some(_) => {}
                        None => failing = Some(Instant::now()),
                    },
                }
                if self.needs_assign {
                    self.assign();
                }
            }
            match self.apply() {
                Ok(true) => {}
                Ok(false) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => break Err(e),
            }
        };
        self.warming = false;
        self.planned = None;
        r
    }

    /// The tasks this instance keeps standbys of, with each store's lag: `(task id, store, lag)`.
    pub(crate) fn lags(&self) -> Vec<(String, String, u64)> {
        self.copies.values().map(|c| (c.task.clone(), c.store.clone(), c.lag())).collect()
    }

    /// One turn: choose again if due (`owned`: the main partitions this instance runs, asked
    /// only then), then apply what the changelogs have. True if any record was applied.
    pub(crate) fn turn(
        &mut self,
        stage: &Stage,
        db: &sled::Db,
        owned: impl FnOnce() -> BTreeSet<(String, u32)>,
    ) -> Result<bool, RunError> {
        if self.planned.is_none_or(|at| at.elapsed() >= PLAN_EVERY) {
            let owned = owned();
            let owned = &owned;
            self.planned = Some(Instant::now());
            // While the group rebalances there is no plan: keep the copies as they are. A
            // broker that cannot be asked now is asked again at the next plan: standbys are
            // best effort, and never stop the instance.
            if let Ok(group) = self.peers.group() {
                if let Err(e) = self.plan(stage, db, owned, &group) {
                    eprintln!("standby replicas: {e}; trying again in {} s", PLAN_EVERY.as_secs());
                }
            }
            if self.needs_assign {
                self.assign();
            }
            self.read_ends();
        }
        self.apply()
    }

    /// Write every copy with its checkpoint (the instance stops).
    pub(crate) fn close(&mut self) -> Result<(), RunError> {
        for c in self.copies.values_mut() {
            c.write()?;
        }
        Ok(())
    }

    /// Stop keeping the standby of task (`name`, `p`), its copies written with their checkpoints
    /// first: the task is about to open here.
    pub(crate) fn release(&mut self, name: &str, p: u32) -> Result<(), RunError> {
        if self.drop_task(name, p)? {
            self.assign();
        }
        Ok(())
    }

    /// Stop copying task (`name`, `p`), its copies written first. True if it had any.
    fn drop_task(&mut self, name: &str, p: u32) -> Result<bool, RunError> {
        let Some(parts) = self.tasks.remove(&(name.to_string(), p)) else { return Ok(false) };
        for k in parts {
            if let Some(mut c) = self.copies.remove(&k) {
                c.write()?;
                if let Some(m) = &self.metrics {
                    m.standby(&c.task, &c.store, None);
                }
            }
        }
        Ok(true)
    }

    /// Choose the tasks to keep a standby of (warming up: all), open new copies from their
    /// local checkpoints, drop those no longer chosen. A lookup that fails leaves every copy as
    /// it is. Returns how many tasks were chosen.
    fn plan(
        &mut self,
        stage: &Stage,
        db: &sled::Db,
        owned: &BTreeSet<(String, u32)>,
        group: &BTreeMap<String, Vec<(String, u32)>>,
    ) -> Result<usize, String> {
        // Just after a warm-up, until the group has this instance as a member, it ranks nowhere:
        // the copies stay as they are (the tasks that move here are about to open from them).
        if !self.warming && !group.contains_key(&self.me) {
            return Ok(self.tasks.len());
        }
        let owner: BTreeMap<&(String, u32), &str> =
            group.iter().flat_map(|(c, parts)| parts.iter().map(move |p| (p, c.as_str()))).collect();
        // Per task chosen: (changelog, partition, task id, store) of each of its stores.
        type Stores = Vec<(String, u32, String, String)>;
        let mut want: BTreeMap<(String, u32), Stores> = BTreeMap::new();
        for spec in stage.specs.iter().filter(|s| !s.stores.is_empty()) {
            let n = self.peers.partitions(&spec.main.topic)?;
            for p in 0..n {
                let main = (spec.main.topic.clone(), p);
                if owned.contains(&main) {
                    continue;
                }
                let key = (spec.name.clone(), p);
                let chosen = self.warming
                    || match owner.get(&main) {
                        Some(o) => {
                            let mut ranked: Vec<(u64, &str)> = group
                                .keys()
                                .filter(|c| c.as_str() != *o)
                                .map(|c| {
                                    (
                                        crate::runtime::chaos::fnv(format!("{c}/{}/{p}", spec.name).as_bytes()),
                                        c.as_str(),
                                    )
                                })
                                .collect();
                            ranked.sort();
                            ranked.iter().take(self.replicas as usize).any(|(_, c)| *c == self.me)
                        }
                        // Between the two phases of a cooperative rebalance a partition has no
                        // owner: a copy kept goes on.
                        None => self.tasks.contains_key(&key),
                    };
                if chosen {
                    let stores = spec
                        .stores
                        .iter()
                        .map(|s| (s.changelog.clone(), p, format!("{}_{p}", spec.sub), s.name.clone()))
                        .collect();
                    want.insert(key, stores);
                }
            }
        }
        let chosen = want.len();
        let err = |e: RunError| e.to_string();
        // Tasks no longer chosen, or whose stores a statement changed.
        let stale: Vec<(String, u32)> = self
            .tasks
            .iter()
            .filter(|(k, parts)| {
                want.get(*k).is_none_or(|w| w.iter().map(|(c, p, _, _)| (c.clone(), *p)).collect::<Vec<_>>() != **parts)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for (name, p) in stale {
            let dropped = self.drop_task(&name, p).map_err(err)?;
            self.needs_assign |= dropped;
        }
        for (task, stores) in want {
            if self.tasks.contains_key(&task) {
                continue;
            }
            let mut copies = Vec::new();
            for (changelog, p, task_id, store) in stores {
                let tree = open_tree(db, &store, p).map_err(err)?;
                let (low, high) =
                    self.kafka.watermarks_within(&changelog, p, Duration::from_secs(10)).map_err(|e| e.to_string())?;
                let (low, high) = (low.max(0) as u64, high.max(0) as u64);
                copies.push((changelog, p, task_id, store, tree, low, high));
            }
            // Every store of the task could be looked up: copy them all.
            let mut parts = Vec::new();
            for (changelog, p, task, store, tree, low, high) in copies {
                // From the local checkpoint when it is consistent with the changelog, else
                // from the changelog's start (a compacted one may start after offset 0).
                let next = restore_start(&tree, high, low).map_err(err)?.offset.max(low);
                parts.push((changelog.clone(), p));
                self.copies.insert(
                    (changelog, p),
                    Copy {
                        task,
                        store,
                        tree,
                        pending: Pending::default(),
                        next,
                        position: next,
                        end: high,
                        written: Instant::now(),
                    },
                );
            }
            self.tasks.insert(task, parts);
            self.needs_assign = true;
        }
        if self.needs_assign {
            self.assign();
        }
        Ok(chosen)
    }

    /// Read every copied changelog partition from where its copy is. (On failure the copies
    /// wait, and the next plan assigns again.)
    fn assign(&mut self) {
        let mut tpl = TopicPartitionList::new();
        for ((t, p), c) in &self.copies {
            if let Err(e) = tpl.add_partition_offset(t, *p as i32, Offset::Offset(c.next as i64)) {
                eprintln!("standby replicas: {e}");
            }
        }
        match self.reader.assign(&tpl) {
            Ok(()) => self.needs_assign = false,
            Err(e) => {
                // (Assigned again at the next plan.)
                eprintln!("standby replicas: cannot read their changelogs: {e}");
                self.needs_assign = true;
            }
        }
    }

    fn read_ends(&mut self) {
        for ((t, p), c) in self.copies.iter_mut() {
            if let Ok((_, high)) = self.kafka.watermarks_within(t, *p, Duration::from_secs(5)) {
                c.end = high.max(0) as u64;
            }
            // Past transaction markers the reader's position is ahead of the last record.
            if let Ok(pos) = self.reader.position() {
                if let Some(Offset::Offset(o)) = pos.find_partition(t, *p as i32).map(|e| e.offset()) {
                    c.position = o.max(0) as u64;
                }
            }
            if let Some(m) = &self.metrics {
                m.standby(&c.task, &c.store, Some((c.lag(), c.next)));
            }
        }
    }

    /// Apply the records the changelogs have now (at most [`PER_TURN`]), writing copies that
    /// are due.
    fn apply(&mut self) -> Result<bool, RunError> {
        let mut n = 0;
        while n < PER_TURN && !self.copies.is_empty() {
            match self.reader.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    n += 1;
                    let key = (m.topic().to_string(), m.partition().max(0) as u32);
                    if let Some(c) = self.copies.get_mut(&key) {
                        let offset = m.offset().max(0) as u64;
                        // (Only records after the copy's position: never one applied twice.)
                        if offset >= c.next {
                            if let Some(k) = m.key() {
                                c.pending.stage_slices(k, m.payload(), true);
                            }
                            c.next = offset + 1;
                            c.end = c.end.max(c.next);
                        }
                    }
                }
                Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::OffsetOutOfRange))) => {
                    // A changelog no longer holds a copy's position (deleted and created again,
                    // or truncated): every copy starts over from scratch at the next plan.
                    eprintln!(
                        "standby replicas: a changelog no longer holds a copy's position; copying again from the start"
                    );
                    self.reset()?;
                    return Ok(false);
                }
                Some(Err(e)) => eprintln!("standby replicas: {e}"),
                None => break,
            }
        }
        for c in self.copies.values_mut() {
            if c.pending.len() >= WRITE_PENDING || (!c.pending.is_empty() && c.written.elapsed() >= WRITE_EVERY) {
                c.write()?;
            }
        }
        Ok(n > 0)
    }

    /// Forget every copy, its local state cleared (no checkpoint: a later restore or copy
    /// starts from the changelog's start).
    fn reset(&mut self) -> Result<(), RunError> {
        for (_, c) in std::mem::take(&mut self.copies) {
            c.tree.clear().map_err(crate::runtime::error::state("cannot reset a standby replica"))?;
            if let Some(m) = &self.metrics {
                m.standby(&c.task, &c.store, None);
            }
        }
        self.tasks.clear();
        self.planned = None;
        self.assign();
        Ok(())
    }
}
