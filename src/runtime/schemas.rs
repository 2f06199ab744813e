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

/// Register the schema of every avro sink of `specs` (each topic once). Without a registry
/// configured, a program with an avro sink cannot run.
pub fn register_sinks(cfg: &Config, specs: &[std::sync::Arc<TaskSpec>]) -> Result<(), RunError> {
    let mut done = std::collections::BTreeSet::new();
    for spec in specs {
        for sink in spec.sinks() {
            if sink.format != Format::Avro || !done.insert(sink.topic.clone()) {
                continue;
            }
            let registry = crate::registry::Registry::of(cfg)
                .ok_or_else(|| no_registry(&format!("sink topic `{}`", sink.topic)))?;
            register(&registry, &sink.topic, &sink.value_ty)?;
        }
    }
    Ok(())
}

/// Register the schema derived from `rt` under `<topic>-value`, and keep its id for encoding.
pub fn register(registry: &Registry, topic: &str, rt: &crate::types::RecordType) -> Result<u32, RunError> {
    let json = crate::avro::schema_json(rt, &crate::avro::record_name(topic));
    let schema = apache_avro::Schema::parse(&json)
        .map_err(|e| RunError::Registry(format!("the schema of `{topic}` is not valid Avro: {e}")))?;
    let id = retry(|| registry.register(&subject(topic), &json)).map_err(|e| {
        RunError::Registry(format!("cannot register the schema of `{topic}` under `{}`: {e}", subject(topic)))
    })?;
    crate::avro::set_sink(topic, id, schema);
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
