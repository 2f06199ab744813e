//! The schema registry in the runtime, for `avro` and `protobuf` sources and sinks: writer
//! schemas fetched before a record needs them (so decoding never waits on the network, and a
//! registry that is down stops the run instead of dead-lettering records), and each sink's
//! schema registered under `<topic>-value` when a program starts or changes (a subject whose
//! compatibility rules refuse it stops the run with the registry's reason, before anything is
//! written).

use std::time::Duration;

use crate::ast::Format;
use crate::config::Config;
use crate::hir;
use crate::plan::physical::TaskSpec;
use crate::registry::{Registry, RegistryError, SchemaType};
use crate::runtime::error::RunError;

/// The subject of a topic's values (Confluent's TopicNameStrategy).
pub fn subject(topic: &str) -> String {
    crate::format::schema_tables::value_subject(topic)
}

fn no_registry(what: &str, format: Format) -> RunError {
    RunError::Registry(format!(
        "{what} is {format}, but no schema registry is configured: set schema.registry.url (e.g. --set schema.registry.url=http://localhost:8081)"
    ))
}

/// The registry's type of schemas of a registry format.
pub fn schema_type(format: Format) -> SchemaType {
    match format {
        Format::Protobuf => SchemaType::Protobuf,
        // (Only a registry format has schemas: the others are never asked for.)
        Format::Avro | Format::Json | Format::String | Format::Csv(_) => SchemaType::Avro,
    }
}

/// How often, and how long, an unreachable registry is asked again before the run stops.
const ATTEMPTS: u32 = 5;
const BACKOFF: Duration = Duration::from_millis(500);

/// `f`, asked again while the registry is unavailable (no answer, HTTP 5xx), with backoff.
pub fn retry<T>(mut f: impl FnMut() -> Result<T, RegistryError>) -> Result<T, RegistryError> {
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

/// Register the schema of every avro or protobuf sink of `specs` (each distinct one once), and
/// install the registry's lookups for what is needed later (rows restored into stores, a query a
/// control statement changes). Without a registry configured, such a program cannot run.
pub fn register_sinks(cfg: &Config, specs: &[std::sync::Arc<TaskSpec>]) -> Result<(), RunError> {
    if let Some(r) = Registry::of(cfg) {
        crate::format::schema_tables::set_registry(std::sync::Arc::new(Lookups(r)));
    }
    let mut done = std::collections::BTreeSet::new();
    for spec in specs {
        for sink in spec.sinks() {
            if let Some(text) = &sink.registry_schema {
                if done.insert((subject(&sink.topic), text.clone())) {
                    let what = format!("sink topic `{}`", sink.topic);
                    let registry = Registry::of(cfg).ok_or_else(|| no_registry(&what, sink.format))?;
                    register_text(&registry, &subject(&sink.topic), text, sink.format)?;
                }
            }
            if let Some((format, text)) = &sink.key_schema {
                let key_subject = crate::format::schema_tables::key_subject(&sink.topic);
                if done.insert((key_subject.clone(), text.clone())) {
                    let what = format!("the keys of sink topic `{}`", sink.topic);
                    let registry = Registry::of(cfg).ok_or_else(|| no_registry(&what, *format))?;
                    register_text(&registry, &key_subject, text, *format)?;
                }
            }
        }
    }
    Ok(())
}

/// The registry, as `avro` and `protobuf` ask it when something was not fetched ahead (with the
/// retries).
struct Lookups(Registry);

impl crate::format::schema_tables::Lookup for Lookups {
    fn writer(&self, id: u32) -> Result<Option<String>, String> {
        retry(|| self.0.schema(id)).map(|s| s.map(|(text, _)| text)).map_err(|e| e.to_string())
    }
    fn register(&self, subject: &str, schema: &str, format: Format) -> Result<u32, String> {
        retry(|| self.0.register(subject, schema, schema_type(format))).map_err(|e| e.to_string())
    }
}

/// Register the schema derived from `rt` for `format` under `<topic>-value`, and keep its id for
/// encoding.
pub fn register(
    registry: &Registry,
    topic: &str,
    rt: &crate::types::RecordType,
    format: Format,
) -> Result<u32, RunError> {
    let text = crate::format::schema_text(format, rt, topic)
        .ok_or_else(|| RunError::Registry(format!("`{topic}` is {format}: no schema registry format")))?;
    register_text(registry, &subject(topic), &text, format)
}

/// Register the schema of `topic`'s keys (of the scalar type `ty`, named `field`) for `format`
/// under `<topic>-key`, and keep its id for encoding (`produce`, `--input`).
pub fn register_key(
    registry: &Registry,
    topic: &str,
    ty: &crate::types::Type,
    field: &str,
    format: Format,
) -> Result<u32, RunError> {
    let text = crate::format::key_schema_text(format, ty, topic, field)
        .ok_or_else(|| RunError::Registry(format!("the keys of `{topic}` are {format}: no schema registry format")))?;
    register_text(registry, &crate::format::schema_tables::key_subject(topic), &text, format)
}

fn register_text(registry: &Registry, subject: &str, text: &str, format: Format) -> Result<u32, RunError> {
    let invalid = |e: String| RunError::Registry(format!("the schema of `{subject}` is not valid {format}: {e}"));
    let register = || {
        retry(|| registry.register(subject, text, schema_type(format))).map_err(|e| {
            let what = match (subject.strip_suffix("-value"), subject.strip_suffix("-key")) {
                (Some(topic), _) => format!("the schema of `{topic}`"),
                (_, Some(topic)) => format!("the key schema of `{topic}`"),
                _ => "a schema".to_string(),
            };
            RunError::Registry(format!("cannot register {what} under `{subject}`: {e}"))
        })
    };
    crate::format::with(format, |f| f.check_schema(text)).map_err(invalid)?;
    let id = register()?;
    crate::format::with(format, |f| f.keep_schema(subject, text, id));
    Ok(id)
}

/// Whether the writer schema `id` is known to the decoder of `format`.
fn known(format: Format, id: u32) -> bool {
    crate::format::with(format, |f| f.writer_known(id))
}

/// Make sure the writer schema a framed value of a source of `format` (Avro or Protobuf) names
/// is known (fetched once per id). Not in the wire format, or an id the registry does not know
/// (or of another schema type): left to decoding, which dead-letters the record with the
/// reason. The registry down: an error that stops the run.
pub fn prefetch(cfg: &Config, what: &str, value: Option<&[u8]>, format: Format) -> Result<(), RunError> {
    let Some(Ok(id)) = value.map(crate::format::avro::schema_id) else { return Ok(()) };
    if known(format, id) {
        return Ok(());
    }
    let registry = crate::registry::Registry::of(cfg).ok_or_else(|| no_registry(what, format))?;
    let schema = retry(|| registry.schema(id))
        .map_err(|e| RunError::Registry(format!("cannot read schema id {id} of a record of {what}: {e}")))?;
    remember(format, id, schema);
    Ok(())
}

/// Like [`prefetch`], for a value of no declared format (`streamc consume`): kept for the
/// decoder of the type the registry gives; that type, if the registry knows the id.
pub fn prefetch_any(cfg: &Config, what: &str, value: Option<&[u8]>) -> Result<Option<Format>, RunError> {
    let Some(Ok(id)) = value.map(crate::format::avro::schema_id) else { return Ok(None) };
    for format in [Format::Avro, Format::Protobuf] {
        if known(format, id) {
            return Ok(Some(format));
        }
    }
    let Some(registry) = crate::registry::Registry::of(cfg) else { return Ok(None) };
    let schema = retry(|| registry.schema(id))
        .map_err(|e| RunError::Registry(format!("cannot read schema id {id} of a record of {what}: {e}")))?;
    let format = match schema.as_ref() {
        Some((_, SchemaType::Protobuf)) => Format::Protobuf,
        // (Some registries leave the type out of a version stored under a subject of another
        // type: a text that is not JSON is a `.proto` file.)
        Some((text, SchemaType::Avro)) if reads_as(Format::Protobuf, text, SchemaType::Avro) => Format::Protobuf,
        Some((_, SchemaType::Avro)) => Format::Avro,
        _ => return Ok(None),
    };
    remember(format, id, schema);
    Ok(Some(format))
}

/// Whether a schema the registry gives as `kind` is to be read as one of `format`: the types
/// agree, or the registry gave no type (taken as Avro) and the text is not JSON (a `.proto`
/// file: Apicurio leaves the type out of a Protobuf version under a subject created as Avro).
pub fn reads_as(format: Format, text: &str, kind: SchemaType) -> bool {
    kind == schema_type(format)
        || (format == Format::Protobuf && kind == SchemaType::Avro && !text.trim_start().starts_with(['{', '[', '"']))
}

/// Keep what the registry said of schema `id` for the decoder of `format`: a schema that does
/// not compile as one of `format` (a JSON Schema, an Avro schema read as Protobuf, …) is kept
/// as unusable (its records are dead letters). (The type the registry states is not trusted
/// alone: some registries leave it out of a version stored under a subject of another type.)
fn remember(format: Format, id: u32, schema: Option<(String, SchemaType)>) {
    let unusable =
        |e: String| eprintln!("schema id {id} in the registry is not usable ({e}): its records are dead letters");
    let text = match schema {
        Some((_, SchemaType::Other)) => {
            unusable(format!("not an Avro or Protobuf schema, and the records are read as {format}"));
            None
        }
        Some((text, _)) => Some(text),
        None => None,
    };
    if let Err(e) = crate::format::with(format, |f| f.remember_writer(id, text.as_deref())) {
        unusable(e);
    }
}

/// Whether a source's values name their schemas in the registry (avro, protobuf).
pub fn uses_registry(src: &hir::Source) -> bool {
    src.format.uses_registry()
}
