//! The embedded driver: runs every task of a topology over the embedded log, with state in one
//! sled database per application. Each task commits every `commit.records` records and when it
//! has caught up with its input. A commit is one atomic log commit — outputs, changelog records
//! and the task's input positions and stream time — followed by one sled batch per store that
//! carries the state and its checkpoint together. So after a crash anywhere, the local state is
//! at some checkpoint, the changelog tail after it is replayed, and input resumes where the
//! committed outputs end: exactly once.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use crate::config::{Config, OnError};
use crate::control::{self, ControlRecord, Stage};
use crate::hir;
use crate::log::{partition_for, Append, Committed, EmbeddedLog, PartitionReader, Pos, Record, Stored};
use crate::plan::physical::{Decode, TaskSpec};
use crate::plan::Topology;
use crate::runtime::chaos::{Chaos, FailPoint};
use crate::runtime::hub::Hub;
use crate::runtime::metrics::{RestoreMetrics, TaskCounts, TaskMetrics};
use crate::runtime::options::RunOptions;
use crate::runtime::task::{
    self, Change, Input, Output, RecordError, StoreRead, Task, H_ERROR, H_OFFSET, H_PARTITION, H_TOPIC,
};
use crate::runtime::topics::{self, TopicKind};
use crate::types::RecordType;
use crate::value::{decode_record, Value};

const CHECKPOINT: &[u8] = b"\xff\xff\xff\xffcheckpoint";

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
    }
}

/// Run the program on the embedded log until its input is drained (`--drain`) or forever.
pub fn run(program: &hir::Program, _topo: &Topology, opts: &RunOptions) -> Result<Summary, String> {
    let log = EmbeddedLog::open(&opts.state_dir, opts.config.embedded.fsync)?;
    for (topic, path) in &opts.inputs {
        ingest(&log, program, &opts.app, topic, path, &opts.config, opts.progress)?;
    }
    // The control log first: tasks start with the program as of its end.
    let mut hub = Hub::new(program, opts)?;
    let control = EmbeddedControl::open(&log, &opts.app)?;
    hub.written = control.written;
    let control = Mutex::new(control);
    poll_control(&log, &control, &mut hub)?;
    hub.verbose = true;
    let stage = hub.ev.latest().clone();
    let counts = setup_topics(&log, &stage.program, &stage.topo, &stage.specs, &opts.config)?;
    let db_path = opts.state_dir.join("apps").join(&opts.app).join("state");
    let db = open_local_state(&db_path, &opts.app)?;
    sweep_removed(&log, &db, &stage, &opts.app)?;
    let committed = log.committed()?;
    // The end of every external input as of start-up: `--drain` stops there.
    let startup = committed.clone();
    let mut tasks = Vec::new();
    for spec in stage.specs.iter() {
        for p in 0..counts[spec.sub] {
            tasks.push(TaskRun::open_at(spec.clone(), p, &stage, &log, &db, &committed, opts)?);
        }
    }
    // With `--drain`, a bar of the records of the external inputs up to their start-up ends.
    let bar = if opts.drain && opts.progress {
        let total = tasks.iter().map(|t| t.backlog(&startup)).sum();
        progress_bar(total, RECORDS, "processing".into())
    } else {
        ProgressBar::hidden()
    };
    for t in &mut tasks {
        t.bar = bar.clone();
    }
    let threads = opts.threads.max(1).min(tasks.len().max(1));
    let live: BTreeMap<(String, u32), u64> =
        tasks.iter().map(|t| ((t.task.spec.name.clone(), t.task.partition), t.control)).collect();
    let mut groups: Vec<Vec<TaskRun>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, t) in tasks.into_iter().enumerate() {
        groups[i % threads].push(t);
    }
    let shared = Shared {
        log,
        db,
        startup,
        hub: Mutex::new(hub),
        control,
        live: Mutex::new(live),
        barrier: Barrier::new(threads),
        any: AtomicBool::new(false),
        bar: bar.clone(),
    };
    let results: Vec<Result<Summary, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, mut ts)| {
                let shared = &shared;
                s.spawn(move || worker(i == 0, &mut ts, shared, opts))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a worker thread panicked".into()))).collect()
    });
    bar.finish_and_clear();
    let mut total = Summary::default();
    for r in results {
        total.add_from(&r?);
    }
    shared.db.flush().map_err(|e| format!("cannot flush local state: {e}"))?;
    Ok(total)
}

/// What the worker threads of an embedded run share.
struct Shared {
    log: EmbeddedLog,
    db: sled::Db,
    startup: Committed,
    hub: Mutex<Hub>,
    control: Mutex<EmbeddedControl>,
    /// Every task of the run, by (sub-topology input node, partition), with the control offset
    /// it applied.
    live: Mutex<BTreeMap<(String, u32), u64>>,
    barrier: Barrier,
    any: AtomicBool,
    bar: ProgressBar,
}

/// Where the embedded run is in the control topic, and how far the status topic is written.
struct EmbeddedControl {
    reader: PartitionReader,
    end: Pos,
    written: u64,
    topic: String,
    status: String,
    group: String,
}

impl EmbeddedControl {
    fn open(log: &EmbeddedLog, app: &str) -> Result<EmbeddedControl, String> {
        let topic = control::control_topic(app);
        let status = control::status_topic(app);
        log.ensure_topic(&topic, 1)?;
        log.ensure_topic(&status, 1)?;
        let group = format!("{app}#control-status");
        let written =
            log.committed()?.groups.get(&group).and_then(|m| m.get("next")).and_then(|v| v.as_u64()).unwrap_or(0);
        Ok(EmbeddedControl {
            reader: log.reader(&topic, 0, Pos::default()),
            end: Pos::default(),
            written,
            topic,
            status,
            group,
        })
    }
}

/// Read the control records appended since the last poll into the hub, and write their
/// statuses. True if the program or a table changed.
fn poll_control(log: &EmbeddedLog, control: &Mutex<EmbeddedControl>, hub: &mut Hub) -> Result<bool, String> {
    let mut c = control.lock().map_err(|_| "control lock poisoned")?;
    let end = log.committed()?.end(&c.topic, 0);
    if end.offset <= c.end.offset {
        return Ok(false);
    }
    let mut records = Vec::new();
    loop {
        let batch = c.reader.read(end, 1024)?;
        if batch.is_empty() {
            break;
        }
        records.extend(batch.into_iter().map(|s| ControlRecord {
            offset: s.offset,
            timestamp: s.record.timestamp,
            headers: s.record.headers,
            value: s.record.value,
        }));
    }
    c.end = end;
    let changed = hub.feed(&records);
    let statuses = hub.status_records();
    if !statuses.is_empty() {
        let next = hub.ev.next;
        log.commit(
            vec![Append { topic: c.status.clone(), partition: 0, records: statuses }],
            vec![(c.group.clone(), serde_json::json!({ "next": next }))],
        )?;
        hub.written_up_to();
        c.written = next;
    }
    Ok(changed)
}

fn worker(leader: bool, tasks: &mut Vec<TaskRun>, sh: &Shared, opts: &RunOptions) -> Result<Summary, String> {
    let commit_every = opts.config.commit.records.max(1);
    let mut retired = Summary::default();
    let result = (|| -> Result<(), String> {
        let mut counts_for: Option<(u64, Vec<u32>)> = None;
        loop {
            let mut progress = false;
            let (stage, seen) = {
                let mut hub = sh.hub.lock().map_err(|_| "control lock poisoned")?;
                if leader && poll_control(&sh.log, &sh.control, &mut hub)? {
                    progress = true;
                }
                (hub.ev.latest().clone(), hub.ev.next)
            };
            let committed = sh.log.committed()?;
            let mut gone = Vec::new();
            for (i, t) in tasks.iter_mut().enumerate() {
                t.control_seen = (seen, stage.next);
                if t.step_embedded(&committed, &sh.startup, opts, commit_every)? > 0 {
                    progress = true;
                }
                // A step stops at `commit.records` uncommitted records or at the end of the
                // available input: either way, a commit point.
                if (t.uncommitted > 0 || t.meta_changed) && !t.failed {
                    t.commit(&sh.log, opts, false, false)?;
                    progress = true;
                }
                if t.failed {
                    t.reopen(&sh.log, &sh.db, &stage, opts)?;
                    progress = true;
                }
                // Control statements apply at commit boundaries.
                if !t.failed && t.uncommitted == 0 && t.control < stage.next {
                    progress = true;
                    if !t.apply_stage(&stage, &sh.log, &sh.db, opts)? {
                        t.commit(&sh.log, opts, false, false)?;
                        // Forgotten once its state's deletion is committed (a failed commit
                        // reopens it as committed, and it is retired again).
                        if !t.failed {
                            gone.push(i);
                        }
                    }
                }
            }
            {
                let mut live = sh.live.lock().map_err(|_| "lock poisoned")?;
                for i in gone.into_iter().rev() {
                    let t = tasks.remove(i);
                    retired.add_from(&t.summary());
                    live.remove(&(t.task.spec.name.clone(), t.task.partition));
                }
                for t in tasks.iter() {
                    live.insert((t.task.spec.name.clone(), t.task.partition), t.control);
                }
            }
            // The leader opens the tasks of new queries (or of new sub-topologies), once every
            // task has applied the stage: none still runs a form that uses their stores.
            let mut live = sh.live.lock().map_err(|_| "lock poisoned")?;
            if leader && live.values().all(|c| *c >= stage.next) {
                // (`live` is held while they open, and released before the barrier below.)
                let counts = match &counts_for {
                    Some((next, c)) if *next == stage.next => c.clone(),
                    _ => {
                        let c = setup_topics(&sh.log, &stage.program, &stage.topo, &stage.specs, &opts.config)?;
                        counts_for = Some((stage.next, c.clone()));
                        c
                    }
                };
                for spec in stage.specs.iter() {
                    for p in 0..counts[spec.sub] {
                        if let std::collections::btree_map::Entry::Vacant(slot) = live.entry((spec.name.clone(), p)) {
                            let mut t =
                                TaskRun::open_at(spec.clone(), p, &stage, &sh.log, &sh.db, &sh.log.committed()?, opts)?;
                            t.bar = sh.bar.clone();
                            slot.insert(t.control);
                            tasks.push(t);
                            progress = true;
                        }
                    }
                }
            }
            drop(live);
            if opts.drain {
                sh.any.fetch_or(progress, Ordering::SeqCst);
                sh.barrier.wait();
                let done = !sh.any.load(Ordering::SeqCst);
                sh.barrier.wait();
                if leader {
                    sh.any.store(false, Ordering::SeqCst);
                }
                sh.barrier.wait();
                if done {
                    return Ok(());
                }
            } else if !progress {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    })();
    result?;
    let mut s = retired;
    for t in tasks.iter_mut() {
        t.commit(&sh.log, opts, opts.close_windows_at_end, true)?;
        s.add_from(&t.summary());
    }
    Ok(s)
}

/// Create or check every topic the program needs; returns each sub-topology's task count.
fn setup_topics(
    log: &EmbeddedLog,
    program: &hir::Program,
    topo: &Topology,
    specs: &[Arc<TaskSpec>],
    cfg: &Config,
) -> Result<Vec<u32>, String> {
    let plan = topics::plan(
        program,
        topo,
        specs,
        &mut |t| Ok(log.topic(t)?.map(|m| m.partitions)),
        Some(cfg.embedded.partitions.max(1)),
    )
    .map_err(|e| e.to_string())?;
    topics::apply(&plan, &mut |t| {
        Ok(match log.topic(&t.name)? {
            Some(m) => m.partitions,
            None => log.create_topic(&t.name, t.partitions, t.kind == TopicKind::Changelog)?.partitions,
        })
    })
    .map_err(|e| e.to_string())?;
    Ok(plan.counts)
}

/// Append the lines of `path` not yet ingested to `topic`, recording (offset, SHA-256 of the
/// consumed prefix) with each batch, so a re-run appends only new lines and a changed prefix is
/// an error.
fn ingest(
    log: &EmbeddedLog,
    program: &hir::Program,
    app: &str,
    topic: &str,
    path: &Path,
    cfg: &Config,
    progress: bool,
) -> Result<(), String> {
    let meta = log.ensure_topic(topic, cfg.embedded.partitions.max(1))?;
    let source = program.sources.iter().find(|s| s.topic.as_deref() == Some(topic)).cloned();
    let group = format!("{app}#input#{topic}#{}", path.display());
    let prev = log.committed()?.groups.get(&group).cloned();
    let (mut consumed, prev_hash) = match &prev {
        Some(v) => (v["offset"].as_u64().unwrap_or(0), v["sha256"].as_str().unwrap_or("").to_string()),
        None => (0, String::new()),
    };
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bar = if progress {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        progress_bar(len, BYTES, format!("ingesting {}", path.display()))
    } else {
        ProgressBar::hidden()
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut hasher = Sha256::new();
    if consumed > 0 {
        let mut prefix = (&mut reader).take(consumed);
        let n = std::io::copy(&mut prefix, &mut HashWriter(&mut hasher))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n != consumed || hex(&hasher.clone().finalize()) != prev_hash {
            return Err(format!(
                "{}: the first {consumed} bytes changed since they were consumed; restore the file or run with a fresh state directory",
                path.display()
            ));
        }
    }
    bar.set_position(consumed);
    let mut round_robin = 0u32;
    let mut batch: Vec<Vec<Record>> = vec![Vec::new(); meta.partitions as usize];
    let mut pending = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n == 0 || line.last() != Some(&b'\n') {
            // An unterminated last line may still be being written: leave it for the next run.
            break;
        }
        hasher.update(&line);
        consumed += n as u64;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let rec = value_record(source.as_ref(), text, now_ms());
        let p = match &rec.key {
            Some(k) => partition_for(k, meta.partitions),
            None => {
                round_robin = (round_robin + 1) % meta.partitions;
                round_robin
            }
        };
        batch[p as usize].push(rec);
        pending += 1;
        if pending.is_multiple_of(8192) {
            bar.set_position(consumed);
        }
        if pending >= 50_000 {
            commit_ingest(log, topic, &mut batch, &group, consumed, &hasher)?;
            pending = 0;
        }
    }
    let r = commit_ingest(log, topic, &mut batch, &group, consumed, &hasher);
    bar.finish_and_clear();
    r
}

const BYTES: &str = "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}";
const RECORDS: &str = "{msg} [{bar:40}] {human_pos}/{human_len} records {rate} eta {eta}";

/// A progress bar on stderr; callers make one only when stderr is a terminal
/// (`RunOptions::progress`) and use [`ProgressBar::hidden`], which draws nothing, otherwise.
fn progress_bar(len: u64, template: &str, msg: String) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("rate", |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", s.per_sec());
        })
        .progress_chars("=> ");
    ProgressBar::new(len).with_style(style).with_message(msg)
}

fn commit_ingest(
    log: &EmbeddedLog,
    topic: &str,
    batch: &mut [Vec<Record>],
    group: &str,
    consumed: u64,
    hasher: &Sha256,
) -> Result<(), String> {
    let appends = batch
        .iter_mut()
        .enumerate()
        .map(|(p, recs)| Append { topic: topic.to_string(), partition: p as u32, records: std::mem::take(recs) })
        .collect();
    let meta = serde_json::json!({"offset": consumed, "sha256": hex(&hasher.clone().finalize())});
    log.commit(appends, vec![(group.to_string(), meta)]).map(|_| ()).map_err(String::from)
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A record for one JSON value line: the key from the stream's `key FIELD`, the timestamp from
/// its `time` field, else `append_time`. A line that does not decode is still appended (the
/// task sends it to the dead-letter topic with the reason).
pub fn value_record(source: Option<&hir::Source>, line: &[u8], append_time: i64) -> Record {
    let mut rec = Record { key: None, value: Some(line.to_vec()), timestamp: append_time, headers: vec![] };
    let Some(src) = source else { return rec };
    if src.format != crate::ast::Format::Json {
        return rec;
    }
    if let Ok(fields) = crate::value::decode_record(line, &src.wire) {
        if let hir::KeySpec::Field(i) = src.key {
            let name = &src.value.fields[i].0;
            if let Some(wi) = src.wire.index_of(name) {
                rec.key = Some(fields[wi].key_bytes(&src.value.fields[i].1));
            }
        }
        if let Some(ti) = src.time {
            let name = &src.value.fields[ti].0;
            if let Some(Value::Ts(t)) = src.wire.index_of(name).map(|wi| &fields[wi]) {
                rec.timestamp = *t;
            }
        }
    }
    rec
}

/// Where a task's records come from: input 0 is the main input, then the side inputs in
/// [`TaskSpec::side_topics`] order.
pub(crate) trait Feed {
    /// What is next on input `i`, without taking it.
    fn peek(&mut self, i: usize) -> Result<Next, String>;
    /// Take the record [`Feed::peek`] saw.
    fn take(&mut self, i: usize) -> Option<Stored>;
    /// The record [`Feed::peek`] saw, if it saw one.
    fn peeked(&self, i: usize) -> Option<&Stored>;
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

/// The embedded log's feed: one reader per input, each read up to an end set before a step.
pub(crate) struct EmbeddedFeed {
    readers: Vec<PartitionReader>,
    peeks: Vec<Option<Stored>>,
    ends: Vec<Pos>,
}

impl Feed for EmbeddedFeed {
    fn peek(&mut self, i: usize) -> Result<Next, String> {
        if self.peeks[i].is_none() {
            self.peeks[i] = self.readers[i].read(self.ends[i], 1)?.pop();
        }
        Ok(self.peeks[i].as_ref().map_or(Next::End, |s| Next::Record(s.record.timestamp)))
    }
    fn take(&mut self, i: usize) -> Option<Stored> {
        self.peeks[i].take()
    }
    fn peeked(&self, i: usize) -> Option<&Stored> {
        self.peeks[i].as_ref()
    }
}

/// One task with its feed, stores and uncommitted work.
pub(crate) struct TaskRun<F: Feed = EmbeddedFeed> {
    pub(crate) task: Task,
    pub(crate) group: String,
    pub(crate) feed: F,
    pub(crate) trees: Trees,
    pub(crate) out: Vec<Output>,
    pub(crate) changes: Vec<Change>,
    pub(crate) uncommitted: u64,
    /// `topic/partition` → the position after the last record processed.
    pub(crate) positions: BTreeMap<String, Pos>,
    pub(crate) skipped: u64,
    pub(crate) restored: u64,
    pub(crate) commits: u64,
    /// Records read from every input (bad ones included), for metrics.
    pub(crate) read: u64,
    pub(crate) metrics: Option<TaskMetrics>,
    /// The `--drain` progress bar, shared by every task (hidden unless shown).
    pub(crate) bar: ProgressBar,
    pub(crate) chaos: Option<Chaos>,
    /// A fault was injected: the task must be reopened from its committed state.
    pub(crate) failed: bool,
    /// The counts as of the last commit (what a reopened task starts from).
    pub(crate) at_commit: (task::Counters, u64, u64),
    /// The control offset applied: every control record before it is reflected in the task.
    pub(crate) control: u64,
    /// The commit record must be written even with nothing else to commit (a control
    /// statement was applied).
    pub(crate) meta_changed: bool,
    /// The control records the process has read (`Evaluator::next`) and the latest stage's
    /// offset, set by the driver before each step: a repartition record from a newer version
    /// makes the task wait only while that version is still to be read or applied.
    pub(crate) control_seen: (u64, u64),
    /// Per input: the event time of the record at its head (by offset), so that a head that
    /// waits while other inputs go first is decoded for its time once.
    pub(crate) head_times: Vec<Option<(u64, i64)>>,
    /// The commit in progress carries something of the task (set by `flush_for_commit`).
    pub(crate) work: bool,
}

/// The committed local state of one task: a sled tree per store, and the committed changes not
/// yet written to it. Local state is written every few commits, not at each: a window created
/// and expired in between costs no sled write at all, and the changelog tail after the
/// checkpoint covers the rest after a crash.
pub(crate) struct Trees {
    pub(crate) trees: Vec<sled::Tree>,
    /// Per store: key → (value or deletion, whether the key may be in sled).
    pub(crate) pending: Vec<Pending>,
    /// Commits since local state was last written.
    pub(crate) commits: u32,
    /// Keys per tenant over every store, in a tenant-scoped task (None otherwise): counted once
    /// when the task opens, then kept up to date as changes are staged.
    pub(crate) tenant_keys: Option<BTreeMap<Vec<u8>, i64>>,
}

/// Changes to one store that are not in sled yet, coalesced by key: key → (value or deletion,
/// whether the key may already be in sled). Used by commits and by restore alike.
#[derive(Default)]
pub(crate) struct Pending(FxHashMap<Vec<u8>, (Option<Vec<u8>>, bool)>);

impl Pending {
    /// Record a change. A key created and deleted while pending never reaches sled.
    pub(crate) fn stage(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, may_exist: bool) {
        match self.0.get_mut(&key) {
            Some(slot) if value.is_none() && !slot.1 => {
                self.0.remove(&key);
            }
            Some(slot) => slot.0 = value,
            None if value.is_some() || may_exist => {
                self.0.insert(key, (value, may_exist));
            }
            None => {}
        }
    }

    fn get(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.0.get(key).map(|(v, _)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Write the changes and the checkpoint to the tree in one atomic batch, sorted by key (so
    /// the batch does not depend on hash order), then read the keys back (see [`consolidate`]).
    /// `written` sees each key and whether it was put (true) or deleted.
    pub(crate) fn write(
        &mut self,
        tree: &sled::Tree,
        checkpoint: &Pos,
        mut written: impl FnMut(&[u8], bool),
    ) -> Result<(), sled::Error> {
        let mut entries: Vec<_> = self.0.drain().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let keys: Vec<Vec<u8>> = entries.iter().map(|e| e.0.clone()).collect();
        let mut batch = sled::Batch::default();
        for (k, (v, _)) in entries {
            written(&k, v.is_some());
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        batch.insert(CHECKPOINT, serde_json::to_vec(checkpoint).unwrap_or_default());
        tree.apply_batch(batch)?;
        consolidate(tree, &keys);
        Ok(())
    }
}

/// Local state is written at least every this many commits…
const LOCAL_WRITE_COMMITS: u32 = 8;
/// …or once this many changes are pending.
const LOCAL_WRITE_PENDING: usize = 20_000;

impl Trees {
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
        }
    }

    /// Count every tenant's keys (a tenant-scoped task), or stop counting.
    pub(crate) fn count_tenants(&mut self, task: &Task) {
        if !task.spec.tenant {
            self.tenant_keys = None;
            return;
        }
        let mut m: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for (i, (tree, pending)) in self.trees.iter().zip(&self.pending).enumerate() {
            live_store_keys(tree, pending, |k| {
                if let Some(t) = task.key_tenant(i, k) {
                    *m.entry(t.to_vec()).or_default() += 1;
                }
            });
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
    ) -> Result<u64, String> {
        let mut n = 0;
        for (i, (tree, pending)) in self.trees.iter().zip(self.pending.iter_mut()).enumerate() {
            let mut keys = Vec::new();
            live_store_keys(tree, pending, |k| {
                if task.key_tenant(i, k).is_some_and(|t| tenants.contains(&t)) {
                    keys.push(k.to_vec());
                }
            });
            for k in &keys {
                pending.stage(k.clone(), None, true);
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

    /// Write the pending changes with each store's checkpoint, one atomic batch per store.
    pub(crate) fn write(&mut self, checkpoints: &[Pos]) -> Result<(), String> {
        for ((tree, pending), cp) in self.trees.iter().zip(self.pending.iter_mut()).zip(checkpoints) {
            pending.write(tree, cp, |_, _| {}).map_err(|e| format!("cannot write local state: {e}"))?;
        }
        self.commits = 0;
        Ok(())
    }

    pub(crate) fn due(&self) -> bool {
        self.commits >= LOCAL_WRITE_COMMITS
            || self.pending.iter().map(|p| p.len()).sum::<usize>() >= LOCAL_WRITE_PENDING
    }
}

impl StoreRead for Trees {
    fn get(&self, store: usize, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(v) = self.pending.get(store)?.get(key) {
            return v.clone();
        }
        self.trees.get(store)?.get(key).ok().flatten().map(|v| v.to_vec())
    }
    fn entries(&self, store: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        // Called when a task starts: after a restore (nothing pending) or after a control
        // statement replaced its query (committed changes may be pending).
        let Some(t) = self.trees.get(store) else { return Vec::new() };
        let mut all: BTreeMap<Vec<u8>, Vec<u8>> = t
            .iter()
            .filter_map(|r| r.ok())
            .filter(|(k, _)| &k[..] != CHECKPOINT)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        if let Some(p) = self.pending.get(store) {
            for (k, (v, _)) in &p.0 {
                match v {
                    Some(v) => all.insert(k.clone(), v.clone()),
                    None => all.remove(k),
                };
            }
        }
        all.into_iter().collect()
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
pub(crate) fn check_tenant_layout(spec: &TaskSpec, meta: &serde_json::Value) -> Result<(), String> {
    let committed = meta.get("inputs").and_then(|i| i.as_object()).is_some_and(|o| !o.is_empty());
    if spec.tenant
        && !spec.stores.is_empty()
        && committed
        && meta.get("tenant_scoped").and_then(|v| v.as_bool()) != Some(true)
    {
        return Err(format!("{}: its state was written without tenant scoping (by an older streamc): start the application over with `streamc run --reset`", spec.name));
    }
    Ok(())
}

/// Open the sled tree of one store's shard.
pub(crate) fn open_tree(db: &sled::Db, store: &str, p: u32) -> Result<sled::Tree, String> {
    db.open_tree(format!("{store}#{p}")).map_err(|e| format!("cannot open store {store}: {e}"))
}

pub(crate) fn log_restore(name: &str, p: u32, restored: u64, started: Instant) {
    if restored > 0 {
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "restored {restored} records into {name} partition {p} in {secs:.2}s ({:.0} records/s)",
            restored as f64 / secs.max(1e-9)
        );
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
        trees: Vec<sled::Tree>,
        meta: &serde_json::Value,
        positions: BTreeMap<String, Pos>,
        restored: u64,
        opts: &RunOptions,
    ) -> TaskRun<F> {
        let task_id = format!("{}_{p}", spec.sub);
        let metrics =
            opts.metrics.as_ref().map(|m| m.task(&task_id, &spec.nodes, spec.agg.as_ref().map(|a| a.node.as_str())));
        let mut trees =
            Trees { pending: trees.iter().map(|_| Pending::default()).collect(), trees, commits: 0, tenant_keys: None };
        let chaos = opts.chaos.map(|c| Chaos::new(c, &group));
        let mut task = Task::new(spec, p, meta.get("stream_time").and_then(|v| v.as_i64()).unwrap_or(i64::MIN));
        task.join_time = meta.get("join_time").and_then(|v| v.as_i64()).unwrap_or(i64::MIN);
        task.join_seq = meta.get("join_seq").and_then(|v| v.as_u64()).unwrap_or(0);
        task.restore_index(&trees);
        trees.count_tenants(&task);
        TaskRun {
            task,
            group,
            feed,
            trees,
            out: Vec::new(),
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
            "join_time": self.task.join_time,
            "join_seq": self.task.join_seq,
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

impl TaskRun {
    fn open(
        spec: Arc<TaskSpec>,
        p: u32,
        log: &EmbeddedLog,
        db: &sled::Db,
        c: &Committed,
        opts: &RunOptions,
    ) -> Result<TaskRun, String> {
        let group = group_name(opts, &spec.name, p);
        let meta = c.groups.get(&group).cloned().unwrap_or(serde_json::Value::Null);
        check_tenant_layout(&spec, &meta)?;
        let positions = positions_of(&spec, p, &meta);
        let feed = embedded_feed(&spec, p, log, &positions);
        let mut trees = Vec::new();
        let mut restored = 0;
        let started = Instant::now();
        let task_id = format!("{}_{p}", spec.sub);
        for st in &spec.stores {
            let tree = open_tree(db, &st.name, p)?;
            let watch = RestoreWatch::new(opts, &task_id, &st.name, p);
            restored += restore(&tree, log, &st.changelog, p, c, &watch)?;
            trees.push(tree);
        }
        log_restore(&spec.name, p, restored, started);
        Ok(TaskRun::new(spec, p, group, feed, trees, &meta, positions, restored, opts))
    }

    /// Open a task of `stage` and bring it up to the stage: a task whose last commit ran an
    /// older form of its query first applies what the control statements since then say about
    /// its state.
    #[allow(clippy::too_many_arguments)]
    fn open_at(
        spec: Arc<TaskSpec>,
        p: u32,
        stage: &Stage,
        log: &EmbeddedLog,
        db: &sled::Db,
        c: &Committed,
        opts: &RunOptions,
    ) -> Result<TaskRun, String> {
        let meta_version =
            c.groups.get(&group_name(opts, &spec.name, p)).and_then(|m| m.get("version")).and_then(|v| v.as_u64());
        let mut t = TaskRun::open(spec.clone(), p, log, db, c, opts)?;
        t.task.globals = stage.tables.clone();
        t.purge_since(stage)?;
        // A task with no commit record of a query defined or reprocessed by a statement starts
        // empty, whatever a store of the same name held before (a dropped query's name reused).
        let fresh_task = meta_version.is_none() && stage.queries.get(&spec.query).is_some_and(|q| q.epoch > 0);
        let catch_up = if fresh_task {
            Some((true, Vec::new()))
        } else {
            meta_version.filter(|v| *v != spec.version).and_then(|v| stage.catch_up(&spec.query, v))
        };
        if let Some((restart, fresh)) = catch_up {
            if t.upgrade(spec, stage, restart, &fresh, &|name| open_tree(db, name, p), opts)? {
                t.set_feed(embedded_feed(&t.task.spec, p, log, &t.positions));
            }
        }
        if t.control != stage.next {
            t.control = stage.next;
            t.meta_changed = true;
        }
        Ok(t)
    }

    /// Bring a running task (at a commit boundary) up to `stage`. False if its query was
    /// dropped: the task has queued the deletion of its state and must be committed, then
    /// forgotten.
    fn apply_stage(
        &mut self,
        stage: &Stage,
        log: &EmbeddedLog,
        db: &sled::Db,
        opts: &RunOptions,
    ) -> Result<bool, String> {
        let p = self.task.partition;
        let Some(spec) = stage.spec(&self.task.spec.name).cloned() else {
            self.retire()?;
            self.control = stage.next;
            return Ok(false);
        };
        self.purge_since(stage)?;
        let cur = &self.task.spec;
        if spec.version == cur.version && spec.epoch == cur.epoch {
            // Only the control-managed tables changed (or a tenant was purged).
            self.task.globals = stage.tables.clone();
            self.control = stage.next;
            self.meta_changed = true;
            return Ok(true);
        }
        let (restart, fresh) = stage.catch_up(&spec.query, cur.version).unwrap_or_default();
        let gone = stage.gone_since(&self.task.spec.name, cur.version);
        if self.upgrade(spec, stage, restart, &fresh, &|name| open_tree(db, name, p), opts)? {
            let feed = embedded_feed(&self.task.spec, p, log, &self.positions);
            self.set_feed(feed);
        }
        for (store, changelog) in gone {
            sweep(log, db, &store, &changelog, p)?;
        }
        Ok(true)
    }

    /// After an injected fault: drop everything uncommitted and reopen the task from the
    /// committed log and its local state, as a restarted process would.
    /// A task that had applied a control statement since its last commit goes back to the
    /// form of its query as of that commit, and applies the statement again.
    fn reopen(&mut self, log: &EmbeddedLog, db: &sled::Db, stage: &Stage, opts: &RunOptions) -> Result<(), String> {
        let c = log.committed()?;
        let fresh = match stage.spec(&self.task.spec.name).cloned() {
            Some(spec) => TaskRun::open_at(spec, self.task.partition, stage, log, db, &c, opts)?,
            // Its query is being dropped: as committed, so that the worker retires it again.
            None => {
                let mut t = TaskRun::open(self.task.spec.clone(), self.task.partition, log, db, &c, opts)?;
                t.control = 0;
                t
            }
        };
        self.replace_with(fresh);
        Ok(())
    }

    /// Records of the external inputs between the task's positions and their start-up ends.
    fn backlog(&self, startup: &Committed) -> u64 {
        let p = self.task.partition;
        let spec = &self.task.spec;
        let mut topics: Vec<String> = spec.side_topics();
        if !matches!(spec.main.decode, Decode::Internal { .. }) {
            topics.push(spec.main.topic.clone());
        }
        topics
            .iter()
            .map(|t| {
                startup.end(t, p).offset.saturating_sub(self.positions.get(&format!("{t}/{p}")).map_or(0, |x| x.offset))
            })
            .sum()
    }

    /// The end to read a topic up to: external inputs stop at their start-up end with `--drain`;
    /// internal (repartition) topics are read to their current end.
    fn end(&self, topic: &str, internal: bool, c: &Committed, startup: &Committed, drain: bool) -> Pos {
        let p = self.task.partition;
        let now = c.end(topic, p);
        if drain && !internal {
            let s = startup.end(topic, p);
            if s.offset < now.offset {
                return s;
            }
        }
        now
    }

    /// Process up to `max` records, reading each input up to its end for this step.
    fn step_embedded(
        &mut self,
        c: &Committed,
        startup: &Committed,
        opts: &RunOptions,
        max: u64,
    ) -> Result<u64, String> {
        let spec = self.task.spec.clone();
        let main_internal = matches!(spec.main.decode, Decode::Internal { .. });
        self.feed.ends[0] = self.end(&spec.main.topic, main_internal, c, startup, opts.drain);
        for (i, t) in spec.side_topics().iter().enumerate() {
            self.feed.ends[i + 1] = self.end(t, false, c, startup, opts.drain);
        }
        self.step(opts, max)
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
        open: &dyn Fn(&str) -> Result<sled::Tree, String>,
        opts: &RunOptions,
    ) -> Result<bool, String> {
        let old = self.task.spec.clone();
        let p = self.task.partition;
        let mut old_trees: Vec<Option<(sled::Tree, Pending)>> = std::mem::take(&mut self.trees.trees)
            .into_iter()
            .zip(std::mem::take(&mut self.trees.pending))
            .map(Some)
            .collect();
        let mut trees = Vec::new();
        let mut pending = Vec::new();
        let mut emptied = 0u64;
        for (i, st) in spec.stores.iter().enumerate() {
            let existing = old.stores.iter().position(|o| o.name == st.name).and_then(|j| old_trees[j].take());
            let new_store = existing.is_none();
            let (tree, mut pend) = match existing {
                Some(x) => x,
                None => (open(&st.name)?, Pending::default()),
            };
            if restart || new_store || fresh.contains(&st.name) {
                emptied += empty_store(i, &tree, &mut pend, self.task.stream_time, &mut self.changes)?;
            }
            trees.push(tree);
            pending.push(pend);
        }
        for (tree, _) in old_trees.into_iter().flatten() {
            // A store the query no longer has.
            let _ = tree.clear();
        }
        self.trees.trees = trees;
        self.trees.pending = pending;
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
            task.join_time = old.join_time;
            task.join_seq = old.join_seq;
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
    pub(crate) fn purge_since(&mut self, stage: &crate::control::Stage) -> Result<u64, String> {
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
    pub(crate) fn retire(&mut self) -> Result<(), String> {
        for (i, (tree, pend)) in self.trees.trees.iter().zip(self.trees.pending.iter_mut()).enumerate() {
            empty_store(i, tree, pend, self.task.stream_time, &mut self.changes)?;
        }
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

    /// Process up to `max` records in timestamp order across the inputs (side inputs first on
    /// ties); returns how many were processed. Stops early when an input's next record is not
    /// known yet.
    pub(crate) fn step(&mut self, opts: &RunOptions, max: u64) -> Result<u64, String> {
        let p = self.task.partition;
        let spec = self.task.spec.clone();
        let main_internal = matches!(spec.main.decode, Decode::Internal { .. });
        let mut topics = vec![spec.main.topic.clone()];
        topics.extend(spec.side_topics());
        let mut n = 0;
        // Records of external inputs, for the progress bar.
        let mut external = 0;
        let budget = max.saturating_sub(self.uncommitted).max(1);
        // Across several inputs, records go in event-time order (docs/language.md, "Joins"): the time
        // of each input's head is its declared time field (`TaskSpec::time_fields`), else its record
        // timestamp.
        self.head_times.resize(topics.len(), None);
        'records: while n < budget {
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
                    Next::End => {}
                    Next::Unknown => break 'records,
                }
            }
            let Some((_, i)) = pick else { break };
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
                            self.positions.insert(format!("{topic}/{p}", topic = topics[0]), s.next);
                            self.skipped += 1;
                            self.uncommitted += 1;
                            n += 1;
                        }
                        continue;
                    }
                }
            }
            let Some(s) = self.feed.take(i) else { break };
            let topic = &topics[i];
            if i > 0 || !main_internal {
                external += 1;
            }
            self.positions.insert(format!("{topic}/{p}"), s.next);
            self.task.counters.counted = false;
            let res = if let Some(r) = (i == 0).then(|| self.task.table_deletion(&s.record, &mut self.out)).flatten() {
                r
            } else if i == 0 {
                match self.task.decode_main(&s.record) {
                    Ok(mut input) => {
                        input.offset = s.offset;
                        self.process(input)
                    }
                    Err(e) => Err(e),
                }
            } else {
                self.task.process_side(i - 1, &s.record, s.offset, &mut self.out, &self.trees)
            };
            if let Err(e) = res {
                self.bad_record(topic, &s, e, opts)?;
            }
            self.late_record(topic, &s, opts);
            n += 1;
            self.uncommitted += 1;
        }
        self.read += n;
        self.bar.inc(external);
        Ok(n)
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
        }
    }

    /// If the record just processed was late, write it to `<app>-late` (with `late.to_topic`).
    fn late_record(&mut self, topic: &str, s: &crate::log::Stored, opts: &RunOptions) {
        if let Some(reason) = self.task.late_reason.take() {
            if opts.config.late.to_topic {
                let rec = with_source_headers(&s.record, reason, topic, self.task.partition, s.offset);
                self.out.push(Output { topic: format!("{}-late", opts.app), partition: Some(0), record: rec });
            }
        }
    }

    fn bad_record(
        &mut self,
        topic: &str,
        s: &crate::log::Stored,
        e: RecordError,
        opts: &RunOptions,
    ) -> Result<(), String> {
        let p = self.task.partition;
        match opts.config.on_error {
            OnError::Fail => Err(format!("{topic} partition {p} offset {}: {}", s.offset, e.0)),
            OnError::Skip => {
                self.skipped += 1;
                self.bar.suspend(|| eprintln!("skipped {topic} partition {p} offset {}: {}", s.offset, e.0));
                Ok(())
            }
            OnError::DeadLetter => {
                let tenant = self.task.record_tenant(topic, &s.record);
                self.task.dead_letter(tenant.as_deref());
                let rec = with_source_headers(&s.record, e.0, topic, p, s.offset);
                self.out.push(Output { topic: format!("{}-dlq", opts.app), partition: Some(0), record: rec });
                Ok(())
            }
        }
    }
}

impl TaskRun {
    /// Flush and commit (see [`TaskRun::commit_batch`]), then report to the metrics.
    /// `last`: the final commit of the run, after which local state must be written.
    fn commit(&mut self, log: &EmbeddedLog, opts: &RunOptions, close_all: bool, last: bool) -> Result<(), String> {
        let started = Instant::now();
        let committed = self.commit_batch(log, opts, close_all, last)?;
        if let (true, Some(m)) = (committed, &self.metrics) {
            m.observe_commit(started.elapsed().as_secs_f64());
        }
        self.publish();
        Ok(())
    }

    /// Flush and commit (see `runtime::commit`): outputs, changelog records and positions in one
    /// log commit, then the local state with its checkpoint (every few commits). False if there
    /// was nothing to commit.
    fn commit_batch(
        &mut self,
        log: &EmbeddedLog,
        opts: &RunOptions,
        close_all: bool,
        last: bool,
    ) -> Result<bool, String> {
        let p = self.task.partition;
        let work = self.flush_for_commit(close_all);
        if !work && !close_all {
            if last && self.trees.pending.iter().any(|p| p.len() > 0) {
                let c = log.committed()?;
                let cps: Vec<Pos> = self.task.spec.stores.iter().map(|st| c.end(&st.changelog, p)).collect();
                self.trees.write(&cps)?;
            }
            return Ok(false);
        }
        let mut appends: BTreeMap<(String, u32), Vec<Record>> = BTreeMap::new();
        let mut meta_cache: BTreeMap<String, u32> = BTreeMap::new();
        for o in self.out.drain(..) {
            let parts = match meta_cache.get(&o.topic) {
                Some(n) => *n,
                None => {
                    let n = log.ensure_topic(&o.topic, opts.config.embedded.partitions.max(1))?.partitions;
                    meta_cache.insert(o.topic.clone(), n);
                    n
                }
            };
            let part = o.partition_in(parts);
            appends.entry((o.topic, part)).or_default().push(o.record);
        }
        for (changelog, p, ch) in self.changelog_records() {
            let rec =
                Record { key: Some(ch.key.clone()), value: ch.value.clone(), timestamp: ch.timestamp, headers: vec![] };
            appends.entry((changelog.to_string(), p)).or_default().push(rec);
        }
        let meta = self.meta();
        let list =
            appends.into_iter().map(|((topic, partition), records)| Append { topic, partition, records }).collect();
        // (No faults in the final commit, so a run always ends.)
        if !last && self.inject(FailPoint::BeforeLogCommit) {
            return Ok(false);
        }
        let c = log.commit(list, vec![(self.group.clone(), meta)])?;
        self.mark_committed();
        if !last && self.inject(FailPoint::AfterLogCommit) {
            return Ok(work);
        }
        let stores = self.task.spec.stores.clone();
        let wrote = self.stage_local(&|i| c.end(&stores[i].changelog, p), last)?;
        if wrote && !last && self.inject(FailPoint::AfterStoreWrite) {
            return Ok(work);
        }
        Ok(work)
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

/// Open the local state. It is a cache of the changelogs: if sled cannot open it (damage after
/// an abrupt stop), it is wiped and every store is restored from its changelog. Only a lock held
/// by another process is an error.
pub(crate) fn open_local_state(path: &Path, app: &str) -> Result<sled::Db, String> {
    let open = || sled::Config::new().path(path).cache_capacity(64 << 20).open();
    match open() {
        Ok(db) => Ok(db),
        Err(e) if e.to_string().contains("lock") => Err(format!(
            "cannot open local state {}: {e} (is another `streamc run` of `{app}` using this state directory?)",
            path.display()
        )),
        Err(e) => {
            eprintln!(
                "local state {} cannot be opened ({e}): wiping it; the stores are restored from their changelogs",
                path.display()
            );
            std::fs::remove_dir_all(path)
                .map_err(|e| format!("cannot remove damaged local state {}: {e}", path.display()))?;
            open().map_err(|e| format!("cannot open local state {}: {e}", path.display()))
        }
    }
}

/// Read back the keys a batch just wrote. sled 0.34 consolidates a page's pending updates when
/// the page is read, not when it is written; a store that is only written (windows are served
/// from the record cache, never read) otherwise keeps every update in memory and on disk: 3 M
/// trades of the stats example grew to 680 MB of memory and 76 MB on disk without this, against
/// 148 MB and 10 MB with it.
fn consolidate<K: AsRef<[u8]>>(tree: &sled::Tree, keys: &[K]) {
    for k in keys {
        let _ = tree.get(k.as_ref());
    }
}

/// Delete a store partition that a control statement removed: a tombstone for every key its
/// changelog still holds, and the local tree cleared. Idempotent.
fn sweep(log: &EmbeddedLog, db: &sled::Db, store: &str, changelog: &str, p: u32) -> Result<usize, String> {
    let tree = open_tree(db, store, p)?;
    tree.clear().map_err(|e| format!("cannot clear local state of {store}: {e}"))?;
    if log.topic(changelog)?.is_none_or(|m| p >= m.partitions) {
        return Ok(0);
    }
    let end = log.committed()?.end(changelog, p);
    let mut r = log.reader(changelog, p, Pos::default());
    let mut records = Vec::new();
    loop {
        let batch = r.read(end, 10_000)?;
        if batch.is_empty() {
            break;
        }
        records.extend(batch);
    }
    let live = live_keys(records);
    let n = live.len();
    if n > 0 {
        let records = live
            .into_iter()
            .map(|(k, ts)| Record { key: Some(k), value: None, timestamp: ts, headers: vec![] })
            .collect();
        log.commit(vec![Append { topic: changelog.to_string(), partition: p, records }], vec![])?;
        eprintln!("{store} partition {p}: removed by a control statement, {n} keys deleted");
    }
    Ok(n)
}

/// Empty store `i` of a task: its local tree cleared, its pending changes dropped, and a
/// tombstone queued for every key it held, to be committed to the changelog. Returns how many.
fn empty_store(
    i: usize,
    tree: &sled::Tree,
    pending: &mut Pending,
    stream_time: i64,
    changes: &mut Vec<Change>,
) -> Result<u64, String> {
    let mut keys = Vec::new();
    live_store_keys(tree, pending, |k| keys.push(k.to_vec()));
    *pending = Pending::default();
    tree.clear().map_err(|e| format!("cannot clear local state: {e}"))?;
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

/// Every key a store holds, in key order: those in sled that no pending change deletes, and those
/// pending changes put (its checkpoint is not a key).
fn live_store_keys(tree: &sled::Tree, pending: &Pending, mut f: impl FnMut(&[u8])) {
    let mut pending_puts: Vec<&Vec<u8>> = pending.0.iter().filter(|(_, (v, _))| v.is_some()).map(|(k, _)| k).collect();
    pending_puts.sort_unstable();
    let mut puts = pending_puts.into_iter().peekable();
    for k in tree.iter().keys().filter_map(|k| k.ok()) {
        // Pending puts before this key, then the key itself unless pending changes decide it.
        while let Some(p) = puts.next_if(|p| p.as_slice() < &k[..]) {
            f(p);
        }
        if &k[..] == CHECKPOINT || pending.0.contains_key(&k[..]) {
            continue;
        }
        f(&k);
    }
    for p in puts {
        f(p);
    }
}

/// The keys a changelog still holds a value for (the last record of each key is not a
/// tombstone), with that record's timestamp.
pub(crate) fn live_keys(records: impl IntoIterator<Item = Stored>) -> BTreeMap<Vec<u8>, i64> {
    let mut live = BTreeMap::new();
    for s in records {
        if let Some(k) = s.record.key {
            match s.record.value {
                Some(_) => live.insert(k, s.record.timestamp),
                None => live.remove(&k),
            };
        }
    }
    live
}

/// At start-up: the stores control statements removed since tasks last committed (queries
/// dropped, clauses replaced away while the application was stopped) are deleted; a dropped
/// query's tasks are marked as having applied the control log.
fn sweep_removed(log: &EmbeddedLog, db: &sled::Db, stage: &Stage, app: &str) -> Result<(), String> {
    let c = log.committed()?;
    let mut done = Vec::new();
    for (g, meta) in &c.groups {
        let Some(rest) = g.strip_prefix(&format!("{app}#")) else { continue };
        let Some((name, p)) = rest.rsplit_once('#') else { continue };
        let (Ok(p), Some(version)) = (p.parse::<u32>(), meta.get("version").and_then(|v| v.as_u64())) else { continue };
        if meta.get("control").and_then(|v| v.as_u64()).unwrap_or(0) >= stage.next {
            continue;
        }
        for (store, changelog) in stage.gone_since(name, version) {
            sweep(log, db, &store, &changelog, p)?;
        }
        if stage.spec(name).is_none() {
            let mut m = meta.clone();
            m["control"] = serde_json::json!(stage.next);
            m["version"] = serde_json::json!(stage.version);
            done.push((g.clone(), m));
        }
    }
    if !done.is_empty() {
        log.commit(vec![], done)?;
    }
    Ok(())
}

/// Readers of a task's inputs from its positions.
fn embedded_feed(spec: &TaskSpec, p: u32, log: &EmbeddedLog, positions: &BTreeMap<String, Pos>) -> EmbeddedFeed {
    let mut topics = vec![spec.main.topic.clone()];
    topics.extend(spec.side_topics());
    let readers = topics
        .iter()
        .map(|t| log.reader(t, p, positions.get(&format!("{t}/{p}")).copied().unwrap_or_default()))
        .collect();
    EmbeddedFeed { readers, peeks: topics.iter().map(|_| None).collect(), ends: vec![Pos::default(); topics.len()] }
}

/// The commit group of a task: `<app>#<input node>#<partition>`.
fn group_name(opts: &RunOptions, spec_name: &str, p: u32) -> String {
    format!("{}#{}#{}", opts.app, spec_name, p)
}

/// A copy of an input record for the dead-letter or late topic: the reason and where it came from
/// in headers.
fn with_source_headers(r: &Record, reason: String, topic: &str, p: u32, offset: u64) -> Record {
    let mut rec = r.clone();
    rec.headers.push((H_ERROR.into(), reason.into_bytes()));
    rec.headers.push((H_TOPIC.into(), topic.as_bytes().to_vec()));
    rec.headers.push((H_PARTITION.into(), p.to_string().into_bytes()));
    rec.headers.push((H_OFFSET.into(), offset.to_string().into_bytes()));
    rec
}

/// Who watches a restore: a progress bar labelled so (when stderr is a terminal) and the metrics.
pub(crate) struct RestoreWatch {
    /// `embedded.restore_batch`.
    batch: u64,
    label: Option<String>,
    metrics: Option<RestoreMetrics>,
}

impl RestoreWatch {
    pub(crate) fn new(opts: &RunOptions, task_id: &str, store: &str, p: u32) -> RestoreWatch {
        RestoreWatch {
            batch: opts.config.embedded.restore_batch.max(1),
            label: opts.progress.then(|| format!("restoring {store} partition {p}")),
            metrics: opts.metrics.as_ref().map(|m| m.restore(task_id, store)),
        }
    }

    /// The store is restored (possibly with nothing to replay).
    pub(crate) fn done(&self) {
        if let Some(m) = &self.metrics {
            m.done();
        }
    }
}

/// The local checkpoint of a store: the changelog position its local state reflects.
pub(crate) fn checkpoint(tree: &sled::Tree) -> Option<Pos> {
    tree.get(CHECKPOINT).ok().flatten().and_then(|b| serde_json::from_slice(&b).ok())
}

/// Where a store's restore starts: its checkpoint if it is at or before the changelog's `end`,
/// else (no checkpoint, or local state ahead of the changelog) nothing: the local state is wiped.
pub(crate) fn restore_start(tree: &sled::Tree, end: u64) -> Result<Pos, String> {
    match checkpoint(tree) {
        Some(cp) if cp.offset <= end => Ok(cp),
        _ => {
            tree.clear().map_err(|e| format!("cannot reset local state: {e}"))?;
            Ok(Pos::default())
        }
    }
}

/// Keys a restore holds in memory at most before writing them to sled.
const RESTORE_PENDING: usize = 20_000;

/// Applies changelog records to a store. Records are coalesced (as commits are, by `Pending`)
/// and written every `embedded.restore_batch` records with the checkpoint they reach, so an
/// interrupted restore resumes there: a window put and later deleted by a tombstone never
/// reaches sled, so a restore writes about the live state, not the whole history.
pub(crate) struct Restorer<'a> {
    tree: &'a sled::Tree,
    watch: &'a RestoreWatch,
    bar: ProgressBar,
    pending: Pending,
    since_flush: u64,
    /// Records applied.
    pub(crate) n: u64,
    /// Which keys may be in sled: none when restoring from scratch (then exactly the keys this
    /// restore wrote), unknown (all) when replaying a tail.
    from_empty: bool,
    written: rustc_hash::FxHashSet<Vec<u8>>,
}

impl<'a> Restorer<'a> {
    /// `total`: the records expected (for the progress bar and metrics), if known.
    pub(crate) fn new(tree: &'a sled::Tree, watch: &'a RestoreWatch, from: Pos, total: u64) -> Restorer<'a> {
        let bar = match &watch.label {
            Some(label) => progress_bar(total, RECORDS, label.clone()),
            None => ProgressBar::hidden(),
        };
        if let Some(m) = &watch.metrics {
            m.start(total);
        }
        Restorer {
            tree,
            watch,
            bar,
            pending: Pending::default(),
            since_flush: 0,
            n: 0,
            from_empty: from == Pos::default(),
            written: Default::default(),
        }
    }

    /// Apply one changelog record (a record without a key is counted and ignored).
    pub(crate) fn apply(&mut self, key: Option<Vec<u8>>, value: Option<Vec<u8>>) {
        self.n += 1;
        self.since_flush += 1;
        let Some(k) = key else { return };
        let may_exist = !self.from_empty || self.written.contains(&k);
        self.pending.stage(k, value, may_exist);
    }

    /// Write what is pending with checkpoint `at` once a batch is full (or always, `force`):
    /// after `embedded.restore_batch` records, or sooner once [`RESTORE_PENDING`] keys are
    /// pending (a changelog of many live keys: sled takes big batches badly, 37 k records/s and
    /// 5.8 GB for 1 M keys in one batch against 90 k/s and 400 MB in batches of 10 k keys).
    pub(crate) fn write(&mut self, at: &Pos, force: bool) -> Result<(), String> {
        if !force && self.since_flush < self.watch.batch && self.pending.len() < RESTORE_PENDING {
            return Ok(());
        }
        let (from_empty, written) = (self.from_empty, &mut self.written);
        self.pending
            .write(self.tree, at, |k, put| {
                if !put {
                    written.remove(k);
                } else if from_empty {
                    written.insert(k.to_vec());
                }
            })
            .map_err(|e| format!("cannot restore local state: {e}"))?;
        self.bar.inc(self.since_flush);
        if let Some(m) = &self.watch.metrics {
            m.advance(self.since_flush);
        }
        self.since_flush = 0;
        Ok(())
    }

    /// Write the rest with the final checkpoint `at`; returns the records applied.
    pub(crate) fn finish(mut self, at: &Pos) -> Result<u64, String> {
        self.write(at, true)?;
        self.bar.finish_and_clear();
        self.watch.done();
        Ok(self.n)
    }
}

/// Bring a store up to its changelog's committed end: from its checkpoint if the local state is
/// consistent with it, else from the beginning. Returns the records replayed.
fn restore(
    tree: &sled::Tree,
    log: &EmbeddedLog,
    changelog: &str,
    p: u32,
    c: &Committed,
    watch: &RestoreWatch,
) -> Result<u64, String> {
    let end = c.end(changelog, p);
    let from = restore_start(tree, end.offset)?;
    if from == end {
        watch.done();
        return Ok(0);
    }
    // The log keeps every changelog record (no compaction), so offsets count the records to replay.
    let mut r = Restorer::new(tree, watch, from, end.offset.saturating_sub(from.offset));
    let mut reader = log.reader(changelog, p, from);
    loop {
        let recs = reader.read(end, 10_000)?;
        if recs.is_empty() {
            break;
        }
        for s in recs {
            r.apply(s.record.key, s.record.value);
        }
        r.write(&reader.position(), false)?;
    }
    r.finish(&reader.position())
}

/// A record's event time from its time field; None if it cannot be read (the record is then
/// ordered by its timestamp, and goes to the dead-letter topic when it is processed).
fn event_time(field: &RecordType, rec: &Record) -> Option<i64> {
    match decode_record(rec.value.as_deref()?, field).ok()?.first()? {
        Value::Ts(t) => Some(*t),
        _ => None,
    }
}
