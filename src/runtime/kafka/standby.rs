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
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::control::Stage;
use crate::kafka::{client, Kafka};
use crate::log::Pos;
use crate::runtime::error::RunError;
use crate::runtime::kafka::peers::GroupPeers;
use crate::runtime::metrics::Metrics;
use crate::runtime::restore::restore_start;
use crate::runtime::state::{open_tree, Pending};

/// How often the choice of standbys is made again (and the changelogs' ends read for the lag).
const PLAN_EVERY: Duration = Duration::from_secs(3);
/// How often a copy's pending records are written to sled with their checkpoint.
const WRITE_EVERY: Duration = Duration::from_secs(1);
/// Pending keys that make a copy write at once.
const WRITE_PENDING: usize = 20_000;
/// Records applied per turn of the driver's loop at most (the active tasks come first).
const PER_TURN: usize = 20_000;

/// One store's partition kept warm.
struct Copy {
    /// The task (`<sub>_<partition>`) and store, for metrics and status.
    task: String,
    store: String,
    tree: sled::Tree,
    pending: Pending,
    /// The offset after the last record applied.
    next: u64,
    /// The changelog's end when last read.
    end: u64,
    written: Instant,
}

impl Copy {
    fn write(&mut self) -> Result<(), RunError> {
        self.pending
            .write(&self.tree, &Pos { offset: self.next, byte: 0 }, |_, _| {})
            .map_err(crate::runtime::error::state("cannot write a standby replica"))?;
        self.written = Instant::now();
        Ok(())
    }

    fn lag(&self) -> u64 {
        self.end.saturating_sub(self.next)
    }
}

pub(crate) struct Standbys {
    replicas: u32,
    /// This instance's client id in the group.
    me: String,
    peers: Arc<GroupPeers>,
    kafka: Kafka,
    reader: BaseConsumer,
    metrics: Option<Arc<Metrics>>,
    /// (changelog topic, partition) → its copy.
    copies: BTreeMap<(String, u32), Copy>,
    /// (sub-topology input node, partition) → the changelog partitions kept for it.
    tasks: BTreeMap<(String, u32), Vec<(String, u32)>>,
    planned: Option<Instant>,
}

impl Standbys {
    pub(crate) fn new(
        replicas: u32,
        me: &str,
        peers: Arc<GroupPeers>,
        kafka: Kafka,
        reader: BaseConsumer,
        metrics: Option<Arc<Metrics>>,
    ) -> Standbys {
        Standbys {
            replicas,
            me: me.to_string(),
            peers,
            kafka,
            reader,
            metrics,
            copies: BTreeMap::new(),
            tasks: BTreeMap::new(),
            planned: None,
        }
    }

    /// The tasks this instance keeps standbys of, with each store's lag: `(task id, store, lag)`.
    pub(crate) fn lags(&self) -> Vec<(String, String, u64)> {
        self.copies.values().map(|c| (c.task.clone(), c.store.clone(), c.lag())).collect()
    }

    /// One turn: choose again if due (`owned`: the main partitions this instance runs), then
    /// apply what the changelogs have. True if any record was applied.
    pub(crate) fn turn(
        &mut self,
        stage: &Stage,
        db: &sled::Db,
        owned: &BTreeSet<(String, u32)>,
    ) -> Result<bool, RunError> {
        if self.planned.is_none_or(|at| at.elapsed() >= PLAN_EVERY) {
            self.planned = Some(Instant::now());
            // While the group rebalances there is no plan: keep the copies as they are.
            if let Ok(group) = self.peers.group() {
                self.plan(stage, db, owned, &group)?;
            }
            self.read_ends();
        }
        self.apply()
    }

    /// Stop keeping the standby of task (`name`, `p`), its copies written with their checkpoints
    /// first: the task is about to open here.
    pub(crate) fn release(&mut self, name: &str, p: u32) -> Result<(), RunError> {
        if let Some(parts) = self.tasks.remove(&(name.to_string(), p)) {
            for k in parts {
                if let Some(mut c) = self.copies.remove(&k) {
                    c.write()?;
                    if let Some(m) = &self.metrics {
                        m.standby(&c.task, &c.store, None);
                    }
                }
            }
            self.assign()?;
        }
        Ok(())
    }

    /// Choose the tasks to keep a standby of, open new copies from their local checkpoints,
    /// drop those no longer chosen.
    fn plan(
        &mut self,
        stage: &Stage,
        db: &sled::Db,
        owned: &BTreeSet<(String, u32)>,
        group: &BTreeMap<String, Vec<(String, u32)>>,
    ) -> Result<(), RunError> {
        let owner: BTreeMap<&(String, u32), &str> =
            group.iter().flat_map(|(c, parts)| parts.iter().map(move |p| (p, c.as_str()))).collect();
        // Per task chosen: (changelog, partition, task id, store) of each of its stores.
        type Stores = Vec<(String, u32, String, String)>;
        let mut want: BTreeMap<(String, u32), Stores> = BTreeMap::new();
        for spec in stage.specs.iter().filter(|s| !s.stores.is_empty()) {
            let n = self.kafka.partitions(&spec.main.topic).ok().flatten().unwrap_or(0);
            for p in 0..n {
                let main = (spec.main.topic.clone(), p);
                if owned.contains(&main) {
                    continue;
                }
                let Some(o) = owner.get(&main) else { continue };
                let mut ranked: Vec<(u64, &str)> = group
                    .keys()
                    .filter(|c| c.as_str() != *o)
                    .map(|c| (crate::runtime::chaos::fnv(format!("{c}/{}/{p}", spec.name).as_bytes()), c.as_str()))
                    .collect();
                ranked.sort();
                if ranked.iter().take(self.replicas as usize).any(|(_, c)| *c == self.me) {
                    let stores = spec
                        .stores
                        .iter()
                        .map(|s| (s.changelog.clone(), p, format!("{}_{p}", spec.sub), s.name.clone()))
                        .collect();
                    want.insert((spec.name.clone(), p), stores);
                }
            }
        }
        let gone: Vec<(String, u32)> = self.tasks.keys().filter(|k| !want.contains_key(*k)).cloned().collect();
        let mut changed = false;
        for (name, p) in gone {
            self.release(&name, p)?;
        }
        for (task, stores) in want {
            if self.tasks.contains_key(&task) {
                continue;
            }
            let mut parts = Vec::new();
            for (changelog, p, task_id, store) in stores {
                let tree = open_tree(db, &store, p)?;
                let (low, high) = self
                    .reader
                    .fetch_watermarks(&changelog, p as i32, Duration::from_secs(10))
                    .map_err(client(format!("cannot read the offsets of `{changelog}` partition {p}")))?;
                let (low, high) = (low.max(0) as u64, high.max(0) as u64);
                // From the local checkpoint when it is consistent with the changelog, else
                // from the changelog's start (a compacted one may start after offset 0).
                let next = restore_start(&tree, high, low)?.offset.max(low);
                parts.push((changelog.clone(), p));
                self.copies.insert(
                    (changelog, p),
                    Copy {
                        task: task_id,
                        store,
                        tree,
                        pending: Pending::default(),
                        next,
                        end: high,
                        written: Instant::now(),
                    },
                );
            }
            self.tasks.insert(task, parts);
            changed = true;
        }
        if changed {
            self.assign()?;
        }
        Ok(())
    }

    /// Read every copied changelog partition from where its copy is.
    fn assign(&mut self) -> Result<(), RunError> {
        let mut tpl = TopicPartitionList::new();
        for ((t, p), c) in &self.copies {
            tpl.add_partition_offset(t, *p as i32, Offset::Offset(c.next as i64))
                .map_err(crate::kafka::BrokerError::from)?;
        }
        self.reader.assign(&tpl).map_err(client("cannot read the changelogs of standby replicas"))?;
        Ok(())
    }

    fn read_ends(&mut self) {
        for ((t, p), c) in self.copies.iter_mut() {
            if let Ok((_, high)) = self.reader.fetch_watermarks(t, *p as i32, Duration::from_secs(5)) {
                c.end = high.max(0) as u64;
            }
            // Past transaction markers the consumer's position is ahead of the last record.
            if let Ok(pos) = self.reader.position() {
                if let Some(Offset::Offset(o)) = pos.find_partition(t, *p as i32).map(|e| e.offset()) {
                    c.next = c.next.max(o.max(0) as u64);
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
                        if let Some(k) = m.key() {
                            c.pending.stage(k.to_vec(), m.payload().map(<[u8]>::to_vec), true);
                        }
                        c.next = m.offset().max(0) as u64 + 1;
                        c.end = c.end.max(c.next);
                    }
                }
                Some(Err(e)) => eprintln!("standby replicas: {e}"),
                None => break,
            }
        }
        for c in self.copies.values_mut() {
            if c.pending.len() >= WRITE_PENDING || (c.pending.len() > 0 && c.written.elapsed() >= WRITE_EVERY) {
                c.write()?;
            }
        }
        Ok(n > 0)
    }
}
