//! Rows as records: how a row travels through a repartition topic or a join store (its value,
//! then each joined side), key bytes scoped to a tenant, and keys read back from bytes.

use std::sync::Arc;

use crate::eval::Tenant;
use crate::runtime::op::RecordError;
use crate::runtime::tenant;
use crate::types::Type;
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

/// Decode a source record's key of the given type: as the source declares its keys (`key …
/// avro|protobuf`: in the Confluent wire format), else as text ([`decode_key`]).
pub fn decode_source_key(src: &crate::hir::Source, bytes: Option<&[u8]>, ty: &Type) -> Result<Value, RecordError> {
    match (src.key_format, bytes) {
        (Some(format), Some(b)) => {
            crate::format::decode_key(format, b, ty).map_err(|e| RecordError(format!("bad key: {e}")))
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
