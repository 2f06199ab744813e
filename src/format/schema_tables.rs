//! The registry formats' (avro, protobuf) schemas in this process: the writer schemas looked up
//! by id and the sink schemas registered, one table of each per format, and the registry lookups
//! the runtime installs for what was not fetched ahead. The runtime fills the tables before a
//! record needs them, so decoding and encoding never wait on the network; what had to be asked
//! anyway and could not be is recorded for the runtime to stop on ([`take_failure`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::ast::Format;

/// The subject of a topic's values (Confluent's TopicNameStrategy).
pub fn value_subject(topic: &str) -> String {
    format!("{topic}-value")
}

/// The subject of a topic's keys (Confluent's TopicNameStrategy).
pub fn key_subject(topic: &str) -> String {
    format!("{topic}-key")
}

/// The magic byte that starts a value or key in the Confluent wire format.
pub const MAGIC: u8 = 0;

/// The start of a value or key in the Confluent wire format: the magic byte and the schema id
/// (4 bytes, big-endian); what follows is the format's own.
pub fn wire_header(id: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
    out
}

/// The schema id in the header ([`wire_header`]) of a value or key in `format`'s wire format
/// (`format`: its name, for the error).
pub fn wire_schema_id(bytes: &[u8], format: &str) -> Result<u32, String> {
    match bytes {
        [MAGIC, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        [MAGIC, ..] => {
            Err(format!("a value of {} bytes: too short for the {format} wire format's header", bytes.len()))
        }
        [m, ..] => Err(format!("not in the {format} wire format: the first byte is {m}, not the magic byte 0")),
        [] => Err(format!("an empty value is not in the {format} wire format")),
    }
}

/// What the runtime installs ([`set_registry`]): looks up a writer schema by id (Ok(None): the
/// registry does not know it) and registers a schema (its text, of `format`: Avro or Protobuf)
/// under a subject, both over the network. Used for what was not fetched ahead (rows
/// restored into a store, a query a control statement changed).
pub trait Lookup: Send + Sync {
    fn writer(&self, id: u32) -> Result<Option<String>, String>;
    fn register(&self, subject: &str, schema: &str, format: Format) -> Result<u32, String>;
}

static LOOKUP: RwLock<Option<Arc<dyn Lookup>>> = RwLock::new(None);

/// Why the registry could not be asked, since the runtime last looked ([`take_failure`]): a
/// record that needed it was refused for that reason, and the run must stop before it commits.
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Install the registry lookups of this process.
pub fn set_registry(lookup: Arc<dyn Lookup>) {
    *LOOKUP.write().unwrap_or_else(|p| p.into_inner()) = Some(lookup);
}

/// The registry failure a decode or encode met since the last call, if any.
pub fn take_failure() -> Option<String> {
    FAILURE.lock().unwrap_or_else(|p| p.into_inner()).take()
}

fn failed(reason: String) -> String {
    FAILURE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(reason.clone());
    format!("the schema registry could not be asked: {reason}")
}

fn lookup() -> Option<Arc<dyn Lookup>> {
    LOOKUP.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The writer schemas of one registry format this process has looked up, by registry id, as
/// that format compiles them (`W`); None: the registry does not know the id, or its schema is
/// not one of that format. The runtime fills it before a record needs it, so that decoding never
/// waits on the network.
pub struct Writers<W>(RwLock<BTreeMap<u32, Option<Arc<W>>>>);

impl<W> Default for Writers<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W> Writers<W> {
    pub const fn new() -> Self {
        Writers(RwLock::new(BTreeMap::new()))
    }

    /// Whether schema `id` has been looked up.
    pub fn known(&self, id: u32) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).contains_key(&id)
    }

    /// Keep what the registry said of schema `id` (None: it does not know it, or it is unusable).
    pub fn remember(&self, id: u32, writer: Option<W>) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).insert(id, writer.map(Arc::new));
    }

    fn get(&self, id: u32) -> Option<Option<Arc<W>>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// Writer schema `id`: known, or looked up now (a record restored into a store before this
    /// process fetched its schema) and compiled by `compile`; `what` names the schemas this
    /// format reads, for the error.
    pub fn of(&self, id: u32, compile: impl FnOnce(&str) -> Result<W, String>, what: &str) -> Result<Arc<W>, String> {
        let known = match self.get(id) {
            Some(known) => known,
            None => {
                let Some(l) = lookup() else {
                    return Err(format!("schema id {id} was not looked up in the schema registry"));
                };
                let text = l.writer(id).map_err(failed)?;
                self.remember(id, text.and_then(|t| compile(&t).ok()));
                self.get(id).flatten()
            }
        };
        known.ok_or_else(|| format!("schema id {id} is not in the schema registry, or is not {what}"))
    }
}

/// The schemas registered for writing in one registry format: per subject (a sink topic's
/// values, a source topic's keys written by `produce`), each schema's text (as derived from a
/// type), its registry id and its compiled form (`S`); one per distinct type written.
pub struct Sinks<S>(RwLock<BTreeMap<String, Vec<SinkSchema<S>>>>);

/// A sink schema: its text, its registry id, its compiled form.
type SinkSchema<S> = (String, u32, S);

impl<S: Clone> Default for Sinks<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Clone> Sinks<S> {
    pub const fn new() -> Self {
        Sinks(RwLock::new(BTreeMap::new()))
    }

    /// Keep the registry id of a schema of `subject`.
    pub fn set(&self, subject: &str, text: &str, id: u32, schema: S) {
        let mut sinks = self.0.write().unwrap_or_else(|p| p.into_inner());
        let v = sinks.entry(subject.to_string()).or_default();
        v.retain(|(t, _, _)| t != text);
        v.push((text.to_string(), id, schema));
    }

    /// The id and compiled form of the schema `text` of `subject`: registered by the runtime
    /// ahead, or now (compiled by `compile`, registered as `format`).
    pub fn of(
        &self,
        subject: &str,
        text: &str,
        format: Format,
        compile: impl FnOnce(&str) -> Result<S, String>,
    ) -> Result<(u32, S), String> {
        let found = {
            let sinks = self.0.read().unwrap_or_else(|p| p.into_inner());
            sinks.get(subject).and_then(|v| v.iter().find(|(t, _, _)| t == text).map(|(_, id, s)| (*id, s.clone())))
        };
        if let Some(found) = found {
            return Ok(found);
        }
        let Some(l) = lookup() else {
            return Err(format!("no schema of `{subject}` was registered in the schema registry"));
        };
        let schema = compile(text).map_err(|e| format!("the schema of `{subject}` is not valid {format}: {e}"))?;
        let id = l.register(subject, text, format).map_err(failed)?;
        self.set(subject, text, id, schema.clone());
        Ok((id, schema))
    }
}
