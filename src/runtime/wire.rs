//! Rows as records: how a row travels through a repartition topic or a join store (its value,
//! then each joined side), key bytes scoped to a tenant, and keys read back from bytes.

use std::sync::Arc;

use crate::eval::{Row, Tenant};
use crate::runtime::op::RecordError;
use crate::runtime::tenant;
use crate::types::{RecordType, Type};
use crate::value::{decode_value, Value};

/// The tenant and the key of a key's bytes as a tenant-scoped task stores them (`scoped`), or
/// the bytes as they are.
pub(crate) fn unscope(kb: &[u8], scoped: bool) -> Result<(Option<Tenant>, &[u8]), String> {
    if !scoped {
        return Ok((None, kb));
    }
    let (t, k) = tenant::split(kb).ok_or("a damaged tenant-scoped key")?;
    Ok((Some(Arc::from(t)), k))
}

/// A row read back from its wire layout: `nvalue` value fields, then each joined side as a
/// record carrying its key last when `joined_keys` says so.
pub(crate) type Joined = Vec<Option<(Value, Arc<Vec<Value>>)>>;

pub(crate) fn split_wire(mut fields: Vec<Value>, nvalue: usize, joined_keys: &[bool]) -> (Vec<Value>, Joined) {
    let n = nvalue.min(fields.len());
    let rest = fields.split_off(n);
    let joined = rest
        .into_iter()
        .zip(joined_keys.iter().chain(std::iter::repeat(&false)))
        .map(|(v, has_key)| match v {
            Value::Record(r) => {
                let mut r = (*r).clone();
                let k = if *has_key { r.pop().unwrap_or(Value::Null) } else { Value::Null };
                Some((k, Arc::new(r)))
            }
            _ => None,
        })
        .collect();
    (fields, joined)
}

pub(crate) fn write_record(fields: &[Value], rt: &RecordType, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (v, (n, t))) in fields.iter().zip(&rt.fields).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        crate::value::write_str(n, out);
        out.push(b':');
        v.write_json(t, out);
    }
    out.push(b'}');
}

/// Writes rows of one record type as JSON objects, as [`write_record`] does, with each field's
/// `"name":` escaped once, not per row (a sink writes every result through one).
pub(crate) struct RecordWriter {
    /// Per field: `"name":`.
    names: Vec<Vec<u8>>,
}

impl RecordWriter {
    pub(crate) fn new(rt: &RecordType) -> RecordWriter {
        let names = rt
            .fields
            .iter()
            .map(|(n, _)| {
                let mut b = Vec::with_capacity(n.len() + 3);
                crate::value::write_str(n, &mut b);
                b.push(b':');
                b
            })
            .collect();
        RecordWriter { names }
    }

    /// A row as it travels through a topic (see [`wire_row`]), of the type this writer was
    /// made for.
    pub(crate) fn write_row(&self, row: &Row, rt: &RecordType, out: &mut Vec<u8>) {
        if !row.joined.is_empty() {
            return write_record(&wire_row(row, rt), rt, out);
        }
        out.push(b'{');
        for (i, ((v, name), (_, t))) in row.value.iter().zip(&self.names).zip(&rt.fields).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(name);
            v.write_json(t, out);
        }
        out.push(b'}');
    }
}

/// Write a row as it travels through a topic (see [`wire_row`]): straight from the row when
/// nothing is joined to it.
pub(crate) fn write_row(row: &Row, wire: &RecordType, out: &mut Vec<u8>) {
    if row.joined.is_empty() {
        write_record(&row.value, wire, out);
    } else {
        write_record(&wire_row(row, wire), wire, out);
    }
}

/// The row as it travels through a topic (see [`plan::wire_value`]): the value, then each joined
/// side as a record with its named key last when the key is not one of its fields.
pub(crate) fn wire_row(row: &Row, wire: &RecordType) -> Vec<Value> {
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

/// Decode a source record's key of the given type: as the source declares its keys (`key …
/// avro|protobuf`: in the Confluent wire format), else as text ([`decode_key`]).
pub fn decode_source_key(src: &crate::hir::Source, bytes: Option<&[u8]>, ty: &Type) -> Result<Value, RecordError> {
    match (src.key_format, bytes) {
        (Some(format), Some(b)) => {
            crate::codec::decode_registered_key(format, b, ty).map_err(|e| RecordError(format!("bad key: {e}")))
        }
        _ => decode_key(bytes, ty),
    }
}

/// Decode a record key of the given type: a string key is its raw UTF-8, others JSON.
pub fn decode_key(bytes: Option<&[u8]>, ty: &Type) -> Result<Value, RecordError> {
    match (bytes, ty.base()) {
        (None, _) => Ok(Value::Null),
        (Some(b), Type::String) => {
            std::str::from_utf8(b).map(Value::str).map_err(|_| RecordError("the key is not UTF-8".into()))
        }
        (Some(b), t) => decode_value(b, t).map_err(|e| RecordError(format!("bad key: {e}"))),
    }
}
