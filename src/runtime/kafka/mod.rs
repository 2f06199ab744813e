//! The Kafka driver: the same tasks as the embedded driver, over Apache Kafka.
//!
//! - **Membership.** One consumer per instance joins the group `application.id` with the
//!   cooperative-sticky assignor (static membership with `instance.id`), subscribed to every
//!   sub-topology's main input. It reads nothing itself: its partitions are paused as they are
//!   assigned, and it only carries membership and the committed offsets.
//! - **Tasks.** An assigned partition `(topic, p)` opens every task whose main input is `topic`,
//!   each with its own reader (a consumer assigned to its main and side partitions, one queue
//!   per partition, end-of-partition events on), restored from its changelogs first: from the
//!   local checkpoint when local state is consistent with the changelog, else from the start.
//! - **Commit**, every `commit.interval_ms`, and sooner once a task holds back more changed
//!   entries than it may (`TaskRun::cache_full`), or `--drain` finds a task at
//!   the end of its inputs with work to commit: each task's record cache is flushed, outputs and
//!   changelog records are produced, and once the broker has acknowledged them the main
//!   partition's offset is committed with every task's commit record (input positions, stream
//!   times) as the offset's metadata. Under `exactly_once` all of it is one transaction. Local
//!   state (sled) is written only after a successful commit, with the changelog offsets the
//!   producer's delivery reports gave, so it never holds uncommitted changes.
//! - **Revocation** commits, writes local state and closes the revoked partitions' tasks; their
//!   state stays on disk, so getting a task back restores only the changelog tail.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use rustc_hash::FxHashMap;

use crate::config::Guarantee;
use crate::control::Stage;
use crate::hir;
use crate::kafka::{client, close_quickly, io, is_fatal, Batches, BrokerError, Fetched, Kafka, Reader, TIMEOUT};
use crate::plan::physical::{Decode, TaskSpec};
use crate::plan::Topology;
use crate::record::{Append, Pos, Record};
use crate::runtime::backend::{tasks_on, Backend, Extent, Membership};
use crate::runtime::error::RunError;
use crate::runtime::hub::Hub;
use crate::runtime::options::RunOptions;
use crate::runtime::restore::{self};
use crate::runtime::run::commit::{self, How};
use crate::runtime::run::driver::{self, Flow, Host};
use crate::runtime::run::open::{self, Applied};
use crate::runtime::run::{self, Feed, Next, Summary, TaskRun};
use crate::runtime::state;
use crate::runtime::topics::{self, SizeLimits, TimestampLimits, TopicConfigs, TopicError, TopicKind};

mod control_topic;
mod feed;
mod peers;
mod producer;
mod standby;
mod txn;

use control_topic::{poll_control, read_control};
use feed::{feed_for, reader_config, KafkaFeed};
use producer::Producer;
use txn::TxnCommit;

type Result<T> = std::result::Result<T, RunError>;

/// The Kafka backend's errors reach the core as its own, typed.
impl From<BrokerError> for RunError {
    fn from(e: BrokerError) -> RunError {
        RunError::Backend(Box::new(e))
    }
}

impl From<KafkaError> for RunError {
    fn from(e: KafkaError) -> RunError {
        BrokerError::from(e).into()
    }
}

/// An error the cluster's state causes (`BrokerError::State`).
fn state_error(message: String) -> RunError {
    BrokerError::State(message).into()
}

/// Records a task processes before the loop turns to the next task.
const STEP: u64 = 5_000;
/// How long a restore waits at an open transaction before it fails (longer than the default
/// `transaction.timeout.ms` this driver sets, after which the broker aborts it).
const RESTORE_WAIT: Duration = Duration::from_secs(120);
/// Failed commits in a row before the run gives up.
const MAX_FAILED_COMMITS: u32 = 10;

/// How long a stopping instance tries to commit offsets a rebalancing group refuses.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Run the program on Kafka until `--drain` finds the input processed, or forever.
pub fn run(program: &hir::Program, _topo: &Topology, opts: &RunOptions) -> std::result::Result<Summary, String> {
    run_typed(program, opts).map_err(|e| e.to_string())
}

fn run_typed(program: &hir::Program, opts: &RunOptions) -> Result<Summary> {
    let kafka = Kafka::connect(&opts.config.kafka)?;
    // The control log first, read in full: tasks start with the program as of its end.
    let (hub, control_reader) = read_control(&kafka, program, opts)?;
    let stage = hub.ev.latest().clone();
    let specs: Vec<Arc<TaskSpec>> = stage.specs.to_vec();
    let topic_configs = setup_topics(&kafka, &stage.program, &stage.topo, &specs)?;
    crate::runtime::schemas::register_sinks(&opts.config, &specs)?;
    let state_path = crate::runtime::local_state_path(&opts.state_dir, &opts.app);
    let db = state::open_local_state(&state_path, &opts.app, opts.config.sled_cache_bytes())?;
    let instance = instance_name(opts)?;
    let eos = opts.config.processing.guarantee == Guarantee::ExactlyOnce;
    let external: BTreeSet<String> = specs.iter().flat_map(|s| external_inputs(s)).collect();
    let startup = startup_ends(&kafka, &external)?;
    let main_topics: BTreeSet<String> = specs.iter().map(|s| s.main.topic.clone()).collect();
    let producer = Producer::create(&kafka, opts, &instance, eos)?;
    let _reporter = RestoreReporter::start(&kafka, opts, &instance)?;
    // SIGTERM or SIGINT: commit, write local state and leave the group.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(io("cannot handle signals"))?;
    }
    if let Some(m) = &opts.metrics {
        m.health.watch_stop(stop.clone());
    }
    let engine = Engine {
        opts: opts.clone(),
        kafka,
        stage,
        hub,
        control_reader,
        subscribed: main_topics.clone(),
        db,
        producer,
        instance: instance.clone(),
        eos,
        tasks: Vec::new(),
        opened: BTreeSet::new(),
        assigned: Vec::new(),
        error: None,
        failed: false,
        reopen_all: false,
        control_due: false,
        offsets_owed: false,
        joined: false,
        partitions: BTreeMap::new(),
        startup,
        main_external: main_topics.iter().filter(|t| external.contains(*t)).cloned().collect(),
        closed: Summary::default(),
        last_commit: Instant::now(),
        drain_commit: false,
        windows_closed: false,
        last_metrics: Instant::now(),
        failed_commits: 0,
        rebalances: 0,
        sweeps: Vec::new(),
        topic_configs,
        standbys: None,
        served: None,
        stop: stop.clone(),
        stopping: None,
    };
    let (cfg, client_id) = group_config(&engine.kafka, opts, &instance);
    let peers =
        Arc::new(peers::GroupPeers::new(&opts.app, &opts.config.kafka, &client_id, &instance).map_err(state_error)?);
    let mut engine = engine;
    if let Some(m) = &opts.metrics {
        let q = &m.queries;
        q.set_me(&opts.app, &instance, q.server());
        if let Some(server) = q.server() {
            // Where this instance serves its stores: now, and again with every metrics batch.
            let rec = peers::server_record(&instance, &server, &client_id, run::now_ms());
            engine
                .kafka
                .produce_plain(&format!("{}-metrics", opts.app), &[(0, rec)])
                .map_err(|e| state_error(format!("cannot publish where this instance serves its stores: {e}")))?;
            engine.served = Some((server, client_id.clone()));
        }
        q.set_peers(peers.clone());
    }
    let replicas = opts.config.num.standby.replicas;
    if replicas > 0 {
        let mut rc = reader_config(&Kafka::new(&opts.config.kafka), opts);
        // A copy's position that the changelog no longer holds is an error, not a jump.
        rc.set("enable.partition.eof", "false").set("auto.offset.reset", "error");
        let reader: BaseConsumer = rc.create().map_err(client("Kafka consumer"))?;
        engine.standbys = Some(standby::Standbys::new(
            replicas,
            &client_id,
            peers.clone(),
            reader,
            Kafka::new(&opts.config.kafka),
            opts.metrics.clone(),
        ));
    }
    // With standby replicas, an instance that starts while others run the application copies
    // the changelogs before it joins, so that tasks move here warm (see `Standbys::warm_up`).
    if let Some(sb) = engine.standbys.as_mut() {
        if let Some(m) = &opts.metrics {
            m.health.set(Err("warming up: copying the changelogs before joining the consumer group"));
        }
        sb.warm_up(&engine.stage, &engine.db, opts.config.acceptable.recovery.lag, &stop)?;
        if stop.load(Ordering::Relaxed) {
            eprintln!("stopping while warming up: the copies are written, the group never joined");
            let summary = engine.close_all(&mut Vec::new())?;
            // (The database closed first: see `state::mark_closed`.)
            drop(engine);
            crate::runtime::state::mark_closed(&state_path);
            return Ok(summary);
        }
    }
    let consumer: BaseConsumer<GroupCtx> =
        cfg.create_with_context(GroupCtx { engine: Mutex::new(engine) }).map_err(client("Kafka consumer"))?;
    let topics: Vec<&str> = main_topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(client(format!("cannot subscribe to {topics:?}")))?;
    eprintln!(
        "instance {instance} of `{}` joining group `{}` on {} ({})",
        opts.app,
        opts.app,
        opts.config.kafka.get("bootstrap.servers").map_or("?", |s| s),
        if eos { "exactly_once" } else { "at_least_once" }
    );
    if let Some(m) = &opts.metrics {
        m.queries.set_workers(1);
    }
    let result = drive(&consumer);
    if let Some(m) = &opts.metrics {
        m.queries.set_workers(0);
    }
    match result {
        Ok(summary) => {
            // Leaving the group revokes what is left (nothing: every task is closed).
            consumer.unsubscribe();
            close_quickly(&consumer);
            // (The engine, and with it the database, goes with the consumer's context: the
            // local state is closed before it is marked so.)
            drop(consumer);
            crate::runtime::state::mark_closed(&state_path);
            Ok(summary)
        }
        Err(err) => {
            // Closing the consumer revokes its partitions: nothing may be committed then.
            lock(&consumer.context().engine).failed = true;
            drop(consumer);
            Err(err)
        }
    }
}

/// The group consumer's configuration, and its client id.
fn group_config(kafka: &Kafka, opts: &RunOptions, instance: &str) -> (rdkafka::ClientConfig, String) {
    let mut cfg = kafka.config();
    cfg.set("group.id", &opts.app)
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed");
    if let Some(id) = &opts.config.instance.id {
        cfg.set("group.instance.id", id);
    }
    // Interactive queries and standby replicas tell instances apart by the client id of the
    // group member: the configured one (or the application id) and the instance name.
    let client_id =
        format!("{}-{instance}", opts.config.kafka.get("client.id").map_or(opts.app.as_str(), String::as_str));
    cfg.set("client.id", &client_id);
    (cfg, client_id)
}

/// Report restores to `<app>-metrics` from a thread of its own (the driver's is busy
/// restoring): a record per task when its restore starts, every [`RESTORE_REPORT_EVERY`] (or
/// the metrics interval, if shorter) while it lasts, and when it ends. Key
/// `<instance>/restore/<task>` (partition 0), value `{"application", "instance", "task",
/// "timestamp", "restoring": {store: {"restored", "total"}}, "restored"}`: the stores still
/// restoring (none once it ended, or the run stopped) and the records read so far over all of
/// them. Best effort: an error is logged, never fatal.
struct RestoreReporter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const RESTORE_REPORT_EVERY: Duration = Duration::from_secs(5);

impl RestoreReporter {
    fn start(kafka: &Kafka, opts: &RunOptions, instance: &str) -> Result<RestoreReporter> {
        let producer: BaseProducer = kafka.config().create().map_err(client("Kafka producer"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (board, app, instance) = (opts.restores.clone(), opts.app.clone(), instance.to_string());
        let every = RESTORE_REPORT_EVERY.min(Duration::from_millis(opts.config.metrics.interval_ms.max(100)));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let topic = format!("{app}-metrics");
            let mut reported = BTreeSet::new();
            let mut sent = Instant::now();
            loop {
                let stopping = flag.load(Ordering::Relaxed);
                let now = board.take();
                // A task that started or ended is reported at once; one in progress, periodically.
                let news = now.iter().any(|(t, s)| !reported.contains(t) || s.values().all(|p| p.ended));
                if news || stopping || (!now.is_empty() && sent.elapsed() >= every) {
                    for (task, stores) in &now {
                        // (A run that stops, or fails, in a restore ends it.)
                        let value = restore_report(&app, &instance, task, stores, stopping, run::now_ms()).to_string();
                        let key = format!("{instance}/restore/{task}");
                        let rec = BaseRecord::to(&topic).partition(0).key(key.as_bytes()).payload(value.as_bytes());
                        if let Err((e, _)) = producer.send(rec) {
                            eprintln!("cannot report a restore to `{topic}`: {e}");
                        }
                    }
                    producer.poll(Duration::ZERO);
                    sent = Instant::now();
                    reported =
                        now.iter().filter(|(_, s)| s.values().any(|p| !p.ended)).map(|(t, _)| t.clone()).collect();
                }
                if stopping {
                    break;
                }
                // (Woken at once when the run ends: see the drop.)
                std::thread::park_timeout(Duration::from_millis(100));
            }
            if let Err(e) = crate::kafka::flush(&producer, Duration::from_secs(5)) {
                eprintln!("cannot report restores to `{topic}`: {e}");
            }
        });
        Ok(RestoreReporter { stop, thread: Some(thread) })
    }
}

impl Drop for RestoreReporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// A restore report's value (see [`RestoreReporter`]).
fn restore_report(
    app: &str,
    instance: &str,
    task: &str,
    stores: &BTreeMap<String, crate::runtime::options::Progress>,
    ended: bool,
    now: i64,
) -> serde_json::Value {
    let restoring: serde_json::Map<String, serde_json::Value> = stores
        .iter()
        .filter(|(_, p)| !p.ended && !ended)
        .map(|(s, p)| (s.clone(), serde_json::json!({ "restored": p.restored, "total": p.total })))
        .collect();
    serde_json::json!({
        "application": app,
        "instance": instance,
        "task": task,
        "timestamp": now,
        "restoring": restoring,
        "restored": stores.values().map(|p| p.restored).sum::<u64>(),
    })
}

fn lock(m: &Mutex<Engine>) -> MutexGuard<'_, Engine> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The external (not internal) inputs of a task: its main input unless it is a repartition
/// topic, and its side inputs.
fn external_inputs(spec: &TaskSpec) -> Vec<String> {
    let mut v = spec.side_topics();
    if !matches!(spec.main.decode, Decode::Internal { .. }) {
        v.push(spec.main.topic.clone());
    }
    v
}

/// This instance's name: `instance.id`, else one made once and kept in the state directory, so
/// a restart with the same state directory takes over its predecessor's `transactional.id`.
fn instance_name(opts: &RunOptions) -> Result<String> {
    if let Some(id) = &opts.config.instance.id {
        return Ok(id.clone());
    }
    let dir = crate::runtime::app_dir(&opts.state_dir, &opts.app);
    let path = dir.join("instance");
    if let Ok(s) = std::fs::read_to_string(&path) {
        if !s.trim().is_empty() {
            return Ok(s.trim().to_string());
        }
    }
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let seed = format!("{}-{}-{:?}", run::now_ms(), std::process::id(), dir);
    let name = format!("i{:016x}", crate::runtime::chaos::fnv(seed.as_bytes()));
    std::fs::write(&path, &name).map_err(io(format!("cannot write {}", path.display())))?;
    Ok(name)
}

/// Check the sources and create the other topics with the admin API (see [`topics::plan`]). A
/// missing source, co-partitioned inputs with different counts, or an internal topic with the
/// wrong count are errors naming the topic.
///
/// Then reads the configuration of the topics written with event times: a changelog that is not
/// compacted is refused, and the configurations are returned, for each task's timestamp bounds
/// ([`limits_of`]): a task dead-letters records the broker would refuse the results of.
fn setup_topics(k: &Kafka, program: &hir::Program, topo: &Topology, specs: &[Arc<TaskSpec>]) -> Result<TopicConfigs> {
    let plan = topics::plan(program, topo, specs, &mut |t| Ok(k.partitions(t)?), None).map_err(|e| match e {
        TopicError::MissingSource { .. } => {
            state_error(format!("{e} on {}; create it first (streamc produce creates topics)", k.servers()))
        }
        e => e.into(),
    })?;
    // Changelogs are compacted, never deleted by time; repartition topics keep their records
    // regardless of their (event-time) timestamps, as Kafka Streams' do.
    let configs = |kind: &TopicKind| -> Vec<(&str, &str)> {
        match kind {
            TopicKind::Changelog => vec![("cleanup.policy", "compact")],
            TopicKind::Repartition => vec![("retention.ms", "-1")],
            _ => vec![],
        }
    };
    // Those missing in one request; then each checked (and its partition count taken).
    let all: Vec<_> = plan.topics.iter().map(|t| (t.name.clone(), t.partitions, configs(&t.kind))).collect();
    k.create_missing(&all)?;
    topics::apply(&plan, &mut |t| Ok(k.ensure_topic_with(&t.name, t.partitions, &configs(&t.kind))?))?;
    let written: BTreeSet<String> = specs.iter().flat_map(|s| s.written_topics()).collect();
    let configs = k.topic_configs(&written.into_iter().collect::<Vec<_>>())?;
    let changelogs: Vec<String> = specs.iter().flat_map(|s| s.stores.iter().map(|st| st.changelog.clone())).collect();
    topics::check_changelogs(&changelogs, &configs)?;
    Ok(configs)
}

/// The timestamp bounds of the topics a task writes with event times.
fn limits_of(configs: &TopicConfigs, spec: &TaskSpec) -> Option<TimestampLimits> {
    let mine: TopicConfigs =
        spec.written_topics().into_iter().filter_map(|t| Some((t.clone(), configs.get(&t)?.clone()))).collect();
    TimestampLimits::of(&mine)
}

/// The largest record each topic a task writes takes: the producer's `message.max.bytes` (its
/// default unless the configuration sets it), and each topic's `max.message.bytes` where tighter.
fn sizes_of(configs: &TopicConfigs, spec: &TaskSpec, config: &crate::config::Config) -> SizeLimits {
    let producer = config
        .kafka
        .get("message.max.bytes")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(topics::DEFAULT_MAX_MESSAGE_BYTES);
    let mine: TopicConfigs =
        spec.written_topics().into_iter().filter_map(|t| Some((t.clone(), configs.get(&t)?.clone()))).collect();
    SizeLimits::kafka(&mine, producer)
}

/// The consumer group's context: it owns the engine, so that a revocation can commit and close
/// tasks from inside the rebalance callback, before the partitions go to another instance.
struct GroupCtx {
    engine: Mutex<Engine>,
}

impl ClientContext for GroupCtx {}

impl ConsumerContext for GroupCtx {
    fn pre_rebalance(&self, c: &BaseConsumer<Self>, r: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = r {
            let lost = c.assignment_lost();
            let mut e = lock(&self.engine);
            let parts = parts_of(tpl);
            let mut tasks = std::mem::take(&mut e.tasks);
            let revoked = Turn { e: &mut e, consumer: c }.revoke(&mut tasks, &parts, lost);
            e.tasks = tasks;
            if let Err(err) = revoked {
                e.error.get_or_insert(err);
            }
        }
    }

    fn post_rebalance(&self, c: &BaseConsumer<Self>, r: &Rebalance<'_>) {
        match r {
            Rebalance::Assign(tpl) => {
                // The tasks' readers fetch; the group consumer only keeps membership.
                let _ = c.pause(tpl);
                let mut e = lock(&self.engine);
                e.joined = true;
                e.rebalances += 1;
                eprintln!(
                    "rebalance {}: assigned {} partition{}",
                    e.rebalances,
                    tpl.count(),
                    if tpl.count() == 1 { "" } else { "s" }
                );
                e.assigned.extend(parts_of(tpl));
            }
            Rebalance::Error(err) => eprintln!("consumer group rebalance: {err}"),
            Rebalance::Revoke(_) => {}
        }
    }
}

/// On Kafka the consumer group decides which main-input partitions this instance owns.
impl Membership for BaseConsumer<GroupCtx> {
    fn owned(&self) -> Result<BTreeSet<(String, u32)>> {
        let tpl = self.assignment().map_err(client("cannot read the consumer group's assignment".to_string()))?;
        Ok(parts_of(&tpl).into_iter().collect())
    }
}

fn parts_of(tpl: &TopicPartitionList) -> Vec<(String, u32)> {
    tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition() as u32)).collect()
}

/// A task on Kafka.
type KTask = TaskRun<KafkaFeed>;

/// The assigned main partition a task runs on: (its main input, its partition).
fn part_of(t: &KTask) -> (String, u32) {
    (t.spec().main.topic.clone(), t.partition())
}

/// Everything an instance runs; owned by the group consumer's context.
struct Engine {
    opts: RunOptions,
    kafka: Kafka,
    /// The program as of the control offset this instance applied.
    stage: Arc<Stage>,
    hub: Hub,
    control_reader: Reader,
    /// The main inputs the group consumer is subscribed to.
    subscribed: BTreeSet<String>,
    db: sled::Db,
    producer: Producer,
    instance: String,
    eos: bool,
    /// The tasks of the assigned main partitions, in the order of their partitions (topic,
    /// partition), then the plan's; lent to the driver loop during a turn.
    tasks: Vec<KTask>,
    /// The assigned main partitions whose tasks are open.
    opened: BTreeSet<(String, u32)>,
    /// Assigned, not opened yet.
    assigned: Vec<(String, u32)>,
    /// An error from inside a rebalance callback, for the main loop.
    error: Option<RunError>,
    /// The run failed: nothing may be committed any more (closing the consumer revokes).
    failed: bool,
    /// A commit failed (or a task a fault failed): at the next turn every task goes back to
    /// the last commit, closed and opened again.
    reopen_all: bool,
    /// A commit was made: the control log is read before the next commit boundary.
    control_due: bool,
    /// `at_least_once`: the last commit's records are in, its offsets were refused during a
    /// rebalance; the next commit carries them, made even with nothing new (see `TxnCommit`).
    offsets_owed: bool,
    /// The group has given this instance an assignment (possibly empty) at least once.
    joined: bool,
    /// Partition counts of the topics written to.
    partitions: BTreeMap<String, u32>,
    startup: BTreeMap<(String, u32), u64>,
    /// External topics that are some task's main input.
    main_external: Vec<String>,
    /// Counts of the tasks closed so far.
    closed: Summary,
    last_commit: Instant,
    /// `--drain` found a task at the end of its inputs with work to commit: commit at once.
    drain_commit: bool,
    /// `--drain` with `close_windows_at_end`: the commit that closed every window is made.
    windows_closed: bool,
    last_metrics: Instant,
    failed_commits: u32,
    /// Assignments received (each rebalance that gave this instance partitions, or none).
    rebalances: u64,
    /// Store partitions removed by control statements, to delete after the next commit:
    /// (store, changelog, partition).
    sweeps: Vec<(String, String, u32)>,
    /// The configurations of the topics the stage writes with event times (see [`setup_topics`]).
    topic_configs: TopicConfigs,
    /// Warm copies of other instances' tasks (`num.standby.replicas`).
    standbys: Option<standby::Standbys>,
    /// Where this instance serves its stores, and its group consumer's client id.
    served: Option<(String, String)>,
    /// Set by SIGINT or SIGTERM.
    stop: Arc<AtomicBool>,
    /// When the stop's last commit was first tried.
    stopping: Option<Instant>,
}

impl Engine {
    fn open_task(
        &self,
        spec: Arc<TaskSpec>,
        p: u32,
        committed: Option<u64>,
        meta: &serde_json::Value,
    ) -> Result<KTask> {
        run::check_tenant_layout(&spec, meta)?;
        let mut positions = run::positions_of(&spec, p, meta);
        let main_key = format!("{}/{p}", spec.main.topic);
        if meta.is_null() {
            if let Some(o) = committed {
                positions.insert(main_key.clone(), Pos::at(o));
            }
        }
        let group = format!("{}#{}#{p}", self.opts.app, spec.name);
        let mut run = open::open_task(self, &self.db, spec, p, group, meta, positions, &self.opts)?;
        // Offsets only: a Kafka position has no byte position.
        run.offsets_only();
        let meta_version = meta.get("version").and_then(|v| v.as_u64());
        open::catch_up(self, &self.db, &mut run, &self.stage, meta_version, &self.opts)?;
        Ok(run)
    }

    fn run_sweeps(&mut self) -> Result<()> {
        for (store, changelog, p) in std::mem::take(&mut self.sweeps) {
            restore::sweep(&*self, &self.db, &store, &changelog, p)?;
        }
        Ok(())
    }

    fn abort(&mut self) -> Result<()> {
        match self.producer.inner.abort_transaction(TIMEOUT) {
            Ok(()) => Ok(()),
            Err(e) => {
                eprintln!("abort failed ({e}): re-creating the producer");
                self.producer.recreate()
            }
        }
    }

    /// Keep the standby replicas warm (see [`standby`]). True if any record was applied.
    fn standby_turn(&mut self) -> Result<bool> {
        let Some(sb) = self.standbys.as_mut() else { return Ok(false) };
        let (opened, assigned) = (&self.opened, &self.assigned);
        sb.turn(&self.stage, &self.db, || opened.iter().chain(assigned).cloned().collect())
    }

    /// Answer the interactive queries waiting (`/stores/…`) from the committed state of the
    /// tasks of the partitions this instance is assigned.
    fn answer_queries(&self, tasks: &[KTask], q: &crate::runtime::query::Queries) {
        q.set_view(&self.stage, tasks.iter().map(|r| (&r.spec().name, r.partition())));
        q.answer(0, &self.stage, |target, f| {
            let store = &target.spec.stores[target.store].name;
            for r in tasks.iter().filter(|r| r.spec().name == target.spec.name) {
                if let Some(shard) = r.store_view(store) {
                    f(r.partition(), crate::runtime::query::Shard { tree: shard.0, layers: shard.1 });
                }
            }
        });
    }

    /// One record per task for `<app>-metrics`: its counters and each input's consumer lag.
    fn metrics_records(&self, tasks: &[KTask]) -> Vec<Record> {
        let now = run::now_ms();
        let mut recs = Vec::new();
        for r in tasks {
            let summary = r.summary();
            let mut lag = serde_json::Map::new();
            let p = r.partition();
            for (i, topic) in r.feed().topics.iter().enumerate() {
                if let Ok((_, high)) = self.kafka.watermarks_within(topic, p, Duration::from_secs(5)) {
                    lag.insert(format!("{topic}/{p}"), serde_json::json!((high - r.feed().next[i] as i64).max(0)));
                }
            }
            let value = serde_json::json!({
                "application": self.opts.app,
                "instance": self.instance,
                "task": format!("{}_{}", r.spec().sub, r.partition()),
                "timestamp": now,
                "records_in": r.records_read(),
                "records_out": summary.records_out,
                "late": summary.late,
                "dead_letters": summary.dead_letters,
                "skipped": summary.skipped,
                "commits": summary.commits,
                "restored": summary.restored,
                "consumer_lag": lag,
            });
            let key = format!("{}/{}_{}", self.instance, r.spec().sub, r.partition());
            recs.push(Record {
                key: Some(key.into_bytes()),
                value: Some(value.to_string().into_bytes()),
                timestamp: now,
                headers: vec![],
            });
        }
        if let Some((server, client_id)) = &self.served {
            recs.push(peers::server_record(&self.instance, server, client_id, now));
        }
        // Each standby replica this instance keeps: the records its stores have yet to apply.
        let mut standbys: BTreeMap<String, serde_json::Map<String, serde_json::Value>> = BTreeMap::new();
        for (task, store, lag) in self.standbys.iter().flat_map(|s| s.lags()) {
            standbys.entry(task).or_default().insert(store, serde_json::json!(lag));
        }
        for (task, lags) in standbys {
            let value = serde_json::json!({
                "application": self.opts.app,
                "instance": self.instance,
                "task": task,
                "timestamp": now,
                "standby": true,
                "lag": lags,
            });
            recs.push(Record {
                key: Some(format!("{}/standby/{task}", self.instance).into_bytes()),
                value: Some(value.to_string().into_bytes()),
                timestamp: now,
                headers: vec![],
            });
        }
        recs
    }

    fn close_task(&mut self, t: KTask) {
        self.closed.add_from(&t.summary_as_committed());
    }

    /// Back to the last commit: close every task without writing local state (it holds only
    /// committed changes); their partitions open again as if just assigned.
    fn reopen_all(&mut self, tasks: &mut Vec<KTask>) {
        for t in std::mem::take(tasks) {
            self.close_task(t);
        }
        self.assigned.extend(std::mem::take(&mut self.opened));
    }

    /// The end of a run: write every task's local state and return the counts.
    fn close_all(&mut self, tasks: &mut Vec<KTask>) -> Result<Summary> {
        for mut t in std::mem::take(tasks) {
            t.write_local()?;
            self.close_task(t);
        }
        self.opened.clear();
        if let Some(sb) = self.standbys.as_mut() {
            sb.close()?;
        }
        self.db.flush().map_err(crate::runtime::error::state("cannot flush local state"))?;
        Ok(self.closed.clone())
    }
}

/// The engine and its group consumer, for a turn of the driver loop (its [`Host`]) or a
/// rebalance callback.
struct Turn<'a> {
    e: &'a mut Engine,
    consumer: &'a BaseConsumer<GroupCtx>,
}

impl Turn<'_> {
    /// Open the tasks of newly assigned partitions: restore, then resume at the committed
    /// positions. True if any was opened.
    fn open_assigned(&mut self, tasks: &mut Vec<KTask>) -> Result<bool> {
        if self.e.assigned.is_empty() {
            return Ok(false);
        }
        // Only what is still assigned (a revocation may have come in between).
        let owned = self.consumer.owned().unwrap_or_default();
        let parts: BTreeSet<(String, u32)> = std::mem::take(&mut self.e.assigned)
            .into_iter()
            .filter(|k| !self.e.opened.contains(k) && owned.contains(k))
            .collect();
        let mut tpl = TopicPartitionList::new();
        for (t, p) in &parts {
            tpl.add_partition(t, *p as i32);
        }
        let committed = self
            .consumer
            .committed_offsets(tpl, TIMEOUT)
            .map_err(client(format!("cannot read the committed offsets of group `{}`", self.e.opts.app)))?;
        // A task committed by an instance that had read more of the control log: catch up
        // first, so the task never runs an older form of its query than it committed with.
        let newest = committed
            .elements()
            .iter()
            .filter_map(|e| serde_json::from_str::<serde_json::Value>(e.metadata()).ok())
            .filter_map(|m| {
                m.as_object()
                    .map(|o| o.values().filter_map(|t| t.get("control").and_then(|c| c.as_u64())).max().unwrap_or(0))
            })
            .max()
            .unwrap_or(0);
        if newest > self.e.stage.next {
            let e = &mut *self.e;
            if newest > e.hub.ev.next {
                poll_control(&e.kafka, &e.control_reader, &mut e.hub, &e.opts.app, true)?;
            }
            if e.hub.ev.latest().next != e.stage.next {
                let all = 0..tasks.len();
                if !driver::commit_unit(self, tasks, all.clone(), How::default())? {
                    // Every task goes back to its last commit: try again on the next turn.
                    self.e.assigned.extend(parts);
                    return Ok(false);
                }
                driver::boundary(self, tasks, all)?;
            }
        }
        let e = &mut *self.e;
        for (t, p) in parts {
            let el = committed.find_partition(&t, p as i32);
            let offset = match el.as_ref().map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o as u64),
                _ => None,
            };
            let meta: serde_json::Value =
                el.as_ref().and_then(|e| serde_json::from_str(e.metadata()).ok()).unwrap_or(serde_json::Value::Null);
            // An offset committed without commit records (set by another tool) is where every
            // task starts; otherwise a task without its commit record is new (a query added
            // since) and reads from the start, like a new query that starts while running.
            let external = meta.as_object().is_none_or(|m| m.is_empty());
            // Stores removed by statements since these tasks committed (a dropped query, a
            // clause replaced away) are deleted first.
            if let Some(m) = meta.as_object() {
                for (name, tm) in m {
                    let (Some(version), control) = (
                        tm.get("version").and_then(|v| v.as_u64()),
                        tm.get("control").and_then(|v| v.as_u64()).unwrap_or(0),
                    ) else {
                        continue;
                    };
                    if control < e.stage.next {
                        // After the next commit, which records that the statement is applied.
                        e.sweeps.extend(e.stage.gone_since(name, version).into_iter().map(|(s, c)| (s, c, p)));
                    }
                }
            }
            let here = BTreeSet::from([(t.clone(), p)]);
            for (spec, p) in tasks_on(&e.stage.specs, &here) {
                // A standby replica of the task becomes its stores, as of its checkpoint.
                if let Some(sb) = e.standbys.as_mut() {
                    sb.release(&spec.name, p)?;
                }
                let task = e.open_task(
                    spec.clone(),
                    p,
                    offset.filter(|_| external),
                    meta.get(&spec.name).unwrap_or(&serde_json::Value::Null),
                )?;
                insert_in_order(tasks, task);
            }
            e.opened.insert((t, p));
        }
        Ok(true)
    }

    /// Commit every task (`unit`: all of them) in one transaction, or one produce and offsets
    /// commit; with the instance's metrics records when they are due. Ok(false): the commit
    /// failed, and every task goes back to its last commit at the next turn (an error after
    /// [`MAX_FAILED_COMMITS`] failures in a row).
    fn commit_all(&mut self, unit: &mut [KTask], how: How) -> Result<bool> {
        if self.e.reopen_all {
            // A commit failed since the tasks' last one: what they hold now is not to be
            // committed (the failed commit's outputs are gone), only dropped at the next turn.
            return Ok(false);
        }
        self.e.last_commit = Instant::now();
        self.e.drain_commit = false;
        match self.try_commit(unit, how) {
            Ok(()) => {
                self.e.failed_commits = 0;
                self.e.control_due = true;
                // Stores removed by statements this commit recorded as applied (once its offsets,
                // which carry the record, are in).
                if !self.e.offsets_owed {
                    self.e.run_sweeps()?;
                }
                Ok(true)
            }
            Err(err) => {
                let e = &mut *self.e;
                e.failed_commits += 1;
                if e.failed_commits >= MAX_FAILED_COMMITS {
                    return Err(state_error(format!("{MAX_FAILED_COMMITS} commits failed in a row; the last: {err}")));
                }
                eprintln!("commit failed ({err}); the tasks resume from their last commit");
                if e.eos {
                    // (A producer that cannot be made again now fails the next commit too, which
                    // counts towards the limit.)
                    if let Err(err) = e.abort() {
                        eprintln!("{err}; trying again at the next commit");
                    }
                } else {
                    // Records still on their way land before the tasks reopen, so that the
                    // restore sees them (after the committed end) and rewrites their keys.
                    let _ = crate::kafka::flush(&e.producer.inner, TIMEOUT);
                }
                e.reopen_all = true;
                Ok(false)
            }
        }
    }

    fn try_commit(&mut self, unit: &mut [KTask], how: How) -> Result<()> {
        let e = &mut *self.e;
        let metrics_due = e.last_metrics.elapsed() >= Duration::from_millis(e.opts.config.metrics.interval_ms);
        let mut extra = Vec::new();
        if metrics_due {
            // Flushed first, so that the metrics count what this commit emits.
            for t in unit.iter_mut() {
                t.flush_for_commit(how.close_all);
            }
            e.last_metrics = Instant::now();
            let topic = format!("{}-metrics", e.opts.app);
            extra = e.metrics_records(unit).into_iter().map(|r| (topic.clone(), r)).collect();
        }
        let Engine { producer, kafka, partitions, eos, offsets_owed, .. } = e;
        let owed = *offsets_owed;
        let mut tasks: Vec<&mut KTask> = unit.iter_mut().collect();
        let mut step =
            TxnCommit { producer, kafka, partitions, consumer: self.consumer, eos: *eos, extra, offsets_owed: owed };
        let result = commit::commit(&mut step, &mut tasks, How { force: how.force || metrics_due || owed, ..how });
        if step.offsets_owed && !owed {
            eprintln!("the group is rebalancing: this commit's offsets go with the next commit");
        }
        *offsets_owed = step.offsets_owed;
        result.map(|_| ())
    }

    /// Partitions are being taken away: commit, then close their tasks, keeping local state.
    /// Lost partitions (or a failed run) are closed without a commit.
    fn revoke(&mut self, tasks: &mut Vec<KTask>, parts: &[(String, u32)], lost: bool) -> Result<()> {
        let committed = if lost || self.e.failed { Ok(false) } else { self.commit_all(tasks, How::default()) };
        self.e.assigned.retain(|k| !parts.contains(k));
        let keep = matches!(committed, Ok(true));
        let (gone, stay): (Vec<KTask>, Vec<KTask>) =
            std::mem::take(tasks).into_iter().partition(|t| parts.contains(&part_of(t)));
        *tasks = stay;
        for k in parts {
            self.e.opened.remove(k);
        }
        for mut t in gone {
            if keep {
                t.write_local()?;
            }
            self.e.close_task(t);
        }
        committed.map(|_| ())
    }

    /// `--drain`: every external input committed up to its start-up end, and this instance's
    /// tasks idle at the end of their inputs.
    fn drained(&mut self, tasks: &mut [KTask]) -> Result<bool> {
        let e = &mut *self.e;
        // Offsets the group refused are committed at the next commit first.
        if e.offsets_owed {
            return Ok(false);
        }
        // Not before the first assignment: its tasks are restored and committed even when
        // there is nothing left to process.
        if !e.joined || !e.assigned.is_empty() {
            return Ok(false);
        }
        for t in tasks.iter_mut() {
            let n = t.feed().readers.len();
            for i in 0..n {
                if t.feed_mut().peek(i)? != Next::End {
                    return Ok(false);
                }
            }
            if t.holds_results() {
                // At the end with work to commit: a commit now, not at the next interval.
                e.drain_commit = true;
                return Ok(false);
            }
            // At the end, past transaction markers (never delivered): commit that position.
            let read: Vec<(String, u64)> = t.feed().topics.iter().cloned().zip(t.feed().next.iter().copied()).collect();
            if t.move_positions(&read) {
                return Ok(false);
            }
            // Internal inputs: read up to their end as of now. (The feed's next offset is past
            // the transaction markers its end came after; a reader's `position()` after a
            // batch that held the end is not to be trusted, see `Batches`.)
            if matches!(t.spec().main.decode, Decode::Internal { .. }) {
                let (_, high) = e.kafka.watermarks(&t.spec().main.topic, t.partition())?;
                if (t.feed().next[0] as i64) < high {
                    return Ok(false);
                }
            }
        }
        let mut tpl = TopicPartitionList::new();
        for ((t, p), _) in e.startup.iter().filter(|((t, _), _)| e.main_external.contains(t)) {
            tpl.add_partition(t, *p as i32);
        }
        if tpl.count() == 0 {
            return Ok(true);
        }
        let committed = self
            .consumer
            .committed_offsets(tpl, TIMEOUT)
            .map_err(client(format!("cannot read the committed offsets of group `{}`", e.opts.app)))?;
        for el in committed.elements() {
            let end = e.startup.get(&(el.topic().to_string(), el.partition() as u32)).copied().unwrap_or(0);
            let at = match el.offset() {
                Offset::Offset(o) => o.max(0) as u64,
                _ => 0,
            };
            if at < end {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A task into `tasks` after those of its partition and of every partition before it.
fn insert_in_order(tasks: &mut Vec<KTask>, t: KTask) {
    let key = part_of(&t);
    let at = tasks.partition_point(|x| part_of(x) <= key);
    tasks.insert(at, t);
}

/// On Kafka, every task of the instance commits in one commit (a transaction under
/// `exactly_once`), every `commit.interval_ms` or sooner; the group consumer's rebalances open
/// and close tasks.
impl Host for Turn<'_> {
    type Feed = KafkaFeed;

    fn opts(&self) -> &RunOptions {
        &self.e.opts
    }

    /// An error from a rebalance callback ends the run; after a failed commit every task
    /// reopens; then the tasks of newly assigned partitions open (restored before the turn
    /// goes on).
    fn begin(&mut self, tasks: &mut Vec<KTask>) -> Result<bool> {
        if let Some(err) = self.e.error.take() {
            return Err(err);
        }
        if std::mem::take(&mut self.e.reopen_all) {
            self.e.reopen_all(tasks);
        }
        let health = |e: &Engine| match (e.joined, e.assigned.is_empty()) {
            (false, _) => Err("waiting for the consumer group's first assignment"),
            (true, false) => Err("restoring the stores of newly assigned partitions"),
            (true, true) => Ok(()),
        };
        // Readiness: an assignment received, and every assigned partition's task open
        // (restored). `open_assigned` restores before it returns.
        if let Some(m) = &self.e.opts.metrics {
            m.health.set(health(self.e));
        }
        let opened = self.open_assigned(tasks)?;
        if let (Some(m), true) = (&self.e.opts.metrics, opened) {
            m.health.set(health(self.e));
        }
        Ok(opened)
    }

    /// After a commit, the control log is read first.
    fn stage(&mut self) -> Result<(Arc<Stage>, u64)> {
        let e = &mut *self.e;
        if std::mem::take(&mut e.control_due) {
            poll_control(&e.kafka, &e.control_reader, &mut e.hub, &e.opts.app, false)?;
        }
        Ok((e.hub.ev.latest().clone(), e.hub.ev.next))
    }

    fn step_size(&self, t: &KTask) -> (u64, bool) {
        (t.uncommitted() + STEP, true)
    }

    fn together(&self) -> bool {
        true
    }

    /// Every `commit.interval_ms`; sooner when a task's cache is full, or when `--drain` finds
    /// no more input to process (it ends only with everything committed), but not right after
    /// a failed commit (a rebalance in progress would fail the next ones as fast, up to the
    /// limit of failures in a row).
    fn commit_due(&self, unit: &[KTask]) -> bool {
        let e = &*self.e;
        e.last_commit.elapsed() >= Duration::from_millis(e.opts.config.commit.interval_ms)
            || (e.failed_commits == 0 && (e.drain_commit || unit.iter().any(|t| t.cache_full())))
    }

    fn commit(&mut self, unit: &mut [KTask], how: How) -> Result<bool> {
        self.commit_all(unit, how)
    }

    /// With the other tasks of the instance, from the group's committed offsets, at the next
    /// turn.
    fn reopen(&mut self, _t: &mut KTask, _stage: &Arc<Stage>) -> Result<()> {
        self.e.reopen_all = true;
        Ok(())
    }

    fn at_boundary(&self, unit: &[KTask]) -> bool {
        !self.e.reopen_all && driver::committed(unit)
    }

    /// The instance applies a stage as a whole: its topics, its subscription.
    fn behind(&self, stage: &Stage) -> bool {
        stage.next != self.e.stage.next
    }

    fn stage_begin(&mut self, stage: &Arc<Stage>) -> Result<()> {
        let e = &mut *self.e;
        e.stage = stage.clone();
        e.topic_configs = setup_topics(&e.kafka, &stage.program, &stage.topo, &stage.specs)?;
        crate::runtime::schemas::register_sinks(&e.opts.config, &stage.specs)
    }

    /// The stores the task's old form had and its new one has not are swept after the next
    /// commit, which records that the statement is applied: an owner that read the commit
    /// before the sweep ran would run the old form on emptied stores.
    fn apply_stage(&mut self, t: &mut KTask, stage: &Arc<Stage>) -> Result<Applied> {
        let e = &mut *self.e;
        let (kafka, opts, startup) = (&e.kafka, &e.opts, &e.startup);
        let feed = |spec: &TaskSpec, p: u32, positions: &BTreeMap<String, Pos>| {
            feed_for(kafka, opts, startup, spec, p, positions)
        };
        let applied = open::apply_stage(t, stage, &e.db, opts, &feed)?;
        if let Applied::Running { gone } = &applied {
            e.sweeps.extend(gone.iter().map(|(s, c)| (s.clone(), c.clone(), t.partition())));
        }
        Ok(applied)
    }

    /// The topics' limits set again; new queries' (or sub-topologies') tasks opened on the
    /// partitions this instance owns; a new set of main inputs changes the subscription (the
    /// one case that rebalances).
    fn stage_end(&mut self, tasks: &mut Vec<KTask>, stage: &Arc<Stage>) -> Result<()> {
        let e = &mut *self.e;
        for t in tasks.iter_mut() {
            let (limits, sizes) =
                (limits_of(&e.topic_configs, t.spec()), sizes_of(&e.topic_configs, t.spec(), &e.opts.config));
            t.set_limits(limits, sizes);
        }
        for (spec, p) in tasks_on(&stage.specs, &e.opened) {
            if tasks.iter().any(|t| t.spec().name == spec.name && t.partition() == p) {
                continue;
            }
            let t = e.open_task(spec, p, None, &serde_json::Value::Null)?;
            insert_in_order(tasks, t);
        }
        let mains: BTreeSet<String> = stage.specs.iter().map(|s| s.main.topic.clone()).collect();
        if mains != e.subscribed {
            let topics: Vec<&str> = mains.iter().map(String::as_str).collect();
            eprintln!("the program's main inputs changed: subscribing to {topics:?} (a rebalance)");
            self.consumer.subscribe(&topics).map_err(client(format!("cannot subscribe to {topics:?}")))?;
            e.main_external = mains.iter().filter(|t| e.startup.keys().any(|(x, _)| x == *t)).cloned().collect();
            e.subscribed = mains;
        }
        Ok(())
    }

    fn retire(&mut self, t: KTask) -> Result<()> {
        // (Its deletion not committed, the counts as of its last commit; the deletion is swept
        // when its partition's tasks open again.)
        let summary = if self.e.reopen_all { t.summary_as_committed() } else { t.summary() };
        self.e.closed.add_from(&summary);
        Ok(())
    }

    /// Interactive queries answered, standby replicas kept warm; a signal stops the run after
    /// a last commit; `--drain` stops it once every input is processed and committed.
    fn end(&mut self, tasks: &mut Vec<KTask>, progress: &mut bool) -> Result<Flow> {
        if let Some(m) = &self.e.opts.metrics {
            self.e.answer_queries(tasks, &m.queries);
        }
        // (Copying other instances' changelogs is not this instance's work: `--drain` does
        // not wait for it.)
        let copied = self.e.standby_turn()?;
        if self.e.stop.load(Ordering::Relaxed) {
            let since = *self.e.stopping.get_or_insert_with(|| {
                eprintln!("stopping: a last commit, then leaving the group");
                Instant::now()
            });
            let all = 0..tasks.len();
            driver::commit_unit(self, tasks, all, How::default())?;
            if self.e.offsets_owed {
                // The group is rebalancing: the offsets again at the next turns, after polls.
                if since.elapsed() < STOP_WAIT {
                    return Ok(Flow::Idle);
                }
                eprintln!(
                    "stopping without the last commit's offsets: the group was rebalancing for {} s; whoever takes these partitions processes the records since the commit before again (at least once)",
                    STOP_WAIT.as_secs()
                );
            }
            return Ok(Flow::Stop);
        }
        if self.e.opts.drain && !*progress && self.drained(tasks)? {
            let all = 0..tasks.len();
            if self.e.opts.close_windows_at_end && !self.e.windows_closed {
                self.e.windows_closed =
                    driver::commit_unit(self, tasks, all, How { close_all: true, ..How::default() })?;
                return Ok(Flow::Busy);
            }
            // The last counts go to `<app>-metrics` too.
            self.e.last_metrics = Instant::now() - Duration::from_millis(self.e.opts.config.metrics.interval_ms);
            if driver::commit_unit(self, tasks, all, How::default())? && !self.e.offsets_owed {
                return Ok(Flow::Stop);
            }
        }
        Ok(if *progress || copied { Flow::Busy } else { Flow::Idle })
    }

    /// (After a failed last commit, the tasks close as of their last commit.)
    fn close(&mut self, tasks: &mut Vec<KTask>) -> Result<Summary> {
        if std::mem::take(&mut self.e.reopen_all) {
            self.e.reopen_all(tasks);
        }
        self.e.close_all(tasks)
    }
}

/// The instance's loop, once it has subscribed: poll the group consumer (rebalances run in its
/// callbacks, with the engine and its tasks), then a turn of the driver loop ([`driver`]);
/// until a signal, or `--drain` finds every input processed and committed.
fn drive(consumer: &BaseConsumer<GroupCtx>) -> Result<Summary> {
    let mut busy = driver::Busy::default();
    let mut idle = false;
    loop {
        match consumer.poll(Duration::from_millis(if idle { 20 } else { 0 })) {
            // A fatal error (a static member fenced by its own rejoin after a session
            // timeout, …) leaves the consumer out of the group for good: the run ends
            // rather than go on as a member of nothing that reports itself ready.
            Some(Err(KafkaError::MessageConsumptionFatal(code)))
            | Some(Err(KafkaError::MessageConsumption(code @ RDKafkaErrorCode::Fatal))) => {
                let why =
                    consumer.client().fatal_error().map_or_else(|| code.to_string(), |(c, m)| format!("{c}: {m}"));
                return Err(state_error(format!("the Kafka consumer hit a fatal error and left the group: {why}")));
            }
            Some(Err(e)) => eprintln!("Kafka consumer: {e}"),
            // Fetched before its partition was paused: the task's own reader reads it.
            Some(Ok(_)) | None => {}
        }
        let mut e = lock(&consumer.context().engine);
        let mut tasks = std::mem::take(&mut e.tasks);
        let mut turn = Turn { e: &mut e, consumer };
        let done = match driver::turn(&mut turn, &mut tasks, &mut busy) {
            Ok(Flow::Stop) => Some(driver::finish(&mut turn, &mut tasks, std::mem::take(&mut busy))),
            Ok(flow) => {
                idle = flow == Flow::Idle;
                None
            }
            Err(err) => Some(Err(err)),
        };
        e.tasks = tasks;
        if let Some(result) = done {
            return result;
        }
    }
}

/// The start-up end of every partition of every external input: `--drain` stops there.
fn startup_ends(kafka: &Kafka, external: &BTreeSet<String>) -> Result<BTreeMap<(String, u32), u64>> {
    let mut startup = BTreeMap::new();
    for t in external {
        for p in 0..kafka.partitions(t)?.unwrap_or(0) {
            let (_, high) = kafka.watermarks(t, p)?;
            startup.insert((t.clone(), p), high.max(0) as u64);
        }
    }
    Ok(startup)
}

/// Changelog records handed to the core at once while reading.
const BATCH: usize = 1_000;

impl Backend for Engine {
    type Feed = KafkaFeed;

    fn timestamp_limits(&self, spec: &TaskSpec) -> Option<TimestampLimits> {
        limits_of(&self.topic_configs, spec)
    }

    fn size_limits(&self, spec: &TaskSpec, config: &crate::config::Config) -> SizeLimits {
        sizes_of(&self.topic_configs, spec, config)
    }

    fn feed(&self, spec: &TaskSpec, p: u32, positions: &BTreeMap<String, Pos>) -> Result<KafkaFeed> {
        feed_for(&self.kafka, &self.opts, &self.startup, spec, p, positions)
    }

    fn changelog_extent(&self, topic: &str, p: u32) -> Result<Option<Extent>> {
        // (Through the metadata client, connected and never waiting on a fetch of its own.)
        let md = self.kafka.topic_metadata(topic)?;
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else { return Ok(None) };
        match t.error().map(RDKafkaErrorCode::from) {
            None if (p as usize) < t.partitions().len() => {}
            None | Some(RDKafkaErrorCode::UnknownTopicOrPartition) => return Ok(None),
            Some(e) => return Err(BrokerError::Refused { doing: format!("topic `{topic}`"), code: e }.into()),
        }
        let (low, high) = self.kafka.watermarks(topic, p)?;
        let low = low.max(0) as u64;
        Ok(Some(Extent { low, end: Pos::at(high.max(0) as u64), deletions_from: low }))
    }

    /// Committed records only (read_committed); returns once the position reaches `end`, which
    /// may be past transaction markers after the last record.
    fn read_changelog(
        &self,
        topic: &str,
        p: u32,
        from: Pos,
        end: Pos,
        visit: &mut crate::runtime::backend::Visit<'_>,
    ) -> Result<Pos> {
        let mut config = reader_config(&self.kafka, &self.opts);
        // Fetches return at once at the end, so the end is known without waiting.
        config.set("fetch.wait.max.ms", "10");
        let consumer = Reader(config.create().map_err(client("Kafka consumer"))?);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p as i32, Offset::Offset(from.offset as i64)).map_err(BrokerError::from)?;
        consumer.assign(&tpl).map_err(client(format!("cannot read `{topic}`")))?;
        // How far the reader is: past the last record read, or at the end it reported (past
        // transaction markers). (Not the reader's `position()`: see `Batches`.)
        let mut at = from.offset;
        // (A batch may run past `end`: those records are not visited.)
        let mut past_end = false;
        let mut batches = Batches::new(&consumer, BATCH)
            .ok_or_else(|| state_error(format!("reading `{topic}` partition {p}: the consumer has no queue")))?;
        // (When the last record was read: taken when the reading pauses, not per record.)
        let mut quiet = Instant::now();
        let mut heard = false;
        loop {
            let fetched = batches.fetch(Duration::from_millis(200));
            let mut paused = fetched == 0;
            let mut entries = Vec::with_capacity(fetched);
            for m in batches.messages() {
                match m {
                    Fetched::Record(e) if e.offset >= end.offset => past_end = true,
                    Fetched::Record(e) => {
                        heard = true;
                        at = at.max(e.offset + 1);
                        entries.push(e);
                    }
                    Fetched::End(o) => {
                        paused = true;
                        at = at.max(o);
                    }
                    Fetched::Error(e) if is_fatal(&e) => {
                        return Err(client(format!("cannot read `{topic}` partition {p}"))(e).into())
                    }
                    // (A dropped connection: librdkafka reconnects; the wait for the end goes on.)
                    Fetched::Error(_) => {}
                }
            }
            if !entries.is_empty() {
                visit(&entries, Pos::at(at.min(end.offset)))?;
            }
            // Under read_committed the end of partition is the last stable offset: an open
            // transaction (of an instance that died) holds the rest until it is aborted.
            if past_end || at >= end.offset {
                break;
            }
            if paused {
                if std::mem::take(&mut heard) {
                    quiet = Instant::now();
                }
                if quiet.elapsed() > RESTORE_WAIT {
                    return Err(state_error(format!(
                        "reading `{topic}` partition {p}: stuck at offset {at} of {} for {}s (an open transaction?)",
                        end.offset,
                        RESTORE_WAIT.as_secs()
                    )));
                }
            }
        }
        Ok(Pos::at(if past_end { end.offset } else { at.min(end.offset) }))
    }

    fn changelog_may_pass_commit(&self) -> bool {
        true
    }

    fn append_alone(&self, appends: Vec<Append>) -> Result<Vec<Pos>> {
        self.append_all(appends)
    }
}

impl Engine {
    /// [`Backend::append_alone`], with the Kafka backend's errors as text.
    fn append_all(&self, appends: Vec<Append>) -> Result<Vec<Pos>> {
        if self.eos {
            self.producer.inner.begin_transaction().map_err(client("cannot begin a transaction"))?;
        }
        for a in &appends {
            for r in &a.records() {
                self.producer.send_parts(
                    &a.topic,
                    a.partition,
                    r.key.as_deref(),
                    r.value.as_deref(),
                    r.timestamp,
                    std::iter::empty(),
                )?;
            }
        }
        self.producer.flush()?;
        if self.eos {
            self.producer.inner.commit_transaction(TIMEOUT).map_err(client("cannot commit the transaction"))?;
        }
        let mut delivered: BTreeMap<String, FxHashMap<i32, i64>> = BTreeMap::new();
        Ok(appends
            .iter()
            .map(|a| {
                let d = delivered.entry(a.topic.clone()).or_insert_with(|| self.producer.take_delivered(&a.topic));
                Pos::at(d.get(&(a.partition as i32)).map_or(0, |o| *o as u64 + 1))
            })
            .collect())
    }
}
