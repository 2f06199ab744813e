//! Record formats: values and keys as bytes, one module per format (`json`, `string`, `csv`,
//! `avro`, `protobuf`), each behind the [`ValueFormat`] trait, with the registry's tables of
//! schemas beside them (`schema_tables`; the registry's HTTP client is `crate::registry`).
//! Sources decode and sinks encode through this module: nothing outside it matches on a
//! format to read or write a record.

pub mod avro;
pub mod csv;
pub mod json;
pub mod protobuf;
pub mod schema_tables;
pub mod scoped;
pub mod string;

use std::sync::Arc;

pub use crate::ast::Format;
use crate::eval::Row;
use crate::hir;
use crate::types::{RecordType, Type};
use crate::value::Value;

/// Where a row is written in a registry format: its topic and the schema (its text, as
/// registered for the topic when the program started) its values are framed with.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub topic: &'a str,
    pub schema: &'a str,
}

/// One format's reading and writing of record values (and, for the registry's formats, keys).
/// A value is a record of the source's or sink's wire type: its fields in order.
pub trait ValueFormat {
    /// Every field of the record type `rt` from a value's bytes.
    fn decode(&self, bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String>;

    /// Only the fields at `want` (indexes into `rt`), the others skipped where the format can:
    /// a record's key and time, read before its task decodes it in full. None where absent or
    /// not wanted.
    fn decode_some(&self, bytes: &[u8], rt: &RecordType, want: &[usize]) -> Result<Vec<Option<Value>>, String> {
        let all = self.decode(bytes, rt)?;
        Ok(all.into_iter().enumerate().map(|(i, v)| want.contains(&i).then_some(v)).collect())
    }

    /// Append a row's fields (of `rt`) as a value to `out`, with the row's tenant (raw bytes)
    /// as a last field where there is one. False: the row has no value (a null `string`).
    fn encode(
        &self,
        values: &[Value],
        rt: &RecordType,
        tenant: Option<&[u8]>,
        target: Target,
        out: &mut Vec<u8>,
    ) -> Result<bool, String>;

    /// The schema (its text, as registered) of values of `rt` written to `topic`: an Avro
    /// record's JSON, or a proto3 file; None for a format without a registry.
    fn schema_text(&self, _rt: &RecordType, _topic: &str) -> Option<String> {
        None
    }

    /// The schema (its text) of keys of the scalar type `ty`, named `field`, written to
    /// `topic`; None for a format without a registry.
    fn key_schema_text(&self, _ty: &Type, _topic: &str, _field: &str) -> Option<String> {
        None
    }

    /// A key framed in the Confluent wire format, decoded to the scalar type `ty` with the
    /// writer schema its id names.
    fn decode_key(&self, _bytes: &[u8], _ty: &Type) -> Result<Value, String> {
        Err("keys in this format are text".into())
    }

    /// Whether the writer schema `id` (a registry's) is known to this format's decoder.
    fn writer_known(&self, _id: u32) -> bool {
        false
    }

    /// Keep the registry's text of writer schema `id` for this format's decoder; a text that
    /// does not compile as one of this format is kept as unusable (records naming it are dead
    /// letters), and why is returned.
    fn remember_writer(&self, _id: u32, _text: Option<&str>) -> Result<(), String> {
        Ok(())
    }

    /// Whether `text` is a valid schema of this format (before it is registered for a sink).
    fn check_schema(&self, _text: &str) -> Result<(), String> {
        Ok(())
    }

    /// Keep a sink's schema `text`, registered under `subject` as `id`, for its encoder.
    fn keep_schema(&self, _subject: &str, _text: &str, _id: u32) {}

    /// A key of the scalar type `ty` framed for `target`, whose schema is a key schema (see
    /// [`ValueFormat::key_schema_text`]) registered under `<topic>-key`.
    fn encode_key(&self, _key: &Value, _ty: &Type, _target: Target) -> Result<Vec<u8>, String> {
        Err("keys in this format are text".into())
    }
}

/// `format`'s [`ValueFormat`], given to `f` (the one place a format is matched to its module).
pub fn with<R>(format: Format, f: impl FnOnce(&dyn ValueFormat) -> R) -> R {
    match format {
        Format::Json => f(&json::Json),
        Format::String => f(&string::Text),
        Format::Csv(delimiter) => f(&csv::Csv(delimiter)),
        Format::Avro => f(&avro::Avro),
        Format::Protobuf => f(&protobuf::Protobuf),
    }
}

/// A source's value as queries see it: decoded by its format, the tenant field removed.
pub fn decode_visible(src: &hir::Source, bytes: &[u8]) -> Result<Vec<Value>, String> {
    Ok(decode_tenanted(src, bytes)?.0)
}

/// A source's value as queries see it and, when the tenant is one of its fields, that field's
/// value (taken out of the record).
pub fn decode_tenanted(src: &hir::Source, bytes: &[u8]) -> Result<(Vec<Value>, Option<Value>), String> {
    let mut fields = with(src.format, |f| f.decode(bytes, &src.wire))?;
    if let Some(hir::TenantSpec::Field(f)) = &src.tenant {
        if let Some(i) = src.wire.index_of(f) {
            let tenant = fields.remove(i);
            return Ok((fields, Some(tenant)));
        }
    }
    Ok((fields, None))
}

/// Only the fields of a source's wire value at `want` (see [`ValueFormat::decode_some`]).
pub fn decode_some(src: &hir::Source, bytes: &[u8], want: &[usize]) -> Result<Vec<Option<Value>>, String> {
    with(src.format, |f| f.decode_some(bytes, &src.wire, want))
}

/// A value in `format` decoded to `rt` (a registry format's: with the writer schema its id
/// names).
pub fn decode(format: Format, bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
    with(format, |f| f.decode(bytes, rt))
}

/// See [`ValueFormat::schema_text`].
pub fn schema_text(format: Format, rt: &RecordType, topic: &str) -> Option<String> {
    with(format, |f| f.schema_text(rt, topic))
}

/// See [`ValueFormat::key_schema_text`].
pub fn key_schema_text(format: Format, ty: &Type, topic: &str, field: &str) -> Option<String> {
    with(format, |f| f.key_schema_text(ty, topic, field))
}

/// See [`ValueFormat::decode_key`].
pub fn decode_key(format: Format, bytes: &[u8], ty: &Type) -> Result<Value, String> {
    with(format, |f| f.decode_key(bytes, ty))
}

/// See [`ValueFormat::encode_key`].
pub fn encode_key(format: Format, key: &Value, ty: &Type, target: Target) -> Result<Vec<u8>, String> {
    with(format, |f| f.encode_key(key, ty, target))
}

/// The fields of `rt` encoded in `format` for `target` (see [`ValueFormat::encode`]), no
/// tenant; None for a row with no value.
pub fn encode(format: Format, values: &[Value], rt: &RecordType, target: Target) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    Ok(with(format, |f| f.encode(values, rt, None, target, &mut out))?.then_some(out))
}

/// Reads one field of a source's values alone (its event time, before its task decodes the
/// record in full).
#[derive(Clone, Debug)]
pub struct FieldReader {
    format: Format,
    /// JSON: a record type of the one field (members are found by name); else the source's
    /// wire type.
    rt: RecordType,
    column: usize,
}

impl FieldReader {
    /// The reader of `field` of a source's wire values `wire` in `format`; None for a format
    /// whose value is not a record of fields (`string`).
    pub fn new(format: Format, wire: &RecordType, field: &(String, Type)) -> Option<FieldReader> {
        match format {
            Format::String => None,
            Format::Json => Some(FieldReader { format, rt: RecordType { fields: vec![field.clone()] }, column: 0 }),
            _ => Some(FieldReader { format, rt: wire.clone(), column: wire.index_of(&field.0)? }),
        }
    }

    /// The field's value in a record's value, if it decodes.
    pub fn read(&self, value: &[u8]) -> Option<Value> {
        match self.format {
            Format::Json => decode(self.format, value, &self.rt).ok()?.into_iter().next(),
            _ => with(self.format, |f| f.decode_some(value, &self.rt, &[self.column]))
                .ok()?
                .into_iter()
                .nth(self.column)?,
        }
    }
}

/// A sink's encoder of rows: its format, value type and target, made once per sink.
pub struct RowEncoder {
    format: Format,
    rt: RecordType,
    topic: String,
    schema: String,
    /// JSON: each field's `"name":`, escaped once.
    json: Option<json::RecordWriter>,
}

impl RowEncoder {
    /// Rows of `rt` written to `topic` in `format` (a registry format's with the schema `schema`
    /// registered for the topic).
    pub fn new(format: Format, rt: &RecordType, topic: &str, schema: Option<&str>) -> RowEncoder {
        RowEncoder {
            format,
            rt: rt.clone(),
            topic: topic.to_string(),
            schema: schema.unwrap_or_default().to_string(),
            json: (format == Format::Json).then(|| json::RecordWriter::new(rt)),
        }
    }

    /// Append a row's value to `out` as it travels through the topic (see [`wire_row`]), its
    /// tenant as a last field where it has one. False: the row has no value.
    pub fn encode(&self, row: &Row, out: &mut Vec<u8>) -> Result<bool, String> {
        if let Some(w) = &self.json {
            // Straight from the row (nothing joined), the names written as they are.
            w.write_row(row, &self.rt, out);
            if let Some(t) = &row.tenant {
                json::add_tenant(t, out);
            }
            return Ok(true);
        }
        let joined;
        let values = match row.joined.is_empty() {
            true => &row.value[..],
            false => {
                joined = wire_row(row, &self.rt);
                &joined[..]
            }
        };
        let target = Target { topic: &self.topic, schema: &self.schema };
        with(self.format, |f| f.encode(values, &self.rt, row.tenant.as_deref(), target, out))
    }
}

/// The row as it travels through a topic (see `plan::wire_value`): the value, then each joined
/// side as a record with its named key last when the key is not one of its fields.
pub fn wire_row(row: &Row, wire: &RecordType) -> Vec<Value> {
    let mut all = row.value.clone();
    for j in &row.joined {
        let i = all.len();
        all.push(match j {
            Some((jk, jv)) => {
                let mut r = (**jv).clone();
                let with_key = matches!(wire.fields.get(i).map(|f| f.1.base()), Some(Type::Record(rt)) if rt.fields.len() > r.len());
                if with_key {
                    r.push(jk.clone());
                }
                Value::Record(Arc::new(r))
            }
            None => Value::Null,
        });
    }
    all
}
