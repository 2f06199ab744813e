//! The schema registry in the runtime, for `avro` sources and sinks: writer schemas fetched
//! before a record needs them (so decoding never waits on the network, and a registry that is
//! down stops the run instead of dead-lettering records), and each sink's schema registered
//! under `<topic>-value` when a program starts or changes (a subject whose compatibility rules
//! refuse it stops the run with the registry's reason, before anything is written).

use std::time::Duration;

use crate::ast::Format;
use crate::config::Config;
use crate::hir;
use crate::plan::physical::TaskSpec;
use crate::registry::{Registry, RegistryError};
use crate::runtime::error::RunError;

/// The subject of a topic's values (Confluent's TopicNameStrategy).
pub fn subject(topic: &str) -> String {
    format!("{topic}-value")
}

fn no_registry(what: &str) -> RunError {
    RunError::Registry(format!(
        "{what} is avro, but no schema registry is configured: set schema.registry.url (e.g. --set schema.registry.url=http://localhost:8081)"
    ))
}

/// How often, and how long, an unreachable registry is asked again before the run stops.
const ATTEMPTS: u32 = 5;
const BACKOFF: Duration = Duration::from_millis(500);

fn retry<T>(mut f: impl FnMut() -> Result<T, RegistryError>) -> Result<T, RegistryError> {
    let mut wait = BACKOFF;
    for _ in 1..ATTEMPTS {
        match f() {
            Err(RegistryError::Unavailable { .. }) => {
                std::thread::sleep(wait);
                wait *= 2;
            }
            r => return r,
        }
    }
    f()
}

/// Register the schema of every avro sink of `specs` (each distinct one once), and install the
/// registry's lookups for what is needed later (rows restored into stores, a query a control
/// statement changes). Without a registry configured, a program with an avro sink cannot run.
pub fn register_sinks(cfg: &Config, specs: &[std::sync::Arc<TaskSpec>]) -> Result<(), RunError> {
    if let Some(r) = Registry::of(cfg) {
        crate::avro::set_registry(std::sync::Arc::new(Lookups(r)));
    }
    let mut done = std::collections::BTreeSet::new();
    for spec in specs {
        for sink in spec.sinks() {
            let Some(text) = &sink.avro_schema else { continue };
            if !done.insert((sink.topic.clone(), text.clone())) {
                continue;
            }
            let registry = Registry::of(cfg).ok_or_else(|| no_registry(&format!("sink topic `{}`", sink.topic)))?;
            register_text(&registry, &sink.topic, text)?;
        }
    }
    Ok(())
}

/// The registry, as `avro` asks it when something was not fetched ahead (with the retries).
struct Lookups(Registry);

impl crate::avro::Lookup for Lookups {
    fn writer(&self, id: u32) -> Result<Option<String>, String> {
        retry(|| self.0.schema(id)).map_err(|e| e.to_string())
    }
    fn register(&self, topic: &str, schema: &str) -> Result<u32, String> {
        let json: serde_json::Value = serde_json::from_str(schema).map_err(|e| e.to_string())?;
        retry(|| self.0.register(&subject(topic), &json)).map_err(|e| e.to_string())
    }
}

/// Register the schema derived from `rt` under `<topic>-value`, and keep its id for encoding.
pub fn register(registry: &Registry, topic: &str, rt: &crate::types::RecordType) -> Result<u32, RunError> {
    let text = crate::avro::schema_json(rt, &crate::avro::record_name(topic)).to_string();
    register_text(registry, topic, &text)
}

fn register_text(registry: &Registry, topic: &str, text: &str) -> Result<u32, RunError> {
    let schema = apache_avro::Schema::parse_str(text)
        .map_err(|e| RunError::Registry(format!("the schema of `{topic}` is not valid Avro: {e}")))?;
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| RunError::Registry(e.to_string()))?;
    let id = retry(|| registry.register(&subject(topic), &json)).map_err(|e| {
        RunError::Registry(format!("cannot register the schema of `{topic}` under `{}`: {e}", subject(topic)))
    })?;
    crate::avro::set_sink(topic, text, id, schema);
    Ok(id)
}

/// Make sure the writer schema a framed avro value names is known (fetched once per id). Not
/// in the wire format, or an id the registry does not know: left to decoding, which
/// dead-letters the record with the reason. The registry down: an error that stops the run.
pub fn prefetch(cfg: &Config, what: &str, value: Option<&[u8]>) -> Result<(), RunError> {
    let Some(Ok(id)) = value.map(crate::avro::schema_id) else { return Ok(()) };
    if crate::avro::writer_known(id) {
        return Ok(());
    }
    let registry = crate::registry::Registry::of(cfg).ok_or_else(|| no_registry(what))?;
    let text = retry(|| registry.schema(id))
        .map_err(|e| RunError::Registry(format!("cannot read schema id {id} of a record of {what}: {e}")))?;
    let writer = match text {
        Some(t) => match crate::avro::Writer::parse(&t) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("schema id {id} in the registry is not usable ({e}): its records are dead letters");
                None
            }
        },
        None => None,
    };
    crate::avro::remember_writer(id, writer);
    Ok(())
}

/// Whether a source's values are avro.
pub fn is_avro(src: &hir::Source) -> bool {
    src.format == Format::Avro
}
