//! Prometheus metrics of a run, served on `--http-addr` in the Prometheus text format
//! (version 0.0.4), with the probes an orchestrator asks: `/healthz` (liveness: the process
//! answers) and `/ready` (readiness: the instance has its partitions, restored, and is not
//! stopping; see [`Health`]).
//!
//! The hot path never touches these: a task counts in its own plain [`Counters`], and the driver
//! hands the totals to [`TaskMetrics::publish`] at each commit, which adds the difference since
//! the last commit to the shared counters. Restores report per batch of changelog records.
//!
//! [`Counters`]: crate::runtime::task::Counters

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppLabels {
    application: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    application: String,
    task: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessorLabels {
    application: String,
    task: String,
    processor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    application: String,
    task: String,
    store: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputLabels {
    application: String,
    task: String,
    /// `topic/partition`.
    input: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    application: String,
    task: String,
    /// The tenant id: its text when UTF-8, else `0x` and its bytes in hex.
    tenant: String,
}

type Ratio = Gauge<f64, AtomicU64>;
type Latency = Family<TaskLabels, Histogram, fn() -> Histogram>;

fn commit_latency_histogram() -> Histogram {
    // 0.5 ms to about 8 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

/// `/console/state` (see [`crate::runtime::console::application_state`]).
pub(crate) fn console_state(url: &str, m: &Metrics) -> String {
    let text = m.encode();
    let live = m.live_tasks();
    crate::runtime::console::application_state(url, &m.console, &m.queries, (&m.app, m.health.ready(), &text, &live))
}

/// Every metric of one application's run.
pub struct Metrics {
    app: String,
    registry: Registry,
    records_in: Family<TaskLabels, Counter>,
    records_out: Family<TaskLabels, Counter>,
    dead_letters: Family<TaskLabels, Counter>,
    skipped: Family<TaskLabels, Counter>,
    commits: Family<TaskLabels, Counter>,
    commit_latency: Latency,
    processor_records: Family<ProcessorLabels, Counter>,
    late: Family<ProcessorLabels, Counter>,
    cache_hits: Family<ProcessorLabels, Counter>,
    cache_misses: Family<ProcessorLabels, Counter>,
    cache_hit_ratio: Family<ProcessorLabels, Ratio>,
    restored: Family<StoreLabels, Counter>,
    restore_remaining: Family<StoreLabels, Gauge<i64, AtomicI64>>,
    standby_lag: Family<StoreLabels, Gauge<i64, AtomicI64>>,
    standby_offset: Family<StoreLabels, Gauge<i64, AtomicI64>>,
    input_lag: Family<InputLabels, Gauge<i64, AtomicI64>>,
    tenant_records_in: Family<TenantLabels, Counter>,
    tenant_dead_letters: Family<TenantLabels, Counter>,
    tenant_state_keys: Family<TenantLabels, Gauge<i64, AtomicI64>>,
    ready: Family<AppLabels, Gauge<i64, AtomicI64>>,
    pub health: Health,
    /// Interactive queries of the instance's stores (`/stores`), answered by its tasks.
    pub queries: crate::runtime::query::Queries,
    /// What the web console shows besides the counters.
    pub console: crate::runtime::console::Console,
    /// The tasks that have metrics now (a task's series stay when it moves to another
    /// instance; the console shows the tasks here only), each with how many forms of it are open.
    live: Arc<Mutex<BTreeMap<String, usize>>>,
}

/// Whether the instance is ready for traffic, as a driver reports it: not until it has its
/// partitions (on Kafka: the group's assignment) and their stores are restored, and not once it
/// is stopping (SIGTERM). `/ready` answers 200 or 503 with the reason.
#[derive(Debug)]
pub struct Health {
    ready: AtomicBool,
    reason: Mutex<String>,
    /// Set by SIGTERM/SIGINT: the instance is stopping, whatever else it says.
    stop: Mutex<Option<Arc<AtomicBool>>>,
}

impl Health {
    fn new() -> Health {
        Health { ready: AtomicBool::new(false), reason: Mutex::new("starting".into()), stop: Mutex::new(None) }
    }

    /// Ready, or not ready for `reason`.
    pub fn set(&self, ready: Result<(), &str>) {
        if let Err(r) = ready {
            let mut reason = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if *reason != r {
                *reason = r.to_string();
            }
        }
        self.ready.store(ready.is_ok(), Ordering::SeqCst);
    }

    /// Not ready once `stop` is set.
    pub fn watch_stop(&self, stop: Arc<AtomicBool>) {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop);
    }

    /// Ok, or why not.
    pub fn ready(&self) -> Result<(), String> {
        if self.stop.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            return Err("stopping: a last commit, then the instance leaves".into());
        }
        if self.ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        Err(self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").field("app", &self.app).finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new(app: &str) -> Metrics {
        let mut registry = Registry::default();
        let mut counter = |name: &str, help: &str| {
            let f = Family::<TaskLabels, Counter>::default();
            registry.register(name, help, f.clone());
            f
        };
        let records_in = counter(
            "streamc_records_in",
            "Records a task read from its input partitions (main and table inputs), bad ones included",
        );
        let records_out = counter("streamc_records_out", "Records a task wrote to sink and repartition topics");
        let dead_letters = counter(
            "streamc_dead_letter_records",
            "Records sent to the dead-letter topic, or results that failed to emit",
        );
        let skipped = counter("streamc_skipped_records", "Bad records skipped (on_error: skip)");
        let commits = counter("streamc_commits", "Commits of a task");
        let commit_latency: Latency = Family::new_with_constructor(commit_latency_histogram);
        registry.register(
            "streamc_commit_latency_seconds",
            "Time a commit takes: flush, log commit and local state",
            commit_latency.clone(),
        );
        let mut per_processor = |name: &str, help: &str| {
            let f = Family::<ProcessorLabels, Counter>::default();
            registry.register(name, help, f.clone());
            f
        };
        let processor_records = per_processor("streamc_processor_records", "Records that reached a processor");
        let late = per_processor(
            "streamc_late_records_dropped",
            "Records dropped by a window aggregate because their window had closed",
        );
        let cache_hits =
            per_processor("streamc_cache_hits", "Record-cache lookups of an aggregate that found the entry");
        let cache_misses =
            per_processor("streamc_cache_misses", "Record-cache lookups of an aggregate that went to the store");
        let cache_hit_ratio = Family::<ProcessorLabels, Ratio>::default();
        registry.register(
            "streamc_cache_hit_ratio",
            "Record-cache hits / lookups of an aggregate since start-up",
            cache_hit_ratio.clone(),
        );
        let restored = Family::<StoreLabels, Counter>::default();
        registry.register(
            "streamc_restored_records",
            "Changelog records replayed into a store at start-up",
            restored.clone(),
        );
        let restore_remaining = Family::<StoreLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "streamc_restore_remaining_records",
            "Changelog records still to replay into a store (0 once restored)",
            restore_remaining.clone(),
        );
        let standby_lag = Family::<StoreLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "streamc_standby_lag_records",
            "Changelog records a standby replica of a store has yet to apply (num.standby.replicas)",
            standby_lag.clone(),
        );
        let standby_offset = Family::<StoreLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "streamc_standby_offset",
            "The changelog offset a standby replica of a store has applied up to (the next to apply)",
            standby_offset.clone(),
        );
        let input_lag = Family::<InputLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "streamc_input_lag_records",
            "Records of an input partition after a task's position, as of its last commit (the end offset the backend last saw minus the position)",
            input_lag.clone(),
        );
        let tenant_records_in = Family::<TenantLabels, Counter>::default();
        registry.register(
            "streamc_tenant_records_in",
            "Records of one tenant a task read (tenant-scoped queries)",
            tenant_records_in.clone(),
        );
        let tenant_dead_letters = Family::<TenantLabels, Counter>::default();
        registry.register(
            "streamc_tenant_dead_letter_records",
            "Records of one tenant sent to the dead-letter topic (those whose tenant could be read)",
            tenant_dead_letters.clone(),
        );
        let tenant_state_keys = Family::<TenantLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "streamc_tenant_state_keys",
            "Keys one tenant holds in a task's stores",
            tenant_state_keys.clone(),
        );
        let ready = Family::<AppLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "streamc_ready",
            "1 when the instance has its partitions, restored, and is not stopping (what /ready answers)",
            ready.clone(),
        );
        Metrics {
            ready,
            health: Health::new(),
            queries: Default::default(),
            console: Default::default(),
            live: Default::default(),
            tenant_records_in,
            tenant_dead_letters,
            tenant_state_keys,
            app: app.to_string(),
            registry,
            records_in,
            records_out,
            dead_letters,
            skipped,
            commits,
            commit_latency,
            processor_records,
            late,
            cache_hits,
            cache_misses,
            cache_hit_ratio,
            restored,
            restore_remaining,
            standby_lag,
            standby_offset,
            input_lag,
        }
    }

    /// The current values in the Prometheus text format, version 0.0.4.
    /// The application's id.
    pub fn app(&self) -> &str {
        &self.app
    }

    pub fn encode(&self) -> String {
        let app = AppLabels { application: self.app.clone() };
        self.ready.get_or_create(&app).set(self.health.ready().is_ok() as i64);
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut s, &self.registry);
        s
    }

    /// The handles of task `task` (`<subtopology>_<partition>`): `processors` names the plan node
    /// of each of its operators, `aggregate` its aggregate's node if it has one.
    /// The tasks whose metrics are open (the tasks this instance runs).
    pub fn live_tasks(&self) -> std::collections::BTreeSet<String> {
        self.live.lock().map(|l| l.keys().cloned().collect()).unwrap_or_default()
    }

    pub fn task(&self, task: &str, processors: &[String], aggregate: Option<&str>) -> TaskMetrics {
        let t = TaskLabels { application: self.app.clone(), task: task.to_string() };
        let p = |name: &str| ProcessorLabels {
            application: self.app.clone(),
            task: task.to_string(),
            processor: name.to_string(),
        };
        TaskMetrics {
            records_in: self.records_in.get_or_create_owned(&t),
            records_out: self.records_out.get_or_create_owned(&t),
            dead_letters: self.dead_letters.get_or_create_owned(&t),
            skipped: self.skipped.get_or_create_owned(&t),
            commits: self.commits.get_or_create_owned(&t),
            commit_latency: self.commit_latency.get_or_create_owned(&t),
            processors: processors.iter().map(|n| self.processor_records.get_or_create_owned(&p(n))).collect(),
            aggregate: aggregate.map(|n| {
                let l = p(n);
                AggregateMetrics {
                    late: self.late.get_or_create_owned(&l),
                    cache_hits: self.cache_hits.get_or_create_owned(&l),
                    cache_misses: self.cache_misses.get_or_create_owned(&l),
                    cache_hit_ratio: self.cache_hit_ratio.get_or_create_owned(&l),
                }
            }),
            reported: TaskCounts::default(),
            input_lag: self.input_lag.clone(),
            inputs: Vec::new(),
            live: {
                if let Ok(mut l) = self.live.lock() {
                    *l.entry(task.to_string()).or_default() += 1;
                }
                self.live.clone()
            },
            tenants: TenantFamilies {
                app: self.app.clone(),
                task: task.to_string(),
                records_in: self.tenant_records_in.clone(),
                dead_letters: self.tenant_dead_letters.clone(),
                state_keys: self.tenant_state_keys.clone(),
            },
        }
    }

    /// The lag and position of this instance's standby replica of one store of a task (None:
    /// it keeps none any more, and the series go).
    pub fn standby(&self, task: &str, store: &str, lag_and_offset: Option<(u64, u64)>) {
        let l = StoreLabels { application: self.app.clone(), task: task.to_string(), store: store.to_string() };
        match lag_and_offset {
            Some((lag, offset)) => {
                self.standby_lag.get_or_create(&l).set(lag.min(i64::MAX as u64) as i64);
                self.standby_offset.get_or_create(&l).set(offset.min(i64::MAX as u64) as i64);
            }
            None => {
                self.standby_lag.remove(&l);
                self.standby_offset.remove(&l);
            }
        }
    }

    /// The restore handles of one store of a task.
    pub fn restore(&self, task: &str, store: &str) -> RestoreMetrics {
        let l = StoreLabels { application: self.app.clone(), task: task.to_string(), store: store.to_string() };
        RestoreMetrics {
            restored: self.restored.get_or_create_owned(&l),
            remaining: self.restore_remaining.get_or_create_owned(&l),
        }
    }
}

/// A task's totals since start-up, as the driver knows them at a commit.
#[derive(Clone, Debug, Default)]
pub struct TaskCounts {
    pub records_in: u64,
    pub records_out: u64,
    pub dead_letters: u64,
    pub skipped: u64,
    pub commits: u64,
    pub late: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Records that reached each operator, indexed like the `processors` given to [`Metrics::task`].
    pub processors: Vec<u64>,
    /// Per input partition (`topic/partition`): records after the task's position.
    pub lags: Vec<(String, u64)>,
    /// Per tenant: records in and dead letters (totals), and keys in the task's stores (now).
    pub tenants: BTreeMap<Vec<u8>, crate::runtime::task::TenantCounts>,
    pub tenant_keys: BTreeMap<Vec<u8>, i64>,
}

struct TenantFamilies {
    app: String,
    task: String,
    records_in: Family<TenantLabels, Counter>,
    dead_letters: Family<TenantLabels, Counter>,
    state_keys: Family<TenantLabels, Gauge<i64, AtomicI64>>,
}

impl TenantFamilies {
    fn labels(&self, t: &[u8]) -> TenantLabels {
        TenantLabels {
            application: self.app.clone(),
            task: self.task.clone(),
            tenant: crate::runtime::tenant::display(t),
        }
    }
}

struct AggregateMetrics {
    late: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    cache_hit_ratio: Ratio,
}

/// One task's metrics, and the totals already added to them.
pub struct TaskMetrics {
    records_in: Counter,
    records_out: Counter,
    dead_letters: Counter,
    skipped: Counter,
    commits: Counter,
    commit_latency: Histogram,
    processors: Vec<Counter>,
    aggregate: Option<AggregateMetrics>,
    reported: TaskCounts,
    tenants: TenantFamilies,
    input_lag: Family<InputLabels, Gauge<i64, AtomicI64>>,
    /// The inputs whose lag it set (their series go with it).
    inputs: Vec<String>,
    live: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Drop for TaskMetrics {
    fn drop(&mut self) {
        let task = &self.tenants.task;
        if let Ok(mut l) = self.live.lock() {
            if let Some(n) = l.get_mut(task) {
                *n -= 1;
                if *n == 0 {
                    l.remove(task);
                    // (The task has gone from this instance: its lag is no longer this one's to say.)
                    for input in &self.inputs {
                        let labels = InputLabels {
                            application: self.tenants.app.clone(),
                            task: task.clone(),
                            input: input.clone(),
                        };
                        self.input_lag.remove(&labels);
                    }
                }
            }
        }
    }
}

/// Add to `c` what `now` has gained since `*reported`.
fn add(c: &Counter, reported: &mut u64, now: u64) {
    if now > *reported {
        c.inc_by(now - *reported);
        *reported = now;
    }
}

impl TaskMetrics {
    /// Take over the totals `old` published (the task's counts carry over to a new form of its
    /// query), but not its per-processor counts: the processors are the new form's.
    pub fn keep_totals(&mut self, old: &TaskMetrics) {
        self.reported = TaskCounts { processors: Vec::new(), ..old.reported.clone() };
    }

    /// Bring the shared metrics up to the task's totals.
    pub fn publish(&mut self, now: &TaskCounts) {
        let r = &mut self.reported;
        add(&self.records_in, &mut r.records_in, now.records_in);
        add(&self.records_out, &mut r.records_out, now.records_out);
        add(&self.dead_letters, &mut r.dead_letters, now.dead_letters);
        add(&self.skipped, &mut r.skipped, now.skipped);
        add(&self.commits, &mut r.commits, now.commits);
        for (input, lag) in &now.lags {
            let l = InputLabels {
                application: self.tenants.app.clone(),
                task: self.tenants.task.clone(),
                input: input.clone(),
            };
            self.input_lag.get_or_create(&l).set((*lag).min(i64::MAX as u64) as i64);
            if !self.inputs.contains(input) {
                self.inputs.push(input.clone());
            }
        }
        r.processors.resize(self.processors.len(), 0);
        for ((c, rep), n) in self.processors.iter().zip(r.processors.iter_mut()).zip(&now.processors) {
            add(c, rep, *n);
        }
        for (t, c) in &now.tenants {
            let rep = r.tenants.entry(t.clone()).or_default();
            if c.records_in > rep.records_in || c.dead_letters > rep.dead_letters {
                let l = self.tenants.labels(t);
                add(&self.tenants.records_in.get_or_create(&l), &mut rep.records_in, c.records_in);
                add(&self.tenants.dead_letters.get_or_create(&l), &mut rep.dead_letters, c.dead_letters);
            }
        }
        // A tenant whose keys are all gone (purged, expired) reads 0.
        for t in r.tenant_keys.keys() {
            if !now.tenant_keys.contains_key(t) {
                self.tenants.state_keys.get_or_create(&self.tenants.labels(t)).set(0);
            }
        }
        for (t, n) in &now.tenant_keys {
            if r.tenant_keys.get(t) != Some(n) {
                self.tenants.state_keys.get_or_create(&self.tenants.labels(t)).set(*n);
            }
        }
        r.tenant_keys = now.tenant_keys.clone();
        if let Some(a) = &self.aggregate {
            add(&a.late, &mut r.late, now.late);
            add(&a.cache_hits, &mut r.cache_hits, now.cache_hits);
            add(&a.cache_misses, &mut r.cache_misses, now.cache_misses);
            let lookups = now.cache_hits + now.cache_misses;
            if lookups > 0 {
                a.cache_hit_ratio.set(now.cache_hits as f64 / lookups as f64);
            }
        }
    }

    pub fn observe_commit(&self, seconds: f64) {
        self.commit_latency.observe(seconds);
    }
}

/// Restore progress of one store.
pub struct RestoreMetrics {
    restored: Counter,
    remaining: Gauge<i64, AtomicI64>,
}

impl RestoreMetrics {
    /// A restore of `total` records begins.
    pub fn start(&self, total: u64) {
        self.remaining.set(total.min(i64::MAX as u64) as i64);
    }
    /// `n` more records were replayed.
    pub fn advance(&self, n: u64) {
        self.restored.inc_by(n);
        let left = (self.remaining.get() - n.min(i64::MAX as u64) as i64).max(0);
        self.remaining.set(left);
    }
    pub fn done(&self) {
        self.remaining.set(0);
    }
}

pub const JSON: &str = "application/json";

fn error_json(why: &str) -> String {
    format!("{}\n", serde_json::json!({ "error": why }))
}

/// `GET /stores/<store>?…`: the store's committed rows this instance holds that the query asks
/// for (see [`crate::runtime::query::Fetch::parse`]); `GET /metadata`. The status and the JSON
/// body.
pub(crate) fn store_query(url: &str, metrics: &Metrics) -> (u16, String) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if path == "/metadata" {
        return match metrics.queries.metadata() {
            Ok(v) => (200, format!("{v}\n")),
            Err(why) => (503, error_json(&why)),
        };
    }
    let name = path.trim_start_matches("/stores/");
    let name: String = form_urlencoded::parse(format!("n={name}").as_bytes()).map(|(_, v)| v.into_owned()).collect();
    let answer = crate::runtime::query::Fetch::parse(&name, query)
        .map_err(|e| (400, e))
        .and_then(|f| metrics.queries.fetch(f, std::time::Duration::from_secs(10)));
    match answer {
        Ok(local) => (
            200,
            format!("{}\n", serde_json::json!({ "store": name, "rows": local.rows, "partitions": local.partitions })),
        ),
        Err((code, why)) => (code, error_json(&why)),
    }
}

/// Every other request (`get`: its method is GET): the status, content type and body.
pub(crate) fn respond(get: bool, url: &str, metrics: &Metrics) -> (u16, &'static str, String) {
    let path = url.split('?').next().unwrap_or("");
    match (get, path) {
        (true, "/metrics") => (200, prometheus_text::CONTENT_TYPE, metrics.encode()),
        (true, "/healthz") => (200, "text/plain; charset=utf-8", "ok\n".to_string()),
        (true, "/") => (200, "text/html; charset=utf-8", crate::runtime::console::PAGE.to_string()),
        (true, "/console/state") => (200, JSON, console_state(url, metrics)),
        (true, "/console/topology.svg") => (200, "image/svg+xml", metrics.console.svg()),
        (true, "/stores") => match metrics.queries.stores() {
            Ok(v) => (200, JSON, format!("{v}\n")),
            Err(why) => (503, JSON, error_json(&why)),
        },
        (true, "/ready") => match metrics.health.ready() {
            Ok(()) => (200, "text/plain; charset=utf-8", "ready\n".to_string()),
            Err(why) => (503, "text/plain; charset=utf-8", format!("not ready: {why}\n")),
        },
        (true, _) => (
            404,
            "text/plain; charset=utf-8",
            "not found: the console is at /, metrics at /metrics, probes at /healthz and /ready, stores at /stores\n"
                .to_string(),
        ),
        _ => (405, "text/plain; charset=utf-8", "only GET is supported\n".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, line_start: &str) -> Option<f64> {
        text.lines().find(|l| l.starts_with(line_start)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
    }

    #[test]
    fn counters_get_the_difference_at_each_publish_and_encode_as_prometheus_text() {
        let m = Metrics::new("stats");
        let mut t = m.task("0_1", &["q-where".into(), "q-aggregate".into()], Some("q-aggregate"));
        let mut c = TaskCounts {
            records_in: 10,
            records_out: 4,
            dead_letters: 1,
            commits: 1,
            cache_hits: 3,
            cache_misses: 1,
            late: 2,
            processors: vec![9, 7],
            ..Default::default()
        };
        t.publish(&c);
        c.records_in = 25;
        c.commits = 2;
        t.publish(&c);
        t.publish(&c);
        t.observe_commit(0.003);
        let r = m.restore("0_1", "q-aggregate");
        r.start(100);
        r.advance(40);
        let text = m.encode();
        assert!(text.contains("# TYPE streamc_records_in_total counter\n"), "{text}");
        assert_eq!(sample(&text, "streamc_records_in_total{application=\"stats\",task=\"0_1\"}"), Some(25.0), "{text}");
        assert_eq!(sample(&text, "streamc_commits_total{"), Some(2.0), "{text}");
        assert_eq!(sample(&text, "streamc_dead_letter_records_total{"), Some(1.0), "{text}");
        assert_eq!(
            sample(
                &text,
                "streamc_processor_records_total{application=\"stats\",task=\"0_1\",processor=\"q-aggregate\"}"
            ),
            Some(7.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "streamc_late_records_dropped_total{application=\"stats\",task=\"0_1\",processor=\"q-aggregate\"}"
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(sample(&text, "streamc_cache_hit_ratio{"), Some(0.75), "{text}");
        assert_eq!(sample(&text, "streamc_commit_latency_seconds_count{"), Some(1.0), "{text}");
        assert_eq!(
            sample(&text, "streamc_commit_latency_seconds_bucket{application=\"stats\",task=\"0_1\",le=\"+Inf\"}"),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "streamc_restored_records_total{application=\"stats\",task=\"0_1\",store=\"q-aggregate\"}"),
            Some(40.0),
            "{text}"
        );
        assert_eq!(sample(&text, "streamc_restore_remaining_records{"), Some(60.0), "{text}");
        // The 0.0.4 text format: no OpenMetrics end marker, and every sample is `name{labels} value`.
        assert!(!text.contains("# EOF"), "{text}");
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = l.rsplit_once(' ').unwrap();
            assert!(series.starts_with("streamc_") && series.ends_with('}'), "{l}");
            assert!(value.parse::<f64>().is_ok() || value == "+Inf", "{l}");
        }
    }
}
