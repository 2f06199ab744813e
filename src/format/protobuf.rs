//! The `protobuf` format: a value is one Protobuf message, framed as Confluent's serializers
//! frame it (the wire format): a magic byte 0, the id of its writer schema in the schema
//! registry (4 bytes, big-endian), the indexes of the message type in that schema's file (a
//! zig-zag varint count, then each index; the first message is the single byte 0), then the
//! message. The registry's schema text (a `.proto` file) is compiled in process by `protox`, with
//! Google's well-known types importable; messages are read and written by reflection
//! (`prost-reflect`). What is here is the mapping between Protobuf and the language's types.
//!
//! Reading matches the declared fields to the writer's by name (as JSON and Avro do): the
//! writer's other fields are ignored; a declared field the writer's message lacks (one added
//! since) is null if nullable, else its proto3 default (0, "", false, empty), and a timestamp,
//! duration or record that is neither makes the record bad input. A field the writer did not set reads as Protobuf
//! reads it: a scalar without presence as its default (0, "", false), a field with presence
//! (`optional`, a `oneof` member, a message) as null where the declared type is nullable. An
//! unset message declared not nullable is bad input. Numbers widen (any integer → int, any number
//! → float; a uint64 above the int range is bad input); an enum reads as its value's name, bytes
//! as a UTF-8 string; `google.protobuf.Timestamp` (or an integer of epoch ms) as a timestamp,
//! `google.protobuf.Duration` (or an integer of ms) as a duration; the wrapper messages
//! (`google.protobuf.Int64Value`, …) as their value.
//!
//! Writing derives a proto3 file from the output type ([`schema_text`]): `int` → int64, `float`
//! → double, `timestamp` → google.protobuf.Timestamp, `duration` → google.protobuf.Duration,
//! lists → repeated, maps → map (string or int64 keys), records → nested messages, a nullable
//! scalar → an `optional` field (null: not set). Protobuf has no null list, map or list item:
//! a null list or map is written as an empty one, and lists of nullable items, lists of lists
//! and maps of lists or maps are refused by the checker ([`unsupported`]).

use std::sync::Arc;

use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage as _, Value as Pb,
};

use crate::types::{RecordType, Type};
use crate::value::Value;

/// The name the schema text is compiled under (imports are resolved beside it).
const FILE: &str = "schema.proto";

/// A writer schema, compiled: the messages of its file (the message indexes of a framed value
/// choose one of them).
#[derive(Debug)]
pub struct Writer {
    file: prost_reflect::FileDescriptor,
}

impl Writer {
    /// Compile a schema as the registry gives it (the text of a `.proto` file). Imports of
    /// Google's well-known types resolve; other imports (schema references) do not.
    pub fn parse(text: &str) -> Result<Writer, String> {
        let mut resolver = protox::file::ChainFileResolver::new();
        resolver.add(Single(protox::file::File::from_source(FILE, text).map_err(|e| e.to_string())?));
        resolver.add(protox::file::GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler.open_file(FILE).map_err(|e| format!("not a Protobuf schema streamc compiles: {e}"))?;
        let file = compiler.descriptor_pool().get_file_by_name(FILE).ok_or("the schema file did not compile")?;
        if file.messages().len() == 0 {
            return Err("the schema defines no message".into());
        }
        Ok(Writer { file })
    }

    /// The first message of the file (message index 0): what a sink writes, and the fields a
    /// source takes from the registry.
    fn first(&self) -> MessageDescriptor {
        self.file.messages().next().expect("a compiled writer has a message")
    }

    /// The message a framed value's indexes name.
    fn message(&self, indexes: &[usize]) -> Option<MessageDescriptor> {
        let (first, rest) = indexes.split_first()?;
        let mut m = self.file.messages().nth(*first)?;
        for i in rest {
            // (Counted as the schema declares them: a map field's hidden entry message is not.)
            let child = m.child_messages().filter(|c| !c.is_map_entry()).nth(*i)?;
            m = child;
        }
        Some(m)
    }
}

/// The one file a schema text is, for the compiler.
struct Single(protox::file::File);

impl protox::file::FileResolver for Single {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == FILE {
            Ok(self.0.clone())
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

/// The writer schemas this process has looked up.
static WRITERS: crate::format::schema_tables::Writers<Writer> = crate::format::schema_tables::Writers::new();

/// The messages of sink topics' schemas, as registered.
static SINKS: crate::format::schema_tables::Sinks<MessageDescriptor> = crate::format::schema_tables::Sinks::new();

/// Whether the writer schema `id` has been looked up.
pub fn writer_known(id: u32) -> bool {
    WRITERS.known(id)
}

/// Keep what the registry said of schema `id` (None: it does not know it).
pub fn remember_writer(id: u32, writer: Option<Writer>) {
    WRITERS.remember(id, writer)
}

/// Keep the registry id of a schema written under `subject` (its text, as [`schema_text`] or
/// [`key_schema_text`] derived it).
pub fn set_schema(subject: &str, text: &str, id: u32, writer: &Writer) {
    SINKS.set(subject, text, id, writer.first())
}

/// The one-field record a key of type `ty` named `field` is written as.
fn key_record(ty: &Type, field: &str) -> RecordType {
    RecordType { fields: vec![(field.to_string(), ty.clone())] }
}

/// The proto3 file of keys of the scalar type `ty`: a message `<name>_key` of one field named
/// after the key (a Protobuf key is a message, as Confluent's serializers write one).
pub fn key_schema_text(ty: &Type, name: &str, field: &str) -> String {
    schema_text(&key_record(ty, field), &format!("{name}_key"))
}

/// A key written under `<topic>-key` with the schema `text` ([`key_schema_text`]) registered
/// for it: by the runtime ahead, or now.
pub fn encode_key(topic: &str, text: &str, key: &Value, ty: &Type) -> Result<Vec<u8>, String> {
    // (The key's message has the one field, number 1, whatever its name: see `key_record`.)
    framed(&crate::format::schema_tables::key_subject(topic), text, |out| {
        write_value(out, 1, key, ty, ty.is_nullable())
    })
}

/// A message under `subject`, the schema `text` registered for it (by the runtime ahead, or
/// now), with message indexes `[0]` (the single byte 0) and the body `write` gives.
fn framed(subject: &str, text: &str, write: impl FnOnce(&mut Vec<u8>)) -> Result<Vec<u8>, String> {
    let (id, _) = SINKS.of(subject, text, crate::ast::Format::Protobuf, |t| Writer::parse(t).map(|w| w.first()))?;
    let mut out = crate::format::schema_tables::wire_header(id);
    put_varint(&mut out, 0);
    write(&mut out);
    Ok(out)
}

/// A framed key as the declared scalar type: the one field of the writer's message.
pub fn decode_key(bytes: &[u8], ty: &Type) -> Result<Value, String> {
    let msg = read_framed(bytes)?;
    let desc = msg.descriptor();
    let mut fields = desc.fields();
    match (fields.next(), fields.len()) {
        (Some(fd), 0) => field(&msg, &fd, ty, ""),
        _ => Err(format!(
            "the key is a message `{}` of {} fields: a key is one value",
            desc.full_name(),
            desc.fields().len()
        )),
    }
}

/// A zig-zag varint at the start of `bytes`: its value and length.
fn varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut v: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((v >> 1) as i64) ^ -((v & 1) as i64), i + 1));
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A framed value's schema id, message indexes and the offset of the message.
fn header(bytes: &[u8]) -> Result<(u32, Vec<usize>, usize), String> {
    let id = crate::format::schema_tables::wire_schema_id(bytes, "Protobuf")?;
    let bad = || format!("the message indexes of a Protobuf value of schema id {id} are not well formed");
    let mut at = 5;
    let (count, n) = varint(&bytes[at..]).ok_or_else(bad)?;
    at += n;
    if count == 0 {
        return Ok((id, vec![0], at));
    }
    if !(1..=32).contains(&count) {
        return Err(bad());
    }
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (i, n) = varint(&bytes[at..]).ok_or_else(bad)?;
        at += n;
        indexes.push(usize::try_from(i).map_err(|_| bad())?);
    }
    Ok((id, indexes, at))
}

/// A framed value's message, decoded with the writer schema its id names.
fn read_framed(bytes: &[u8]) -> Result<DynamicMessage, String> {
    let (id, indexes, at) = header(bytes)?;
    let w = WRITERS.of(id, Writer::parse, "a Protobuf schema streamc compiles")?;
    let desc = w.message(&indexes).ok_or_else(|| format!("schema id {id} has no message at indexes {indexes:?}"))?;
    DynamicMessage::decode(desc.clone(), &bytes[at..])
        .map_err(|e| format!("not a Protobuf message of schema id {id} ({}): {e}", desc.full_name()))
}

/// A framed value decoded to the declared record type, with the writer schema its id names.
pub fn decode(bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
    let msg = read_framed(bytes)?;
    record(&msg, rt, "")
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "the value".into()
    } else {
        format!("field `{path}`")
    }
}

fn record(msg: &DynamicMessage, rt: &RecordType, path: &str) -> Result<Vec<Value>, String> {
    let desc = msg.descriptor();
    let mut out = Vec::with_capacity(rt.fields.len());
    for (name, ty) in &rt.fields {
        let p = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        match desc.get_field_by_name(name) {
            Some(fd) => out.push(field(msg, &fd, ty, &p)?),
            None if ty.is_nullable() => out.push(Value::Null),
            // A field added since the writer's schema: what a reader of the newer schema reads.
            None => out.push(default_of(ty).ok_or_else(|| {
                format!("the writer's message has no field `{p}`, and a {ty} has no default (declare it nullable)")
            })?),
        }
    }
    Ok(out)
}

/// One field of a message as the declared type.
fn field(msg: &DynamicMessage, fd: &FieldDescriptor, ty: &Type, path: &str) -> Result<Value, String> {
    if fd.supports_presence() && !msg.has_field(fd) {
        if ty.is_nullable() || *ty == Type::Error {
            return Ok(Value::Null);
        }
        if matches!(fd.kind(), Kind::Message(_)) {
            return Err(format!("{} is not set, and a {ty} cannot be null", at(path)));
        }
    }
    let v = msg.get_field(fd);
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else { unreachable!("a map field's kind is its entry message") };
        let (Type::Map(k, vt), Pb::Map(m)) = (ty.base(), &*v) else {
            return Err(format!("{}: the writer wrote a map, which does not read as a {}", at(path), ty.base()));
        };
        let vk = entry.map_entry_value_field().kind();
        // In key order (not the hash map's): two keys that read as one (`"01"`, `"1"` into
        // `map<int, …>`) keep the later, always the same.
        let mut raw: Vec<(&MapKey, &Pb)> = m.iter().collect();
        raw.sort_by(|a, b| a.0.cmp(b.0));
        let mut entries = Vec::with_capacity(m.len());
        for (key, x) in raw {
            let text = match key {
                MapKey::Bool(b) => b.to_string(),
                MapKey::I32(i) => i.to_string(),
                MapKey::I64(i) => i.to_string(),
                MapKey::U32(i) => i.to_string(),
                MapKey::U64(i) => i.to_string(),
                MapKey::String(s) => s.clone(),
            };
            let p = format!("{path}[{text}]");
            let key = crate::value::map_key(&text, k).map_err(|e| format!("{}: {e}", at(path)))?;
            entries.push((key, convert(x, &vk, vt, &p)?));
        }
        return Ok(Value::map(entries));
    }
    if fd.is_list() {
        let (Type::List(item), Pb::List(xs)) = (ty.base(), &*v) else {
            return Err(format!(
                "{}: the writer wrote a repeated field, which does not read as a {}",
                at(path),
                ty.base()
            ));
        };
        let kind = fd.kind();
        let items = xs
            .iter()
            .enumerate()
            .map(|(i, x)| convert(x, &kind, item, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Value::List(Arc::new(items)));
    }
    convert(&v, &fd.kind(), ty, path)
}

/// The value Protobuf reads for an unset field of type `ty` (proto3's defaults); None for a
/// timestamp, duration or record (a message: not set is null).
fn default_of(ty: &Type) -> Option<Value> {
    Some(match ty {
        Type::String => Value::str(""),
        Type::Int => Value::Int(0),
        Type::Float => Value::Float(0.0),
        Type::Bool => Value::Bool(false),
        Type::List(_) => Value::List(Arc::new(Vec::new())),
        Type::Map(..) => Value::map(Vec::new()),
        _ => return None,
    })
}

fn kind_name(v: &Pb) -> String {
    match v {
        Pb::Bool(_) => "a bool".into(),
        Pb::I32(_) | Pb::I64(_) | Pb::U32(_) | Pb::U64(_) => "an integer".into(),
        Pb::F32(_) | Pb::F64(_) => "a floating-point number".into(),
        Pb::String(_) => "a string".into(),
        Pb::Bytes(_) => "bytes".into(),
        Pb::EnumNumber(_) => "an enum value".into(),
        Pb::Message(m) => format!("a message `{}`", m.descriptor().full_name()),
        Pb::List(_) => "a repeated field".into(),
        Pb::Map(_) => "a map".into(),
    }
}

/// A message of a well-known type (`google.protobuf.<name>`).
fn well_known<'a>(m: &'a DynamicMessage, name: &str) -> Option<&'a DynamicMessage> {
    m.descriptor().full_name().strip_prefix("google.protobuf.").filter(|n| *n == name).map(|_| m)
}

fn int_field(m: &DynamicMessage, name: &str) -> i64 {
    match m.get_field_by_name(name).as_deref() {
        Some(Pb::I64(i)) => *i,
        Some(Pb::I32(i)) => (*i).into(),
        _ => 0,
    }
}

/// Epoch (or span) milliseconds of a Timestamp or Duration message.
fn millis(m: &DynamicMessage) -> i64 {
    let (s, n) = (int_field(m, "seconds"), int_field(m, "nanos"));
    s.saturating_mul(1_000).saturating_add(n.div_euclid(1_000_000))
}

const WRAPPERS: &[&str] = &[
    "DoubleValue",
    "FloatValue",
    "Int64Value",
    "UInt64Value",
    "Int32Value",
    "UInt32Value",
    "BoolValue",
    "StringValue",
    "BytesValue",
];

/// Whether a message's full name is one of the well-known wrapper types.
fn is_wrapper(full_name: &str) -> bool {
    full_name.strip_prefix("google.protobuf.").is_some_and(|n| WRAPPERS.contains(&n))
}

/// One value of the writer's field kind `kind` as the declared type `ty`.
fn convert(v: &Pb, kind: &Kind, ty: &Type, path: &str) -> Result<Value, String> {
    let bad = || format!("{}: the writer wrote {}, which does not read as a {}", at(path), kind_name(v), ty.base());
    if let Pb::Message(m) = v {
        let desc = m.descriptor();
        if is_wrapper(desc.full_name()) {
            let fd = desc.get_field_by_name("value").ok_or_else(bad)?;
            return convert(&m.get_field(&fd), &fd.kind(), ty, path);
        }
    }
    Ok(match (ty.base(), v) {
        (Type::String, Pb::String(s)) => Value::str(s),
        (Type::String, Pb::EnumNumber(n)) => match kind.as_enum().and_then(|e| e.get_value(*n)) {
            Some(e) => Value::str(e.name()),
            None => Value::str(&n.to_string()),
        },
        (Type::String, Pb::Bytes(b)) => Value::str(std::str::from_utf8(b).map_err(|_| bad())?),
        (Type::Int, Pb::I32(i)) => Value::Int((*i).into()),
        (Type::Int, Pb::I64(i)) => Value::Int(*i),
        (Type::Int, Pb::U32(i)) => Value::Int((*i).into()),
        (Type::Int, Pb::U64(i)) => Value::Int(i64::try_from(*i).map_err(|_| bad())?),
        (Type::Float, Pb::I32(i)) => Value::Float((*i).into()),
        (Type::Float, Pb::I64(i)) => Value::Float(*i as f64),
        (Type::Float, Pb::U32(i)) => Value::Float((*i).into()),
        (Type::Float, Pb::U64(i)) => Value::Float(*i as f64),
        (Type::Float, Pb::F32(f)) => finite((*f).into()).ok_or_else(bad)?,
        (Type::Float, Pb::F64(f)) => finite(*f).ok_or_else(bad)?,
        (Type::Bool, Pb::Bool(b)) => Value::Bool(*b),
        (Type::Timestamp, Pb::I64(t)) => Value::Ts(*t),
        (Type::Timestamp, Pb::I32(t)) => Value::Ts((*t).into()),
        (Type::Timestamp, Pb::Message(m)) => Value::Ts(millis(well_known(m, "Timestamp").ok_or_else(bad)?)),
        (Type::Duration, Pb::I64(d)) => Value::Dur(*d),
        (Type::Duration, Pb::I32(d)) => Value::Dur((*d).into()),
        (Type::Duration, Pb::Message(m)) => Value::Dur(millis(well_known(m, "Duration").ok_or_else(bad)?)),
        (Type::Record(rt), Pb::Message(m)) => Value::Record(Arc::new(record(m, rt, path)?)),
        _ => return Err(bad()),
    })
}

fn finite(f: f64) -> Option<Value> {
    f.is_finite().then_some(Value::Float(f))
}

/// A framed value as JSON, by its writer schema alone (for `streamc consume`): messages as
/// objects of every field in declaration order (an unset message or `optional` field as null),
/// enums as their names, Timestamps as epoch ms, Durations as ms, wrappers as their value, maps
/// with their keys sorted, bytes as `{"hex": …}`.
pub fn to_json(bytes: &[u8]) -> Result<serde_json::Value, String> {
    Ok(message_json(&read_framed(bytes)?))
}

fn message_json(m: &DynamicMessage) -> serde_json::Value {
    let name = m.descriptor().full_name().to_string();
    match name.strip_prefix("google.protobuf.") {
        Some("Timestamp" | "Duration") => return serde_json::json!(millis(m)),
        Some(w) if WRAPPERS.contains(&w) => {
            if let Some(fd) = m.descriptor().get_field_by_name("value") {
                return value_json(&m.get_field(&fd), &fd.kind());
            }
        }
        _ => {}
    }
    let mut out = serde_json::Map::new();
    for fd in m.descriptor().fields() {
        let j = if fd.supports_presence() && !m.has_field(&fd) {
            serde_json::Value::Null
        } else if fd.is_map() {
            let Pb::Map(entries) = &*m.get_field(&fd) else { continue };
            let vk = match fd.kind() {
                Kind::Message(e) => e.map_entry_value_field().kind(),
                k => k,
            };
            let mut pairs: Vec<(String, serde_json::Value)> = entries
                .iter()
                .map(|(k, x)| {
                    let key = match k {
                        MapKey::String(s) => s.clone(),
                        MapKey::Bool(b) => b.to_string(),
                        MapKey::I32(i) => i.to_string(),
                        MapKey::I64(i) => i.to_string(),
                        MapKey::U32(i) => i.to_string(),
                        MapKey::U64(i) => i.to_string(),
                    };
                    (key, value_json(x, &vk))
                })
                .collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(pairs.into_iter().collect())
        } else {
            value_json(&m.get_field(&fd), &fd.kind())
        };
        out.insert(fd.name().to_string(), j);
    }
    serde_json::Value::Object(out)
}

fn value_json(v: &Pb, kind: &Kind) -> serde_json::Value {
    use serde_json::json;
    match v {
        Pb::Bool(b) => json!(b),
        Pb::I32(i) => json!(i),
        Pb::I64(i) => json!(i),
        Pb::U32(i) => json!(i),
        Pb::U64(i) => json!(i),
        Pb::F32(f) => json!(f),
        Pb::F64(f) => json!(f),
        Pb::String(s) => json!(s),
        Pb::Bytes(b) => json!({ "hex": hex::encode(b) }),
        Pb::EnumNumber(n) => match kind.as_enum().and_then(|e| e.get_value(*n)) {
            Some(e) => json!(e.name()),
            None => json!(n),
        },
        Pb::Message(m) => message_json(m),
        Pb::List(xs) => serde_json::Value::Array(xs.iter().map(|x| value_json(x, kind)).collect()),
        Pb::Map(_) => serde_json::Value::Null,
    }
}

/// The fields of the schema's first message as the language declares them (`{ name: type, … }`),
/// each of the type [`decode`] reads the writer's values as: any integer → `int`; float and
/// double → `float`; bool → `bool`; string, bytes and enums → `string`; Timestamp →
/// `timestamp`; Duration → `duration`; a wrapper → its value's type, nullable; repeated →
/// `list<…>`; map → `map<string, …>` or `map<int, …>`; other messages → records, nullable; a field
/// with presence (`optional`, a `oneof` member) → nullable. Groups, maps with bool keys and
/// messages nested more than 32 deep (recursion) have no declared type: an error naming the field.
pub fn declared_fields(text: &str) -> Result<String, String> {
    let w = Writer::parse(text)?;
    message_text(&w.first(), "", 0)
}

fn message_text(m: &MessageDescriptor, path: &str, depth: usize) -> Result<String, String> {
    if depth > 32 {
        return Err(format!("`{path}` nests messages more than 32 deep (a recursive schema has no declared type)"));
    }
    let mut parts = Vec::new();
    for fd in m.fields() {
        let at = if path.is_empty() { fd.name().to_string() } else { format!("{path}.{}", fd.name()) };
        let name = if crate::format::avro::QUOTED.contains(&fd.name()) {
            format!("`{}`", fd.name())
        } else {
            fd.name().into()
        };
        parts.push(format!("{name}: {}", field_text(&fd, &at, depth)?));
    }
    if parts.is_empty() {
        return Err(format!("{} has no fields", if path.is_empty() { "the message" } else { path }));
    }
    Ok(format!("{{ {} }}", parts.join(", ")))
}

fn field_text(fd: &FieldDescriptor, path: &str, depth: usize) -> Result<String, String> {
    if fd.is_group() {
        return Err(format!("`{path}` is a group, which no declared type reads"));
    }
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else { unreachable!("a map field's kind is its entry message") };
        let key = match entry.map_entry_key_field().kind() {
            Kind::String => "string",
            Kind::Bool => return Err(format!("`{path}` is a map with bool keys, which no declared type reads")),
            _ => "int",
        };
        let value = kind_text(&entry.map_entry_value_field().kind(), &format!("{path}[]"), depth)?;
        return Ok(format!("map<{key}, {}>", value.trim_end_matches('?')));
    }
    let t = kind_text(&fd.kind(), path, depth)?;
    if fd.is_list() {
        return Ok(format!("list<{}>", t.trim_end_matches('?')));
    }
    let always = matches!(fd.kind(), Kind::Message(ref m) if !matches!(m.full_name(), "google.protobuf.Timestamp" | "google.protobuf.Duration"));
    let present = fd.supports_presence() && (fd.containing_oneof().is_some() || !matches!(fd.kind(), Kind::Message(_)));
    Ok(if (always || present) && !t.ends_with('?') { format!("{t}?") } else { t })
}

fn kind_text(kind: &Kind, path: &str, depth: usize) -> Result<String, String> {
    Ok(match kind {
        Kind::Double | Kind::Float => "float".into(),
        Kind::Int32
        | Kind::Int64
        | Kind::Uint32
        | Kind::Uint64
        | Kind::Sint32
        | Kind::Sint64
        | Kind::Fixed32
        | Kind::Fixed64
        | Kind::Sfixed32
        | Kind::Sfixed64 => "int".into(),
        Kind::Bool => "bool".into(),
        Kind::String | Kind::Bytes | Kind::Enum(_) => "string".into(),
        Kind::Message(m) => match m.full_name().strip_prefix("google.protobuf.") {
            Some("Timestamp") => "timestamp".into(),
            Some("Duration") => "duration".into(),
            Some(w) if WRAPPERS.contains(&w) => {
                let fd = m.get_field_by_name("value").ok_or_else(|| format!("`{path}`: a wrapper without a value"))?;
                format!("{}?", kind_text(&fd.kind(), path, depth)?)
            }
            _ => message_text(m, path, depth + 1)?,
        },
    })
}

/// Why a type has no Protobuf form here, if it has none: a name Protobuf does not allow, a map
/// whose keys are not strings or integers, a list of lists or of nullable items, a map of lists
/// or maps (Protobuf has no null item, and nests repeated fields only inside messages).
pub fn unsupported(rt: &RecordType) -> Option<String> {
    // (protoc and protox refuse two fields of one message whose names are equal without `_` and
    // case: their JSON names could clash.)
    let folded = |n: &str| n.replace('_', "").to_lowercase();
    for (i, (name, _)) in rt.fields.iter().enumerate() {
        if let Some((other, _)) = rt.fields[..i].iter().find(|(o, _)| folded(o) == folded(name)) {
            return Some(format!(
                "`{other}` and `{name}` are the same name to proto3 (without `_` and case), which one message cannot hold"
            ));
        }
    }
    for (name, ty) in &rt.fields {
        if !crate::format::avro::valid_name(name) {
            return Some(format!(
                "`{name}` is not a Protobuf field name (letters, digits and `_`, not starting with a digit)"
            ));
        }
        if let Some(why) = unsupported_type(ty, false) {
            return Some(format!("`{name}`: {why}"));
        }
    }
    None
}

fn unsupported_type(ty: &Type, in_repeated: bool) -> Option<String> {
    match ty.base() {
        Type::Map(k, v) => {
            if in_repeated {
                return Some("Protobuf has no map inside a list or map (wrap it in a record)".into());
            }
            if !matches!(k.base(), Type::String | Type::Int) {
                return Some(format!("its map keys are {k}, and Protobuf map keys here are strings or integers"));
            }
            if v.is_nullable() {
                return Some("Protobuf has no null map value".into());
            }
            unsupported_type(v, true)
        }
        Type::List(t) => {
            if in_repeated {
                return Some("Protobuf has no list inside a list or map (wrap it in a record)".into());
            }
            if t.is_nullable() {
                return Some("Protobuf has no null list item".into());
            }
            unsupported_type(t, true)
        }
        Type::Record(rt) => unsupported(rt),
        Type::Tuple(_) => Some("a composite value has no Protobuf form".into()),
        _ => None,
    }
}

/// A field name as protoc writes it in CamelCase: `_` dropped, the first letter and each after
/// a `_` upper-cased (a map field `tags` has a hidden entry message `TagsEntry`).
fn camel(name: &str) -> String {
    let (mut out, mut up) = (String::with_capacity(name.len()), true);
    for c in name.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The names of the messages the nested record fields of `rt` are written as (None for the
/// other fields): the field's name with its first letter upper-cased, `_` appended until it is
/// no field's, no other nested message's and no map field's entry message's name.
fn nested_names(rt: &RecordType) -> Vec<Option<String>> {
    let mut taken: Vec<String> = rt.fields.iter().map(|(f, _)| f.clone()).collect();
    for (f, t) in &rt.fields {
        if matches!(t.base(), Type::Map(..)) {
            taken.push(format!("{}Entry", camel(f)));
        }
    }
    rt.fields
        .iter()
        .map(|(field, ty)| {
            let nested = match ty.base() {
                Type::Record(_) => true,
                Type::List(item) | Type::Map(_, item) => matches!(item.base(), Type::Record(_)),
                _ => false,
            };
            if !nested {
                return None;
            }
            let mut cs = field.chars();
            let mut n: String = match cs.next() {
                Some(c) => c.to_ascii_uppercase().to_string() + cs.as_str(),
                None => "R".into(),
            };
            while taken.contains(&n) {
                n.push('_');
            }
            taken.push(n.clone());
            Some(n)
        })
        .collect()
}

/// The proto3 file of values of `rt`, a message named `name` (see [`crate::format::avro::record_name`]);
/// nested records are messages nested in theirs, named after their field ([`nested_names`]).
pub fn schema_text(rt: &RecordType, name: &str) -> String {
    let mut body = String::new();
    // (`google` is the well-known types' package: a message of that name would clash with it.)
    let name = if name == "google" { "google_" } else { name };
    message(rt, name, 0, &mut body);
    let mut out = String::from("syntax = \"proto3\";\n\n");
    if body.contains(".google.protobuf.Timestamp") {
        out.push_str("import \"google/protobuf/timestamp.proto\";\n");
    }
    if body.contains(".google.protobuf.Duration") {
        out.push_str("import \"google/protobuf/duration.proto\";\n");
    }
    if out.contains("import") {
        out.push('\n');
    }
    out + &body
}

fn message(rt: &RecordType, name: &str, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    out.push_str(&format!("{pad}message {name} {{\n"));
    for (i, ((field, ty), nested)) in rt.fields.iter().zip(nested_names(rt)).enumerate() {
        let t = match (nested, ty.base()) {
            (Some(n), Type::Record(inner)) => {
                message(inner, &n, depth + 1, out);
                n
            }
            (Some(n), Type::List(item) | Type::Map(_, item)) => {
                if let Type::Record(inner) = item.base() {
                    message(inner, &n, depth + 1, out);
                }
                n
            }
            (_, Type::List(item) | Type::Map(_, item)) => scalar(item.base()).to_string(),
            (_, t) => scalar(t).to_string(),
        };
        let line = match ty.base() {
            Type::List(_) => format!("repeated {t}"),
            Type::Map(k, _) => format!("map<{}, {t}>", if *k.base() == Type::Int { "int64" } else { "string" }),
            Type::String | Type::Int | Type::Float | Type::Bool if ty.is_nullable() => format!("optional {t}"),
            _ => t,
        };
        out.push_str(&format!("{pad}  {line} {field} = {};\n", i + 1));
    }
    out.push_str(&format!("{pad}}}\n"));
}

fn scalar(t: &Type) -> &'static str {
    match t {
        Type::String => "string",
        Type::Int => "int64",
        Type::Float => "double",
        Type::Bool => "bool",
        // (Fully qualified: a message named `google` must not shadow the package.)
        Type::Timestamp => ".google.protobuf.Timestamp",
        Type::Duration => ".google.protobuf.Duration",
        // No value of these reaches a sink the checker allows.
        _ => "bytes",
    }
}

/// A row of `rt` framed for `topic`, with the schema `text` (derived from `rt` by
/// [`schema_text`]) registered for it: by the runtime ahead, or now. The message is encoded
/// here, from the row and the derived schema's rules (field numbers are positions), not by
/// reflection: map entries in the map's (sorted) order, so that a row is always the same bytes.
pub fn encode(topic: &str, text: &str, values: &[Value], rt: &RecordType) -> Result<Vec<u8>, String> {
    framed(&crate::format::schema_tables::value_subject(topic), text, |out| write_message(out, values, rt))
}

fn uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: usize, wire: u64) {
    uvarint(out, (field as u64) << 3 | wire);
}

/// Length-delimited field `field`: its body written by `body`.
fn delimited(out: &mut Vec<u8>, field: usize, body: impl FnOnce(&mut Vec<u8>)) {
    let mut b = Vec::new();
    body(&mut b);
    key(out, field, 2);
    uvarint(out, b.len() as u64);
    out.extend_from_slice(&b);
}

/// The fields of a message of `rt`'s derived schema (field `i` is number `i + 1`). A null is
/// not written; a proto3 scalar without presence is not written when it is its default.
fn write_message(out: &mut Vec<u8>, values: &[Value], rt: &RecordType) {
    for (i, ((_, ty), v)) in rt.fields.iter().zip(values).enumerate() {
        let n = i + 1;
        match (ty.base(), v) {
            (_, Value::Null) => {}
            (Type::List(item), Value::List(xs)) => match item.base() {
                // Packed (proto3's default for numbers).
                Type::Int | Type::Float | Type::Bool if !xs.is_empty() => delimited(out, n, |b| {
                    for x in xs.iter() {
                        write_packed(b, x, item.base());
                    }
                }),
                _ => {
                    for x in xs.iter() {
                        write_value(out, n, x, item, true);
                    }
                }
            },
            (Type::Map(_, vt), Value::Map(m)) => {
                for (k, x) in m.iter() {
                    delimited(out, n, |b| {
                        write_value(b, 1, k, &Type::Error, true);
                        write_value(b, 2, x, vt, true);
                    });
                }
            }
            _ => write_value(out, n, v, ty, ty.is_nullable()),
        }
    }
}

/// One number of a packed repeated field.
fn write_packed(out: &mut Vec<u8>, v: &Value, t: &Type) {
    match (v, t) {
        (Value::Int(i), Type::Float) => out.extend_from_slice(&(*i as f64).to_le_bytes()),
        (Value::Float(f), _) => out.extend_from_slice(&f.to_le_bytes()),
        (Value::Int(i), _) => uvarint(out, *i as u64),
        (Value::Bool(b), _) => uvarint(out, u64::from(*b)),
        _ => {}
    }
}

/// Field `n` holding `v` of type `t`; `present`: written even when it is proto3's default (a
/// field with presence, a repeated item, a map entry's key or value).
fn write_value(out: &mut Vec<u8>, n: usize, v: &Value, t: &Type, present: bool) {
    // (A value that is proto3's default, in a field without presence, is not written: the
    // guards fall through to the last arm.)
    match (v, t.base()) {
        (Value::Null, _) => {}
        (Value::Str(s), _) if present || !s.is_empty() => delimited(out, n, |b| b.extend_from_slice(s.as_bytes())),
        (Value::Int(i), Type::Float) => write_value(out, n, &Value::Float(*i as f64), t, present),
        (Value::Float(f), _) if present || f.to_bits() != 0 => {
            key(out, n, 1);
            out.extend_from_slice(&f.to_le_bytes());
        }
        (Value::Int(i), _) if present || *i != 0 => {
            key(out, n, 0);
            uvarint(out, *i as u64);
        }
        (Value::Bool(b), _) if present || *b => {
            key(out, n, 0);
            uvarint(out, u64::from(*b));
        }
        // A Timestamp: seconds and nanos of the epoch, nanos never negative; a Duration: seconds
        // and nanos of the same sign (google/protobuf/duration.proto).
        (Value::Ts(ms), _) => span(out, n, ms.div_euclid(1_000), ms.rem_euclid(1_000)),
        (Value::Dur(ms), _) => span(out, n, ms / 1_000, ms % 1_000),
        (Value::Record(fs), Type::Record(rt)) => delimited(out, n, |b| write_message(b, fs, rt)),
        // (The checker lets no other value reach a protobuf sink.)
        _ => {}
    }
}

fn span(out: &mut Vec<u8>, n: usize, seconds: i64, millis: i64) {
    delimited(out, n, |b| {
        if seconds != 0 {
            key(b, 1, 0);
            uvarint(b, seconds as u64);
        }
        let nanos = millis * 1_000_000;
        if nanos != 0 {
            key(b, 2, 0);
            uvarint(b, nanos as u64);
        }
    });
}

/// The `protobuf` format: values (and keys) in the Confluent wire format, with schemas from the
/// registry.
pub struct Protobuf;

impl crate::format::ValueFormat for Protobuf {
    fn decode(&self, bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
        decode(bytes, rt)
    }

    fn encode(
        &self,
        values: &[Value],
        rt: &RecordType,
        _tenant: Option<&[u8]>,
        target: crate::format::Target,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        out.extend_from_slice(&encode(target.topic, target.schema, values, rt)?);
        Ok(true)
    }

    fn schema_text(&self, rt: &RecordType, topic: &str) -> Option<String> {
        Some(schema_text(rt, &crate::format::avro::record_name(topic)))
    }

    fn key_schema_text(&self, ty: &Type, topic: &str, field: &str) -> Option<String> {
        Some(key_schema_text(ty, &crate::format::avro::record_name(topic), field))
    }

    fn decode_key(&self, bytes: &[u8], ty: &Type) -> Result<Value, String> {
        decode_key(bytes, ty)
    }

    fn writer_known(&self, id: u32) -> bool {
        writer_known(id)
    }

    fn remember_writer(&self, id: u32, text: Option<&str>) -> Result<(), String> {
        let parsed = text.map(Writer::parse).transpose();
        let failed = parsed.as_ref().err().cloned();
        remember_writer(id, parsed.ok().flatten());
        failed.map_or(Ok(()), Err)
    }

    fn check_schema(&self, text: &str) -> Result<(), String> {
        Writer::parse(text).map(|_| ())
    }

    fn keep_schema(&self, subject: &str, text: &str, id: u32) {
        if let Ok(writer) = Writer::parse(text) {
            set_schema(subject, text, id, &writer);
        }
    }

    fn encode_key(&self, key: &Value, ty: &Type, target: crate::format::Target) -> Result<Vec<u8>, String> {
        encode_key(target.topic, target.schema, key, ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's own Protobuf writer: a key (field number and wire type) and a varint.
    fn key(out: &mut Vec<u8>, field: u64, wire: u64) {
        uvarint(out, field << 3 | wire);
    }
    fn uvarint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn bytes_field(out: &mut Vec<u8>, field: u64, body: &[u8]) {
        key(out, field, 2);
        uvarint(out, body.len() as u64);
        out.extend_from_slice(body);
    }

    fn framed(id: u32, body: &[u8]) -> Vec<u8> {
        let mut b = vec![0];
        b.extend_from_slice(&id.to_be_bytes());
        b.push(0);
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn message_indexes_are_zig_zag_varints() {
        let mut b = vec![0, 0, 0, 0, 7];
        put_varint(&mut b, 0);
        assert_eq!(header(&b).unwrap(), (7, vec![0], 6));
        let mut b = vec![0, 0, 0, 1, 0];
        for i in [2, 1, 3] {
            put_varint(&mut b, i);
        }
        // Count 2 → 4; 1 → 2; 3 → 6.
        assert_eq!(&b[5..], &[4, 2, 6]);
        assert_eq!(header(&b).unwrap(), (256, vec![1, 3], 8));
        assert!(header(&[0, 0, 0, 0, 1, 0x81]).is_err(), "a varint that does not end");
        assert!(header(&[0, 0, 0, 0, 1, 3]).is_err(), "a negative count");
        assert!(header(&[1, 0, 0, 0, 1, 0]).unwrap_err().contains("magic"));
    }

    fn rt() -> RecordType {
        let inner = RecordType { fields: vec![("day".into(), Type::Int), ("note".into(), Type::String.nullable())] };
        RecordType {
            fields: vec![
                ("s".into(), Type::String),
                ("n".into(), Type::Int.nullable()),
                ("f".into(), Type::Float),
                ("b".into(), Type::Bool),
                ("at".into(), Type::Timestamp),
                ("d".into(), Type::Duration.nullable()),
                ("tags".into(), Type::List(Box::new(Type::String))),
                ("counts".into(), Type::Map(Box::new(Type::String), Box::new(Type::Int))),
                ("names".into(), Type::Map(Box::new(Type::Int), Box::new(Type::String))),
                ("inner".into(), Type::Record(inner.clone())),
                ("maybe".into(), Type::Record(inner.clone()).nullable()),
                ("rows".into(), Type::List(Box::new(Type::Record(inner)))),
            ],
        }
    }

    fn row() -> Vec<Value> {
        vec![
            Value::str("héllo"),
            Value::Null,
            Value::Float(1.5),
            Value::Bool(true),
            Value::Ts(-1_500),
            Value::Dur(250),
            Value::List(Arc::new(vec![Value::str("x"), Value::str("y")])),
            Value::map(vec![(Value::str("k"), Value::Int(3)), (Value::str("a"), Value::Int(-1))]),
            Value::map(vec![(Value::Int(-2), Value::str("minus two")), (Value::Int(9), Value::str("nine"))]),
            Value::Record(Arc::new(vec![Value::Int(7), Value::Null])),
            Value::Null,
            Value::List(Arc::new(vec![
                Value::Record(Arc::new(vec![Value::Int(1), Value::str("a")])),
                Value::Record(Arc::new(vec![Value::Int(0), Value::Null])),
            ])),
        ]
    }

    /// Register `rt`'s schema as both the sink's and writer `id`, as the runtime does.
    fn registered(topic: &str, id: u32, rt: &RecordType) -> String {
        let text = schema_text(rt, &crate::format::avro::record_name(topic));
        let w = Writer::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        set_schema(&crate::format::schema_tables::value_subject(topic), &text, id, &w);
        remember_writer(id, Some(w));
        text
    }

    #[test]
    fn every_type_round_trips_through_the_derived_schema() {
        let t = rt();
        let text = registered("round-trip", 9101, &t);
        assert_eq!(
            text,
            "syntax = \"proto3\";\n\n\
             import \"google/protobuf/timestamp.proto\";\n\
             import \"google/protobuf/duration.proto\";\n\n\
             message round_trip {\n\
             \x20 string s = 1;\n\
             \x20 optional int64 n = 2;\n\
             \x20 double f = 3;\n\
             \x20 bool b = 4;\n\
             \x20 .google.protobuf.Timestamp at = 5;\n\
             \x20 .google.protobuf.Duration d = 6;\n\
             \x20 repeated string tags = 7;\n\
             \x20 map<string, int64> counts = 8;\n\
             \x20 map<int64, string> names = 9;\n\
             \x20 message Inner {\n\
             \x20   int64 day = 1;\n\
             \x20   optional string note = 2;\n\
             \x20 }\n\
             \x20 Inner inner = 10;\n\
             \x20 message Maybe {\n\
             \x20   int64 day = 1;\n\
             \x20   optional string note = 2;\n\
             \x20 }\n\
             \x20 Maybe maybe = 11;\n\
             \x20 message Rows {\n\
             \x20   int64 day = 1;\n\
             \x20   optional string note = 2;\n\
             \x20 }\n\
             \x20 repeated Rows rows = 12;\n\
             }\n"
        );
        let bytes = encode("round-trip", &text, &row(), &t).unwrap();
        assert_eq!(&bytes[..6], &[0, 0, 0, 0x23, 0x8d, 0]);
        assert_eq!(decode(&bytes, &t).unwrap(), row());
        // Read back, the declared fields are the type's (a record with presence is nullable).
        assert_eq!(
            declared_fields(&text).unwrap(),
            "{ s: string, n: int?, f: float, b: bool, at: timestamp, d: duration, tags: list<string>, \
             counts: map<string, int>, names: map<int, string>, inner: { day: int, note: string? }?, \
             maybe: { day: int, note: string? }?, rows: list<{ day: int, note: string? }> }"
        );
    }

    /// Maps (two entries, in key order, whatever order they came in), a nested record, a list
    /// of records, packed numbers, a negative timestamp and negative durations: the bytes of
    /// Protobuf's encoding, written by this test's own writer.
    #[test]
    fn a_sink_writes_maps_records_and_spans_as_protobuf_encodes_them() {
        let inner = RecordType { fields: vec![("day".into(), Type::Int)] };
        let t = RecordType {
            fields: vec![
                ("m".into(), Type::Map(Box::new(Type::String), Box::new(Type::Int))),
                ("r".into(), Type::Record(inner.clone())),
                ("rs".into(), Type::List(Box::new(Type::Record(inner)))),
                ("xs".into(), Type::List(Box::new(Type::Int))),
                ("at".into(), Type::Timestamp),
                ("d".into(), Type::Duration),
                ("d2".into(), Type::Duration),
            ],
        };
        let text = registered("spans", 78, &t);
        let day = |d: i64| Value::Record(Arc::new(vec![Value::Int(d)]));
        let row = vec![
            Value::map(vec![(Value::str("z"), Value::Int(1)), (Value::str("a"), Value::Int(0))]),
            day(7),
            Value::List(Arc::new(vec![day(1), day(0)])),
            Value::List(Arc::new(vec![Value::Int(3), Value::Int(-1)])),
            Value::Ts(-1_500),
            Value::Dur(-1_500),
            Value::Dur(2_250),
        ];
        let mut want = Vec::new();
        for (k, v) in [(b"a", 0u64), (b"z", 1)] {
            let mut e = Vec::new();
            bytes_field(&mut e, 1, k);
            key(&mut e, 2, 0);
            uvarint(&mut e, v);
            bytes_field(&mut want, 1, &e);
        }
        bytes_field(&mut want, 2, &[0x08, 7]);
        bytes_field(&mut want, 3, &[0x08, 1]);
        bytes_field(&mut want, 3, &[]);
        let mut packed = vec![3];
        uvarint(&mut packed, u64::MAX);
        bytes_field(&mut want, 4, &packed);
        // Timestamp -1.5 s: seconds -2, nanos 500000000 (nanos never negative).
        let mut ts = Vec::new();
        key(&mut ts, 1, 0);
        uvarint(&mut ts, (-2i64) as u64);
        key(&mut ts, 2, 0);
        uvarint(&mut ts, 500_000_000);
        bytes_field(&mut want, 5, &ts);
        // Duration -1.5 s: seconds -1, nanos -500000000 (one sign).
        let mut d = Vec::new();
        key(&mut d, 1, 0);
        uvarint(&mut d, (-1i64) as u64);
        key(&mut d, 2, 0);
        uvarint(&mut d, (-500_000_000i64) as u64);
        bytes_field(&mut want, 6, &d);
        bytes_field(&mut want, 7, &[0x08, 2, 0x10, 0x80, 0xe5, 0x9a, 0x77]);
        let bytes = encode("spans", &text, &row, &t).unwrap();
        assert_eq!(bytes, framed(78, &want));
        // Read back by reflection (prost-reflect's decoder): the same row.
        assert_eq!(decode(&bytes, &t).unwrap(), row);
    }

    /// Names the derived schema must keep apart: a nested message beside a field of its name, a
    /// map's hidden entry message, a topic named like the well-known types' package; and JSON
    /// names proto3 refuses to share.
    #[test]
    fn derived_names_do_not_clash() {
        let one = RecordType { fields: vec![("v".into(), Type::Int)] };
        let t = RecordType {
            fields: vec![
                ("x".into(), Type::Record(one.clone())),
                ("tags".into(), Type::Map(Box::new(Type::String), Box::new(Type::Int))),
                ("tagsEntry".into(), Type::Record(one.clone())),
                ("at".into(), Type::Timestamp),
            ],
        };
        assert_eq!(nested_names(&t), [Some("X".into()), None, Some("TagsEntry_".into()), None]);
        let text = schema_text(&t, "google");
        Writer::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let clash = RecordType { fields: vec![("user_id".into(), Type::Int), ("userId".into(), Type::Int)] };
        assert!(unsupported(&clash).unwrap().contains("the same name to proto3"), "{:?}", unsupported(&clash));
        let clash = RecordType { fields: vec![("X".into(), Type::Int), ("x".into(), Type::Int)] };
        assert!(unsupported(&clash).is_some());
    }

    /// The bytes written are Protobuf's own encoding (checked by a writer in this test, not the
    /// crate's): field 1 a length-delimited string, field 2 a 64-bit double.
    #[test]
    fn a_sink_writes_the_protobuf_encoding() {
        let t = RecordType { fields: vec![("ticker".into(), Type::String), ("price".into(), Type::Float)] };
        let text = registered("ticks", 77, &t);
        let mut want = Vec::new();
        bytes_field(&mut want, 1, b"AB");
        key(&mut want, 2, 1);
        want.extend_from_slice(&1.5f64.to_le_bytes());
        assert_eq!(encode("ticks", &text, &[Value::str("AB"), Value::Float(1.5)], &t).unwrap(), framed(77, &want));
        // Defaults are not written (proto3): an empty string and 0.0 are an empty message.
        assert_eq!(encode("ticks", &text, &[Value::str(""), Value::Float(0.0)], &t).unwrap(), framed(77, &[]));
    }

    const ORDER: &str = r#"
        syntax = "proto3";
        package shop;
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        enum Side { BUY = 0; SELL = 1; }
        message Order {
          sint32 qty = 1;
          uint64 big = 2;
          Side side = 3;
          google.protobuf.Timestamp at = 4;
          google.protobuf.StringValue note = 5;
          map<int32, string> tags = 6;
          repeated int32 levels = 7;
          oneof choice { string a = 8; int64 b = 9; }
          Inner inner = 10;
          optional bool flag = 11;
          bytes raw = 12;
          message Inner { float f = 1; }
        }
        message Other { string x = 1; }
    "#;

    /// A message a producer wrote (encoded here by hand) with every kind of field, read into the
    /// fields declared from its schema.
    #[test]
    fn a_writer_schema_resolves_to_the_declared_fields() {
        remember_writer(9102, Some(Writer::parse(ORDER).unwrap()));
        let mut m = Vec::new();
        key(&mut m, 1, 0);
        uvarint(&mut m, 5); // zig-zag of -3
        key(&mut m, 2, 0);
        uvarint(&mut m, 300);
        key(&mut m, 3, 0);
        uvarint(&mut m, 1);
        let mut at = Vec::new();
        key(&mut at, 1, 0);
        uvarint(&mut at, 1_700_000_000);
        key(&mut at, 2, 0);
        uvarint(&mut at, 123_456_789);
        bytes_field(&mut m, 4, &at);
        let mut note = Vec::new();
        bytes_field(&mut note, 1, b"hi");
        bytes_field(&mut m, 5, &note);
        let mut entry = Vec::new();
        key(&mut entry, 1, 0);
        uvarint(&mut entry, 7);
        bytes_field(&mut entry, 2, b"x");
        bytes_field(&mut m, 6, &entry);
        bytes_field(&mut m, 7, &[1, 2, 3]); // packed
        key(&mut m, 9, 0);
        uvarint(&mut m, 5);
        let mut inner = Vec::new();
        key(&mut inner, 1, 5);
        inner.extend_from_slice(&0.5f32.to_le_bytes());
        bytes_field(&mut m, 10, &inner);
        bytes_field(&mut m, 12, b"ok");
        let fields = declared_fields(ORDER).unwrap();
        assert_eq!(
            fields,
            "{ qty: int, big: int, side: string, at: timestamp, note: string?, tags: map<int, string>, \
             levels: list<int>, a: string?, b: int?, inner: { f: float }?, flag: bool?, raw: string }"
        );
        let declared = crate::compile(&format!("stream s from \"t\" {{ value protobuf {fields} }}"))
            .unwrap()
            .sources
            .remove(0)
            .wire;
        let bytes = framed(9102, &m);
        assert_eq!(
            decode(&bytes, &declared).unwrap(),
            vec![
                Value::Int(-3),
                Value::Int(300),
                Value::str("SELL"),
                Value::Ts(1_700_000_000_123),
                Value::str("hi"),
                Value::map(vec![(Value::Int(7), Value::str("x"))]),
                Value::List(Arc::new(vec![Value::Int(1), Value::Int(2), Value::Int(3)])),
                Value::Null,
                Value::Int(5),
                Value::Record(Arc::new(vec![Value::Float(0.5)])),
                Value::Null,
                Value::str("ok"),
            ]
        );
        // Fewer fields, in another order, one the writer lacks (nullable), widened types.
        let some = RecordType {
            fields: vec![
                ("raw".into(), Type::String),
                ("qty".into(), Type::Float),
                ("gone".into(), Type::Int.nullable()),
                ("flag".into(), Type::Bool),
                ("added".into(), Type::Int),
            ],
        };
        // (`flag` is optional and unset: read as not nullable, its default; `added` is not in
        // the writer's schema: its default.)
        assert_eq!(
            decode(&bytes, &some).unwrap(),
            vec![Value::str("ok"), Value::Float(-3.0), Value::Null, Value::Bool(false), Value::Int(0)]
        );
        assert_eq!(
            to_json(&bytes).unwrap(),
            serde_json::json!({
                "qty": -3, "big": 300, "side": "SELL", "at": 1_700_000_000_123i64, "note": "hi",
                "tags": {"7": "x"}, "levels": [1, 2, 3], "a": null, "b": 5, "inner": {"f": 0.5},
                "flag": null, "raw": {"hex": "6f6b"}
            })
        );
        // A nested message: indexes [0, 0] are `Order.Inner` (the map field's hidden entry
        // message is not counted).
        let mut nested = vec![0, 0, 0, 0x23, 0x8e, 4, 0, 0];
        key(&mut nested, 1, 5);
        nested.extend_from_slice(&2.5f32.to_le_bytes());
        let f = RecordType { fields: vec![("f".into(), Type::Float)] };
        assert_eq!(decode(&nested, &f).unwrap(), vec![Value::Float(2.5)]);
        // The second top-level message: indexes [1].
        let mut other = vec![0, 0, 0, 0x23, 0x8e, 2, 2];
        bytes_field(&mut other, 1, b"y");
        let x = RecordType { fields: vec![("x".into(), Type::String)] };
        assert_eq!(decode(&other, &x).unwrap(), vec![Value::str("y")]);
    }

    /// Keys: a message of one field (encoded here by hand), read as the key's type; a message of
    /// two fields is a reason; a key written is a message `<topic>_key` of one field.
    #[test]
    fn keys_are_messages_of_one_field() {
        remember_writer(9311, Some(Writer::parse("syntax = \"proto3\"; message K { sint64 id = 1; }").unwrap()));
        remember_writer(9312, Some(Writer::parse(ORDER).unwrap()));
        assert_eq!(decode_key(&framed(9311, &[0x08, 3]), &Type::Int).unwrap(), Value::Int(-2));
        // Not set: proto3's default.
        assert_eq!(decode_key(&framed(9311, &[]), &Type::Int).unwrap(), Value::Int(0));
        let e = decode_key(&framed(9312, &[]), &Type::Int).unwrap_err();
        assert!(e.contains("message `shop.Order` of 12 fields"), "{e}");
        let text = key_schema_text(&Type::String, "t", "id");
        assert_eq!(text, "syntax = \"proto3\";\n\nmessage t_key {\n  string id = 1;\n}\n");
        let w = Writer::parse(&text).unwrap();
        set_schema("t-key", &text, 9313, &w);
        remember_writer(9313, Some(w));
        let bytes = encode_key("t", &text, &Value::str("ab"), &Type::String).unwrap();
        assert_eq!(bytes, framed(9313, &[0x0a, 2, b'a', b'b']));
        assert_eq!(decode_key(&bytes, &Type::String).unwrap(), Value::str("ab"));
    }

    #[test]
    fn bad_records_are_reasons_not_panics() {
        remember_writer(9103, Some(Writer::parse(ORDER).unwrap()));
        remember_writer(9104, None);
        let rt = RecordType {
            fields: vec![
                ("big".into(), Type::Int),
                ("inner".into(), Type::Record(RecordType { fields: vec![("f".into(), Type::Float)] })),
            ],
        };
        let mut big = Vec::new();
        key(&mut big, 2, 0);
        uvarint(&mut big, u64::MAX);
        let e = decode(&framed(9103, &big), &rt).unwrap_err();
        assert!(e.contains("field `big`") && e.contains("does not read as a int"), "{e}");
        let e = decode(&framed(9103, &[]), &rt).unwrap_err();
        assert!(e.contains("field `inner` is not set"), "{e}");
        let e = decode(&framed(9103, &[0x12, 0x05, 1]), &rt).unwrap_err();
        assert!(e.contains("not a Protobuf message of schema id 9103"), "{e}");
        let e = decode(&framed(9104, &[]), &rt).unwrap_err();
        assert!(e.contains("schema id 9104 is not in the schema registry"), "{e}");
        let e = decode(&[0, 0, 0, 0x23, 0x8f, 2, 8], &rt).unwrap_err();
        assert!(e.contains("has no message at indexes [4]"), "{e}");
        let missing = RecordType { fields: vec![("nope".into(), Type::Timestamp)] };
        let e = decode(&framed(9103, &[]), &missing).unwrap_err();
        assert!(e.contains("no field `nope`, and a timestamp has no default"), "{e}");
        assert!(Writer::parse("syntax = \"proto3\"; message M { strin x = 1; }").is_err());
        assert!(Writer::parse("syntax = \"proto3\"; import \"other.proto\"; message M { string x = 1; }").is_err());
        assert_eq!(Writer::parse("syntax = \"proto3\";").unwrap_err(), "the schema defines no message");
        let e = declared_fields("syntax = \"proto3\"; message M { map<bool, string> m = 1; }").unwrap_err();
        assert!(e.contains("`m` is a map with bool keys"), "{e}");
        let e = declared_fields("syntax = \"proto3\"; message M { M next = 1; }").unwrap_err();
        assert!(e.contains("nests messages more than 32 deep"), "{e}");
    }

    #[test]
    fn types_protobuf_cannot_hold_are_named() {
        let list = |t: Type| Type::List(Box::new(t));
        let one = |t: Type| RecordType { fields: vec![("x".into(), t)] };
        assert!(unsupported(&one(list(list(Type::Int)))).unwrap().contains("no list inside a list"));
        assert!(unsupported(&one(list(Type::Int.nullable()))).unwrap().contains("no null list item"));
        let m = Type::Map(Box::new(Type::Float), Box::new(Type::Int));
        assert!(unsupported(&one(m)).unwrap().contains("map keys are float"));
        assert!(unsupported(&RecordType { fields: vec![("a-b".into(), Type::Int)] })
            .unwrap()
            .contains("not a Protobuf field name"));
        assert_eq!(unsupported(&rt()), None);
    }
}
