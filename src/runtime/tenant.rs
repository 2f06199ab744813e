//! Tenant scoping: how a record's tenant is found, how it scopes state keys, and how it
//! appears in outputs.
//!
//! A tenant-scoped state key is the tenant id's length (4 bytes, big-endian), the id, then the
//! key's bytes. Decoding reads the length first, so the pair (tenant, key) is recovered exactly
//! from the bytes: no two different pairs share an encoding, whatever bytes the id holds (empty,
//! a prefix of another id, separators, NUL, invalid UTF-8) — unlike `tenant + ":" + key`, where
//! ("a", ":b") and ("a:", "b") collide. ARCHITECTURE.md says why this encoding and not a tree per
//! tenant.

use std::sync::Arc;

use crate::eval::Tenant;
use crate::hir::{Source, TenantSpec};
use crate::record::Record;
use crate::value::Value;

/// Header that carries the tenant through internal topics and on outputs (docs/conventions.md).
pub use crate::control::H_TENANT;

/// Longest tenant id accepted (a record with a longer one is bad input).
pub const MAX_TENANT: usize = 1 << 20;

pub use crate::format::scoped::{prefix, scope, split, write_json};

/// The tenant of a record of `src` (a tenant-scoped stream or table), given the value of its
/// tenant field as decoded (None: the record has no value). A record without one is bad input.
pub fn of_record(src: &Source, field: Option<&Value>, rec: &Record) -> Result<Tenant, String> {
    match &src.tenant {
        None => Err("the source declares no tenant".into()),
        Some(TenantSpec::Field(f)) => match field {
            Some(Value::Str(s)) => checked(s.as_bytes()),
            Some(Value::Null) => Err(format!("the record has no tenant: its tenant field `{f}` is missing or null")),
            Some(v) => Err(format!("the tenant field `{f}` is not a string: {v}")),
            // A deletion (no value) of a table names its tenant in the header instead.
            None => match header(rec, H_TENANT) {
                Some(t) => checked(t),
                None => {
                    Err(format!("the record has no tenant: no value (so no field `{f}`) and no `{H_TENANT}` header"))
                }
            },
        },
        Some(TenantSpec::Header(h)) => match header(rec, h) {
            Some(t) => checked(t),
            None => Err(format!("the record has no tenant: no `{h}` header")),
        },
    }
}

/// The tenant of a record of an internal (repartition) topic: its `streamc.tenant` header.
pub fn of_internal(rec: &Record) -> Result<Tenant, String> {
    match header(rec, H_TENANT) {
        Some(t) => checked(t),
        None => Err(format!("a record of a tenant-scoped repartition topic has no `{H_TENANT}` header")),
    }
}

fn header<'a>(rec: &'a Record, name: &str) -> Option<&'a [u8]> {
    rec.headers.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_slice())
}

/// A tenant id as found in a record, if it is not too long.
pub fn checked(t: &[u8]) -> Result<Tenant, String> {
    if t.len() > MAX_TENANT {
        return Err(format!("the tenant id is {} bytes long (at most {MAX_TENANT})", t.len()));
    }
    Ok(Arc::from(t))
}

/// A tenant id as a metrics label or in a message: its text when UTF-8, else `0x` and hex; an id
/// longer than 128 bytes is cut to its first 64 and a hash of the whole (labels stay small).
pub fn display(t: &[u8]) -> String {
    let text = |t: &[u8]| match std::str::from_utf8(t) {
        Ok(s) => s.to_string(),
        Err(_) => format!("0x{}", hex::encode(t)),
    };
    if t.len() <= 128 {
        return text(t);
    }
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same label for the same id in every process.
    let mut h = std::hash::DefaultHasher::new();
    t.hash(&mut h);
    let cut = (0..=64).rev().find(|&i| std::str::from_utf8(&t[..i]).is_ok()).unwrap_or(0);
    let head = if cut > 0 { text(&t[..cut]) } else { text(&t[..64]) };
    format!("{head}…({} bytes, {:016x})", t.len(), h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_keys_split_back_exactly() {
        let ids: [&[u8]; 6] = [b"", b"a", b"a:", b"a\0", b"\xff\xfe", b"ab"];
        let keys: [&[u8]; 4] = [b"", b":b", b"b", b"\0\0\0\x01a"];
        let mut seen = std::collections::BTreeMap::new();
        for t in ids {
            for k in keys {
                let s = scope(t, k);
                assert_eq!(split(&s), Some((t, k)));
                assert!(s.starts_with(&prefix(t)));
                // No other tenant's prefix matches this key.
                for u in ids.iter().filter(|u| **u != t) {
                    assert!(!s.starts_with(&prefix(u)), "{t:?} {k:?} starts with the prefix of {u:?}");
                }
                assert_eq!(seen.insert(s, (t, k)), None);
            }
        }
    }

    #[test]
    fn tenants_print_distinctly_in_json() {
        let mut a = Vec::new();
        write_json(b"\xff", &mut a);
        assert_eq!(a, b"[255]");
        let mut b = Vec::new();
        write_json(b"[255]", &mut b);
        assert_eq!(b, b"\"[255]\"");
    }
}
