//! Record bytes ↔ values, independent of any backend: a source's value decoded by its
//! format, and the scoped key bytes that keep tenants' state apart (see
//! ARCHITECTURE.md, "Tenants: how state is scoped").

use crate::ast::Format;
use crate::hir;
use crate::types::{RecordType, Type};
use crate::value::{decode_record, Value};

/// `key` scoped to `tenant`: length, id, key.
pub fn scope(tenant: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + tenant.len() + key.len());
    k.extend_from_slice(&(tenant.len() as u32).to_be_bytes());
    k.extend_from_slice(tenant);
    k.extend_from_slice(key);
    k
}

/// The (tenant, key) of a scoped key; None if the bytes are not one.
pub fn split(scoped: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u32::from_be_bytes(scoped.get(..4)?.try_into().ok()?) as usize;
    let rest = &scoped[4..];
    (rest.len() >= n).then(|| rest.split_at(n))
}

/// The prefix every key scoped to `tenant` starts with, and no other key does.
pub fn prefix(tenant: &[u8]) -> Vec<u8> {
    scope(tenant, &[])
}

/// A source's value as queries see it: decoded by its format, the tenant field removed.
pub fn decode_visible(src: &hir::Source, bytes: &[u8]) -> Result<Vec<Value>, String> {
    Ok(decode_tenanted(src, bytes)?.0)
}

/// A source's value as queries see it and, when the tenant is one of its fields, that field's
/// value (taken out of the record).
pub fn decode_tenanted(src: &hir::Source, bytes: &[u8]) -> Result<(Vec<Value>, Option<Value>), String> {
    let mut fields = match src.format {
        Format::Json => decode_record(bytes, &src.wire)?,
        Format::String => vec![Value::str(&String::from_utf8_lossy(bytes))],
        Format::Csv(d) => crate::delimited::decode(bytes, &src.wire, d)?,
        Format::Avro => crate::avro::decode(bytes, &src.wire)?,
        Format::Protobuf => crate::protobuf::decode(bytes, &src.wire)?,
    };
    if let Some(hir::TenantSpec::Field(f)) = &src.tenant {
        if let Some(i) = src.wire.index_of(f) {
            let tenant = fields.remove(i);
            return Ok((fields, Some(tenant)));
        }
    }
    Ok((fields, None))
}

/// Only the fields of a source's wire value at `want` (indexes into `src.wire`), the others
/// skipped: a record's key and time, read before its task decodes it in full. None where absent
/// or not wanted. A `string` value is its one field.
pub fn decode_some(src: &hir::Source, bytes: &[u8], want: &[usize]) -> Result<Vec<Option<Value>>, String> {
    match src.format {
        Format::Json => crate::value::decode_fields(bytes, &src.wire, want),
        Format::String => Ok(vec![Some(Value::str(&String::from_utf8_lossy(bytes)))]),
        Format::Csv(d) => crate::delimited::decode_some(bytes, &src.wire, d, want),
        Format::Avro | Format::Protobuf => {
            let all = decode_registered(src.format, bytes, &src.wire)?;
            Ok(all.into_iter().enumerate().map(|(i, v)| want.contains(&i).then_some(v)).collect())
        }
    }
}

/// A value framed in the Confluent wire format (`format` is Avro or Protobuf), decoded to `rt`
/// with the writer schema its id names.
pub fn decode_registered(format: Format, bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
    match format {
        Format::Protobuf => crate::protobuf::decode(bytes, rt),
        _ => crate::avro::decode(bytes, rt),
    }
}

/// The schema (its text, as registered) of values of `rt` written to `topic` in a registry
/// format: an Avro record's JSON, or a proto3 file; None for the other formats.
pub fn schema_text(format: Format, rt: &RecordType, topic: &str) -> Option<String> {
    let name = crate::avro::record_name(topic);
    match format {
        Format::Avro => Some(crate::avro::schema_json(rt, &name).to_string()),
        Format::Protobuf => Some(crate::protobuf::schema_text(rt, &name)),
        _ => None,
    }
}

/// A key framed in the Confluent wire format (`format` is Avro or Protobuf), decoded to the
/// scalar type `ty` with the writer schema its id names.
pub fn decode_registered_key(format: Format, bytes: &[u8], ty: &Type) -> Result<Value, String> {
    match format {
        Format::Protobuf => crate::protobuf::decode_key(bytes, ty),
        _ => crate::avro::decode_key(bytes, ty),
    }
}

/// The schema (its text) of keys of the scalar type `ty`, named `field`, written to `topic` in a
/// registry format; None for the other formats.
pub fn key_schema_text(format: Format, ty: &Type, topic: &str, field: &str) -> Option<String> {
    match format {
        Format::Avro => Some(crate::avro::key_schema_json(ty)),
        Format::Protobuf => Some(crate::protobuf::key_schema_text(ty, &crate::avro::record_name(topic), field)),
        _ => None,
    }
}

/// A key of the scalar type `ty` framed for `topic` in a registry format, with the schema `text`
/// (see [`key_schema_text`]) registered under `<topic>-key`.
pub fn encode_registered_key(
    format: Format,
    topic: &str,
    text: &str,
    key: &Value,
    ty: &Type,
) -> Result<Vec<u8>, String> {
    match format {
        Format::Protobuf => crate::protobuf::encode_key(topic, text, key, ty),
        _ => crate::avro::encode_key(topic, text, key, ty),
    }
}

/// A row of `rt` framed for `topic` in a registry format, with the schema `text` (see
/// [`schema_text`]) registered for it.
pub fn encode_registered(
    format: Format,
    topic: &str,
    text: &str,
    values: &[Value],
    rt: &RecordType,
) -> Result<Vec<u8>, String> {
    match format {
        Format::Protobuf => crate::protobuf::encode(topic, text, values, rt),
        _ => crate::avro::encode(topic, text, values, rt),
    }
}
