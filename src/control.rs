//! Control statements: the signed envelope they travel in, and the evaluator that turns the
//! control log into program versions.
//!
//! The running program is the program file (version 0) plus the accepted statements of
//! `<app>-control` in log order. [`Evaluator::apply`] is a pure function of the records it is
//! given and of the trusted keys: every instance that reads the same log reaches the same
//! verdicts, program versions and control-managed tables, and writes the same status record for
//! each statement. The envelope is verified before the text is parsed, so an unsigned or forged
//! statement never reaches the parser.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::check::{self, Control};
use crate::config::TrustedKey;
use crate::diag::{self, Code, Diagnostic, RenderOptions};
use crate::eval::{eval, Row};
use crate::format;
use crate::hir;
use crate::plan::physical::{self, TaskSpec};
use crate::plan::{self, Topology};
use crate::syntax;
use crate::value::Value;

/// Why a signing key, the trusted keys or the program file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no randomness for a key: {0}")]
    NoRandomness(String),
    #[error("cannot create {}: {source}", path.display())]
    CreateKeyFile { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: {source}", path.display())]
    WriteKeyFile { path: PathBuf, source: std::io::Error },
    #[error("cannot read key file {}: {source}", path.display())]
    ReadKeyFile { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    EncodeKeyFile(String),
    #[error("{} is not a streamc key file: {reason}", path.display())]
    NotAKeyFile { path: PathBuf, reason: String },
    #[error("{}: `secret` is not 32 bytes of hex", path.display())]
    BadSecret { path: PathBuf },
    #[error("control.trusted_keys: the public key of `{id}` is not 32 bytes of hex")]
    TrustedKeyNotHex { id: String },
    #[error("control.trusted_keys: `{id}` is not an Ed25519 public key: {reason}")]
    TrustedKeyInvalid { id: String, reason: String },
    /// The program file (version 0) cannot be planned.
    #[error("the program cannot run: {0}")]
    ProgramCannotRun(physical::PlanError),
}

/// Why a control statement is rejected: the reason its status record gives (with a rendered
/// diagnostic beside it where the text is at fault).
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("unsigned: no streamc.sig header")]
    Unsigned,
    #[error("header {0} is not UTF-8")]
    HeaderNotUtf8(&'static str),
    /// A header of the envelope is missing or malformed (the text says which).
    #[error("{0}")]
    Envelope(&'static str),
    #[error("key `{0}` is not in control.trusted_keys")]
    UnknownKey(String),
    #[error("the signature does not verify with key `{key_id}` for application `{app}` (signed for another application, or text or headers altered)")]
    NotVerified { key_id: String, app: String },
    #[error("sequence {seq} of key `{key_id}` is not above {last} (a replayed or reordered statement)")]
    Replayed { seq: u64, key_id: String, last: u64 },
    #[error("expired: streamc.expires {expires} is before the record's timestamp {timestamp}")]
    Expired { expires: i64, timestamp: i64 },
    #[error("key `{key_id}` may only sign for tenants {}", allowed.join(", "))]
    TenantNotAllowed { key_id: String, allowed: Vec<String> },
    #[error("the statement is not UTF-8")]
    NotUtf8,
    #[error("the statement does not compile")]
    DoesNotCompile,
    #[error("the text is for tenant `{text}` but was signed for tenant `{signed}`")]
    TenantMismatch { text: String, signed: String },
    #[error("the {what} cannot be evaluated: {reason}")]
    Eval { what: &'static str, reason: String },
    #[error("the value does not fit `{table}`: {reason}")]
    DoesNotFit { table: String, reason: String },
    #[error("`purge` deletes one tenant's state: write `for tenant \"t\" purge`")]
    PurgeWithoutTenant,
    #[error("incompatible state change without `with reprocess` or `with fresh state`")]
    IncompatibleState,
    #[error("query `{query}` writes to `{topic}`, {why}")]
    ReservedSink { query: String, topic: String, why: String },
    #[error("the runtime cannot run it: {0}")]
    CannotRun(physical::PlanError),
    #[error("the replacement {0}")]
    Replacement(String),
}

pub const H_KEY_ID: &str = "streamc.key_id";
pub const H_SEQ: &str = "streamc.seq";
pub const H_EXPIRES: &str = "streamc.expires";
pub const H_TENANT: &str = "streamc.tenant";
pub const H_SIG: &str = "streamc.sig";

/// The control topic of an application.
pub fn control_topic(app: &str) -> String {
    format!("{app}-control")
}

/// Where every accepted and rejected statement is recorded, keyed by control offset.
pub fn status_topic(app: &str) -> String {
    format!("{app}-control-status")
}

/// Kafka configs of the control and status topics: kept forever; the control topic's
/// timestamps set by the broker on append, so a writer cannot choose the timestamp an expiry
/// is compared with.
pub fn topic_configs(topic: &str) -> Vec<(&'static str, &'static str)> {
    let mut c = vec![("retention.ms", "-1")];
    if topic.ends_with("-control") {
        c.push(("message.timestamp.type", "LogAppendTime"));
    }
    c
}

/// The key of the status record that holds the program file the application runs as version 0.
pub const PROGRAM_KEY: &str = "program";

/// The bytes a control statement's signature covers: the application id, key id, sequence,
/// expiry, tenant and text, each length-prefixed so no two envelopes share a message.
pub fn message(app: &str, key_id: &str, seq: u64, expires: i64, tenant: &str, text: &[u8]) -> Vec<u8> {
    let mut m = b"streamc control statement v1\n".to_vec();
    for part in [app.as_bytes(), key_id.as_bytes(), &seq.to_be_bytes(), &expires.to_be_bytes(), tenant.as_bytes(), text]
    {
        m.extend_from_slice(&(part.len() as u64).to_be_bytes());
        m.extend_from_slice(part);
    }
    m
}

/// A private signing key with the id that `control.trusted_keys` knows it by.
pub struct KeyFile {
    pub id: String,
    key: SigningKey,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFileText {
    id: String,
    secret: String,
    public_key: String,
}

impl KeyFile {
    pub fn generate(id: &str) -> Result<KeyFile, ControlError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| ControlError::NoRandomness(e.to_string()))?;
        Ok(KeyFile { id: id.to_string(), key: SigningKey::from_bytes(&secret) })
    }

    pub fn public_hex(&self) -> String {
        hex::encode(self.key.verifying_key().to_bytes())
    }

    /// Write the key to a new file, readable by its owner only.
    pub fn write(&self, path: &Path) -> Result<(), ControlError> {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(path).map_err(|source| ControlError::CreateKeyFile { path: path.to_path_buf(), source })?;
        let text = KeyFileText {
            id: self.id.clone(),
            secret: hex::encode(self.key.to_bytes()),
            public_key: self.public_hex(),
        };
        let yaml = serde_yaml::to_string(&text).map_err(|e| ControlError::EncodeKeyFile(e.to_string()))?;
        f.write_all(format!("# streamc control signing key: keep it secret\n{yaml}").as_bytes())
            .map_err(|source| ControlError::WriteKeyFile { path: path.to_path_buf(), source })
    }

    pub fn read(path: &Path) -> Result<KeyFile, ControlError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ControlError::ReadKeyFile { path: path.to_path_buf(), source })?;
        let k: KeyFileText = serde_yaml::from_str(&text)
            .map_err(|e| ControlError::NotAKeyFile { path: path.to_path_buf(), reason: e.to_string() })?;
        let bytes: [u8; 32] = hex::decode(k.secret.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| ControlError::BadSecret { path: path.to_path_buf() })?;
        Ok(KeyFile { id: k.id, key: SigningKey::from_bytes(&bytes) })
    }

    /// The sequence of a control record this key signed for `app` (None if its signature does
    /// not verify with this key).
    pub fn signed_seq(&self, app: &str, headers: &[(String, Vec<u8>)], value: Option<&[u8]>) -> Option<u64> {
        let h = |n: &str| headers.iter().rev().find(|(k, _)| k == n).and_then(|(_, v)| std::str::from_utf8(v).ok());
        if h(H_KEY_ID)? != self.id {
            return None;
        }
        let seq: u64 = h(H_SEQ)?.parse().ok()?;
        let expires: i64 = h(H_EXPIRES)?.parse().ok()?;
        let tenant = h(H_TENANT).unwrap_or("");
        let sig: [u8; 64] = hex::decode(h(H_SIG)?).ok()?.try_into().ok()?;
        let msg = message(app, &self.id, seq, expires, tenant, value?);
        self.key.verifying_key().verify_strict(&msg, &Signature::from_bytes(&sig)).ok()?;
        Some(seq)
    }

    /// The headers of a signed statement.
    pub fn sign(&self, app: &str, seq: u64, expires: i64, tenant: &str, text: &str) -> Vec<(String, Vec<u8>)> {
        let sig = self.key.sign(&message(app, &self.id, seq, expires, tenant, text.as_bytes()));
        vec![
            (H_KEY_ID.into(), self.id.as_bytes().to_vec()),
            (H_SEQ.into(), seq.to_string().into_bytes()),
            (H_EXPIRES.into(), expires.to_string().into_bytes()),
            (H_TENANT.into(), tenant.as_bytes().to_vec()),
            (H_SIG.into(), hex::encode(sig.to_bytes()).into_bytes()),
        ]
    }
}

/// A key from `control.trusted_keys`, parsed.
#[derive(Clone, Debug)]
pub struct Trusted {
    pub id: String,
    key: VerifyingKey,
    tenants: Option<Vec<String>>,
}

pub fn trusted_keys(keys: &[TrustedKey]) -> Result<Vec<Trusted>, ControlError> {
    keys.iter()
        .map(|k| {
            let bytes: [u8; 32] = hex::decode(k.public_key.trim())
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| ControlError::TrustedKeyNotHex { id: k.id.clone() })?;
            let key = VerifyingKey::from_bytes(&bytes)
                .map_err(|e| ControlError::TrustedKeyInvalid { id: k.id.clone(), reason: e.to_string() })?;
            Ok(Trusted { id: k.id.clone(), key, tenants: k.tenants.clone() })
        })
        .collect()
}

/// One record of the control topic.
#[derive(Clone, Debug)]
pub struct ControlRecord {
    pub offset: u64,
    pub timestamp: i64,
    pub headers: Vec<(String, Vec<u8>)>,
    pub value: Option<Vec<u8>>,
}

/// What happens to a replaced query's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub query: String,
    /// `reprocess`, `fresh state`, or none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mode: Option<String>,
    /// Same name, same key, value and window: kept as they are.
    pub kept: Vec<String>,
    /// Rebuilt from the start of the input (`with reprocess`).
    pub rebuilt: Vec<String>,
    /// Started empty from now (`with fresh state`).
    pub emptied: Vec<String>,
    /// No longer used: deleted.
    pub dropped: Vec<String>,
    /// Stores the old query did not have, or whose type changed, with the reason.
    pub incompatible: Vec<String>,
}

impl Report {
    /// One line per store, as `deploy --dry-run` and the status topic show them.
    pub fn render(&self) -> String {
        let mut o = format!(
            "query {}{}:\n",
            self.query,
            self.mode.as_ref().map(|m| format!(" (with {m})")).unwrap_or_default()
        );
        for (what, list) in [
            ("kept", &self.kept),
            ("rebuilt from the start of the input", &self.rebuilt),
            ("started empty", &self.emptied),
            ("dropped", &self.dropped),
            ("incompatible", &self.incompatible),
        ] {
            for s in list {
                o += &format!("  {what}: {s}\n");
            }
        }
        if self.kept.len() + self.rebuilt.len() + self.emptied.len() + self.dropped.len() + self.incompatible.len() == 0
        {
            o += "  no state\n";
        }
        o
    }
}

/// The status record of one control statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub offset: u64,
    pub timestamp: i64,
    pub accepted: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tenant: Option<String>,
    /// `query`, `replace`, `drop`, `update`, `delete` or `purge` (once parsed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kind: Option<String>,
    /// The query or table it names.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target: Option<String>,
    /// The program version after this statement.
    pub version: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub report: Option<Report>,
    /// Why it was rejected, in one line.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// The diagnostic of a statement that does not compile, rendered without colour.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub diagnostic: Option<String>,
    /// The statement text (its first 4,000 characters).
    pub statement: String,
}

impl Status {
    /// One line: offset, verdict, what it changed or why it was rejected.
    pub fn describe(&self) -> String {
        let what = match (&self.kind, &self.target) {
            (Some(k), Some(t)) => format!("{k} {t}"),
            (Some(k), None) => k.clone(),
            _ => "statement".into(),
        };
        if self.accepted {
            format!("offset {}: accepted {what} (program version {})", self.offset, self.version)
        } else {
            format!("offset {}: rejected {what}: {}", self.offset, self.reason.as_deref().unwrap_or("?"))
        }
    }
}

/// A query of the running program: the version that defined it, and since when its state
/// history holds (the version of its last `with reprocess`, drop or creation).
#[derive(Clone, Debug, PartialEq)]
pub struct QueryState {
    pub version: u64,
    pub epoch: u64,
    /// Its source text (the file's, or the statement's).
    pub text: String,
}

/// A change to a query's state that a task catching up must apply.
#[derive(Clone, Debug)]
pub struct Event {
    pub version: u64,
    pub query: String,
    /// Every store of the query starts over, and its input is read again from the start.
    pub restart: bool,
    /// These stores start empty.
    pub fresh: Vec<String>,
    /// Stores that no longer exist (the query dropped, or its replacement has no such clause):
    /// (the sub-topology that had it, store, changelog). Tasks that committed before this
    /// version delete their keys.
    pub gone: Vec<(String, String, String)>,
}

impl Stage {
    /// The stores a task named `task` that committed at query version `from` must delete,
    /// because a statement since then removed them: (store, changelog).
    pub fn gone_since(&self, task: &str, from: u64) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for e in self.events.iter().filter(|e| e.version > from) {
            for (owner, store, changelog) in &e.gone {
                let still = self.specs.iter().any(|s| s.stores.iter().any(|st| &st.name == store));
                if owner == task && !still && !out.iter().any(|(s, _)| s == store) {
                    out.push((store.clone(), changelog.clone()));
                }
            }
        }
        out
    }
}

/// The rows of the control-managed tables: table → [`table_key`] → visible value.
pub type Tables = BTreeMap<String, Arc<BTreeMap<Vec<u8>, Arc<Vec<Value>>>>>;

/// The key of a control-managed table's row: the key's bytes after a 0 byte, or for a row of
/// one tenant (`for tenant "t" update …`) after a 1 byte and the tenant (length-prefixed). A
/// tenant-scoped query looks up only its record's tenant's rows; other queries only rows of
/// no tenant.
pub fn table_key(tenant: Option<&[u8]>, kb: &[u8]) -> Vec<u8> {
    match tenant {
        None => [&[0u8][..], kb].concat(),
        Some(t) => [&[1u8][..], &format::scoped::scope(t, kb)].concat(),
    }
}

/// The program as of some control offset: what a task runs.
#[derive(Clone)]
pub struct Stage {
    /// The control offset after the last record this stage reflects.
    pub next: u64,
    /// Program version: the control offset after the last accepted query statement (0: the
    /// file). Offsets, not counts, so a changed program file renumbers nothing.
    pub version: u64,
    pub program: Arc<hir::Program>,
    pub topo: Arc<Topology>,
    /// The task specs, with each query's version and epoch.
    pub specs: Arc<Vec<Arc<TaskSpec>>>,
    pub queries: Arc<BTreeMap<String, QueryState>>,
    pub tables: Arc<Tables>,
    pub events: Arc<Vec<Event>>,
    /// `for tenant "t" purge` statements: (control offset, tenant). A task that applied control
    /// records only up to (not including) the offset deletes the tenant's keys.
    pub purges: Arc<Vec<(u64, String)>>,
}

impl Stage {
    /// What a task of `query` at `from` (a program version) must do to reach this stage:
    /// (restart from the start of the input, stores to start empty). None if the query is gone.
    pub fn catch_up(&self, query: &str, from: u64) -> Option<(bool, Vec<String>)> {
        self.queries.get(query)?;
        let mut restart = false;
        let mut fresh = Vec::new();
        for e in self.events.iter().filter(|e| e.version > from && e.query == query) {
            restart |= e.restart;
            fresh.extend(e.fresh.iter().cloned());
        }
        Some((restart, fresh))
    }

    pub fn spec(&self, name: &str) -> Option<&Arc<TaskSpec>> {
        self.specs.iter().find(|s| s.name == name)
    }
}

/// Evaluates the control log, record by record, in order.
#[derive(Clone)]
pub struct Evaluator {
    app: String,
    trusted: Vec<Trusted>,
    /// The last sequence number seen from each key with a valid signature.
    seqs: BTreeMap<String, u64>,
    /// The control offset after the last record evaluated.
    pub next: u64,
    /// The program as of `next`. Older stages are not kept: tasks always move to the latest.
    current: Arc<Stage>,
    /// Reserved topics a query may write to nonetheless (`topics.allow_internal_sinks`).
    allowed_sinks: Vec<String>,
}

impl Evaluator {
    /// Start from the program file (version 0).
    pub fn new(app: &str, program: hir::Program, text: &str, trusted: Vec<Trusted>) -> Result<Evaluator, ControlError> {
        let queries = program
            .queries
            .iter()
            .map(|q| {
                (
                    q.name.clone(),
                    QueryState {
                        version: 0,
                        epoch: 0,
                        text: text.get(q.span.start..q.span.end).unwrap_or_default().to_string(),
                    },
                )
            })
            .collect();
        let stage =
            build_stage(app, 0, 0, Arc::new(program), Arc::new(queries), Arc::new(Tables::new()), Arc::new(Vec::new()))
                .map_err(ControlError::ProgramCannotRun)?;
        Ok(Evaluator {
            app: app.to_string(),
            trusted,
            seqs: BTreeMap::new(),
            next: 0,
            current: Arc::new(stage),
            allowed_sinks: Vec::new(),
        })
    }

    /// Let queries write to these reserved topics (`topics.allow_internal_sinks`); a statement
    /// whose query writes to any other reserved topic ([`plan::reserved_sink`]) is rejected.
    pub fn allow_sinks(mut self, allowed: &[String]) -> Evaluator {
        self.allowed_sinks = allowed.to_vec();
        self
    }

    /// Refuse a query that writes to a reserved topic.
    fn check_sink(&self, q: &hir::Query) -> Result<(), Rejection> {
        for sink in &q.sinks {
            if let Some(why) = plan::reserved_sink(&sink.topic, &self.current.topo, &self.allowed_sinks) {
                return Err(Rejection::ReservedSink { query: q.name.clone(), topic: sink.topic.clone(), why });
            }
        }
        Ok(())
    }

    pub fn latest(&self) -> &Arc<Stage> {
        &self.current
    }

    /// Set or delete a row of a control-managed table. A table shared with running tasks is
    /// copied once; further changes before they take the new stage are made in place.
    /// `for tenant "t" purge` at `offset`: the tenant's rows leave every control-managed table
    /// now, and tasks delete its keys when they apply the offset.
    fn purge(&mut self, offset: u64, tenant: &str) {
        let stage = Arc::make_mut(&mut self.current);
        let prefix = table_key(Some(tenant.as_bytes()), &[]);
        for t in Arc::make_mut(&mut stage.tables).values_mut() {
            if t.keys().any(|k| k.starts_with(&prefix)) {
                Arc::make_mut(t).retain(|k, _| !k.starts_with(&prefix));
            }
        }
        Arc::make_mut(&mut stage.purges).push((offset, tenant.to_string()));
        stage.next = self.next;
    }

    fn set_row(&mut self, table: &str, key: Vec<u8>, row: Option<Arc<Vec<Value>>>) {
        let stage = Arc::make_mut(&mut self.current);
        let t = Arc::make_mut(Arc::make_mut(&mut stage.tables).entry(table.to_string()).or_default());
        match row {
            Some(r) => t.insert(key, r),
            None => t.remove(&key),
        };
        stage.next = self.next;
    }

    /// Evaluate the next control record. Records must come in offset order; one already
    /// evaluated is ignored (None).
    pub fn apply(&mut self, r: &ControlRecord) -> Option<Status> {
        if r.offset < self.next {
            return None;
        }
        self.next = r.offset + 1;
        let text =
            r.value.as_deref().map(|v| String::from_utf8_lossy(v).chars().take(4000).collect()).unwrap_or_default();
        let mut st = Status {
            offset: r.offset,
            timestamp: r.timestamp,
            accepted: false,
            key_id: None,
            seq: None,
            tenant: None,
            kind: None,
            target: None,
            version: self.latest().version,
            report: None,
            reason: None,
            diagnostic: None,
            statement: text,
        };
        match self.evaluate(r, &mut st) {
            Ok(()) => {
                st.accepted = true;
                st.version = self.current.version;
            }
            Err(reason) => st.reason = Some(reason.to_string()),
        }
        // Bounded, like the statement: a status record stays small whatever the text.
        if let Some(d) = st.diagnostic.as_mut().filter(|d| d.len() > 16_000) {
            let cut = (0..=16_000).rev().find(|i| d.is_char_boundary(*i)).unwrap_or(0);
            d.truncate(cut);
            d.push_str("\n… (truncated)\n");
        }
        Some(st)
    }

    /// A control record's signed envelope, checked before anything looks at its text: signed
    /// by a trusted key for this application, its sequence number above the key's last one, not
    /// expired, for a tenant the key may speak for. The tenant it is signed for (empty: none)
    /// and the statement's text.
    fn authentic<'r>(&mut self, r: &'r ControlRecord, st: &mut Status) -> Result<(String, &'r str), Rejection> {
        // The envelope, before anything looks at the text.
        let header = |name: &str| r.headers.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_slice());
        let text_header = |name: &'static str| -> Result<Option<String>, Rejection> {
            match header(name) {
                None => Ok(None),
                Some(v) => String::from_utf8(v.to_vec()).map(Some).map_err(|_| Rejection::HeaderNotUtf8(name)),
            }
        };
        let sig = match header(H_SIG) {
            None => return Err(Rejection::Unsigned),
            Some(s) => s,
        };
        let key_id = text_header(H_KEY_ID)?.ok_or(Rejection::Envelope("no streamc.key_id header"))?;
        st.key_id = Some(key_id.clone());
        let seq: u64 = text_header(H_SEQ)?
            .and_then(|s| s.parse().ok())
            .ok_or(Rejection::Envelope("streamc.seq is missing or not a number"))?;
        st.seq = Some(seq);
        let expires: i64 = text_header(H_EXPIRES)?
            .and_then(|s| s.parse().ok())
            .ok_or(Rejection::Envelope("streamc.expires is missing or not a number"))?;
        let tenant = text_header(H_TENANT)?.unwrap_or_default();
        if !tenant.is_empty() {
            st.tenant = Some(tenant.clone());
        }
        let trusted =
            self.trusted.iter().find(|t| t.id == key_id).ok_or_else(|| Rejection::UnknownKey(key_id.clone()))?;
        let sig: [u8; 64] = std::str::from_utf8(sig)
            .ok()
            .and_then(|s| hex::decode(s).ok())
            .and_then(|b| b.try_into().ok())
            .ok_or(Rejection::Envelope("streamc.sig is not 64 bytes of hex"))?;
        let value = r.value.as_deref().ok_or(Rejection::Envelope("no statement: the record has no value"))?;
        let msg = message(&self.app, &key_id, seq, expires, &tenant, value);
        trusted
            .key
            .verify_strict(&msg, &Signature::from_bytes(&sig))
            .map_err(|_| Rejection::NotVerified { key_id: key_id.clone(), app: self.app.clone() })?;
        // Authentic from here on.
        let last = self.seqs.get(&key_id).copied();
        if last.is_some_and(|l| seq <= l) {
            return Err(Rejection::Replayed { seq, key_id, last: last.unwrap_or(0) });
        }
        self.seqs.insert(key_id.clone(), seq);
        if expires < r.timestamp {
            return Err(Rejection::Expired { expires, timestamp: r.timestamp });
        }
        if let Some(allowed) = &trusted.tenants {
            if tenant.is_empty() || !allowed.contains(&tenant) {
                return Err(Rejection::TenantNotAllowed { key_id, allowed: allowed.clone() });
            }
        }
        let text = std::str::from_utf8(value).map_err(|_| Rejection::NotUtf8)?;
        Ok((tenant, text))
    }

    fn evaluate(&mut self, r: &ControlRecord, st: &mut Status) -> Result<(), Rejection> {
        let (tenant, text) = self.authentic(r, st)?;
        // The text.
        let latest = self.latest().clone();
        let program = &latest.program;
        let rendered = |diags: &[Diagnostic]| {
            diag::render(
                diags,
                &format!("<{} offset {}>", control_topic(&self.app), r.offset),
                text,
                RenderOptions::plain(),
            )
        };
        let ast = syntax::parse_statement(text).map_err(|d| {
            st.diagnostic = Some(rendered(&d));
            Rejection::DoesNotCompile
        })?;
        let stmt_tenant = ast.tenant.as_ref().map(|t| t.node.clone()).unwrap_or_default();
        if stmt_tenant != tenant {
            return Err(Rejection::TenantMismatch { text: stmt_tenant, signed: tenant });
        }
        let (_, control) = check::check_statement(program, &ast, text).map_err(|d| {
            st.diagnostic = Some(rendered(&d));
            Rejection::DoesNotCompile
        })?;
        // The checker refused `for tenant` on anything but `update`, `delete` and `purge`.
        let scoped = (!tenant.is_empty()).then_some(tenant.as_bytes());
        let span_text = |s: crate::ast::Span| text.get(s.start..s.end).unwrap_or_default().to_string();
        // State updates: a row of a control-managed table; the program stays as it is.
        if let Some(change) = state_change(&control, program, scoped, &tenant, st)? {
            drop(latest);
            match change {
                StateChange::Row { table, key, row } => self.set_row(&table, key, row),
                StateChange::Purge => self.purge(r.offset, &tenant),
            }
            return Ok(());
        }
        let mut queries = (*latest.queries).clone();
        let mut events = (*latest.events).clone();
        let mut prog = (**program).clone();
        let tables = latest.tables.clone();
        let mut version = latest.version;
        match control {
            Control::Update { .. } | Control::Delete { .. } | Control::Purge => {}
            Control::NewQuery(q) => {
                st.kind = Some("query".into());
                st.target = Some(q.name.clone());
                self.check_sink(&q)?;
                version = self.next;
                let body = match &ast.body {
                    crate::ast::StatementBody::NewQuery(a) => span_text(a.span),
                    _ => text.to_string(),
                };
                queries.insert(q.name.clone(), QueryState { version, epoch: version, text: body });
                // A new query reads its input from the start, as if it had been in the file.
                events.push(Event {
                    version,
                    query: q.name.clone(),
                    restart: true,
                    fresh: Vec::new(),
                    gone: Vec::new(),
                });
                prog.queries.push(q);
            }
            Control::Replace { query: q, mode } => {
                st.kind = Some("replace".into());
                st.target = Some(q.name.clone());
                self.check_sink(&q)?;
                version = self.next;
                let (next_prog, state, ev) =
                    self.replacement(q, mode, &ast, text, &latest, &queries, &prog, st, &rendered)?;
                queries.insert(state.0, state.1);
                events.push(ev);
                prog = next_prog;
            }
            Control::Drop(name) => {
                st.kind = Some("drop".into());
                st.target = Some(name.clone());
                version = self.next;
                events.push(Event {
                    version,
                    query: name.clone(),
                    restart: true,
                    fresh: Vec::new(),
                    gone: stores_of(&latest.specs, &name),
                });
                queries.remove(&name);
                prog.queries.retain(|q| q.name != name);
            }
        }
        let mut stage =
            build_stage(&self.app, self.next, version, Arc::new(prog), Arc::new(queries), tables, Arc::new(events))
                .map_err(|e| {
                    st.diagnostic = Some(rendered(&[Diagnostic::new(
                        Code::CannotRun,
                        ast.span,
                        format!("the runtime cannot run this: {e}"),
                    )
                    .label("here")]));
                    Rejection::CannotRun(e)
                })?;
        if st.kind.as_deref() == Some("replace") {
            if let Some(why) = st.target.as_deref().and_then(|q| moved(&latest.specs, &stage.specs, q)) {
                let span = match &ast.body {
                    crate::ast::StatementBody::Replace { query, .. } => query.name.span,
                    _ => ast.span,
                };
                let d = Diagnostic::new(Code::IncompatibleState, span, format!("this replacement {why}"))
                    .label("tasks would change")
                    .help("a task is its sub-topology's input partition: add the new form as a new query (`query NEW { … }`) and drop this one");
                st.diagnostic = Some(rendered(&[d]));
                return Err(Rejection::Replacement(why));
            }
        }
        stage.purges = latest.purges.clone();
        drop(latest);
        self.current = Arc::new(stage);
        Ok(())
    }

    /// A `replace` of query `q` (checked, its sink allowed) at version `self.next`: the program
    /// with it replaced, the query's new state by name, and its event; or the rejection (state
    /// that cannot be kept without a mode), its diagnostic and report in `st`.
    #[allow(clippy::too_many_arguments)]
    fn replacement(
        &self,
        q: hir::Query,
        mode: Option<crate::ast::ReplaceMode>,
        ast: &crate::ast::Statement,
        text: &str,
        latest: &Stage,
        queries: &BTreeMap<String, QueryState>,
        prog: &hir::Program,
        st: &mut Status,
        rendered: &dyn Fn(&[Diagnostic]) -> String,
    ) -> Result<(hir::Program, (String, QueryState), Event), Rejection> {
        let span_text = |s: crate::ast::Span| text.get(s.start..s.end).unwrap_or_default().to_string();
        let old_topo = &latest.topo;
        let mut next_prog = prog.clone();
        if let Some(slot) = next_prog.queries.iter_mut().find(|x| x.name == q.name) {
            *slot = q.clone();
        }
        let new_topo = plan::lower(&next_prog, &self.app);
        let mut report = compare(old_topo, &new_topo, &q.name);
        report.mode = mode.map(|m| match m {
            crate::ast::ReplaceMode::Reprocess => "reprocess".to_string(),
            crate::ast::ReplaceMode::FreshState => "fresh state".to_string(),
        });
        let needs = !report.incompatible.is_empty();
        let version = self.next;
        let mut ev = Event {
            version,
            query: q.name.clone(),
            restart: false,
            fresh: Vec::new(),
            gone: stores_of(&latest.specs, &q.name),
        };
        let mut epoch = queries.get(&q.name).map_or(version, |s| s.epoch);
        match mode {
            None if needs => {
                let (qspan, name) = match &ast.body {
                    crate::ast::StatementBody::Replace { query, .. } => (query.name.span, query.name.node.clone()),
                    _ => (ast.span, q.name.clone()),
                };
                let d = Diagnostic::new(Code::IncompatibleState, qspan, format!("replacing `{name}` changes state that cannot be kept: {}", report.incompatible.join("; ")))
                    .label("incompatible state")
                    .help("add `with reprocess` to rebuild it from the start of the input, or `with fresh state` to start it empty from now");
                st.diagnostic = Some(rendered(&[d]));
                st.report = Some(report);
                return Err(Rejection::IncompatibleState);
            }
            None => {}
            Some(m) => replace_with(m, &mut report, &mut ev, &mut epoch),
        }
        let body = match &ast.body {
            crate::ast::StatementBody::Replace { query, .. } => span_text(query.span),
            _ => text.to_string(),
        };
        st.report = Some(report);
        Ok((next_prog, (q.name.clone(), QueryState { version, epoch, text: body }), ev))
    }
}

/// Every store of a query's tasks: (task, store, changelog). `Stage::gone_since` keeps those
/// the new program no longer has.
fn stores_of(specs: &[Arc<TaskSpec>], query: &str) -> Vec<(String, String, String)> {
    specs
        .iter()
        .filter(|s| s.query == query)
        .flat_map(|s| s.stores.iter().map(move |st| (s.name.clone(), st.name.clone(), st.changelog.clone())))
        .collect()
}

/// Whether replacing `query` moves work between tasks: a sub-topology that keeps its name but
/// reads another topic, or a store that would be kept by another sub-topology (its
/// partitioning changes). Tasks are identified by their sub-topology's input, so neither can be
/// done in place.
pub fn moved(old: &[Arc<TaskSpec>], new: &[Arc<TaskSpec>], query: &str) -> Option<String> {
    let of = |specs: &[Arc<TaskSpec>]| -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let mut inputs = BTreeMap::new();
        let mut owners = BTreeMap::new();
        for s in specs.iter().filter(|s| s.query == query) {
            inputs.insert(s.name.clone(), s.main.topic.clone());
            for st in &s.stores {
                owners.insert(st.name.clone(), s.name.clone());
            }
        }
        (inputs, owners)
    };
    let ((ia, oa), (ib, ob)) = (of(old), of(new));
    for (name, topic) in &ib {
        if let Some(before) = ia.get(name).filter(|t| *t != topic) {
            return Some(format!("makes `{name}` read `{topic}` instead of `{before}`"));
        }
    }
    for (store, owner) in &ob {
        if let Some(before) = oa.get(store).filter(|o| *o != owner) {
            return Some(format!(
                "moves the state of `{store}` from `{before}` to `{owner}` (its partitioning changes)"
            ));
        }
    }
    None
}

fn build_stage(
    app: &str,
    next: u64,
    version: u64,
    program: Arc<hir::Program>,
    queries: Arc<BTreeMap<String, QueryState>>,
    tables: Arc<Tables>,
    events: Arc<Vec<Event>>,
) -> Result<Stage, physical::PlanError> {
    let topo = plan::lower(&program, app);
    let specs = physical::specs(&program, &topo)?
        .into_iter()
        .map(|mut s| {
            if let Some(q) = queries.get(&s.query) {
                s.version = q.version;
                s.epoch = q.epoch;
            }
            Arc::new(s)
        })
        .collect();
    Ok(Stage {
        next,
        version,
        program,
        topo: Arc::new(topo),
        specs: Arc::new(specs),
        queries,
        tables,
        events,
        purges: Arc::default(),
    })
}

/// Compare the stores of `query` in two topologies.
pub fn compare(old: &Topology, new: &Topology, query: &str) -> Report {
    let of = |t: &Topology| -> BTreeMap<String, plan::Store> {
        t.stores
            .iter()
            .filter(|s| s.subtopology.is_some_and(|i| t.subtopologies.get(i).is_some_and(|sub| sub.query == query)))
            .map(|s| (s.name.clone(), s.clone()))
            .collect()
    };
    let (a, b) = (of(old), of(new));
    let mut r = Report { query: query.to_string(), ..Report::default() };
    for (name, s) in &b {
        match a.get(name) {
            None => r.incompatible.push(format!("{name}: a new store, with no history")),
            Some(o) => match store_difference(o, s) {
                None => r.kept.push(name.clone()),
                Some(why) => r.incompatible.push(format!("{name}: {why}")),
            },
        }
    }
    r.dropped = a.keys().filter(|n| !b.contains_key(*n)).cloned().collect();
    r
}

/// Why a store's contents cannot be read by its replacement, if they cannot.
fn store_difference(old: &plan::Store, new: &plan::Store) -> Option<String> {
    use plan::StoreKind::*;
    match (&old.kind, &new.kind) {
        (Window { window: a }, Window { window: b }) if a.kind != b.kind => {
            return Some(format!("the window changed from {} to {}", fmt_window(a), fmt_window(b)))
        }
        (Window { .. }, Window { .. }) => {}
        (JoinWindow { within: a, after: x, .. }, JoinWindow { within: b, after: y, .. }) if a != b || x != y => {
            return Some("the join's `within` changed".into())
        }
        (JoinWindow { outer: a, .. }, JoinWindow { outer: b, .. }) if a != b => {
            return Some("the join changed to or from an outer join".into())
        }
        (Grouped { grouping: a }, Grouped { grouping: b }) if a != b => {
            return Some(format!("the grouping changed from `{a}` to `{b}`"))
        }
        (ForeignKey { join: a }, ForeignKey { join: b }) if a != b => {
            return Some(format!("the foreign-key join changed from `{a}` to `{b}`"))
        }
        (a, b) if std::mem::discriminant(a) != std::mem::discriminant(b) => {
            return Some("the kind of state changed".into())
        }
        _ => {}
    }
    if old.key != new.key {
        return Some(format!("its key changed from {} to {}", old.key, new.key));
    }
    if old.tenant_scoped != new.tenant_scoped {
        return Some(if new.tenant_scoped {
            "it becomes tenant-scoped".into()
        } else {
            "it is no longer tenant-scoped".into()
        });
    }
    if old.value != new.value {
        return Some(format!("its state changed from {} to {}", old.value, new.value));
    }
    None
}

fn fmt_window(w: &hir::Window) -> String {
    format!("{:?}", w.kind).to_lowercase()
}

/// A replacement `with reprocess` (the whole query starts over from the start of its input,
/// its stores rebuilt: they would otherwise count the input read again twice) or `with fresh
/// state` (the stores that cannot be kept start empty): the event and the report say so.
fn replace_with(mode: crate::ast::ReplaceMode, report: &mut Report, ev: &mut Event, epoch: &mut u64) {
    let names = |v: &mut Vec<String>| -> Vec<String> {
        v.drain(..).map(|s| s.split(':').next().unwrap_or_default().to_string()).collect()
    };
    match mode {
        crate::ast::ReplaceMode::Reprocess => {
            ev.restart = true;
            *epoch = ev.version;
            report.rebuilt = std::mem::take(&mut report.kept);
            let incompatible = names(&mut report.incompatible);
            report.rebuilt.extend(incompatible);
        }
        crate::ast::ReplaceMode::FreshState => {
            report.emptied = names(&mut report.incompatible);
            ev.fresh = report.emptied.clone();
        }
    }
}

/// What a statement that changes state, not the program, changes.
enum StateChange {
    /// A row of a control-managed table set (None: deleted), under its (tenant-scoped) key.
    Row { table: String, key: Vec<u8>, row: Option<Arc<Vec<Value>>> },
    /// Every row of the tenant's, in every control-managed table.
    Purge,
}

/// The state change an `update`, `delete` or `purge` makes (None: the statement changes the
/// program), its kind and target recorded in the status.
fn state_change(
    control: &Control,
    program: &hir::Program,
    scoped: Option<&[u8]>,
    tenant: &str,
    st: &mut Status,
) -> Result<Option<StateChange>, Rejection> {
    match control {
        Control::Update { table, key, value } => {
            let src = &program.sources[*table];
            st.kind = Some("update".into());
            st.target = Some(src.name.clone());
            let row = Row::default();
            let k = eval(key, &row, &[]).map_err(|e| Rejection::Eval { what: "key", reason: e })?;
            let v = eval(value, &row, &[]).map_err(|e| Rejection::Eval { what: "value", reason: e })?;
            let mut json = Vec::new();
            v.write_json(&value.ty, &mut json);
            let fields = format::decode_visible(src, &json)
                .map_err(|e| Rejection::DoesNotFit { table: src.name.clone(), reason: e })?;
            let key = table_key(scoped, &k.key_bytes(&src.key_type()));
            Ok(Some(StateChange::Row { table: src.name.clone(), key, row: Some(Arc::new(fields)) }))
        }
        Control::Delete { table, key } => {
            let src = &program.sources[*table];
            st.kind = Some("delete".into());
            st.target = Some(src.name.clone());
            let k = eval(key, &Row::default(), &[]).map_err(|e| Rejection::Eval { what: "key", reason: e })?;
            let key = table_key(scoped, &k.key_bytes(&src.key_type()));
            Ok(Some(StateChange::Row { table: src.name.clone(), key, row: None }))
        }
        Control::Purge => {
            st.kind = Some("purge".into());
            st.target = Some(tenant.to_string());
            if tenant.is_empty() {
                return Err(Rejection::PurgeWithoutTenant);
            }
            Ok(Some(StateChange::Purge))
        }
        _ => Ok(None),
    }
}

/// Read the control records of a log, in order, into an evaluator; returns their statuses.
pub fn evaluate_all(ev: &mut Evaluator, records: &[ControlRecord]) -> Vec<Status> {
    records.iter().filter_map(|r| ev.apply(r)).collect()
}
