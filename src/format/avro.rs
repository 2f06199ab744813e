//! The `avro` format: a value is one Avro datum in the binary encoding, framed as Confluent's
//! serializers frame it (the wire format): a magic byte 0, the id of its writer schema in the
//! schema registry (4 bytes, big-endian), then the datum. Encoding and decoding are the
//! `apache-avro` crate's; what is here is the mapping between Avro and the language's types.
//!
//! Reading resolves the writer's schema to the declared fields as the JSON format does: fields
//! are matched by name, the writer's other fields ignored, a declared field the writer lacks is
//! null if nullable (else the record is bad input); a union is read as the branch the datum holds;
//! numbers widen (int → long, int/long/float → double); an enum, a uuid or UTF-8 bytes read as a
//! string; a decimal as a float; dates and timestamps of any precision as a timestamp (ms).
//!
//! Writing derives the schema from the output type ([`schema_json`]): `int` → long, `float` →
//! double, `timestamp` → long with logical type timestamp-millis, `duration` → long (ms), lists
//! → arrays, `map<string, V>` → maps, records → records, `T?` → a union of null and T (default
//! null).
//!
//! The writer schemas a process has fetched, and the schema ids of its sinks, are kept in
//! process-wide tables ([`remember_writer`], [`set_schema`]): the runtime fills them from the
//! registry before a record needs them, so decoding and encoding never wait on the network.

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, Schema};
use apache_avro::types::Value as Datum;

use crate::types::{RecordType, Type};
use crate::value::Value;

/// A writer schema, parsed, with its named types (for references to them) and its datum reader,
/// built once (building one resolves the schema's names: per record, that was most of reading).
pub struct Writer {
    /// (Leaked: the reader borrows it for as long as the process keeps the writer, which is for
    /// good — one per schema id the registry gave, see [`remember_writer`].)
    schema: &'static Schema,
    names: HashMap<Name, Schema>,
    reader: GenericDatumReader<'static>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("schema", self.schema).finish_non_exhaustive()
    }
}

impl Writer {
    /// Parse a schema as the registry gives it (its JSON text).
    pub fn parse(text: &str) -> Result<Writer, String> {
        let schema = Schema::parse_str(text).map_err(|e| format!("not an Avro schema: {e}"))?;
        let mut names = HashMap::new();
        collect_names(&schema, &mut names);
        let schema: &'static Schema = Box::leak(Box::new(schema));
        let reader = GenericDatumReader::builder(schema).build().map_err(|e| format!("not an Avro schema: {e}"))?;
        Ok(Writer { schema, names, reader })
    }

    fn resolve<'a>(&'a self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref { name } => self.names.get(name).unwrap_or(s),
            s => s,
        }
    }
}

fn collect_names(s: &Schema, names: &mut HashMap<Name, Schema>) {
    if let Some(n) = s.name() {
        if !matches!(s, Schema::Ref { .. }) {
            names.insert(n.clone(), s.clone());
        }
    }
    match s {
        Schema::Record(r) => r.fields.iter().for_each(|f| collect_names(&f.schema, names)),
        Schema::Array(a) => collect_names(&a.items, names),
        Schema::Map(m) => collect_names(&m.types, names),
        Schema::Union(u) => u.variants().iter().for_each(|v| collect_names(v, names)),
        _ => {}
    }
}

/// The writer schemas this process has looked up.
static WRITERS: crate::format::schema_tables::Writers<Writer> = crate::format::schema_tables::Writers::new();

/// The schemas of sink topics, as registered.
static SINKS: crate::format::schema_tables::Sinks<Arc<Schema>> = crate::format::schema_tables::Sinks::new();

/// Whether the writer schema `id` has been looked up.
pub fn writer_known(id: u32) -> bool {
    WRITERS.known(id)
}

/// Keep what the registry said of schema `id` (None: it does not know it).
pub fn remember_writer(id: u32, writer: Option<Writer>) {
    WRITERS.remember(id, writer)
}

/// Keep the registry id of a schema written under `subject` (its text, as [`schema_json`] or
/// [`key_schema_json`] derived it).
pub fn set_schema(subject: &str, text: &str, id: u32, schema: Schema) {
    SINKS.set(subject, text, id, Arc::new(schema))
}

/// The Avro schema (JSON) of keys of the scalar type `ty`: a primitive (`"string"`, `"long"`,
/// `"double"`, `"boolean"`, a timestamp-millis long), as Confluent's serializers write a key of
/// such a type.
pub fn key_schema_json(ty: &Type) -> String {
    type_json(ty, "key").to_string()
}

/// A key written under `<topic>-key` with the schema `text` ([`key_schema_json`]) registered
/// for it: by the runtime ahead, or now.
pub fn encode_key(topic: &str, text: &str, key: &Value, ty: &Type) -> Result<Vec<u8>, String> {
    let (id, _) = SINKS.of(&crate::format::schema_tables::key_subject(topic), text, crate::ast::Format::Avro, |t| {
        Schema::parse_str(t).map(Arc::new).map_err(|e| e.to_string())
    })?;
    let mut out = crate::format::schema_tables::wire_header(id);
    write_avro(&mut out, key, ty).map_err(|e| format!("cannot write an Avro key for `{topic}`: {e}"))?;
    Ok(out)
}

/// A framed key as the declared scalar type: the writer's datum, a primitive (or a union
/// holding one), or a record of one field (ksqlDB's wrapped single key column).
pub fn decode_key(bytes: &[u8], ty: &Type) -> Result<Value, String> {
    let (id, w, datum) = read_framed(bytes)?;
    match (&datum, w.resolve(w.schema)) {
        (Datum::Record(fields), Schema::Record(r)) if fields.len() == 1 && r.fields.len() == 1 => {
            convert(&fields[0].1, &r.fields[0].schema, ty, &w, "")
        }
        (Datum::Record(fields), _) => {
            Err(format!("the key's schema id {id} is a record of {} fields: a key is one value", fields.len()))
        }
        _ => convert(&datum, w.schema, ty, &w, ""),
    }
}

/// The writer schema id of a framed value.
pub fn schema_id(bytes: &[u8]) -> Result<u32, String> {
    crate::format::schema_tables::wire_schema_id(bytes, "Avro")
}

/// A framed value decoded to the declared record type, with the writer schema its id names.
pub fn decode(bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
    let (id, w, datum) = read_framed(bytes)?;
    match record(&datum, w.schema, rt, &w, "")? {
        Value::Record(fields) => Ok(Arc::try_unwrap(fields).unwrap_or_else(|a| (*a).clone())),
        _ => Err(format!("schema id {id} is not a record schema")),
    }
}

fn record(v: &Datum, s: &Schema, rt: &RecordType, w: &Writer, path: &str) -> Result<Value, String> {
    let (Datum::Record(fields), Schema::Record(rs)) = (v, w.resolve(s)) else {
        return Err(format!("{}: the writer wrote {}, not a record", at(path), kind(v)));
    };
    let mut out = Vec::with_capacity(rt.fields.len());
    for (name, ty) in &rt.fields {
        let p = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        let found = fields.iter().position(|(n, _)| n == name);
        match found {
            Some(i) => {
                let fs =
                    rs.fields.get(i).filter(|f| f.name == *name).or_else(|| rs.fields.iter().find(|f| f.name == *name));
                let Some(fs) = fs else { return Err(format!("{}: not in the writer's schema", at(&p))) };
                out.push(convert(&fields[i].1, &fs.schema, ty, w, &p)?);
            }
            None if ty.is_nullable() => out.push(Value::Null),
            None => return Err(format!("the writer's schema has no field `{p}`, and it is not nullable here")),
        }
    }
    Ok(Value::Record(Arc::new(out)))
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "the value".into()
    } else {
        format!("field `{path}`")
    }
}

fn kind(v: &Datum) -> &'static str {
    match v {
        Datum::Null => "null",
        Datum::Boolean(_) => "a boolean",
        Datum::Int(_) | Datum::Long(_) => "an integer",
        Datum::Float(_) | Datum::Double(_) => "a floating-point number",
        Datum::Bytes(_) | Datum::Fixed(..) => "bytes",
        Datum::String(_) => "a string",
        Datum::Enum(..) => "an enum symbol",
        Datum::Union(..) => "a union",
        Datum::Array(_) => "an array",
        Datum::Map(_) => "a map",
        Datum::Record(_) => "a record",
        Datum::Date(_) => "a date",
        Datum::Decimal(_) | Datum::BigDecimal(_) => "a decimal",
        Datum::TimeMillis(_) | Datum::TimeMicros(_) => "a time of day",
        Datum::TimestampMillis(_)
        | Datum::TimestampMicros(_)
        | Datum::TimestampNanos(_)
        | Datum::LocalTimestampMillis(_)
        | Datum::LocalTimestampMicros(_)
        | Datum::LocalTimestampNanos(_) => "a timestamp",
        Datum::Duration(_) => "an Avro duration",
        Datum::Uuid(_) => "a uuid",
    }
}

/// One value of the writer's schema `s` as the declared type `ty`.
fn convert(v: &Datum, s: &Schema, ty: &Type, w: &Writer, path: &str) -> Result<Value, String> {
    let s = w.resolve(s);
    if let Datum::Union(i, inner) = v {
        let branch = match s {
            Schema::Union(u) => u.variants().get(*i as usize).unwrap_or(s),
            s => s,
        };
        return convert(inner, branch, ty, w, path);
    }
    if let Datum::Null = v {
        return if ty.is_nullable() || *ty == Type::Error {
            Ok(Value::Null)
        } else {
            Err(format!("{} is null, and a {ty} cannot be", at(path)))
        };
    }
    let bad = || format!("{}: the writer wrote {}, which does not read as a {}", at(path), kind(v), ty.base());
    Ok(match (ty.base(), v) {
        (Type::String, Datum::String(s)) => Value::str(s),
        (Type::String, Datum::Enum(_, s)) => Value::str(s),
        (Type::String, Datum::Uuid(u)) => Value::str(&u.to_string()),
        (Type::String, Datum::Bytes(b)) => Value::str(std::str::from_utf8(b).map_err(|_| bad())?),
        (Type::Int, Datum::Int(i)) => Value::Int((*i).into()),
        (Type::Int, Datum::Long(i)) => Value::Int(*i),
        (Type::Float, Datum::Int(i)) => Value::Float((*i).into()),
        (Type::Float, Datum::Long(i)) => Value::Float(*i as f64),
        (Type::Float, Datum::Float(f)) => finite((*f).into()).ok_or_else(bad)?,
        (Type::Float, Datum::Double(f)) => finite(*f).ok_or_else(bad)?,
        (Type::Float, Datum::Decimal(d)) => {
            let Schema::Decimal(ds) = s else { return Err(bad()) };
            let bytes = <Vec<u8>>::try_from(d).map_err(|_| bad())?;
            finite(unscaled(&bytes).ok_or_else(bad)? / 10f64.powi(ds.scale as i32)).ok_or_else(bad)?
        }
        (Type::Bool, Datum::Boolean(b)) => Value::Bool(*b),
        (Type::Timestamp, Datum::TimestampMillis(t) | Datum::LocalTimestampMillis(t) | Datum::Long(t)) => Value::Ts(*t),
        (Type::Timestamp, Datum::TimestampMicros(t) | Datum::LocalTimestampMicros(t)) => Value::Ts(t.div_euclid(1_000)),
        (Type::Timestamp, Datum::TimestampNanos(t) | Datum::LocalTimestampNanos(t)) => {
            Value::Ts(t.div_euclid(1_000_000))
        }
        (Type::Timestamp, Datum::Int(t)) => Value::Ts((*t).into()),
        (Type::Timestamp, Datum::Date(d)) => Value::Ts(i64::from(*d) * 86_400_000),
        (Type::Duration, Datum::Long(d)) => Value::Dur(*d),
        (Type::Duration, Datum::Int(d) | Datum::TimeMillis(d)) => Value::Dur((*d).into()),
        (Type::Duration, Datum::TimeMicros(d)) => Value::Dur(d.div_euclid(1_000)),
        (Type::List(item), Datum::Array(xs)) => {
            let Schema::Array(a) = s else { return Err(bad()) };
            let items = xs
                .iter()
                .enumerate()
                .map(|(i, x)| convert(x, &a.items, item, w, &format!("{path}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            Value::List(Arc::new(items))
        }
        (Type::Map(k, vt), Datum::Map(m)) => {
            let Schema::Map(ms) = s else { return Err(bad()) };
            let mut entries = Vec::with_capacity(m.len());
            for (key, x) in m {
                let p = format!("{path}[{key}]");
                let key = crate::value::map_key(key, k).map_err(|e| format!("{}: {e}", at(path)))?;
                entries.push((key, convert(x, &ms.types, vt, w, &p)?));
            }
            Value::map(entries)
        }
        (Type::Record(rt), Datum::Record(_)) => record(v, s, rt, w, path)?,
        _ => return Err(bad()),
    })
}

fn finite(f: f64) -> Option<Value> {
    f.is_finite().then_some(Value::Float(f))
}

/// A decimal's unscaled value (big-endian two's complement) as a float.
fn unscaled(bytes: &[u8]) -> Option<f64> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut b = [fill; 16];
    b[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(b) as f64)
}

/// A framed value as JSON, by its writer schema alone (for `streamc consume`): records as
/// objects in field order, unions as their value, maps with their keys sorted, timestamps and
/// dates as epoch ms, times as ms, decimals as numbers, enums and uuids as strings, bytes as
/// `{"hex": …}`.
pub fn to_json(bytes: &[u8]) -> Result<serde_json::Value, String> {
    let (_, w, datum) = read_framed(bytes)?;
    Ok(json_of(&datum, w.schema, &w))
}

/// A framed value's schema id, writer schema and datum; bytes after the datum are an error.
fn read_framed(bytes: &[u8]) -> Result<(u32, Arc<Writer>, Datum), String> {
    let id = schema_id(bytes)?;
    let w = WRITERS.of(id, Writer::parse, "an Avro schema streamc reads")?;
    let mut payload = &bytes[5..];
    let datum = w.reader.read_value(&mut payload).map_err(|e| format!("not Avro data of schema id {id}: {e}"))?;
    if !payload.is_empty() {
        return Err(format!("{} bytes after the Avro datum of schema id {id}", payload.len()));
    }
    Ok((id, w, datum))
}

fn json_of(v: &Datum, s: &Schema, w: &Writer) -> serde_json::Value {
    use serde_json::{json, Value as J};
    let s = w.resolve(s);
    match v {
        Datum::Null => J::Null,
        Datum::Boolean(b) => json!(b),
        Datum::Date(d) => json!(i64::from(*d) * 86_400_000),
        Datum::Int(i) | Datum::TimeMillis(i) => json!(i),
        Datum::Long(i) | Datum::TimestampMillis(i) | Datum::LocalTimestampMillis(i) => json!(i),
        Datum::TimeMicros(i) | Datum::TimestampMicros(i) | Datum::LocalTimestampMicros(i) => json!(i.div_euclid(1_000)),
        Datum::TimestampNanos(i) | Datum::LocalTimestampNanos(i) => json!(i.div_euclid(1_000_000)),
        Datum::Float(f) => json!(f),
        Datum::Double(f) => json!(f),
        Datum::Bytes(b) | Datum::Fixed(_, b) => json!({ "hex": hex::encode(b) }),
        Datum::String(t) | Datum::Enum(_, t) => json!(t),
        Datum::Uuid(u) => json!(u.to_string()),
        Datum::Union(i, inner) => {
            let branch = match s {
                Schema::Union(u) => u.variants().get(*i as usize).unwrap_or(s),
                s => s,
            };
            json_of(inner, branch, w)
        }
        Datum::Array(xs) => {
            let items = match s {
                Schema::Array(a) => &*a.items,
                s => s,
            };
            J::Array(xs.iter().map(|x| json_of(x, items, w)).collect())
        }
        Datum::Map(m) => {
            let values = match s {
                Schema::Map(ms) => &*ms.types,
                s => s,
            };
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            J::Object(keys.into_iter().map(|k| (k.clone(), json_of(&m[k], values, w))).collect())
        }
        Datum::Record(fields) => {
            let schemas: Vec<&Schema> = match s {
                Schema::Record(r) => r.fields.iter().map(|f| &f.schema).collect(),
                _ => Vec::new(),
            };
            J::Object(
                fields
                    .iter()
                    .enumerate()
                    .map(|(i, (n, x))| (n.clone(), json_of(x, schemas.get(i).copied().unwrap_or(s), w)))
                    .collect(),
            )
        }
        Datum::Decimal(d) => match (s, <Vec<u8>>::try_from(d).ok().and_then(|b| unscaled(&b))) {
            (Schema::Decimal(ds), Some(u)) => json!(u / 10f64.powi(ds.scale as i32)),
            _ => J::Null,
        },
        Datum::BigDecimal(d) => json!(d.to_string()),
        Datum::Duration(d) => json!({
            "months": u32::from(d.months()), "days": u32::from(d.days()), "millis": u32::from(d.millis())
        }),
    }
}

/// The fields of a record schema as the language declares them (`{ name: type, … }`), each of
/// the type [`decode`] reads the writer's values as: boolean → `bool`; int and long → `int`;
/// float, double and decimal → `float`; string, enum, uuid and bytes → `string`; dates and
/// timestamps → `timestamp`; times of day → `duration`; arrays → `list<…>`; maps →
/// `map<string, …>`; records → records; a union of null and one type → that type, nullable.
/// Other unions, fixed, big decimals and Avro durations have no one type here: an error
/// naming the field.
pub fn declared_fields(text: &str) -> Result<String, String> {
    let w = Writer::parse(text)?;
    let Schema::Record(r) = w.resolve(w.schema) else {
        return Err("its latest schema is not a record".into());
    };
    record_text(r, &w, "", 0)
}

/// Field names that need backquotes (the expression words).
pub(crate) const QUOTED: &[&str] = &["and", "or", "not", "in", "is", "if", "then", "else", "true", "false", "null"];

fn record_text(r: &apache_avro::schema::RecordSchema, w: &Writer, path: &str, depth: usize) -> Result<String, String> {
    if depth > 32 {
        return Err(format!("`{path}` nests records more than 32 deep (a recursive schema has no declared type)"));
    }
    if r.fields.is_empty() {
        return Err(format!("{} has no fields", if path.is_empty() { "the record" } else { path }));
    }
    let mut parts = Vec::with_capacity(r.fields.len());
    for f in &r.fields {
        let at = if path.is_empty() { f.name.clone() } else { format!("{path}.{}", f.name) };
        let name = if QUOTED.contains(&f.name.as_str()) { format!("`{}`", f.name) } else { f.name.clone() };
        parts.push(format!("{name}: {}", type_text(&f.schema, w, &at, depth)?));
    }
    Ok(format!("{{ {} }}", parts.join(", ")))
}

fn type_text(s: &Schema, w: &Writer, path: &str, depth: usize) -> Result<String, String> {
    let none = |what: &str| Err(format!("`{path}` is {what}, which no declared type reads"));
    Ok(match w.resolve(s) {
        Schema::Union(u) => {
            let some: Vec<&Schema> = u.variants().iter().filter(|v| !matches!(v, Schema::Null)).collect();
            match some.as_slice() {
                [one] if some.len() < u.variants().len() => {
                    let t = type_text(one, w, path, depth)?;
                    if t.ends_with('?') {
                        t
                    } else {
                        format!("{t}?")
                    }
                }
                [one] => type_text(one, w, path, depth)?,
                [] => return none("always null"),
                _ => return none("a union of several types"),
            }
        }
        Schema::Boolean => "bool".into(),
        Schema::Int | Schema::Long => "int".into(),
        Schema::Float | Schema::Double | Schema::Decimal(_) => "float".into(),
        Schema::String | Schema::Enum(_) | Schema::Uuid(_) | Schema::Bytes => "string".into(),
        Schema::Date
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "timestamp".into(),
        Schema::TimeMillis | Schema::TimeMicros => "duration".into(),
        Schema::Array(a) => format!("list<{}>", type_text(&a.items, w, &format!("{path}[]"), depth)?),
        Schema::Map(m) => format!("map<string, {}>", type_text(&m.types, w, &format!("{path}[]"), depth)?),
        Schema::Record(r) => record_text(r, w, path, depth + 1)?,
        Schema::Null => return none("always null"),
        Schema::Fixed(_) => return none("fixed bytes"),
        Schema::BigDecimal => return none("a big decimal"),
        Schema::Duration(_) => return none("an Avro duration"),
        Schema::Ref { name } => return none(&format!("a reference to `{name}` the schema does not define")),
    })
}

/// Why a type has no Avro form here, if it has none: a map whose keys are not strings (Avro's
/// map keys are strings), or a name Avro does not allow.
pub fn unsupported(rt: &RecordType) -> Option<String> {
    for (name, ty) in &rt.fields {
        if !valid_name(name) {
            return Some(format!("`{name}` is not an Avro name (letters, digits and `_`, not starting with a digit)"));
        }
        if let Some(why) = unsupported_type(ty) {
            return Some(format!("`{name}`: {why}"));
        }
    }
    None
}

fn unsupported_type(ty: &Type) -> Option<String> {
    match ty.base() {
        Type::Map(k, v) => {
            if *k.base() != Type::String {
                return Some(format!("its map keys are {k}, and Avro map keys are strings"));
            }
            unsupported_type(v)
        }
        Type::List(t) => unsupported_type(t),
        Type::Record(rt) => unsupported(rt),
        Type::Tuple(_) => Some("a composite value has no Avro form".into()),
        _ => None,
    }
}

pub(crate) fn valid_name(n: &str) -> bool {
    let mut cs = n.chars();
    cs.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A record name for the schema of `topic`'s values: its letters and digits, others as `_`.
pub fn record_name(topic: &str) -> String {
    let mut n: String = topic.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if !n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        n.insert(0, '_');
    }
    n
}

/// The Avro schema (JSON) of values of `rt`, a record named `name`; nested records are named
/// after their path (`name_field`).
pub fn schema_json(rt: &RecordType, name: &str) -> serde_json::Value {
    let fields: Vec<serde_json::Value> = rt
        .fields
        .iter()
        .map(|(n, t)| {
            let mut f = serde_json::json!({ "name": n, "type": type_json(t, &format!("{name}_{n}")) });
            if t.is_nullable() {
                f["default"] = serde_json::Value::Null;
            }
            f
        })
        .collect();
    serde_json::json!({ "type": "record", "name": name, "fields": fields })
}

fn type_json(t: &Type, name: &str) -> serde_json::Value {
    use serde_json::json;
    let base = match t.base() {
        Type::String => json!("string"),
        Type::Int | Type::Duration => json!("long"),
        Type::Float => json!("double"),
        Type::Bool => json!("boolean"),
        Type::Timestamp => json!({ "type": "long", "logicalType": "timestamp-millis" }),
        Type::List(i) => json!({ "type": "array", "items": type_json(i, &format!("{name}_item")) }),
        Type::Map(_, v) => json!({ "type": "map", "values": type_json(v, &format!("{name}_value")) }),
        Type::Record(rt) => schema_json(rt, name),
        // No value of these reaches a sink the checker allows (`null` alone: a null column).
        Type::Null | Type::Error | Type::Tuple(_) | Type::Nullable(_) => json!("null"),
    };
    if t.is_nullable() && *t != Type::Null {
        json!(["null", base])
    } else {
        base
    }
}

/// A row of `rt` framed for `topic`, with the schema `text` (derived from `rt` by
/// [`schema_json`]) registered for it: by the runtime ahead, or now.
pub fn encode(topic: &str, text: &str, values: &[Value], rt: &RecordType) -> Result<Vec<u8>, String> {
    let (id, _) =
        SINKS.of(&crate::format::schema_tables::value_subject(topic), text, crate::ast::Format::Avro, |t| {
            Schema::parse_str(t).map(Arc::new).map_err(|e| e.to_string())
        })?;
    // (Written here by the derived schema's rules; the schema was compiled when registered.)
    let mut out = crate::format::schema_tables::wire_header(id);
    write_record(&mut out, values, rt).map_err(|e| format!("cannot write Avro for `{topic}`: {e}"))?;
    Ok(out)
}

/// A row of `rt` in Avro's binary encoding, as the derived schema ([`schema_json`]) reads it.
fn write_record(out: &mut Vec<u8>, values: &[Value], rt: &RecordType) -> Result<(), String> {
    if values.len() != rt.fields.len() {
        return Err(format!("a row of {} values for a record of {} fields", values.len(), rt.fields.len()));
    }
    for ((name, t), v) in rt.fields.iter().zip(values) {
        write_avro(out, v, t).map_err(|e| format!("`{name}`: {e}"))?;
    }
    Ok(())
}

/// A long (and a length): a zig-zag varint.
fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    long(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// `v` in Avro's binary encoding, as the schema derived from `t` ([`type_json`]) reads it: a
/// nullable type is the union `["null", T]` (branch 0 null, branch 1 the value); an array or a
/// map is one block and the end block; a map's entries in the map's (sorted) order, so that a
/// row is always the same bytes.
fn write_avro(out: &mut Vec<u8>, v: &Value, t: &Type) -> Result<(), String> {
    // (`Type::Null` is the schema "null" itself, not a union: see `type_json`.)
    if t.is_nullable() && *t != Type::Null {
        if v.is_null() {
            long(out, 0);
            return Ok(());
        }
        long(out, 1);
    }
    // (Each value against its type: a mismatch is an error, never bytes a reader would misread.)
    match (v, t.base()) {
        (Value::Null, Type::Null) => {}
        (Value::Str(s), Type::String) => bytes(out, s.as_bytes()),
        (Value::Int(i), Type::Float) => out.extend_from_slice(&(*i as f64).to_le_bytes()),
        (Value::Int(i), Type::Int) | (Value::Ts(i), Type::Timestamp) | (Value::Dur(i), Type::Duration) => long(out, *i),
        (Value::Float(f), Type::Float) => out.extend_from_slice(&f.to_le_bytes()),
        (Value::Bool(b), Type::Bool) => out.push(u8::from(*b)),
        (Value::List(xs), Type::List(item)) => {
            if !xs.is_empty() {
                long(out, xs.len() as i64);
                for x in xs.iter() {
                    write_avro(out, x, item)?;
                }
            }
            long(out, 0);
        }
        (Value::Map(m), Type::Map(_, vt)) => {
            if !m.is_empty() {
                long(out, m.len() as i64);
                for (k, x) in m.iter() {
                    let Value::Str(k) = k else { return Err(format!("a map key {k}: Avro map keys are strings")) };
                    bytes(out, k.as_bytes());
                    write_avro(out, x, vt)?;
                }
            }
            long(out, 0);
        }
        (Value::Record(fs), Type::Record(rt)) => write_record(out, fs, rt)?,
        (v, _) => return Err(format!("{v} has no Avro form as a {t}")),
    }
    Ok(())
}

/// The `avro` format: values (and keys) in the Confluent wire format, with schemas from the
/// registry.
pub struct Avro;

impl crate::format::ValueFormat for Avro {
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
        Some(schema_json(rt, &record_name(topic)).to_string())
    }

    fn key_schema_text(&self, ty: &Type, _topic: &str, _field: &str) -> Option<String> {
        Some(key_schema_json(ty))
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
        apache_avro::Schema::parse_str(text).map(|_| ()).map_err(|e| e.to_string())
    }

    fn keep_schema(&self, subject: &str, text: &str, id: u32) {
        if let Ok(schema) = apache_avro::Schema::parse_str(text) {
            set_schema(subject, text, id, schema);
        }
    }

    fn encode_key(&self, key: &Value, ty: &Type, target: crate::format::Target) -> Result<Vec<u8>, String> {
        encode_key(target.topic, target.schema, key, ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::writer::datum::GenericDatumWriter;

    fn rt() -> RecordType {
        let inner = RecordType { fields: vec![("day".into(), Type::Int), ("note".into(), Type::String.nullable())] };
        RecordType {
            fields: vec![
                ("name".into(), Type::String),
                ("n".into(), Type::Int.nullable()),
                ("x".into(), Type::Float),
                ("ok".into(), Type::Bool),
                ("at".into(), Type::Timestamp),
                ("gap".into(), Type::Duration),
                ("tags".into(), Type::List(Box::new(Type::String))),
                ("counts".into(), Type::Map(Box::new(Type::String), Box::new(Type::Int)).nullable()),
                ("when".into(), Type::Record(inner)),
                ("none".into(), Type::Null),
                ("maybes".into(), Type::List(Box::new(Type::Float.nullable()))),
            ],
        }
    }

    fn row() -> Vec<Value> {
        vec![
            Value::str("a"),
            Value::Null,
            Value::Float(1.5),
            Value::Bool(true),
            Value::Ts(1_700_000_000_123),
            Value::Dur(250),
            Value::List(Arc::new(vec![Value::str("x"), Value::str("y")])),
            Value::map(vec![(Value::str("k"), Value::Int(3)), (Value::str("a"), Value::Int(-1))]),
            Value::Record(Arc::new(vec![Value::Int(7), Value::Null])),
            Value::Null,
            Value::List(Arc::new(vec![Value::Float(0.5), Value::Null])),
        ]
    }

    /// Register `rt`'s schema as both the sink's and writer `id`, as the runtime does.
    fn registered(topic: &str, id: u32, rt: &RecordType) -> String {
        let json = schema_json(rt, &record_name(topic)).to_string();
        set_schema(&crate::format::schema_tables::value_subject(topic), &json, id, Schema::parse_str(&json).unwrap());
        remember_writer(id, Some(Writer::parse(&json).unwrap()));
        json
    }

    #[test]
    fn every_type_round_trips_through_the_derived_schema() {
        let t = rt();
        let text = registered("round-trip", 9001, &t);
        let bytes = encode("round-trip", &text, &row(), &t).unwrap();
        assert_eq!(&bytes[..5], &[0, 0, 0, 0x23, 0x29]);
        assert_eq!(decode(&bytes, &t).unwrap(), row());
        let json = schema_json(&t, "round_trip");
        assert_eq!(json["fields"][1]["type"], serde_json::json!(["null", "long"]));
        assert_eq!(json["fields"][1]["default"], serde_json::Value::Null);
        assert_eq!(json["fields"][4]["type"]["logicalType"], "timestamp-millis");
        assert_eq!(json["fields"][8]["type"]["name"], "round_trip_when");
    }

    #[test]
    fn a_writer_schema_resolves_to_the_declared_fields() {
        // An older writer: no `n` (nullable: null), an extra field (ignored), an int where a
        // float is declared, an enum where a string is, a decimal, timestamps in micros and a
        // date, a union holding a long.
        let writer = r#"{"type": "record", "name": "W", "fields": [
            {"name": "extra", "type": "string"},
            {"name": "name", "type": {"type": "enum", "name": "E", "symbols": ["a", "b"]}},
            {"name": "x", "type": "int"},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "maybe", "type": ["null", "long"]}
        ]}"#;
        let w = Writer::parse(writer).unwrap();
        let datum = Datum::Record(vec![
            ("extra".into(), Datum::String("ignored".into())),
            ("name".into(), Datum::Enum(1, "b".into())),
            ("x".into(), Datum::Int(3)),
            ("price".into(), Datum::Decimal(apache_avro::Decimal::from((-12345i32).to_be_bytes()))),
            ("at".into(), Datum::TimestampMicros(1_700_000_000_123_999)),
            ("day".into(), Datum::Date(2)),
            ("maybe".into(), Datum::Union(1, Box::new(Datum::Long(5)))),
        ]);
        let body = GenericDatumWriter::builder(w.schema).build().unwrap().write_value_to_vec(datum).unwrap();
        remember_writer(9002, Some(w));
        let mut bytes = vec![0, 0, 0, 0x23, 0x2a];
        bytes.extend_from_slice(&body);
        let declared = RecordType {
            fields: vec![
                ("name".into(), Type::String),
                ("n".into(), Type::Int.nullable()),
                ("x".into(), Type::Float),
                ("price".into(), Type::Float),
                ("at".into(), Type::Timestamp),
                ("day".into(), Type::Timestamp),
                ("maybe".into(), Type::Int),
            ],
        };
        let v = decode(&bytes, &declared).unwrap();
        assert_eq!(
            v,
            vec![
                Value::str("b"),
                Value::Null,
                Value::Float(3.0),
                Value::Float(-123.45),
                Value::Ts(1_700_000_000_123),
                Value::Ts(2 * 86_400_000),
                Value::Int(5)
            ]
        );
        // A non-nullable field the writer lacks, a type that does not read: bad input.
        let missing = RecordType { fields: vec![("n".into(), Type::Int)] };
        assert!(decode(&bytes, &missing).unwrap_err().contains("no field `n`"));
        let wrong = RecordType { fields: vec![("x".into(), Type::Bool)] };
        assert_eq!(
            decode(&bytes, &wrong).unwrap_err(),
            "field `x`: the writer wrote an integer, which does not read as a bool"
        );
    }

    /// A row's bytes are Avro's binary encoding (written here by hand): a union's branch, a
    /// map as one block of its entries in key order, whatever order they came in, then the end
    /// block; so a row is always the same bytes.
    #[test]
    fn a_row_is_avro_binary_with_map_entries_in_key_order() {
        let t = RecordType {
            fields: vec![
                ("m".into(), Type::Map(Box::new(Type::String), Box::new(Type::Int))),
                ("o".into(), Type::Int.nullable()),
                ("xs".into(), Type::List(Box::new(Type::Float))),
            ],
        };
        let text = registered("bytes", 9020, &t);
        let row = |entries: Vec<(&str, i64)>| {
            vec![
                Value::map(entries.into_iter().map(|(k, v)| (Value::str(k), Value::Int(v))).collect()),
                Value::Int(-1),
                Value::List(Arc::new(vec![Value::Int(2)])),
            ]
        };
        let a = encode("bytes", &text, &row(vec![("z", 1), ("a", 2)]), &t).unwrap();
        let b = encode("bytes", &text, &row(vec![("a", 2), ("z", 1)]), &t).unwrap();
        let mut want = vec![0, 0, 0, 0x23, 0x3c];
        // Map: 2 entries (zig-zag 4), "a" → 2 (4), "z" → 1 (2), end.
        want.extend_from_slice(&[4, 2, b'a', 4, 2, b'z', 2, 0]);
        // Union branch 1, long -1 (1); array of 1 double 2.0, end.
        want.extend_from_slice(&[2, 1, 2]);
        want.extend_from_slice(&2.0f64.to_le_bytes());
        want.push(0);
        assert_eq!((a.clone(), b), (want.clone(), want));
        assert_eq!(
            decode(&a, &t).unwrap(),
            row(vec![("a", 2), ("z", 1)])
                .into_iter()
                .enumerate()
                .map(|(i, v)| if i == 2 { Value::List(Arc::new(vec![Value::Float(2.0)])) } else { v })
                .collect::<Vec<_>>()
        );
    }

    /// Keys as Confluent's serializers write them (encoded here by hand): a primitive datum, or a
    /// record of one field; a key of two fields is a reason, not a value.
    #[test]
    fn keys_read_from_primitives_and_one_field_records() {
        remember_writer(9301, Some(Writer::parse(r#""string""#).unwrap()));
        remember_writer(
            9302,
            Some(
                Writer::parse(r#"{"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}"#)
                    .unwrap(),
            ),
        );
        remember_writer(9303, Some(Writer::parse(r#"{"type": "record", "name": "K2", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "long"}]}"#).unwrap()));
        let framed = |id: u32, body: &[u8]| [&[0u8][..], &id.to_be_bytes(), body].concat();
        // A string: its length (zig-zag 3 → 6) and bytes.
        assert_eq!(decode_key(&framed(9301, &[6, b'a', b'b', b'c']), &Type::String).unwrap(), Value::str("abc"));
        // A record of one long: -2 → 3.
        assert_eq!(decode_key(&framed(9302, &[3]), &Type::Int).unwrap(), Value::Int(-2));
        assert_eq!(decode_key(&framed(9302, &[3]), &Type::Float).unwrap(), Value::Float(-2.0));
        let e = decode_key(&framed(9303, &[2, 4]), &Type::Int).unwrap_err();
        assert!(e.contains("a record of 2 fields"), "{e}");
        let e = decode_key(b"abc", &Type::String).unwrap_err();
        assert!(e.contains("not in the Avro wire format"), "{e}");
        // Written: the primitive schema of the key's type.
        assert_eq!(key_schema_json(&Type::String), r#""string""#);
        assert_eq!(key_schema_json(&Type::Timestamp), r#"{"type":"long","logicalType":"timestamp-millis"}"#);
        let text = key_schema_json(&Type::Int);
        set_schema("keyed-key", &text, 9304, Schema::parse_str(&text).unwrap());
        assert_eq!(encode_key("keyed", &text, &Value::Int(-2), &Type::Int).unwrap(), framed(9304, &[3]));
    }

    #[test]
    fn framing_errors_are_reasons_not_panics() {
        let t = rt();
        assert!(decode(b"", &t).unwrap_err().contains("empty"));
        assert!(decode(b"{\"a\":1}", &t).unwrap_err().contains("magic byte"));
        assert!(decode(&[0, 0, 1], &t).unwrap_err().contains("too short"));
        remember_writer(9003, None);
        assert!(decode(&[0, 0, 0, 0x23, 0x2b, 1], &t)
            .unwrap_err()
            .starts_with("schema id 9003 is not in the schema registry"));
        assert!(decode(&[0, 0, 0, 0x23, 0x2c], &t).is_err());
        let text = registered("frames", 9004, &t);
        let mut bytes = encode("frames", &text, &row(), &t).unwrap();
        bytes.push(0);
        assert!(decode(&bytes, &t).unwrap_err().contains("1 bytes after"));
        for cut in 5..bytes.len() - 2 {
            assert!(decode(&bytes[..cut], &t).is_err(), "cut at {cut}");
        }
    }

    /// A registry's schema declares fields of the types its values are read as; the text it
    /// gives is a record type the language parses; a field no one type holds is named.
    #[test]
    fn a_registry_schema_declares_the_fields_its_values_read_as() {
        let schema = r#"{"type": "record", "name": "r", "fields": [
            {"name": "id", "type": "string"}, {"name": "n", "type": "long"}, {"name": "i", "type": "int"},
            {"name": "x", "type": "double"}, {"name": "f", "type": "float"}, {"name": "ok", "type": "boolean"},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "b", "type": "bytes"},
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "note", "type": ["null", "string"], "default": null},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
            {"name": "in", "type": {"type": "record", "name": "In", "fields": [{"name": "a", "type": "int"}]}},
            {"name": "again", "type": ["null", "In"]}]}"#;
        let fields = declared_fields(schema).unwrap();
        assert_eq!(
            fields,
            "{ id: string, n: int, i: int, x: float, f: float, ok: bool, kind: string, u: string, b: string, \
             d: float, at: timestamp, day: timestamp, tod: duration, note: string?, tags: list<string>, \
             m: map<string, int?>, `in`: { a: int }, again: { a: int }? }"
        );
        let program = format!("stream s from \"t\" {{\n  value avro {fields}\n}}\n");
        let compiled = crate::compile(&program).unwrap();
        // A datum written with the schema reads into the declared fields: every declared type
        // is one the reader takes the writer's values as.
        let w = Writer::parse(schema).unwrap();
        let inner = Datum::Record(vec![("a".into(), Datum::Int(7))]);
        let datum = Datum::Record(vec![
            ("id".into(), Datum::String("k".into())),
            ("n".into(), Datum::Long(-2)),
            ("i".into(), Datum::Int(3)),
            ("x".into(), Datum::Double(1.5)),
            ("f".into(), Datum::Float(0.25)),
            ("ok".into(), Datum::Boolean(true)),
            ("kind".into(), Datum::Enum(1, "B".into())),
            ("u".into(), Datum::Uuid("00000000-0000-0000-0000-000000000001".parse().unwrap())),
            ("b".into(), Datum::Bytes(b"hi".to_vec())),
            ("d".into(), Datum::Decimal(apache_avro::Decimal::from(250i32.to_be_bytes()))),
            ("at".into(), Datum::TimestampMicros(5_000_999)),
            ("day".into(), Datum::Date(1)),
            ("tod".into(), Datum::TimeMillis(60_000)),
            ("note".into(), Datum::Union(0, Box::new(Datum::Null))),
            ("tags".into(), Datum::Array(vec![Datum::String("t".into())])),
            ("m".into(), Datum::Map([("z".to_string(), Datum::Union(1, Box::new(Datum::Long(4))))].into())),
            ("in".into(), inner.clone()),
            ("again".into(), Datum::Union(1, Box::new(inner))),
        ]);
        let body = GenericDatumWriter::builder(w.schema).build().unwrap().write_value_to_vec(datum).unwrap();
        remember_writer(9003, Some(w));
        let mut bytes = vec![0, 0, 0, 0x23, 0x2b];
        bytes.extend_from_slice(&body);
        let v = decode(&bytes, &compiled.sources[0].value).unwrap();
        assert_eq!(v.len(), 18);
        assert_eq!(v[6], Value::str("B"));
        assert_eq!(v[9], Value::Float(2.5));
        assert_eq!(v[10], Value::Ts(5_000));
        assert_eq!(v[11], Value::Ts(86_400_000));
        assert_eq!(v[13], Value::Null);
        let union = r#"{"type": "record", "name": "r", "fields": [{"name": "v", "type": ["string", "int"]}]}"#;
        assert_eq!(
            declared_fields(union).unwrap_err(),
            "`v` is a union of several types, which no declared type reads"
        );
        assert_eq!(declared_fields(r#""string""#).unwrap_err(), "its latest schema is not a record");
    }

    /// `value avro` without fields: the registry's fields are inserted on its line (every other
    /// line keeps its number); a failed lookup is a diagnostic at the declaration.
    #[test]
    fn value_avro_without_fields_takes_them_from_the_lookup() {
        let src = "stream s from \"t\" {\n  value avro  # the registry's\n  time at\n}\nstream j from \"u\" { value json { a: int } }\n";
        let mut asked = Vec::new();
        let out = crate::expand_registry_fields(src, &mut |topic, format| {
            assert_eq!(format, crate::ast::Format::Avro);
            asked.push(topic.to_string());
            Ok("{ at: timestamp }".into())
        })
        .unwrap();
        assert_eq!(asked, ["t"]);
        assert_eq!(out, src.replacen("value avro", "value avro { at: timestamp }", 1));
        assert!(crate::compile(&out).is_ok());
        let e = crate::expand_registry_fields(src, &mut |_, _| Err("no subject `t-value`".into())).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(&src[e[0].span.start..e[0].span.end], "value avro");
        assert!(e[0].message.contains("no subject `t-value`"), "{}", e[0].message);
        // Unexpanded (an editor), the checker says where the fields come from, and only that:
        // a query over the source does not add that it is unknown.
        let with_query = format!("{src}query q {{\n  from s\n  select {{ at }}\n  to \"o\"\n}}\n");
        let d = crate::compile(&with_query).unwrap_err();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].message.contains("schema registry's latest schema of `t-value`"), "{}", d[0].message);
    }

    #[test]
    fn names_and_map_keys_avro_cannot_hold_are_named() {
        let rt = RecordType { fields: vec![("m".into(), Type::Map(Box::new(Type::Int), Box::new(Type::Int)))] };
        assert!(unsupported(&rt).unwrap().contains("Avro map keys are strings"));
        let rt = RecordType { fields: vec![("a-b".into(), Type::Int)] };
        assert!(unsupported(&rt).unwrap().contains("not an Avro name"));
        assert_eq!(record_name("stock-stats.v1"), "stock_stats_v1");
        assert_eq!(record_name("1x"), "_1x");
    }
}
