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
use std::sync::{Arc, Condvar, Mutex};

use indicatif::ProgressBar;
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::control::{self, ControlRecord, Stage};
use crate::hir;
use crate::log::{Committed, EmbeddedLog, PartitionReader};
use crate::plan::physical::{Decode, TaskSpec};
use crate::plan::Topology;
use crate::record::{partition_for, Append, Pos, Record};
use crate::runtime::backend::{tasks_on, Membership};
use crate::runtime::error::{state, RunError};
use crate::runtime::hub::{ControlLog, Hub};
use crate::runtime::options::RunOptions;
use crate::runtime::placement::LinePlacer;
use crate::runtime::restore::sweep;
use crate::runtime::run::commit;
use crate::runtime::run::driver::{self, Flow, Host};
use crate::runtime::run::open::{self, Applied};
use crate::runtime::run::{now_ms, positions_of, progress_bar, Summary, TaskRun, BYTES, RECORDS};
use crate::runtime::state::open_local_state;
use crate::runtime::topics::{self, TopicKind};

mod backend;
use backend::{embedded_feed, Embedded, EmbeddedFeed, LogCommit, WholeLog};

/// Run the program on the embedded log until its input is drained (`--drain`) or forever.
pub fn run(program: &hir::Program, _topo: &Topology, opts: &RunOptions) -> Result<Summary, String> {
    Ok(run_typed(program, opts)?)
}

fn run_typed(program: &hir::Program, opts: &RunOptions) -> Result<Summary, RunError> {
    let log = EmbeddedLog::open(&opts.state_dir, opts.config.embedded.fsync)?;
    // One run of the application on this log, for as long as this one lives.
    let _run_lock = log.lock_run(&opts.app)?;
    // However the run ends, the compactions its commits asked for end first, while it still
    // holds the run lock (a `run --reset` after it must find no compaction at work).
    let _compactions = SettleCompactions(log.clone());
    // A partition file cut short inside its committed records stops the run before anything
    // is appended after the tear.
    log.check_tails()?;
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
    crate::runtime::schemas::register_sinks(&opts.config, &stage.specs)?;
    let db_path = crate::runtime::local_state_path(&opts.state_dir, &opts.app);
    let db = open_local_state(&db_path, &opts.app, opts.config.sled_cache_bytes())?;
    sweep_removed(&log, &db, &stage, &opts.app)?;
    let committed = log.committed()?;
    // The end of every external input as of start-up: `--drain` stops there.
    let startup = committed.clone();
    let mut tasks = Vec::new();
    let owned = WholeLog { specs: &stage.specs, counts: &counts }.owned()?;
    for (spec, p) in tasks_on(&stage.specs, &owned) {
        tasks.push(TaskRun::open_at(spec, p, &stage, &log, &db, &committed, opts)?);
    }
    // With `--drain`, a bar of the records of the external inputs up to their start-up ends.
    let bar = if opts.drain && opts.progress {
        let total = tasks.iter().map(|t| t.backlog(&startup)).sum();
        progress_bar(total, RECORDS, "processing".into())
    } else {
        ProgressBar::hidden()
    };
    for t in &mut tasks {
        t.set_bar(bar.clone());
    }
    let threads = opts.threads.max(1).min(tasks.len().max(1));
    eprintln!(
        "running `{}` on the embedded log in {}: {} task{} on {threads} thread{}, {}",
        opts.app,
        opts.state_dir.display(),
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" },
        if threads == 1 { "" } else { "s" },
        if opts.drain { "until its input is processed (--drain)" } else { "waiting for input (Ctrl-C stops it)" }
    );
    // SIGTERM or SIGINT: every task commits what it processed, and the run ends with its summary.
    let stop = Arc::new(AtomicBool::new(false));
    let _signals = on_signals(&stop)?;
    // Ready: every task is open (restored) and runs until the stop.
    if let Some(m) = &opts.metrics {
        m.health.watch_stop(stop.clone());
        m.health.set(Ok(()));
    }
    let live: BTreeMap<(String, u32), u64> = tasks.iter().map(|t| (t.id(), t.control())).collect();
    // Every writer of a repartition topic is at work until its first step says otherwise.
    let busy: BTreeMap<(String, u32), Vec<String>> =
        tasks.iter().map(|t| (t.id(), t.spec().repartition_topics())).filter(|(_, w)| !w.is_empty()).collect();
    let mut groups: Vec<Vec<TaskRun<EmbeddedFeed>>> = (0..threads).map(|_| Vec::new()).collect();
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
        busy: Mutex::new(busy),
        quiet: Quiet::new(threads),
        stop,
        bar: bar.clone(),
    };
    if let Some(m) = &opts.metrics {
        m.queries.set_workers(threads);
    }
    let results: Vec<Result<Summary, RunError>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, mut ts)| {
                let shared = &shared;
                s.spawn(move || worker(i, &mut ts, shared, opts))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(RunError::Internal("a worker thread panicked"))))
            .collect()
    });
    if let Some(m) = &opts.metrics {
        m.queries.set_workers(0);
    }
    bar.finish_and_clear();
    let mut total = Summary::default();
    for r in results {
        total.add_from(&r?);
    }
    total.interrupted = shared.stop.load(Ordering::SeqCst);
    shared.db.flush().map_err(state("cannot flush local state"))?;
    drop(shared);
    crate::runtime::state::mark_closed(&db_path);
    Ok(total)
}

/// Waits, when dropped, until the log's compactions are done.
struct SettleCompactions(EmbeddedLog);

impl Drop for SettleCompactions {
    fn drop(&mut self) {
        self.0.settle_compactions();
    }
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
    /// The tasks still at work (not at the end of every input, or with uncommitted records)
    /// that write repartition topics, with those topics: a task reading one of them waits at
    /// its end while a writer is at work ([`TaskRun::main_may_grow`]).
    busy: Mutex<BTreeMap<(String, u32), Vec<String>>>,
    /// `--drain`: when the workers are done.
    quiet: Quiet,
    /// Set by SIGINT or SIGTERM.
    stop: Arc<AtomicBool>,
    bar: ProgressBar,
}

/// `--drain`: the run is done once every worker has had a turn that did nothing, begun after
/// the last turn of any worker that did something (whose commits it then saw). Workers do not
/// wait for each other otherwise.
struct Quiet {
    /// (Turns that did something so far, workers idle since the last of them, done.)
    state: Mutex<(u64, usize, bool)>,
    changed: Condvar,
    workers: usize,
}

impl Quiet {
    fn new(workers: usize) -> Quiet {
        Quiet { state: Mutex::new((0, 0, false)), changed: Condvar::new(), workers }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, usize, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the workers are, at the start of a turn.
    fn epoch(&self) -> u64 {
        self.lock().0
    }

    /// A turn did something: the idle workers go on.
    fn worked(&self) {
        let mut st = self.lock();
        st.0 += 1;
        st.1 = 0;
        drop(st);
        self.changed.notify_all();
    }

    /// A turn begun at `epoch` did nothing. True once every worker's has since the last turn
    /// that did something (or a signal came); false as soon as another worker's turn does
    /// something: a turn again.
    fn idle(&self, epoch: u64, stop: &AtomicBool) -> bool {
        let mut st = self.lock();
        if st.2 {
            return true;
        }
        if st.0 != epoch {
            return false;
        }
        st.1 += 1;
        if st.1 == self.workers {
            st.2 = true;
            drop(st);
            self.changed.notify_all();
            return true;
        }
        loop {
            st = self
                .changed
                .wait_timeout(st, std::time::Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if st.2 || stop.load(Ordering::SeqCst) {
                return true;
            }
            if st.0 != epoch {
                return false;
            }
        }
    }
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
    fn open(log: &EmbeddedLog, app: &str) -> Result<EmbeddedControl, RunError> {
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

impl ControlLog for (&EmbeddedLog, &mut EmbeddedControl) {
    fn read(&mut self, _next: u64, _to_end: bool) -> Result<Vec<ControlRecord>, RunError> {
        let (log, c) = self;
        let end = log.committed()?.end(&c.topic, 0);
        let mut records = Vec::new();
        if end.offset <= c.end.offset {
            return Ok(records);
        }
        // The log's committed end is its end: every read is to the end.
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
        Ok(records)
    }

    fn write_statuses(&mut self, records: Vec<Record>, next: u64) -> Result<(), RunError> {
        let (log, c) = self;
        log.commit(
            vec![Append::of(c.status.clone(), 0, &records)],
            vec![(c.group.clone(), serde_json::json!({ "next": next }))],
        )?;
        c.written = next;
        Ok(())
    }
}

/// Read the control records appended since the last poll into the hub, and write their
/// statuses. True if the program or a table changed.
fn poll_control(log: &EmbeddedLog, control: &Mutex<EmbeddedControl>, hub: &mut Hub) -> Result<bool, RunError> {
    let mut c = control.lock().map_err(|_| RunError::Internal("control lock poisoned"))?;
    hub.poll(&mut (log, &mut *c), true)
}

/// One worker thread of an embedded run: the driver loop ([`driver::turn`]) over its tasks,
/// each committing alone; with `--drain`, until every worker has had a turn that did nothing
/// ([`Quiet`]).
fn worker(
    index: usize,
    tasks: &mut Vec<TaskRun<EmbeddedFeed>>,
    sh: &Shared,
    opts: &RunOptions,
) -> Result<Summary, RunError> {
    let (stage, seen) = {
        let hub = sh.hub.lock().map_err(|_| RunError::Internal("control lock poisoned"))?;
        (hub.ev.latest().clone(), hub.ev.next)
    };
    let mut host = Worker {
        index,
        sh,
        opts,
        commit_every: opts.config.commit.records.max(1),
        stage,
        seen,
        committed: sh.log.committed()?,
        counts_for: None,
        retired: Summary::default(),
    };
    let mut busy = driver::Busy::default();
    loop {
        let epoch = sh.quiet.epoch();
        let flow = match driver::turn(&mut host, tasks, &mut busy) {
            Ok(flow) => flow,
            Err(e) => {
                // The run fails: the other workers stop after their turns (a --drain worker
                // waiting for the others to go idle sees the stop too).
                sh.stop.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        if opts.drain {
            // (Every task committed what it processed in its turn: a signal stops the worker
            // here, whatever the others do.)
            if sh.stop.load(Ordering::SeqCst) {
                break;
            }
            if flow == Flow::Busy {
                sh.quiet.worked();
            } else if sh.quiet.idle(epoch, &sh.stop) {
                break;
            }
        } else {
            match flow {
                // Every task committed what it processed in this turn.
                Flow::Stop => break,
                Flow::Idle => std::thread::sleep(std::time::Duration::from_millis(20)),
                Flow::Busy => {}
            }
        }
    }
    driver::finish(&mut host, tasks, busy)
}

/// A worker thread of an embedded run, as the driver loop's [`Host`].
struct Worker<'a> {
    index: usize,
    sh: &'a Shared,
    opts: &'a RunOptions,
    commit_every: u64,
    /// The latest stage and the control records read, as of the turn's start.
    stage: Arc<Stage>,
    seen: u64,
    /// The log's committed ends as of the turn's start.
    committed: Committed,
    /// The partition counts of the topics of the stage whose new tasks the leader opened last.
    counts_for: Option<(u64, Vec<u32>)>,
    /// The counts of the tasks retired (their queries dropped).
    retired: Summary,
}

impl Host for Worker<'_> {
    type Feed = EmbeddedFeed;

    fn opts(&self) -> &RunOptions {
        self.opts
    }

    /// The leader reads the control log; every worker answers the interactive queries waiting
    /// for it and reads the log's committed ends.
    fn begin(&mut self, tasks: &mut Vec<TaskRun<EmbeddedFeed>>) -> Result<bool, RunError> {
        let sh = self.sh;
        let mut progress = false;
        {
            let mut hub = sh.hub.lock().map_err(|_| RunError::Internal("control lock poisoned"))?;
            if self.index == 0 && poll_control(&sh.log, &sh.control, &mut hub)? {
                progress = true;
            }
            (self.stage, self.seen) = (hub.ev.latest().clone(), hub.ev.next);
        }
        if let Some(m) = &self.opts.metrics {
            answer_queries(&m.queries, self.index, &self.stage, tasks);
        }
        self.committed = sh.log.committed()?;
        Ok(progress)
    }

    fn stage(&mut self) -> Result<(Arc<Stage>, u64), RunError> {
        Ok((self.stage.clone(), self.seen))
    }

    /// Each input read up to its end for this step (with `--drain`, an external input up to
    /// its start-up end); a repartition topic that a writer at work may still write to is
    /// waited on at its end.
    fn prepare(&mut self, t: &mut TaskRun<EmbeddedFeed>) -> Result<(), RunError> {
        let sh = self.sh;
        let may_grow = {
            let busy = sh.busy.lock().map_err(|_| RunError::Internal("lock poisoned"))?;
            busy.values().any(|w| w.contains(&t.spec().main.topic))
        };
        t.set_main_may_grow(may_grow);
        // A task that reads a repartition topic beside other inputs sees what its writers
        // committed up to now: a writer found idle has committed all it will write.
        if matches!(t.spec().main.decode, Decode::Internal { .. }) && t.spec().has_side_inputs() {
            let fresh = sh.log.committed()?;
            t.set_ends(&fresh, &sh.startup, self.opts.drain);
        } else {
            t.set_ends(&self.committed, &sh.startup, self.opts.drain);
        }
        Ok(())
    }

    fn step_size(&self, _t: &TaskRun<EmbeddedFeed>) -> (u64, bool) {
        (self.commit_every, false)
    }

    fn together(&self) -> bool {
        false
    }

    /// A step stops at `commit.records` uncommitted records or at the end of the available
    /// input: either way, a commit point.
    fn commit_due(&self, unit: &[TaskRun<EmbeddedFeed>]) -> bool {
        unit.iter().any(|t| t.has_work() && !t.failed())
    }

    fn commit(&mut self, unit: &mut [TaskRun<EmbeddedFeed>], how: commit::How) -> Result<bool, RunError> {
        let mut step = LogCommit { log: &self.sh.log, partitions: self.opts.config.embedded.partitions.max(1) };
        let mut refs: Vec<&mut TaskRun<EmbeddedFeed>> = unit.iter_mut().collect();
        commit::commit(&mut step, &mut refs, how)
    }

    fn reopen(&mut self, t: &mut TaskRun<EmbeddedFeed>, stage: &Arc<Stage>) -> Result<(), RunError> {
        t.reopen(&self.sh.log, &self.sh.db, stage, self.opts)
    }

    /// Idle: at the end of every input, committed, and not reading a repartition topic whose
    /// own writers are still at work (busy carries down a chain of them).
    fn settled(&mut self, t: &TaskRun<EmbeddedFeed>) -> Result<bool, RunError> {
        let writes = t.spec().repartition_topics();
        let mut busy = self.sh.busy.lock().map_err(|_| RunError::Internal("lock poisoned"))?;
        if writes.is_empty() || t.idle() {
            // A writer going idle lets its readers go on: that is progress (`--drain` must not
            // stop before they read what it committed).
            Ok(busy.remove(&t.id()).is_some())
        } else {
            busy.insert(t.id(), writes);
            Ok(false)
        }
    }

    fn apply_stage(&mut self, t: &mut TaskRun<EmbeddedFeed>, stage: &Arc<Stage>) -> Result<Applied, RunError> {
        t.apply_stage(stage, &self.sh.log, &self.sh.db, self.opts)
    }

    fn retire(&mut self, t: TaskRun<EmbeddedFeed>) -> Result<(), RunError> {
        self.retired.add_from(&t.summary());
        self.sh.live.lock().map_err(|_| RunError::Internal("lock poisoned"))?.remove(&t.id());
        self.sh.busy.lock().map_err(|_| RunError::Internal("lock poisoned"))?.remove(&t.id());
        Ok(())
    }

    /// Every task's control offset published; the leader opens the tasks of new queries (or
    /// of new sub-topologies), once every task has applied the stage: none still runs a form
    /// that uses their stores.
    fn end(&mut self, tasks: &mut Vec<TaskRun<EmbeddedFeed>>, progress: &mut bool) -> Result<Flow, RunError> {
        let (sh, opts, leader) = (self.sh, self.opts, self.index == 0);
        {
            let mut live = sh.live.lock().map_err(|_| RunError::Internal("lock poisoned"))?;
            for t in tasks.iter() {
                live.insert(t.id(), t.control());
            }
            if let (true, Some(m)) = (leader, &opts.metrics) {
                m.queries.set_view(&self.stage, live.keys().map(|(n, p)| (n, *p)));
            }
        }
        if leader {
            *progress |= open_new_tasks(tasks, &self.stage, sh, opts, &mut self.counts_for)?;
        }
        Ok(if !opts.drain && sh.stop.load(Ordering::SeqCst) {
            Flow::Stop
        } else if *progress {
            Flow::Busy
        } else {
            Flow::Idle
        })
    }

    /// Every task's last commit. Stopped by a signal, the input may not be at its end: closing
    /// every window now would make the rest late for good. They close at the end of a run
    /// that drains it.
    fn close(&mut self, tasks: &mut Vec<TaskRun<EmbeddedFeed>>) -> Result<Summary, RunError> {
        let close = self.opts.close_windows_at_end && !self.sh.stop.load(Ordering::SeqCst);
        let mut s = std::mem::take(&mut self.retired);
        for t in tasks.iter_mut() {
            t.commit(&self.sh.log, self.opts, close, true)?;
            s.add_from(&t.summary());
        }
        Ok(s)
    }
}

/// The leader's part of a round: once every task has applied the stage (none still runs a form
/// that uses their stores), open the tasks of new queries or sub-topologies. True if it opened
/// any. (`live` is held while they open.)
fn open_new_tasks(
    tasks: &mut Vec<TaskRun<EmbeddedFeed>>,
    stage: &Arc<Stage>,
    sh: &Shared,
    opts: &RunOptions,
    counts_for: &mut Option<(u64, Vec<u32>)>,
) -> Result<bool, RunError> {
    let mut live = sh.live.lock().map_err(|_| RunError::Internal("lock poisoned"))?;
    if !live.values().all(|c| *c >= stage.next) {
        return Ok(false);
    }
    let mut progress = false;
    let counts = match &*counts_for {
        Some((next, c)) if *next == stage.next => c.clone(),
        _ => {
            let c = setup_topics(&sh.log, &stage.program, &stage.topo, &stage.specs, &opts.config)?;
            crate::runtime::schemas::register_sinks(&opts.config, &stage.specs)?;
            *counts_for = Some((stage.next, c.clone()));
            c
        }
    };
    let owned = WholeLog { specs: &stage.specs, counts: &counts }.owned()?;
    for (spec, p) in tasks_on(&stage.specs, &owned) {
        if let std::collections::btree_map::Entry::Vacant(slot) = live.entry((spec.name.clone(), p)) {
            let writes = spec.repartition_topics();
            let mut t = TaskRun::open_at(spec.clone(), p, stage, &sh.log, &sh.db, &sh.log.committed()?, opts)?;
            t.set_bar(sh.bar.clone());
            slot.insert(t.control());
            if !writes.is_empty() {
                let mut busy = sh.busy.lock().map_err(|_| RunError::Internal("lock poisoned"))?;
                busy.insert((spec.name.clone(), p), writes);
            }
            tasks.push(t);
            progress = true;
        }
    }
    Ok(progress)
}

/// `streamc query` on an application that is not running: each partition's shard of the store
/// brought up to its changelog (the local state of a run that stopped abruptly may lag it), then
/// read. Ok(None): a run of the application holds the log (ask it instead).
pub fn query_stopped(
    state_dir: &Path,
    cfg: &Config,
    app: &str,
    stage: &Stage,
    fetch: &crate::runtime::query::Fetch,
) -> Result<Option<Vec<crate::runtime::query::Answer>>, String> {
    use crate::runtime::query::{merge, read, resolve, Shard};
    let target = resolve(stage, &fetch.store)?;
    let log = EmbeddedLog::open(state_dir, cfg.embedded.fsync).map_err(|e| e.to_string())?;
    let _lock = match log.lock_run(app) {
        Ok(l) => l,
        Err(crate::log::LogError::Busy { .. }) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let partitions = log.topic(&target.spec.main.topic).map_err(|e| e.to_string())?.map_or(0, |m| m.partitions);
    let db_path = crate::runtime::local_state_path(state_dir, app);
    let db = open_local_state(&db_path, app, cfg.sled_cache_bytes()).map_err(|e| e.to_string())?;
    let store = &target.spec.stores[target.store];
    let mut rows = Vec::new();
    for p in 0..partitions {
        let tree = crate::runtime::state::open_tree(&db, &store.name, p).map_err(|e| e.to_string())?;
        let watch = crate::runtime::restore::RestoreWatch::quiet(cfg.cache_max_bytes());
        let mut r =
            crate::runtime::restore::restore_store(&Embedded { log: &log }, &tree, &store.changelog, p, None, &watch)
                .map_err(|e| e.to_string())?;
        r.land().map_err(|e| e.to_string())?;
        crate::runtime::writer::write(&tree, &r.pending, Some(&r.checkpoint))
            .map_err(|e| format!("cannot write local state: {e}"))?;
        rows.extend(read(&target, fetch, p, &Shard { tree: &tree, layers: Vec::new() })?);
    }
    db.flush().map_err(|e| format!("cannot flush local state: {e}"))?;
    drop(db);
    crate::runtime::state::mark_closed(&db_path);
    Ok(Some(merge(rows)))
}

/// Answer the interactive queries waiting (`/stores/…`) from the committed state of `tasks`.
fn answer_queries(q: &crate::runtime::query::Queries, index: usize, stage: &Stage, tasks: &[TaskRun<EmbeddedFeed>]) {
    q.answer(index, stage, |target, f| {
        let store = &target.spec.stores[target.store].name;
        for t in tasks.iter().filter(|t| t.spec().name == target.spec.name) {
            if let Some(shard) = t.store_view(store) {
                f(t.partition(), crate::runtime::query::Shard { tree: shard.0, layers: shard.1 });
            }
        }
    });
}

/// The signal handlers of a run, removed when it ends (so `streamc test`'s next fixture, or
/// whatever the process does next, is not left with them).
struct Signals(Vec<signal_hook::SigId>);

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// SIGTERM and SIGINT set `stop` (the run commits and ends with its summary); a second one, with
/// `stop` already set, exits at once (143 or 130), as a stuck run must still be stoppable.
fn on_signals(stop: &Arc<AtomicBool>) -> Result<Signals, RunError> {
    let io = |e| RunError::Io { doing: "cannot handle signals".into(), source: e };
    let mut ids = Vec::new();
    for (sig, code) in [(signal_hook::consts::SIGTERM, 143), (signal_hook::consts::SIGINT, 130)] {
        // Registered first, so it runs before the flag is set: the first signal only sets it.
        ids.push(signal_hook::flag::register_conditional_shutdown(sig, code, stop.clone()).map_err(io)?);
        ids.push(signal_hook::flag::register(sig, stop.clone()).map_err(io)?);
    }
    Ok(Signals(ids))
}

/// Create or check every topic the program needs; returns each sub-topology's task count.
fn setup_topics(
    log: &EmbeddedLog,
    program: &hir::Program,
    topo: &Topology,
    specs: &[Arc<TaskSpec>],
    cfg: &Config,
) -> Result<Vec<u32>, RunError> {
    let plan = topics::plan(
        program,
        topo,
        specs,
        &mut |t| Ok(log.topic(t)?.map(|m| m.partitions)),
        Some(cfg.embedded.partitions.max(1)),
    )?;
    topics::apply(&plan, &mut |t| {
        Ok(match log.topic(&t.name)? {
            Some(m) => m.partitions,
            None => log.create_topic(&t.name, t.partitions, t.kind == TopicKind::Changelog)?.partitions,
        })
    })?;
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
) -> Result<(), RunError> {
    let meta = log.ensure_topic(topic, cfg.embedded.partitions.max(1))?;
    let source = program.sources.iter().find(|s| s.topic.as_deref() == Some(topic)).cloned();
    // An avro or protobuf source's lines are JSON objects, written in its format with its
    // registered schema.
    if let Some(src) = source.as_ref().filter(|s| crate::runtime::schemas::uses_registry(s)) {
        let registry = crate::registry::Registry::of(cfg).ok_or_else(|| {
            RunError::Registry(format!(
                "`{}` is {}: set schema.registry.url to read it from --input",
                src.name, src.format
            ))
        })?;
        crate::runtime::schemas::register(&registry, topic, &src.wire, src.format)?;
    }
    // Likewise its keys, in their format (`key … avro|protobuf`).
    if let Some((src, format)) = source.as_ref().and_then(|s| Some((s, s.key_format?))) {
        let registry = crate::registry::Registry::of(cfg).ok_or_else(|| {
            RunError::Registry(format!(
                "the keys of `{}` are {format}: set schema.registry.url to read it from --input",
                src.name
            ))
        })?;
        let field = src.key_name().unwrap_or("key");
        crate::runtime::schemas::register_key(&registry, topic, &src.key_type(), field, format)?;
    }
    // What of the file is in the topic is the log's, not one application's: a second program
    // reading the same topic from the same file appends nothing again. (Before, it was kept per
    // application: that record still counts.)
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    // (`#` first: no application id contains one, so no application's records are these.)
    let group = format!("#input#{topic}#{}", canonical.display());
    let committed = log.committed()?;
    let prev = committed
        .groups
        .get(&group)
        .or_else(|| committed.groups.get(&format!("{app}#input#{topic}#{}", path.display())))
        .cloned();
    let (mut consumed, prev_hash) = match &prev {
        Some(v) => (v["offset"].as_u64().unwrap_or(0), v["sha256"].as_str().unwrap_or("").to_string()),
        None => (0, String::new()),
    };
    let file = std::fs::File::open(path)
        .map_err(|source| RunError::Io { doing: format!("cannot read {}", path.display()), source })?;
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
            .map_err(|source| RunError::Io { doing: format!("cannot read {}", path.display()), source })?;
        if n != consumed || hex::encode(hasher.clone().finalize()) != prev_hash {
            return Err(RunError::Input(format!(
                "{}: the first {consumed} bytes changed since they were consumed; restore the file or run with a fresh state directory",
                path.display()
            )));
        }
    }
    bar.set_position(consumed);
    let placer = LinePlacer::new(source.as_ref());
    let mut round_robin = 0u32;
    let mut batch: Vec<Vec<Record>> = vec![Vec::new(); meta.partitions as usize];
    let mut pending = 0usize;
    let mut line = Vec::new();
    // Blank lines are not records (as `streamc produce` reads them): skipped, and said.
    let mut blank = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| RunError::Io { doing: format!("cannot read {}", path.display()), source })?;
        if n == 0 || line.last() != Some(&b'\n') {
            // An unterminated last line may still be being written: leave it for the next run.
            break;
        }
        hasher.update(&line);
        consumed += n as u64;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(|b| b.is_ascii_whitespace()) {
            blank += 1;
            continue;
        }
        let rec = placer.record(text, now_ms());
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
    if blank > 0 {
        eprintln!("{}: {blank} blank line{} skipped (a blank line is not a record)", path.display(), plural(blank));
    }
    r
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn commit_ingest(
    log: &EmbeddedLog,
    topic: &str,
    batch: &mut [Vec<Record>],
    group: &str,
    consumed: u64,
    hasher: &Sha256,
) -> Result<(), RunError> {
    let appends = batch
        .iter_mut()
        .enumerate()
        .map(|(p, recs)| {
            let a = Append::of(topic, p as u32, recs.iter());
            recs.clear();
            a
        })
        .collect();
    let meta = serde_json::json!({"offset": consumed, "sha256": hex::encode(hasher.clone().finalize())});
    log.commit(appends, vec![(group.to_string(), meta)])?;
    Ok(())
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

impl TaskRun<EmbeddedFeed> {
    fn open(
        spec: Arc<TaskSpec>,
        p: u32,
        log: &EmbeddedLog,
        db: &sled::Db,
        c: &Committed,
        opts: &RunOptions,
    ) -> Result<TaskRun<EmbeddedFeed>, RunError> {
        let group = group_name(opts, &spec.name, p);
        let meta = c.groups.get(&group).cloned().unwrap_or(serde_json::Value::Null);
        let positions = positions_of(&spec, p, &meta);
        open::open_task(&Embedded { log }, db, spec, p, group, &meta, positions, opts)
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
    ) -> Result<TaskRun<EmbeddedFeed>, RunError> {
        let meta_version =
            c.groups.get(&group_name(opts, &spec.name, p)).and_then(|m| m.get("version")).and_then(|v| v.as_u64());
        let mut t = TaskRun::open(spec, p, log, db, c, opts)?;
        open::catch_up(&Embedded { log }, db, &mut t, stage, meta_version, opts)?;
        Ok(t)
    }

    /// Bring a running task (at a commit boundary) up to `stage` ([`open::apply_stage`]); the
    /// stores its old form had and the new one has not are deleted at once.
    fn apply_stage(
        &mut self,
        stage: &Stage,
        log: &EmbeddedLog,
        db: &sled::Db,
        opts: &RunOptions,
    ) -> Result<Applied, RunError> {
        let feed =
            |spec: &TaskSpec, p: u32, positions: &BTreeMap<String, Pos>| Ok(embedded_feed(spec, p, log, positions));
        let applied = open::apply_stage(self, stage, db, opts, &feed)?;
        if let Applied::Running { gone } = &applied {
            for (store, changelog) in gone {
                sweep(&Embedded { log }, db, store, changelog, self.partition())?;
            }
        }
        Ok(applied)
    }

    /// After an injected fault: drop everything uncommitted and reopen the task from the
    /// committed log and its local state, as a restarted process would.
    /// A task that had applied a control statement since its last commit goes back to the
    /// form of its query as of that commit, and applies the statement again.
    fn reopen(&mut self, log: &EmbeddedLog, db: &sled::Db, stage: &Stage, opts: &RunOptions) -> Result<(), RunError> {
        // Its flights written first: the reopened task's restore must not meet a late write.
        self.settle()?;
        let c = log.committed()?;
        let fresh = match stage.spec(&self.spec().name).cloned() {
            Some(spec) => TaskRun::open_at(spec, self.partition(), stage, log, db, &c, opts)?,
            // Its query is being dropped: as committed, so that the worker retires it again.
            None => {
                let mut t = TaskRun::open(self.spec().clone(), self.partition(), log, db, &c, opts)?;
                t.forget_control();
                t
            }
        };
        self.replace_with(fresh);
        Ok(())
    }

    /// Records of the external inputs between the task's positions and their start-up ends.
    fn backlog(&self, startup: &Committed) -> u64 {
        let p = self.partition();
        let spec = self.spec();
        let mut topics: Vec<String> = spec.side_topics();
        if !matches!(spec.main.decode, Decode::Internal { .. }) {
            topics.push(spec.main.topic.clone());
        }
        topics.iter().map(|t| startup.end(t, p).offset.saturating_sub(self.position(t).map_or(0, |x| x.offset))).sum()
    }

    /// The end to read a topic up to: external inputs stop at their start-up end with `--drain`;
    /// internal (repartition) topics are read to their current end.
    fn end(&self, topic: &str, internal: bool, c: &Committed, startup: &Committed, drain: bool) -> Pos {
        let p = self.partition();
        let now = c.end(topic, p);
        if drain && !internal {
            let s = startup.end(topic, p);
            if s.offset < now.offset {
                return s;
            }
        }
        now
    }

    /// Where each input is read up to in the next step ([`TaskRun::end`]).
    fn set_ends(&mut self, c: &Committed, startup: &Committed, drain: bool) {
        let spec = self.spec().clone();
        let main_internal = matches!(spec.main.decode, Decode::Internal { .. });
        let main = self.end(&spec.main.topic, main_internal, c, startup, drain);
        self.feed_mut().ends[0] = main;
        for (i, t) in spec.side_topics().iter().enumerate() {
            let end = self.end(t, false, c, startup, drain);
            self.feed_mut().ends[i + 1] = end;
        }
    }
}

impl TaskRun<EmbeddedFeed> {
    /// Commit the task (`runtime::run::commit`) in one log commit. `last`: the final commit of the
    /// run, after which local state must be written.
    fn commit(&mut self, log: &EmbeddedLog, opts: &RunOptions, close_all: bool, last: bool) -> Result<(), RunError> {
        let mut step = LogCommit { log, partitions: opts.config.embedded.partitions.max(1) };
        commit::commit(&mut step, &mut [self], commit::How { close_all, force: close_all, last })?;
        Ok(())
    }
}

/// At start-up: the stores control statements removed since tasks last committed (queries
/// dropped, clauses replaced away while the application was stopped) are deleted; a dropped
/// query's tasks are marked as having applied the control log.
fn sweep_removed(log: &EmbeddedLog, db: &sled::Db, stage: &Stage, app: &str) -> Result<(), RunError> {
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
            sweep(&Embedded { log }, db, &store, &changelog, p)?;
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

/// The commit group of a task: `<app>#<input node>#<partition>`.
fn group_name(opts: &RunOptions, spec_name: &str, p: u32) -> String {
    format!("{}#{}#{}", opts.app, spec_name, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two workers: one idle while the other works goes again; both idle since the last work
    /// end the run; an idle turn begun before the last work counts for nothing.
    #[test]
    fn a_drain_ends_once_every_worker_had_a_turn_that_did_nothing_after_the_last_work() {
        let (q, stop) = (Quiet::new(2), AtomicBool::new(false));
        let e = q.epoch();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| q.idle(e, &stop));
            while q.lock().1 == 0 {
                std::thread::yield_now();
            }
            q.worked();
            assert!(!waiting.join().unwrap(), "the other worker did something: a turn again");
        });
        assert!(!q.idle(e, &stop), "a turn begun before the last work");
        let e = q.epoch();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| q.idle(e, &stop));
            while q.lock().1 == 0 {
                std::thread::yield_now();
            }
            assert!(q.idle(e, &stop), "the last worker to go idle ends the run");
            assert!(waiting.join().unwrap());
        });
    }

    #[test]
    fn a_signal_ends_a_drain_that_waits() {
        let (q, stop) = (Quiet::new(2), AtomicBool::new(true));
        assert!(q.idle(q.epoch(), &stop));
    }
}
