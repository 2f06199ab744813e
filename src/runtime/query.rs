//! Interactive queries: a store's committed rows read by key, key range or key prefix, and a
//! windowed store's by window start, as JSON. The same reading serves a running instance (its
//! tasks answer between steps, from their committed state) and `streamc query` on an
//! application that has stopped (local state brought up to its changelogs).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::control::Stage;
use crate::hir;
use crate::plan::physical::{AggSpec, TaskSpec};
use crate::runtime::agg::{decode_entry, key_part, result_values, store_key};
use crate::runtime::pages::PagedTree;
use crate::runtime::state::Pending;
use crate::runtime::wire::decode_key;
use crate::types::{RecordType, Type};
use crate::value::Value;

/// What a query asks of one store. Times are ms since the epoch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fetch {
    pub store: String,
    /// One key (its text: a string key as is, other types as JSON, e.g. `7` or `["a", 1]`).
    pub key: Option<String>,
    /// Keys whose text starts with this (string keys).
    pub prefix: Option<String>,
    /// Keys from this one to `to_key`, both included, in the key type's order.
    pub from_key: Option<String>,
    pub to_key: Option<String>,
    /// A windowed store: windows starting at or after `from` and at or before `to`.
    pub from: Option<i64>,
    pub to: Option<i64>,
    /// Answer from this instance's tasks only (set on requests one instance forwards to another).
    pub local: bool,
}

impl Fetch {
    /// From the query string of `GET /stores/<store>?…` (`key`, `prefix`, `from_key`, `to_key`,
    /// `from`, `to` as ms or RFC 3339, `local`).
    pub fn parse(store: &str, query: &str) -> Result<Fetch, String> {
        let mut f = Fetch { store: store.to_string(), ..Fetch::default() };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let v = v.into_owned();
            match k.as_ref() {
                "key" => f.key = Some(v),
                "prefix" => f.prefix = Some(v),
                "from_key" => f.from_key = Some(v),
                "to_key" => f.to_key = Some(v),
                "from" => f.from = Some(parse_time(&v)?),
                "to" => f.to = Some(parse_time(&v)?),
                "local" => f.local = v == "true",
                other => {
                    return Err(format!(
                        "unknown parameter `{other}` (a store takes key, prefix, from_key, to_key, from, to)"
                    ))
                }
            }
        }
        if f.key.is_some() && (f.prefix.is_some() || f.from_key.is_some() || f.to_key.is_some()) {
            return Err("`key` asks for one key: it does not go with prefix, from_key or to_key".into());
        }
        Ok(f)
    }

    /// The query string that [`Fetch::parse`] reads back.
    pub fn query_string(&self) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("key", &self.key),
            ("prefix", &self.prefix),
            ("from_key", &self.from_key),
            ("to_key", &self.to_key),
            ("from", &self.from.map(|t| t.to_string())),
            ("to", &self.to.map(|t| t.to_string())),
        ] {
            if let Some(v) = v {
                s.append_pair(k, v);
            }
        }
        if self.local {
            s.append_pair("local", "true");
        }
        s.finish()
    }
}

/// A time given as ms since the epoch or in RFC 3339.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.trim().parse::<i64>() {
        return Ok(ms);
    }
    match crate::value::decode_value(format!("\"{}\"", s.trim()).as_bytes(), &Type::Timestamp) {
        Ok(Value::Ts(t)) => Ok(t),
        _ => Err(format!("`{s}` is not a time (ms since the epoch, or RFC 3339 like 2024-05-01T12:00:00Z)")),
    }
}

/// Where a running embedded instance of `app` serves its stores (recorded by `run --http-addr`).
fn served_path(state_dir: &std::path::Path, app: &str) -> std::path::PathBuf {
    crate::runtime::app_dir(state_dir, app).join("http-addr")
}

pub fn served_at(state_dir: &std::path::Path, app: &str) -> Option<String> {
    std::fs::read_to_string(served_path(state_dir, app)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Record (Some) or forget (None) the address a run serves on.
pub fn set_served_at(state_dir: &std::path::Path, app: &str, addr: Option<&str>) {
    let path = served_path(state_dir, app);
    match addr {
        Some(a) => {
            if let Some(d) = path.parent() {
                let _ = std::fs::create_dir_all(d);
            }
            let _ = std::fs::write(&path, a);
        }
        None => {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// How this process asks instances' HTTP servers (`streamc query`, and a run asking the other
/// instances): the bearer token to send and the CA certificates to trust, from `http.*`.
#[derive(Default)]
struct Client {
    token: Option<String>,
    /// `http.tls.ca`: trusted instead of the public roots.
    roots: Option<Vec<ureq::tls::Certificate<'static>>>,
    /// `http.tls.*` is set: the token goes to `https://` servers only.
    tls: bool,
}

static CLIENT: std::sync::OnceLock<Client> = std::sync::OnceLock::new();

/// Take the configuration's `http.*` settings for the servers this process asks (once, at
/// start); errors name the setting.
pub fn set_client(c: &crate::config::HttpConfig) -> Result<(), String> {
    let roots = match &c.tls.ca {
        None => None,
        Some(f) => {
            let pem = std::fs::read(f).map_err(|e| format!("http.tls.ca {f}: {e}"))?;
            let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                    Ok(_) => None,
                    Err(e) => Some(Err(format!("http.tls.ca {f}: {e}"))),
                })
                .collect::<Result<_, _>>()?;
            if certs.is_empty() {
                return Err(format!("http.tls.ca {f}: no certificate in it"));
            }
            Some(certs)
        }
    };
    let tls = c.tls.cert.is_some() || c.tls.ca.is_some();
    let _ = CLIENT.set(Client { token: c.token()?, roots, tls });
    Ok(())
}

/// Ask the instance serving at `server` (`HOST:PORT` or a URL).
pub fn ask_server(server: &str, f: &Fetch, timeout: Duration) -> Result<Local, String> {
    let store: String = form_urlencoded::byte_serialize(f.store.as_bytes()).collect();
    let (base, status, body) = get_json(server, &format!("/stores/{store}?{}", f.query_string()), timeout)?;
    if status != 200 {
        return Err(format!("{base}: {}", body["error"].as_str().unwrap_or("error")));
    }
    Ok(Local {
        rows: serde_json::from_value(body["rows"].clone())
            .map_err(|e| format!("{base} answered rows that are not rows: {e}"))?,
        partitions: serde_json::from_value(body["partitions"].clone()).unwrap_or_default(),
    })
}

/// `GET path` of the instance serving at `server` (`HOST:PORT` or a URL), as this process asks
/// instances (its token, its CA): the base URL, the status and the JSON body.
pub(crate) fn get_json(
    server: &str,
    path: &str,
    timeout: Duration,
) -> Result<(String, u16, serde_json::Value), String> {
    let base =
        if server.contains("://") { server.trim_end_matches('/').to_string() } else { format!("http://{server}") };
    let at = format!("{base}{path}");
    let client = CLIENT.get_or_init(Client::default);
    let mut tls = ureq::tls::TlsConfig::builder();
    if let Some(roots) = &client.roots {
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(roots));
    }
    let mut req = ureq::get(&at)
        .config()
        .http_status_as_error(false)
        .timeout_global(Some(timeout + Duration::from_secs(5)))
        .tls_config(tls.build())
        .build();
    if let Some(t) = &client.token {
        if client.tls && !base.starts_with("https://") {
            return Err(format!(
                "{base}: not sending http.auth.token over plain HTTP while http.tls is set (advertise application.server as https://HOST:PORT)"
            ));
        }
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.call().map_err(|e| format!("no answer from {base}: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_string()
        .map_err(|e| format!("no answer from {base}: {e}"))?;
    let body: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{base} answered {status} with a body that is not JSON ({e}): {text}"))?;
    Ok((base, status, body))
}

/// One row of an answer: the key, the partition of the task that holds it, and the row.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Answer {
    pub key: serde_json::Value,
    pub partition: u32,
    pub value: serde_json::Value,
}

/// A store a query can read, as the running program defines it.
pub(crate) struct Target {
    pub(crate) spec: Arc<TaskSpec>,
    pub(crate) store: usize,
    kind: Kind,
}

enum Kind {
    /// An aggregate's store: rows as the aggregate emits them (window bounds, group values,
    /// each aggregate's result), named as its output.
    Agg { agg: Box<AggSpec>, row: RecordType },
    /// A table input's store: its latest row per key.
    Table { source: Arc<hir::Source> },
}

impl Target {
    fn key_type(&self) -> Type {
        match &self.kind {
            Kind::Agg { agg, .. } => agg.key_ty.clone(),
            Kind::Table { source } => source.key_type(),
        }
    }

    fn windowed(&self) -> bool {
        matches!(&self.kind, Kind::Agg { agg, .. } if agg.window.is_some())
    }
}

/// The stores of `stage` a query can read, with what each holds, in plan order.
pub fn queryable(stage: &Stage) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for spec in stage.specs.iter() {
        for st in &spec.stores {
            if let Ok(t) = resolve(stage, &st.name) {
                let what = match &t.kind {
                    Kind::Agg { agg, .. } if agg.window.is_some() => "windowed aggregate",
                    Kind::Agg { .. } => "aggregate",
                    Kind::Table { .. } => "table",
                };
                out.push((st.name.clone(), format!("{what}, key {}", t.key_type())));
            }
        }
    }
    out
}

/// The store `name` of the running program, if a query can read it.
pub(crate) fn resolve(stage: &Stage, name: &str) -> Result<Target, String> {
    for spec in stage.specs.iter() {
        let Some(i) = spec.stores.iter().position(|s| s.name == name) else { continue };
        if spec.tenant {
            return Err(format!(
                "store `{name}` is tenant-scoped: interactive queries do not read tenant-scoped stores yet"
            ));
        }
        if let Some(agg) = spec.agg.as_ref().filter(|a| a.store == i) {
            let row = aggregate_row(&stage.program, agg)
                .ok_or_else(|| format!("internal: no output type for the aggregate `{}`", agg.node))?;
            return Ok(Target { spec: spec.clone(), store: i, kind: Kind::Agg { agg: Box::new(agg.clone()), row } });
        }
        if let Some(t) = spec.tables.iter().chain(&spec.left).find(|t| t.store == i) {
            return Ok(Target { spec: spec.clone(), store: i, kind: Kind::Table { source: t.source.clone() } });
        }
        return Err(format!(
            "store `{name}` holds an operator's working state (a join's buffer, an index): only aggregates' and tables' stores can be queried"
        ));
    }
    let names: Vec<String> = queryable(stage).into_iter().map(|(n, _)| n).collect();
    Err(format!(
        "no store `{name}` in the running program (stores that can be queried: {})",
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    ))
}

/// The record type of an aggregate's results: the step's output.
fn aggregate_row(program: &hir::Program, agg: &AggSpec) -> Option<RecordType> {
    program
        .queries
        .iter()
        .flat_map(|q| q.steps.iter().map(move |s| (q, s)))
        .find(|(q, s)| format!("{}-{}", q.name, s.slug) == agg.node)
        .map(|(_, s)| s.out.value.clone())
}

/// A store entry: its key and value as stored.
type Entry = (Vec<u8>, Vec<u8>);

/// A store's shard as a query reads it: sled, with the committed changes not written to it yet
/// over it (`layers`, oldest first: those in the writer's hands, then those pending).
pub(crate) struct Shard<'a> {
    pub(crate) tree: &'a PagedTree,
    pub(crate) layers: Vec<&'a Pending>,
}

impl Shard<'_> {
    /// Every entry whose store key starts with `prefix`, in key order.
    fn scan(&self, prefix: &[u8]) -> Result<Vec<Entry>, String> {
        let mut all = std::collections::BTreeMap::new();
        for r in self.tree.scan_prefix(prefix) {
            let (k, v) = r.map_err(|e| format!("cannot read local state: {e}"))?;
            all.insert(k, v);
        }
        for p in &self.layers {
            p.overlay(prefix, &mut all);
        }
        Ok(all.into_iter().collect())
    }

    /// The value of one store key.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        if let Some(v) = self.layers.iter().rev().find_map(|p| p.value(key)) {
            return Ok(v.map(<[u8]>::to_vec));
        }
        self.tree.get(key).map_err(|e| format!("cannot read local state: {e}"))
    }
}

/// Bounds of the keys asked for, as values of the key type.
#[derive(Debug)]
struct KeyFilter {
    exact: Option<(Value, Vec<u8>)>,
    prefix: Option<String>,
    from: Option<Value>,
    to: Option<Value>,
}

fn key_value(text: &str, ty: &Type) -> Result<Value, String> {
    match decode_key(Some(text.as_bytes()), ty) {
        Ok(Value::Null) | Err(_) => Err(format!("`{text}` is not a key of type {ty}")),
        Ok(v) => Ok(v),
    }
}

impl KeyFilter {
    fn new(f: &Fetch, ty: &Type) -> Result<KeyFilter, String> {
        let exact = match &f.key {
            Some(k) => {
                let v = key_value(k, ty)?;
                let kb = v.key_bytes(ty);
                Some((v, kb))
            }
            None => None,
        };
        if f.prefix.is_some() && !matches!(ty.base(), Type::String) {
            return Err(format!("`prefix` needs string keys; the keys are {ty}"));
        }
        Ok(KeyFilter {
            exact,
            prefix: f.prefix.clone(),
            from: f.from_key.as_deref().map(|k| key_value(k, ty)).transpose()?,
            to: f.to_key.as_deref().map(|k| key_value(k, ty)).transpose()?,
        })
    }

    fn takes(&self, key: &Value) -> bool {
        if let Some((v, _)) = &self.exact {
            return v.cmp_total(key).is_eq();
        }
        if let (Some(p), Value::Str(s)) = (&self.prefix, key) {
            if !s.starts_with(p.as_str()) {
                return false;
            }
        }
        self.from.as_ref().is_none_or(|f| f.cmp_total(key).is_le())
            && self.to.as_ref().is_none_or(|t| t.cmp_total(key).is_ge())
    }
}

/// The rows of partition `p`'s shard of `t` that `f` asks for, in key (then window start) order.
/// Whether `t` can answer `f`: its keys of the key type, times only for a windowed store.
fn validate(t: &Target, f: &Fetch) -> Result<KeyFilter, String> {
    let filter = KeyFilter::new(f, &t.key_type())?;
    if !t.windowed() && (f.from.is_some() || f.to.is_some()) {
        return Err(format!("`from` and `to` select windows; store `{}` is not windowed", f.store));
    }
    Ok(filter)
}

pub(crate) fn read(t: &Target, f: &Fetch, p: u32, shard: &Shard<'_>) -> Result<Vec<Answer>, String> {
    let ty = t.key_type();
    let filter = validate(t, f)?;
    let mut out: Vec<(Value, i64, Answer)> = Vec::new();
    let json = |v: &Value, ty: &Type| -> serde_json::Value {
        let mut b = Vec::new();
        v.write_json(ty, &mut b);
        serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null)
    };
    match &t.kind {
        Kind::Agg { agg, row } => {
            let prefix = match &filter.exact {
                Some((_, kb)) => store_key(kb, None),
                None => Vec::new(),
            };
            for (sk, v) in shard.scan(&prefix)? {
                // Entries only: a window's or group's key starts with its length, never 0xff…
                if sk.first() == Some(&0xff) {
                    continue;
                }
                let e = decode_entry(&v, agg)?;
                if agg.window.is_some()
                    && (f.from.is_some_and(|from| e.start < from) || f.to.is_some_and(|to| e.start > to))
                {
                    continue;
                }
                let key = decode_key(Some(key_part(&sk)), &ty).map_err(|e| e.0)?;
                if !filter.takes(&key) {
                    continue;
                }
                let vals = result_values(agg, &e)?;
                let value = json(&Value::Record(Arc::new(vals)), &Type::Record(row.clone()));
                out.push((key.clone(), e.start, Answer { key: json(&key, &ty), partition: p, value }));
            }
        }
        Kind::Table { source } => {
            let entries = match &filter.exact {
                Some((_, kb)) => shard.get(kb)?.map(|v| (kb.clone(), v)).into_iter().collect(),
                None => shard.scan(&[])?,
            };
            for (kb, v) in entries {
                let key = decode_key(Some(&kb), &ty).map_err(|e| e.0)?;
                if !filter.takes(&key) {
                    continue;
                }
                let row = crate::format::decode_visible(source, &v)?;
                let value = json(&Value::Record(Arc::new(row)), &Type::Record(source.value.clone()));
                out.push((key.clone(), 0, Answer { key: json(&key, &ty), partition: p, value }));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp_total(&b.0).then(a.1.cmp(&b.1)));
    Ok(out.into_iter().map(|(_, _, a)| a).collect())
}

/// Rows of several partitions, merged into key (then window start, then partition) order.
pub fn merge(mut rows: Vec<Answer>) -> Vec<Answer> {
    rows.sort_by(|a, b| {
        let ka = json_key(&a.key);
        let kb = json_key(&b.key);
        ka.cmp_total(&kb).then_with(|| start_of(&a.value).cmp(&start_of(&b.value))).then(a.partition.cmp(&b.partition))
    });
    rows
}

/// A key as JSON, as a value to sort by (numbers by value, strings by bytes).
fn json_key(k: &serde_json::Value) -> Value {
    match k {
        serde_json::Value::Number(n) => n.as_i64().map(Value::Int).unwrap_or(Value::Float(n.as_f64().unwrap_or(0.0))),
        serde_json::Value::String(s) => Value::str(s),
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Array(items) => Value::List(Arc::new(items.iter().map(json_key).collect())),
        other => Value::str(&other.to_string()),
    }
}

fn start_of(v: &serde_json::Value) -> i64 {
    v.get("window_start").and_then(|s| s.as_i64()).unwrap_or(0)
}

/// Queries waiting for a running instance's tasks to answer. The HTTP thread posts one and
/// waits; each worker thread, between steps, answers from the tasks it runs.
pub struct Queries {
    jobs: Mutex<Vec<Arc<Job>>>,
    /// How many threads answer each query (set by the driver; 0: none runs yet).
    workers: Mutex<usize>,
    /// The running program and the tasks this instance runs (sub-topology input node,
    /// partition), as the driver last reported them.
    view: Mutex<Option<View>>,
    /// The other instances of the application (Kafka), installed by the driver.
    peers: Mutex<Option<Arc<dyn Peers>>>,
    /// This instance: the application, its name, and the address other instances reach its
    /// stores at.
    me: Mutex<Me>,
}

#[derive(Clone, Debug, Default)]
struct Me {
    app: String,
    instance: String,
    server: Option<String>,
}

/// Who holds which partition, as a driver that shares the work with other instances knows it.
pub trait Peers: Send + Sync {
    /// The owners of every assigned partition, with the partition counts of `topics`.
    fn owners(&self, topics: &[&str]) -> Result<Owners, String>;
}

/// The application's instances as of now: the owner of each (topic, partition) assigned, the
/// address of each instance's stores, the partition count of each topic.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    pub parts: std::collections::BTreeMap<(String, u32), String>,
    pub servers: std::collections::BTreeMap<String, String>,
    pub partitions: std::collections::BTreeMap<String, u32>,
}

/// The running program, and the tasks (sub-topology input node, partition) this instance runs.
type View = (Stage, Vec<(String, u32)>);

pub struct Job {
    fetch: Fetch,
    state: Mutex<JobState>,
    done: Condvar,
}

#[derive(Default)]
struct JobState {
    /// Threads that answered.
    answered: std::collections::BTreeSet<usize>,
    rows: Vec<Answer>,
    /// The partitions of the store whose task answered.
    partitions: std::collections::BTreeSet<u32>,
    error: Option<String>,
}

/// What this instance answered: rows, and the partitions of the store its tasks hold.
pub struct Local {
    pub rows: Vec<Answer>,
    pub partitions: Vec<u32>,
}

impl Default for Queries {
    fn default() -> Self {
        Queries {
            jobs: Mutex::new(Vec::new()),
            workers: Mutex::new(0),
            view: Mutex::new(None),
            peers: Mutex::new(None),
            me: Mutex::new(Me::default()),
        }
    }
}

impl Queries {
    /// The driver's view: the running program and the tasks it runs (set when either changes).
    /// (Called every round of a driver's loop: the tasks are copied only when they changed.)
    pub(crate) fn set_view<'a>(&self, stage: &Stage, tasks: impl Iterator<Item = (&'a String, u32)> + Clone) {
        if let Ok(mut v) = self.view.lock() {
            let same = v.as_ref().is_some_and(|(s, t)| {
                let mut now = tasks.clone();
                s.next == stage.next
                    && t.iter().all(|(n, p)| now.next().is_some_and(|(m, q)| n == m && *p == q))
                    && now.next().is_none()
            });
            if !same {
                *v = Some((stage.clone(), tasks.map(|(n, p)| (n.clone(), p)).collect()));
            }
        }
    }

    /// `GET /stores`: the stores a query can read, and the partitions of each this instance holds.
    pub fn stores(&self) -> Result<serde_json::Value, String> {
        let v = self.view.lock().map_err(|_| "lock poisoned")?;
        let Some((stage, tasks)) = v.as_ref() else { return Err("the instance is not running its tasks yet".into()) };
        let mut out = Vec::new();
        for (name, what) in queryable(stage) {
            let spec = stage.specs.iter().find(|s| s.stores.iter().any(|st| st.name == name));
            let local: Vec<u32> =
                tasks.iter().filter(|(n, _)| spec.is_some_and(|s| &s.name == n)).map(|(_, p)| *p).collect();
            out.push(serde_json::json!({ "name": name, "holds": what, "partitions": local }));
        }
        Ok(serde_json::json!({ "stores": out }))
    }

    /// Check a query against the running program: Err((404, why)) for a store it cannot read,
    /// Err((400, why)) for a question the store cannot answer (a bad key, times on a store that
    /// is not windowed).
    pub fn check(&self, f: &Fetch) -> Result<(), (u16, String)> {
        let v = self.view.lock().map_err(|_| (500, "lock poisoned".to_string()))?;
        // Not running yet: asking says so.
        let Some((stage, _)) = v.as_ref() else { return Ok(()) };
        let t = resolve(stage, &f.store).map_err(|e| (404, e))?;
        validate(&t, f).map(|_| ()).map_err(|e| (400, e))
    }

    /// The driver runs `n` threads that answer (each calls [`Queries::answer`] with its index).
    pub fn set_workers(&self, n: usize) {
        if let Ok(mut w) = self.workers.lock() {
            *w = n;
        }
    }

    /// This instance's name and the address it serves its stores at (`application.server`, else
    /// the `--http-addr` it bound when that names a host).
    pub fn set_me(&self, app: &str, instance: &str, server: Option<String>) {
        if let Ok(mut m) = self.me.lock() {
            *m = Me { app: app.to_string(), instance: instance.to_string(), server };
        }
    }

    pub fn server(&self) -> Option<String> {
        self.me.lock().ok().and_then(|m| m.server.clone())
    }

    pub(crate) fn set_peers(&self, peers: Arc<dyn Peers>) {
        if let Ok(mut p) = self.peers.lock() {
            *p = Some(peers);
        }
    }

    /// This instance's name and the other instances of the application with the address each
    /// serves at (none without peers: the embedded log, or Kafka before the group is joined).
    pub(crate) fn others(&self) -> Result<(String, Vec<(String, String)>), String> {
        let me = self.instance();
        let Some(peers) = self.peers() else { return Ok((me, Vec::new())) };
        let owners = peers.owners(&[])?;
        Ok((me.clone(), owners.servers.into_iter().filter(|(name, _)| *name != me).collect()))
    }

    fn peers(&self) -> Option<Arc<dyn Peers>> {
        self.peers.lock().ok().and_then(|p| p.clone())
    }

    fn me(&self) -> Me {
        self.me.lock().map(|m| m.clone()).unwrap_or_default()
    }

    fn instance(&self) -> String {
        self.me().instance
    }

    /// The main topic of the sub-topology that holds `store`.
    fn topic_of(&self, store: &str) -> Result<String, (u16, String)> {
        let v = self.view.lock().map_err(|_| (500, "lock poisoned".to_string()))?;
        let Some((stage, _)) = v.as_ref() else {
            return Err((503, "the instance is not running its tasks yet".into()));
        };
        Ok(resolve(stage, store).map_err(|e| (404, e))?.spec.main.topic.clone())
    }

    /// Answer `f` for the whole application: this instance's tasks, and (unless `f.local`, or
    /// with no other instances) those of every other instance that owns a partition of the
    /// store, asked over HTTP. Every partition must be answered by its owner, else the answer
    /// is an error to retry (a rebalance moved partitions meanwhile).
    pub fn fetch(&self, f: Fetch, timeout: Duration) -> Result<Local, (u16, String)> {
        self.check(&f)?;
        let peers = if f.local { None } else { self.peers() };
        let Some(peers) = peers else { return self.ask(f, timeout).map_err(|e| (503, e)) };
        let topic = self.topic_of(&f.store)?;
        let owners = peers.owners(&[&topic]).map_err(|e| (503, format!("cannot tell who owns the partitions: {e}")))?;
        let n = owners.partitions.get(&topic).copied().unwrap_or(0);
        if n == 0 {
            return Err((503, format!("`{topic}` has no partitions yet: retry")));
        }
        let mut by_instance: std::collections::BTreeMap<&str, Vec<u32>> = std::collections::BTreeMap::new();
        for p in 0..n {
            let owner = owners.parts.get(&(topic.clone(), p)).ok_or_else(|| {
                (503, format!("partition {p} of `{topic}` has no owner (the group is rebalancing): retry"))
            })?;
            by_instance.entry(owner).or_default().push(p);
        }
        let me = self.instance();
        let mut rows = Vec::new();
        let mut answered = std::collections::BTreeSet::new();
        for (instance, parts) in by_instance {
            let local = if instance == me {
                self.ask(Fetch { local: true, ..f.clone() }, timeout).map_err(|e| (503, e))?
            } else {
                let server = owners.servers.get(instance).ok_or_else(|| {
                    (
                        503,
                        format!(
                            "instance `{instance}` owns partitions {parts:?} of `{topic}` but publishes no address (run it with --http-addr, and application.server when that address is not reachable from here)"
                        ),
                    )
                })?;
                ask_server(server, &Fetch { local: true, ..f.clone() }, timeout)
                    .map_err(|e| (503, format!("instance `{instance}` at {server}: {e}")))?
            };
            // Only the partitions the group gives it: one that just moved is its new owner's.
            rows.extend(local.rows.into_iter().filter(|r| parts.contains(&r.partition)));
            answered.extend(local.partitions.into_iter().filter(|p| parts.contains(p)));
        }
        let missing: Vec<u32> = (0..n).filter(|p| !answered.contains(p)).collect();
        if !missing.is_empty() {
            return Err((
                503,
                format!("partitions {missing:?} of `{topic}` were not answered by their owners (moving): retry"),
            ));
        }
        Ok(Local { rows: merge(rows), partitions: answered.into_iter().collect() })
    }

    /// `GET /metadata`: this instance, and for each store that can be queried the owner of each
    /// partition (on Kafka, as the consumer group assigned them; embedded: this instance).
    pub fn metadata(&self) -> Result<serde_json::Value, String> {
        let (stage, tasks) = {
            let v = self.view.lock().map_err(|_| "lock poisoned")?;
            v.clone().ok_or("the instance is not running its tasks yet")?
        };
        let me = self.instance();
        let owners = match self.peers() {
            Some(p) => {
                let topics: Vec<String> = queryable(&stage)
                    .into_iter()
                    .filter_map(|(name, _)| resolve(&stage, &name).ok().map(|t| t.spec.main.topic.clone()))
                    .collect();
                Some(p.owners(&topics.iter().map(String::as_str).collect::<Vec<_>>())?)
            }
            None => None,
        };
        let mut stores = Vec::new();
        for (name, holds) in queryable(&stage) {
            let Ok(t) = resolve(&stage, &name) else { continue };
            let topic = &t.spec.main.topic;
            let parts: Vec<serde_json::Value> = match &owners {
                Some(o) => (0..o.partitions.get(topic).copied().unwrap_or(0))
                    .map(|p| {
                        let owner = o.parts.get(&(topic.clone(), p));
                        serde_json::json!({
                            "partition": p,
                            "instance": owner,
                            "server": owner.and_then(|i| o.servers.get(i)),
                        })
                    })
                    .collect(),
                None => tasks
                    .iter()
                    .filter(|(n, _)| *n == t.spec.name)
                    .map(|(_, p)| serde_json::json!({ "partition": p, "instance": me, "server": self.server() }))
                    .collect(),
            };
            stores.push(serde_json::json!({ "name": name, "holds": holds, "topic": topic, "partitions": parts }));
        }
        Ok(serde_json::json!({
            "application": self.me().app,
            "instance": me,
            "server": self.server(),
            "stores": stores,
        }))
    }

    /// Ask the running tasks, waiting at most `timeout`.
    pub fn ask(&self, fetch: Fetch, timeout: Duration) -> Result<Local, String> {
        let workers = self.workers.lock().map(|w| *w).unwrap_or(0);
        if workers == 0 {
            return Err("the instance is not running its tasks yet (restoring, or waiting for an assignment)".into());
        }
        let job = Arc::new(Job { fetch, state: Mutex::new(JobState::default()), done: Condvar::new() });
        self.jobs.lock().map_err(|_| "lock poisoned")?.push(job.clone());
        let deadline = Instant::now() + timeout;
        let mut st = job.state.lock().map_err(|_| "lock poisoned")?;
        while st.answered.len() < workers && st.error.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = job.done.wait_timeout(st, left).map_err(|_| "lock poisoned")?.0;
        }
        let answered = st.answered.len() >= workers;
        let result = match (&st.error, answered) {
            (Some(e), _) => Err(e.clone()),
            (None, false) => Err(format!("the instance's tasks did not answer within {} s", timeout.as_secs())),
            (None, true) => Ok(Local {
                rows: merge(std::mem::take(&mut st.rows)),
                partitions: st.partitions.iter().copied().collect(),
            }),
        };
        drop(st);
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.retain(|j| !Arc::ptr_eq(j, &job));
        }
        result
    }

    /// Worker `worker` answers every query it has not answered yet from its tasks: `shards`
    /// gives, for a target, the partitions this worker runs and their shards.
    pub(crate) fn answer(
        &self,
        worker: usize,
        stage: &Stage,
        mut shards: impl FnMut(&Target, &mut dyn FnMut(u32, Shard<'_>)),
    ) {
        let jobs: Vec<Arc<Job>> = match self.jobs.lock() {
            Ok(j) if !j.is_empty() => j.clone(),
            _ => return,
        };
        for job in jobs {
            let Ok(mut st) = job.state.lock() else { continue };
            if st.answered.contains(&worker) {
                continue;
            }
            match resolve(stage, &job.fetch.store) {
                Err(e) => st.error = Some(e),
                Ok(t) => {
                    let mut rows = Vec::new();
                    let mut parts = Vec::new();
                    let mut err = None;
                    shards(&t, &mut |p, shard| match read(&t, &job.fetch, p, &shard) {
                        Ok(r) => {
                            rows.extend(r);
                            parts.push(p);
                        }
                        Err(e) => err = Some(e),
                    });
                    st.rows.extend(rows);
                    st.partitions.extend(parts);
                    if err.is_some() {
                        st.error = err;
                    }
                }
            }
            st.answered.insert(worker);
            job.done.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_round_trip_and_bad_ones_are_refused() {
        let f = Fetch {
            store: "s".into(),
            key: Some("A&B =c".into()),
            from: Some(1000),
            to: Some(2000),
            local: true,
            ..Fetch::default()
        };
        assert_eq!(Fetch::parse("s", &f.query_string()).unwrap(), f);
        let g = Fetch::parse("s", "from=2024-05-01T00:00:01Z&prefix=a%20b").unwrap();
        assert_eq!(g.from, Some(1_714_521_601_000));
        assert_eq!(g.prefix.as_deref(), Some("a b"));
        assert!(Fetch::parse("s", "colour=red").unwrap_err().contains("unknown parameter `colour`"));
        assert!(Fetch::parse("s", "from=yesterday").unwrap_err().contains("is not a time"));
        assert!(Fetch::parse("s", "key=a&prefix=b").is_err());
    }

    #[test]
    fn keys_are_filtered_by_the_key_types_order() {
        let f = Fetch { from_key: Some("9".into()), to_key: Some("10".into()), ..Fetch::default() };
        assert!(KeyFilter::new(&f, &Type::Int).is_ok());
        let r = KeyFilter::new(
            &Fetch { from_key: Some("2".into()), to_key: Some("10".into()), ..Fetch::default() },
            &Type::Int,
        )
        .unwrap();
        assert!(r.takes(&Value::Int(9)) && r.takes(&Value::Int(10)) && r.takes(&Value::Int(2)));
        assert!(!r.takes(&Value::Int(11)) && !r.takes(&Value::Int(1)));
        let p = KeyFilter::new(&Fetch { prefix: Some("AA".into()), ..Fetch::default() }, &Type::String).unwrap();
        assert!(p.takes(&Value::str("AAPL")) && !p.takes(&Value::str("MSFT")));
        assert!(KeyFilter::new(&Fetch { prefix: Some("1".into()), ..Fetch::default() }, &Type::Int).is_err());
        assert!(KeyFilter::new(&Fetch { key: Some("x".into()), ..Fetch::default() }, &Type::Int)
            .unwrap_err()
            .contains("not a key of type int"));
    }
}
