//! Configuration: a YAML file (`--config`) overridden by `--set KEY=VALUE` pairs. streamc keys
//! are YAML paths (`processing.guarantee`); librdkafka properties pass through under `kafka.`
//! (`kafka.bootstrap.servers`). Unknown keys are errors.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_yaml::{Mapping, Value};

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub application: Application,
    pub processing: Processing,
    pub on_error: OnError,
    pub commit: Commit,
    pub control: Control,
    pub embedded: Embedded,
    /// `statestore.cache.max.bytes` (Kafka Streams' name).
    pub statestore: Statestore,
    pub late: Late,
    pub instance: Instance,
    /// `num.standby.replicas` (Kafka Streams' name).
    pub num: Num,
    /// `acceptable.recovery.lag` (Kafka Streams' name).
    pub acceptable: Acceptable,
    pub metrics: MetricsConfig,
    pub topics: Topics,
    /// `schema.registry.*`: the schema registry of `avro` values.
    pub schema: SchemaConfig,
    /// librdkafka properties, passed through unchanged.
    pub kafka: BTreeMap<String, String>,
    /// `http.*`: the HTTP server of `run --http-addr` (access and TLS), and how `streamc query`
    /// and other instances reach it.
    pub http: HttpConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub auth: HttpAuth,
    pub tls: HttpTls,
}

#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpAuth {
    /// The bearer token every request but the probes must carry (`Authorization: Bearer …`).
    pub token: Option<String>,
    /// A file holding it (a mounted Secret), instead of `token`.
    pub token_file: Option<String>,
}

impl std::fmt::Debug for HttpAuth {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpAuth")
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("token_file", &self.token_file)
            .finish()
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpTls {
    /// PEM certificate chain the server presents (with `key`: the server speaks HTTPS only).
    pub cert: Option<String>,
    /// PEM private key of `cert`.
    pub key: Option<String>,
    /// PEM CA certificates `streamc query` and other instances trust for the servers they ask
    /// (instead of the public roots).
    pub ca: Option<String>,
}

impl HttpConfig {
    /// The bearer token, if one is set (read from `token_file` when that is given).
    pub fn token(&self) -> Result<Option<String>, String> {
        let t = match (&self.auth.token, &self.auth.token_file) {
            (Some(_), Some(_)) => return Err("set http.auth.token or http.auth.token_file, not both".into()),
            (Some(t), None) => t.clone(),
            (None, Some(f)) => {
                std::fs::read_to_string(f).map_err(|e| format!("http.auth.token_file {f}: {e}"))?.trim().to_string()
            }
            (None, None) => return Ok(None),
        };
        if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("http.auth.token is empty or holds whitespace: use a long random token".into());
        }
        Ok(Some(t))
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaConfig {
    pub registry: RegistryConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// The base URL of its Confluent-compatible API (`schema.registry.url`).
    pub url: Option<String>,
    /// `user:password` for HTTP basic authentication.
    pub basic_auth: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Topics {
    /// Topics a query may write to although they are reserved (`__…`, internal topics of this
    /// or another application): each named exactly.
    pub allow_internal_sinks: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Application {
    /// Defaults to the program file's stem.
    pub id: Option<String>,
    /// `HOST:PORT` at which other instances (and `streamc query`) reach this instance's stores
    /// (Kafka Streams' `application.server`); default: the `--http-addr` address when it names
    /// a host.
    pub server: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Processing {
    pub guarantee: Guarantee,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    #[default]
    AtLeastOnce,
    ExactlyOnce,
}

/// What happens to a record that cannot be decoded or evaluated.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    Fail,
    #[default]
    DeadLetter,
    Skip,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Commit {
    /// Embedded backend: commit every this many records per task (and at end of input).
    pub records: u64,
    /// Kafka backend: commit at this interval, like Kafka Streams' `commit.interval.ms`.
    pub interval_ms: u64,
}

impl Default for Commit {
    fn default() -> Self {
        Commit { records: 10_000, interval_ms: 1_000 }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Control {
    pub trusted_keys: Vec<TrustedKey>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    pub id: String,
    /// Ed25519 public key, hex.
    pub public_key: String,
    /// When given, the key may sign only for these tenants.
    #[serde(default)]
    pub tenants: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Embedded {
    /// Partitions of topics the embedded log creates implicitly.
    pub partitions: u32,
    /// fsync the log at every commit (survives power loss, not only process crashes). Off by
    /// default, like Kafka, which leaves flushing to the OS.
    pub fsync: bool,
    /// The largest record (key, value and headers) a run writes to the embedded log: a result
    /// over it makes its input record a dead letter, as on Kafka with its default limits.
    pub max_message_bytes: u64,
}

impl Default for Embedded {
    fn default() -> Self {
        Embedded { partitions: 1, fsync: false, max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Statestore {
    pub cache: StoreCache,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreCache {
    pub max: CacheMax,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheMax {
    /// The memory the local state of all of an instance's tasks may hold, shared out evenly
    /// over its tasks: rows in memory over sled, the changes not written to sled yet, a
    /// restore's changes (Kafka Streams' `statestore.cache.max.bytes`).
    pub bytes: u64,
}

impl Default for CacheMax {
    fn default() -> Self {
        CacheMax { bytes: DEFAULT_CACHE_MAX_BYTES }
    }
}

/// `statestore.cache.max.bytes`'s default: 512 MiB, which keeps a table of about 1.5 M small
/// rows (a short key, two numbers) in memory, so that restoring it needs no sled write first.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 512 << 20;

/// Where an application's topics live: chosen once, by the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// The embedded log in the state directory (no `kafka.bootstrap.servers`).
    Embedded,
    /// Apache Kafka (`kafka.bootstrap.servers` set).
    Kafka,
}

impl Config {
    /// The backend this configuration runs on: Kafka when `kafka.bootstrap.servers` is set, the
    /// embedded log otherwise.
    pub fn backend(&self) -> BackendKind {
        if self.kafka.contains_key("bootstrap.servers") {
            BackendKind::Kafka
        } else {
            BackendKind::Embedded
        }
    }

    /// Whether this configuration runs on Kafka ([`Config::backend`]).
    pub fn on_kafka(&self) -> bool {
        self.backend() == BackendKind::Kafka
    }

    /// The part of `statestore.cache.max.bytes` sled's own page cache takes: a quarter, between
    /// 4 MiB and 64 MiB (sled's cache is per state directory, not per task).
    pub fn sled_cache_bytes(&self) -> u64 {
        (self.statestore.cache.max.bytes / 4).clamp(4 << 20, 64 << 20)
    }

    /// The rest of `statestore.cache.max.bytes`: what the tasks' local state may hold in memory
    /// over sled, shared out over them.
    pub fn cache_max_bytes(&self) -> usize {
        self.statestore.cache.max.bytes.saturating_sub(self.sled_cache_bytes()).try_into().unwrap_or(usize::MAX)
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Late {
    /// Also write each late record (with the reason in `streamc.error`) to `<app>-late`.
    pub to_topic: bool,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Instance {
    /// Kafka backend: this instance's stable name. Gives static group membership
    /// (`group.instance.id`) and the exactly-once `transactional.id`; without it, a name kept
    /// in the state directory is used for the `transactional.id`.
    pub id: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Num {
    pub standby: Standby,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Standby {
    /// Kafka backend: how many other instances keep a warm copy of each task's stores by
    /// following its changelogs (`num.standby.replicas`), so that a task that moves to one of
    /// them restores only the tail.
    pub replicas: u32,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Acceptable {
    pub recovery: Recovery,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Recovery {
    /// Kafka backend, with standby replicas: an instance that starts while others run the
    /// application first copies every task's changelogs into its local state, and joins the
    /// group (so that tasks move to it) once each copy is within this many records of its
    /// changelog's end (`acceptable.recovery.lag`).
    pub lag: u64,
}

impl Default for Recovery {
    fn default() -> Recovery {
        Recovery { lag: 10_000 }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Kafka backend: how often each task's counters and consumer lag go to `<app>-metrics`.
    pub interval_ms: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { interval_ms: 30_000 }
    }
}

/// Why a configuration cannot be loaded. Its text is what the CLI prints.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("`{key}` is {value}; it must be {}", bounds(.min, .max))]
    OutOfRange { key: &'static str, value: u64, min: u64, max: u64 },
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path}: {source}")]
    Yaml {
        path: String,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("config {0}: the top level must be a mapping of keys")]
    NotAMapping(String),
    #[error("--set {0}: expected KEY=VALUE")]
    BadSet(String),
    /// A key is unknown or a value has the wrong type (serde's message names which).
    #[error("configuration: {0}")]
    Invalid(#[source] serde_yaml::Error),
    #[error("configuration key {0} is not a string")]
    KeyNotString(String),
    #[error("{0}: librdkafka properties are strings")]
    KafkaNotString(String),
    #[error("`kafka` must be a mapping")]
    KafkaNotMapping,
    #[error("empty configuration key in `{0}`")]
    EmptyKey(String),
    #[error("configuration key `{head}` is not a section, so `{path}` cannot be set")]
    NotASection { head: String, path: String },
    #[error("application id `{0}` must be made of ASCII letters, digits, `.`, `_` and `-`")]
    BadApplicationId(String),
    #[error("application id `{0}` must be made of ASCII letters, digits, `.`, `_` and `-` (derived from the file name; set `application.id`)")]
    BadFileStem(String),
}

impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}

/// Load the configuration: the file (if any), then each `KEY=VALUE` in order.
pub fn load(file: Option<&Path>, sets: &[String]) -> Result<Config, ConfigError> {
    load_files(file.as_slice(), sets)
}

/// The configuration of `files` in order, each file's keys over the earlier ones' (mappings
/// merged key by key, so a second file can add `kafka.sasl.password` to the first's `kafka`
/// section: credentials kept in a file of their own, a Kubernetes Secret), then `sets`.
pub fn load_files(files: &[impl AsRef<Path>], sets: &[String]) -> Result<Config, ConfigError> {
    let mut root = Mapping::new();
    for p in files {
        let p = p.as_ref();
        let path = p.display().to_string();
        let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        let v: Value =
            serde_yaml::from_str(&text).map_err(|source| ConfigError::Yaml { path: path.clone(), source })?;
        match v {
            Value::Null => {}
            Value::Mapping(m) => merge(&mut root, normalize(m, false)?),
            _ => return Err(ConfigError::NotAMapping(path)),
        }
    }
    for s in sets {
        let (k, v) = s.split_once('=').ok_or_else(|| ConfigError::BadSet(s.clone()))?;
        let value: Value = if k.starts_with("kafka.") {
            Value::String(v.to_string())
        } else {
            serde_yaml::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()))
        };
        insert(&mut root, k, value)?;
    }
    let cfg: Config = serde_yaml::from_value(Value::Mapping(root)).map_err(ConfigError::Invalid)?;
    if let Some(id) = &cfg.application.id {
        validate_app_id(id)?;
    }
    validate_ranges(&cfg)?;
    Ok(cfg)
}

fn bounds(min: &u64, max: &u64) -> String {
    if *max == u64::MAX {
        format!("at least {min}")
    } else {
        format!("between {min} and {max}")
    }
}

/// Kafka's producer default for `message.max.bytes`, and `embedded.max_message_bytes`' default.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 1_000_000;

/// The most partitions the embedded log gives a topic: each is a file and a reader per task, and
/// a typo (`100000`) must be refused before anything is written.
pub const MAX_EMBEDDED_PARTITIONS: u32 = 4096;

/// Settings that must be within a range to mean anything: refused at load, before anything runs.
fn validate_ranges(cfg: &Config) -> Result<(), ConfigError> {
    let checks: [(&'static str, u64, u64, u64); 3] = [
        ("embedded.partitions", cfg.embedded.partitions.into(), 1, MAX_EMBEDDED_PARTITIONS.into()),
        ("embedded.max_message_bytes", cfg.embedded.max_message_bytes, 1024, 1 << 30),
        ("commit.records", cfg.commit.records, 1, u64::MAX),
    ];
    for (key, value, min, max) in checks {
        if value < min || value > max {
            return Err(ConfigError::OutOfRange { key, value, min, max });
        }
    }
    Ok(())
}

/// Split dotted keys into nested mappings (except below `kafka`, whose keys are librdkafka
/// property names) and make every `kafka` value a string.
fn normalize(m: Mapping, in_kafka: bool) -> Result<Mapping, ConfigError> {
    let mut out = Mapping::new();
    for (k, v) in m {
        let key = match &k {
            Value::String(s) => s.clone(),
            other => return Err(ConfigError::KeyNotString(format!("{other:?}"))),
        };
        if in_kafka {
            let s = match v {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(ConfigError::KafkaNotString(format!("kafka.{key}"))),
            };
            out.insert(Value::String(key), Value::String(s));
            continue;
        }
        let v = match v {
            Value::Mapping(inner) => Value::Mapping(normalize(inner, key == "kafka")?),
            v => v,
        };
        insert(&mut out, &key, v)?;
    }
    Ok(out)
}

/// `over`'s keys into `root`: mappings merged key by key, any other value replaced, a null
/// ignored.
fn merge(root: &mut Mapping, over: Mapping) {
    for (k, v) in over {
        match (root.get_mut(&k), v) {
            // (A section whose lines are all commented out reads as null: it sets nothing.)
            (_, Value::Null) => {}
            (Some(Value::Mapping(existing)), Value::Mapping(new)) => merge(existing, new),
            (_, v) => {
                root.insert(k, v);
            }
        }
    }
}

fn insert(root: &mut Mapping, path: &str, value: Value) -> Result<(), ConfigError> {
    let (head, rest) = match path.split_once('.') {
        Some(("kafka", r)) => {
            let kafka = root.entry(Value::String("kafka".into())).or_insert_with(|| Value::Mapping(Mapping::new()));
            let Value::Mapping(m) = kafka else { return Err(ConfigError::KafkaNotMapping) };
            let s = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(ConfigError::KafkaNotString(path.to_string())),
            };
            m.insert(Value::String(r.to_string()), Value::String(s));
            return Ok(());
        }
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    if head.is_empty() {
        return Err(ConfigError::EmptyKey(path.to_string()));
    }
    match rest {
        None => {
            match (root.get_mut(head), value) {
                (Some(Value::Mapping(existing)), Value::Mapping(new)) => {
                    for (k, v) in new {
                        existing.insert(k, v);
                    }
                }
                (_, value) => {
                    root.insert(Value::String(head.to_string()), value);
                }
            }
            Ok(())
        }
        Some(r) => {
            let entry = root.entry(Value::String(head.to_string())).or_insert_with(|| Value::Mapping(Mapping::new()));
            match entry {
                Value::Mapping(m) => insert(m, r, value),
                _ => Err(ConfigError::NotASection { head: head.to_string(), path: path.to_string() }),
            }
        }
    }
}

/// `[A-Za-z0-9._-]+`, as docs/conventions.md says.
pub fn validate_app_id(id: &str) -> Result<(), ConfigError> {
    if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        Ok(())
    } else {
        Err(ConfigError::BadApplicationId(id.to_string()))
    }
}

/// The application id: configured, else the program file's stem.
pub fn application_id(cfg: &Config, program: &Path) -> Result<String, ConfigError> {
    if let Some(id) = &cfg.application.id {
        return Ok(id.clone());
    }
    let stem = program.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    validate_app_id(stem).map_err(|_| ConfigError::BadFileStem(stem.to_string()))?;
    Ok(stem.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backend is Kafka exactly when `kafka.bootstrap.servers` is set; other `kafka.*` keys
    /// alone leave it embedded.
    #[test]
    fn the_backend_is_kafka_exactly_when_bootstrap_servers_is_set() {
        assert_eq!(load(None, &[]).unwrap().backend(), BackendKind::Embedded);
        assert_eq!(load(None, &["kafka.linger.ms=5".into()]).unwrap().backend(), BackendKind::Embedded);
        let kafka = load(None, &["kafka.bootstrap.servers=h:9092".into()]).unwrap();
        assert_eq!(kafka.backend(), BackendKind::Kafka);
        assert!(kafka.on_kafka());
    }

    #[test]
    fn sets_override_file_values_and_kafka_keys_keep_their_dots() {
        let dir = std::env::temp_dir().join(format!("streamc-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.yaml");
        std::fs::write(&f, "commit:\n  records: 5\nkafka:\n  bootstrap.servers: a:1\n  linger.ms: 5\nprocessing.guarantee: exactly_once\n").unwrap();
        let cfg = load(Some(&f), &["commit.records=7".into(), "kafka.client.id=x".into()]).unwrap();
        assert_eq!(cfg.commit.records, 7);
        assert_eq!(cfg.processing.guarantee, Guarantee::ExactlyOnce);
        assert_eq!(cfg.kafka.get("bootstrap.servers").map(String::as_str), Some("a:1"));
        assert_eq!(cfg.kafka.get("linger.ms").map(String::as_str), Some("5"));
        assert_eq!(cfg.kafka.get("client.id").map(String::as_str), Some("x"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn later_files_add_to_and_override_earlier_ones_key_by_key() {
        let dir = std::env::temp_dir().join(format!("streamc-cfg-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
        std::fs::write(&a, "commit:\n  records: 5\n  interval_ms: 40\nkafka:\n  bootstrap.servers: a:1\n").unwrap();
        std::fs::write(&b, "commit.records: 6\nkafka:\n  security.protocol: SASL_SSL\n  sasl.password: s3cret\n")
            .unwrap();
        let cfg = load_files(&[&a, &b], &["kafka.sasl.username=u".into()]).unwrap();
        assert_eq!((cfg.commit.records, cfg.commit.interval_ms), (6, 40));
        let kafka: Vec<(&str, &str)> = cfg.kafka.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            kafka,
            [
                ("bootstrap.servers", "a:1"),
                ("sasl.password", "s3cret"),
                ("sasl.username", "u"),
                ("security.protocol", "SASL_SSL")
            ]
        );
        // The same files the other way round: the first file's value wins where both set one.
        assert_eq!(load_files(&[&b, &a], &[]).unwrap().commit.records, 5);
        // A section with every line commented out (null) takes nothing away.
        let c = dir.join("c.yaml");
        std::fs::write(&c, "kafka:\n  # security.protocol: SASL_SSL\n").unwrap();
        let cfg = load_files(&[&a, &c], &[]).unwrap();
        assert_eq!(cfg.kafka.get("bootstrap.servers").map(String::as_str), Some("a:1"));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = load(None, &["commit.recordz=1".into()]).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid(_)) && e.to_string().contains("recordz"), "{e}");
        let e = load(None, &["nope=1".into()]).unwrap_err();
        assert!(e.to_string().starts_with("configuration: ") && e.to_string().contains("nope"), "{e}");
        let e = load(None, &["no-equals-sign".into()]).unwrap_err();
        assert_eq!(e.to_string(), "--set no-equals-sign: expected KEY=VALUE");
        let e = load(None, &["application.id=a".into(), "application.id.x=1".into()]).unwrap_err();
        assert!(matches!(e, ConfigError::NotASection { .. }), "{e}");
    }

    #[test]
    fn settings_out_of_range_are_refused_with_the_key_and_range() {
        for (set, key) in [
            ("embedded.partitions=0", "embedded.partitions"),
            ("embedded.partitions=100000", "embedded.partitions"),
            ("commit.records=0", "commit.records"),
        ] {
            let e = load(None, &[set.into()]).unwrap_err();
            assert!(matches!(e, ConfigError::OutOfRange { key: k, .. } if k == key), "{set}: {e}");
            assert!(e.to_string().starts_with(&format!("`{key}` is ")), "{e}");
        }
        let e = load(None, &["embedded.partitions=100000".into()]).unwrap_err();
        assert_eq!(e.to_string(), "`embedded.partitions` is 100000; it must be between 1 and 4096");
        let e = load(None, &["commit.records=0".into()]).unwrap_err();
        assert_eq!(e.to_string(), "`commit.records` is 0; it must be at least 1");
        assert_eq!(load(None, &["embedded.partitions=4096".into()]).unwrap().embedded.partitions, 4096);
        assert_eq!(load(None, &["commit.records=1".into()]).unwrap().commit.records, 1);
    }

    #[test]
    fn application_id_defaults_to_the_file_stem_and_is_validated() {
        let cfg = Config::default();
        assert_eq!(application_id(&cfg, Path::new("dir/stats.stream")).unwrap(), "stats");
        assert!(application_id(&cfg, Path::new("my stats.stream")).is_err());
        assert!(load(None, &["application.id=bad/id".into()]).is_err());
    }
}
