//! Runtime values, and their JSON forms. A record's JSON is decoded once, straight into
//! positional fields by the declared schema (no intermediate JSON tree, no name lookups after
//! decoding).

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::types::{RecordType, Type};

/// The most items a list made by `+` (or entries a map made by a function) may hold: a
/// user-defined aggregate's growing state stops with an error (the record is a dead letter
/// with the reason) rather than growing without end.
pub const MAX_LIST: usize = 10_000;

#[derive(Clone, Debug, Default, PartialEq)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Arc<str>),
    /// Epoch milliseconds.
    Ts(i64),
    /// Milliseconds.
    Dur(i64),
    List(Arc<Vec<Value>>),
    /// Positional: field `i` of the record type.
    Record(Arc<Vec<Value>>),
    /// Entries sorted by key ([`Value::cmp_total`]), keys distinct: built by [`Value::map`].
    Map(Arc<Vec<(Value, Value)>>),
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    /// A map of these entries: sorted by key, and of entries with equal keys the last one kept
    /// (as a JSON object's repeated member and SQL's map constructors do).
    pub fn map(mut entries: Vec<(Value, Value)>) -> Value {
        // Stable: entries with equal keys stay in the order given.
        entries.sort_by(|a, b| a.0.cmp_total(&b.0));
        let mut out: Vec<(Value, Value)> = Vec::with_capacity(entries.len());
        for e in entries {
            match out.last_mut() {
                Some(last) if last.0.equals(&e.0) => *last = e,
                _ => out.push(e),
            }
        }
        Value::Map(Arc::new(out))
    }

    /// The value at `key` in a map (None: no such key, or not a map).
    pub fn map_get(&self, key: &Value) -> Option<&Value> {
        match self {
            Value::Map(es) => es.binary_search_by(|(k, _)| k.cmp_total(key)).ok().map(|i| &es[i].1),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A total order used by `min`, `max`, comparisons and sorting: numbers compare by value
    /// (int against float as floats), otherwise values of one type compare naturally.
    pub fn cmp_total(&self, other: &Value) -> Ordering {
        use Value::*;
        match (self, other) {
            (Int(a), Int(b)) => a.cmp(b),
            (Float(a), Float(b)) => a.total_cmp(b),
            (Int(a), Float(b)) => (*a as f64).total_cmp(b),
            (Float(a), Int(b)) => a.total_cmp(&(*b as f64)),
            (Str(a), Str(b)) => a.cmp(b),
            (Ts(a), Ts(b)) | (Dur(a), Dur(b)) => a.cmp(b),
            (Bool(a), Bool(b)) => a.cmp(b),
            (Null, Null) => Ordering::Equal,
            (Null, _) => Ordering::Less,
            (_, Null) => Ordering::Greater,
            (List(a), List(b)) | (Record(a), Record(b)) => {
                for (x, y) in a.iter().zip(b.iter()) {
                    match x.cmp_total(y) {
                        Ordering::Equal => {}
                        o => return o,
                    }
                }
                a.len().cmp(&b.len())
            }
            (Map(a), Map(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b.iter()) {
                    match ka.cmp_total(kb).then_with(|| va.cmp_total(vb)) {
                        Ordering::Equal => {}
                        o => return o,
                    }
                }
                a.len().cmp(&b.len())
            }
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Float(_) => 2,
            Value::Str(_) => 3,
            Value::Ts(_) => 4,
            Value::Dur(_) => 5,
            Value::List(_) => 6,
            Value::Record(_) => 7,
            Value::Map(_) => 8,
        }
    }

    /// Equality as the language defines it (`==`): numbers by value, null equals null.
    pub fn equals(&self, other: &Value) -> bool {
        self.cmp_total(other) == Ordering::Equal
    }

    /// Append this value's JSON to `out` directly (no intermediate tree): the hot path of
    /// every output, repartition and changelog record.
    pub fn write_json(&self, ty: &Type, out: &mut Vec<u8>) {
        match (self, ty.base()) {
            (Value::Null, _) => out.extend_from_slice(b"null"),
            (Value::Bool(b), _) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            (Value::Int(i), _) | (Value::Ts(i), _) | (Value::Dur(i), _) => {
                out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes())
            }
            (Value::Float(f), _) => {
                if f.is_finite() {
                    write_float(*f, out);
                } else {
                    out.extend_from_slice(b"null");
                }
            }
            (Value::Str(s), _) => write_str(s, out),
            (Value::List(items), t) => {
                out.push(b'[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let et = match t {
                        Type::List(e) => e.as_ref(),
                        Type::Tuple(ts) => ts.get(i).unwrap_or(&Type::Error),
                        _ => &Type::Error,
                    };
                    v.write_json(et, out);
                }
                out.push(b']');
            }
            (Value::Record(fields), Type::Record(rt)) => {
                out.push(b'{');
                for (i, (v, (n, t))) in fields.iter().zip(&rt.fields).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(n, out);
                    out.push(b':');
                    v.write_json(t, out);
                }
                out.push(b'}');
            }
            (Value::Record(fields), _) => Value::List(fields.clone()).write_json(&Type::Error, out),
            (Value::Map(entries), t) => {
                let (kt, vt) = match t {
                    Type::Map(k, v) => (k.base(), v.as_ref()),
                    _ => (&Type::Error, &Type::Error),
                };
                out.push(b'{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    match k {
                        Value::Str(s) => write_str(s, out),
                        k => {
                            // A member name is a string: a scalar key's JSON text, quoted (an
                            // int key of a float map as the float it stands for: `1.0`, as a
                            // float key equal to it is written).
                            out.push(b'"');
                            match (k, kt) {
                                (Value::Int(i), Type::Float) => Value::Float(*i as f64).write_json(kt, out),
                                _ => k.write_json(&Type::Error, out),
                            }
                            out.push(b'"');
                        }
                    }
                    out.push(b':');
                    v.write_json(vt, out);
                }
                out.push(b'}');
            }
        }
    }

    /// The text of a key, as docs/conventions.md says: a string is its raw UTF-8, other scalars their
    /// JSON text, a composite key a compact JSON array.
    pub fn key_bytes(&self, ty: &Type) -> Vec<u8> {
        match self {
            Value::Str(s) => s.as_bytes().to_vec(),
            v => {
                let mut out = Vec::with_capacity(16);
                v.write_json(ty, &mut out);
                out
            }
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
            Value::Ts(t) => write!(f, "{t}"),
            Value::Dur(d) => write!(f, "{d}ms"),
            Value::List(items) | Value::Record(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{k}:{v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// A map key of type `ty` from a JSON object's member name: a string as it is, another scalar
/// read from its JSON text (a timestamp also from RFC 3339).
pub(crate) fn map_key(name: &str, ty: &Type) -> Result<Value, String> {
    let bad = || format!("member name `{name}` is not a map key of type {ty}");
    match ty.base() {
        Type::String => Ok(Value::str(name)),
        Type::Int => name.parse().map(Value::Int).map_err(|_| bad()),
        Type::Float => name.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::Float).ok_or_else(bad),
        Type::Bool => match name {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(bad()),
        },
        Type::Timestamp => name.parse().ok().or_else(|| parse_rfc3339(name)).map(Value::Ts).ok_or_else(bad),
        Type::Duration => name.parse().map(Value::Dur).map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// A finite float's shortest round-trip decimal, as streamc has always written it (ryu's form:
/// `1e16`, `1.5e-7`, `0.1`). zmij finds the same digits in about 2.5x fewer instructions but writes a
/// positive exponent as `e+16`; the `+` is dropped.
pub(crate) fn write_float(f: f64, out: &mut Vec<u8>) {
    let mut b = zmij::Buffer::new();
    let s = b.format_finite(f).as_bytes();
    match s.iter().position(|&c| c == b'+') {
        Some(i) => {
            out.extend_from_slice(&s[..i]);
            out.extend_from_slice(&s[i + 1..]);
        }
        None => out.extend_from_slice(s),
    }
}

pub(crate) fn write_str(s: &str, out: &mut Vec<u8>) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        // Nothing to escape (the common case: field names, tickers): copied as is.
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // serde_json's escaping, written straight into the buffer.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// An object key, borrowed from the input when it has no escapes (no allocation per field).
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Decode a JSON document into a record of type `rt`.
pub fn decode_record(bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
    if let Some(v) = flat::record(bytes, rt) {
        return Ok(v);
    }
    // JSON text is UTF-8 throughout: serde_json checks the strings it reads, not those of the
    // members it skips (fields the program does not declare).
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(format!("invalid UTF-8 at byte {}: JSON text must be UTF-8", e.valid_up_to()));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    FAILED_FIELD.with(|f| f.borrow_mut().clear());
    let v = RecordSeed(rt).deserialize(&mut de).map_err(field_error)?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

thread_local! {
    /// The field path of the value a record's decoding failed in, innermost first (see
    /// [`field_error`]).
    static FAILED_FIELD: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A record's decoding error as a dead letter's reason: a value of the wrong type names its
/// field (`price: expected float, found a string`, `order.total: …` nested) instead of where
/// it is in the text; a document that is not JSON keeps its line and column.
fn field_error(e: serde_json::Error) -> String {
    let path: Vec<String> = FAILED_FIELD.with(|f| std::mem::take(&mut *f.borrow_mut()));
    if path.is_empty() || e.is_syntax() || e.is_eof() {
        return e.to_string();
    }
    let text = e.to_string();
    let message = match text.rfind(" at line ") {
        Some(i) if text[i..].contains(" column ") => &text[..i],
        _ => text.as_str(),
    };
    let field: Vec<&str> = path.iter().rev().map(String::as_str).collect();
    format!("{}: {message}", field.join("."))
}

/// Decode only the fields of a JSON record at `want` (indexes into `rt`): the others are
/// skipped as JSON, their types not checked. Returns those fields' values, in `rt`'s order
/// (None where absent). Used where a record's key and time are needed before its task decodes
/// it in full.
pub fn decode_fields(bytes: &[u8], rt: &RecordType, want: &[usize]) -> Result<Vec<Option<Value>>, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = de::Deserializer::deserialize_map(&mut de, FieldsVisitor(rt, want)).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

struct FieldsVisitor<'a>(&'a RecordType, &'a [usize]);

impl<'de> Visitor<'de> for FieldsVisitor<'_> {
    type Value = Vec<Option<Value>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a JSON object {}", self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (rt, want) = (self.0, self.1);
        let mut out: Vec<Option<Value>> = vec![None; rt.fields.len()];
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            match rt.index_of(&k).filter(|i| want.contains(i)) {
                Some(i) => out[i] = Some(map.next_value_seed(TypeSeed(&rt.fields[i].1))?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// Decode one JSON value of type `ty` (used for keys and for state in changelogs).
pub fn decode_value(bytes: &[u8], ty: &Type) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = TypeSeed(ty).deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

/// Parse a timestamp given as an RFC 3339 string.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    // YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM]
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(3).collect();
        ms = digits.parse().ok()?;
    }
    let offset_min = match &s[i..] {
        "Z" | "z" => 0,
        rest if rest.len() == 6
            && rest.is_ascii()
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest[1..3].parse::<i64>().ok()? * 60 + rest[4..6].parse::<i64>().ok()?)
        }
        _ => return None,
    };
    // Days from civil (Howard Hinnant's algorithm).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = if yy >= 0 { yy } else { yy - 399 } / 400;
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3_600 + mi * 60 + sec - offset_min * 60) * 1_000) + ms)
}

struct RecordSeed<'a>(&'a RecordType);
struct TypeSeed<'a>(&'a Type);

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = Vec<Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(RecordVisitor(self.0))
    }
}

struct RecordVisitor<'a>(&'a RecordType);

impl<'de> Visitor<'de> for RecordVisitor<'_> {
    type Value = Vec<Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a JSON object {}", self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let rt = self.0;
        let n = rt.fields.len();
        // Values go straight to their place; which fields came is a bit set (a vector of flags
        // past 64 fields). Producers mostly write fields in the declared order: the field after
        // the last one is tried first.
        let mut out: Vec<Value> = vec![Value::Null; n];
        let mut seen_bits = 0u64;
        let mut seen_more = if n > 64 { vec![false; n] } else { Vec::new() };
        let mut next = 0;
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let i = match rt.fields.get(next) {
                Some((name, _)) if *name == *k => Some(next),
                _ => rt.index_of(&k),
            };
            match i {
                Some(i) => {
                    out[i] = map.next_value_seed(TypeSeed(&rt.fields[i].1)).inspect_err(|_| {
                        FAILED_FIELD.with(|f| f.borrow_mut().push(rt.fields[i].0.clone()));
                    })?;
                    if n > 64 {
                        seen_more[i] = true;
                    } else {
                        seen_bits |= 1 << i;
                    }
                    next = i + 1;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        for (i, (name, t)) in rt.fields.iter().enumerate() {
            let seen = if n > 64 { seen_more[i] } else { seen_bits & (1 << i) != 0 };
            if !seen && !t.is_nullable() {
                return Err(de::Error::custom(format_args!("missing field `{name}`")));
            }
        }
        Ok(out)
    }
}

impl<'de> DeserializeSeed<'de> for TypeSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.0.base() {
            Type::Record(rt) => {
                let nullable = self.0.is_nullable();
                d.deserialize_any(NullableRecord(rt, nullable))
            }
            _ => d.deserialize_any(ScalarVisitor(self.0)),
        }
    }
}

struct NullableRecord<'a>(&'a RecordType, bool);

impl<'de> Visitor<'de> for NullableRecord<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a JSON object {}", self.0)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        if self.1 {
            Ok(Value::Null)
        } else {
            Err(E::custom(format_args!("null where {} is expected", self.0)))
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        RecordVisitor(self.0).visit_map(map).map(|v| Value::Record(Arc::new(v)))
    }
}

struct ScalarVisitor<'a>(&'a Type);

impl ScalarVisitor<'_> {
    fn mismatch<E: de::Error>(&self, got: &str) -> E {
        E::custom(format_args!("expected {}, found {got}", self.0))
    }
}

impl<'de> Visitor<'de> for ScalarVisitor<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value of type {}", self.0)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        if self.0.is_nullable() {
            Ok(Value::Null)
        } else {
            Err(E::custom(format_args!("null where {} is expected", self.0)))
        }
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        match self.0.base() {
            Type::Bool => Ok(Value::Bool(v)),
            _ => Err(self.mismatch("a bool")),
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        match self.0.base() {
            Type::Int => Ok(Value::Int(v)),
            Type::Float => Ok(Value::Float(v as f64)),
            Type::Timestamp => Ok(Value::Ts(v)),
            Type::Duration => Ok(Value::Dur(v)),
            _ => Err(self.mismatch("a number")),
        }
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        match i64::try_from(v) {
            Ok(i) => self.visit_i64(i),
            Err(_) if *self.0.base() == Type::Float => Ok(Value::Float(v as f64)),
            Err(_) => Err(E::custom(format_args!("{v} does not fit in a 64-bit int"))),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        match self.0.base() {
            Type::Float => Ok(Value::Float(v)),
            Type::Int | Type::Timestamp | Type::Duration if v.fract() == 0.0 && v.abs() < 9.0e15 => {
                self.visit_i64(v as i64)
            }
            _ => Err(self.mismatch("a fractional number")),
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        match self.0.base() {
            Type::String => Ok(Value::str(v)),
            Type::Timestamp => parse_rfc3339(v)
                .map(Value::Ts)
                .ok_or_else(|| E::custom(format_args!("`{v}` is not an RFC 3339 timestamp"))),
            _ => Err(self.mismatch("a string")),
        }
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        match self.0.base() {
            Type::List(t) => {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element_seed(TypeSeed(t))? {
                    out.push(v);
                }
                Ok(Value::List(Arc::new(out)))
            }
            Type::Tuple(ts) => {
                let mut out = Vec::with_capacity(ts.len());
                for t in ts {
                    match seq.next_element_seed(TypeSeed(t))? {
                        Some(v) => out.push(v),
                        None => return Err(de::Error::custom("composite key too short")),
                    }
                }
                Ok(Value::List(Arc::new(out)))
            }
            _ => Err(self.mismatch("a list")),
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        match self.0.base() {
            Type::Map(kt, vt) => {
                let mut out = Vec::new();
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let key = map_key(&k, kt).map_err(de::Error::custom)?;
                    out.push((key, map.next_value_seed(TypeSeed(vt))?));
                }
                Ok(Value::map(out))
            }
            _ => Err(self.mismatch("an object")),
        }
    }
}

/// A fast path for the common record: a flat JSON object of scalar members (numbers, strings
/// without escapes, `true`, `false`, `null`) read in one pass without serde. It gives exactly
/// what the serde path ([`RecordVisitor`]) gives for such a record, and declines (None) anything
/// else — nested values, escapes, a number it would have to convert with care, anything not
/// well formed, a missing field, a type mismatch — which the serde path then reads (or refuses
/// with its message).
mod flat {
    use super::{parse_rfc3339, RecordType, Type, Value};

    pub(super) fn record(b: &[u8], rt: &RecordType) -> Option<Vec<Value>> {
        let n = rt.fields.len();
        if n > 64 {
            return None;
        }
        // Checked once: every string and number below is a slice of it.
        let text = std::str::from_utf8(b).ok()?;
        let mut r = Reader { s: text, b, at: 0 };
        r.ws();
        r.eat(b'{')?;
        let mut out = vec![Value::Null; n];
        let mut seen = 0u64;
        let mut next = 0;
        r.ws();
        if r.peek()? == b'}' {
            r.at += 1;
        } else {
            loop {
                r.ws();
                let key = r.string()?;
                r.ws();
                r.eat(b':')?;
                r.ws();
                let i = match rt.fields.get(next) {
                    Some((name, _)) if name == key => Some(next),
                    _ => rt.fields.iter().position(|(name, _)| name == key),
                };
                match i {
                    Some(i) => {
                        out[i] = r.scalar(&rt.fields[i].1)?;
                        seen |= 1 << i;
                        next = i + 1;
                    }
                    None => r.skip_scalar()?,
                }
                r.ws();
                match r.next()? {
                    b',' => continue,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        r.ws();
        if r.at != b.len() {
            return None;
        }
        for (i, (_, t)) in rt.fields.iter().enumerate() {
            if seen & (1 << i) == 0 && !t.is_nullable() {
                return None;
            }
        }
        Some(out)
    }

    /// A number's text and, for an integer that fits, its value.
    struct Number<'a> {
        text: &'a str,
        /// No fraction, no exponent.
        integer: bool,
        /// An integer of at most 18 digits: its value (exact as an i64 and as an f64).
        small: Option<i64>,
    }

    struct Reader<'a> {
        s: &'a str,
        b: &'a [u8],
        at: usize,
    }

    impl<'a> Reader<'a> {
        fn peek(&self) -> Option<u8> {
            self.b.get(self.at).copied()
        }

        fn next(&mut self) -> Option<u8> {
            let c = self.peek()?;
            self.at += 1;
            Some(c)
        }

        fn eat(&mut self, c: u8) -> Option<()> {
            (self.next()? == c).then_some(())
        }

        fn ws(&mut self) {
            while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.at) {
                self.at += 1;
            }
        }

        /// A string without escapes or control characters.
        fn string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.at;
            let rest = self.b.get(start..)?;
            let len = rest.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            if rest[len] != b'"' {
                return None;
            }
            self.at = start + len + 1;
            self.s.get(start..start + len)
        }

        /// A number, as JSON writes one.
        fn number(&mut self) -> Option<Number<'a>> {
            let start = self.at;
            let negative = self.peek() == Some(b'-');
            if negative {
                self.at += 1;
            }
            let digits_start = self.at;
            let mut value: i64 = 0;
            match self.next()? {
                b'0' => {}
                c @ b'1'..=b'9' => {
                    value = i64::from(c - b'0');
                    while let Some(&c @ b'0'..=b'9') = self.b.get(self.at) {
                        // (Wraps past 18 digits, where `small` does not use it.)
                        value = value.wrapping_mul(10).wrapping_add(i64::from(c - b'0'));
                        self.at += 1;
                    }
                }
                _ => return None,
            }
            let digits = self.at - digits_start;
            let mut integer = true;
            if self.peek() == Some(b'.') {
                self.at += 1;
                integer = false;
                self.digits()?;
            }
            if let Some(b'e' | b'E') = self.peek() {
                self.at += 1;
                integer = false;
                if let Some(b'+' | b'-') = self.peek() {
                    self.at += 1;
                }
                self.digits()?;
            }
            let small = (integer && digits <= 18).then(|| if negative { -value } else { value });
            Some(Number { text: self.s.get(start..self.at)?, integer, small })
        }

        /// One digit or more.
        fn digits(&mut self) -> Option<()> {
            let start = self.at;
            while let Some(b'0'..=b'9') = self.b.get(self.at) {
                self.at += 1;
            }
            (self.at > start).then_some(())
        }

        fn word(&mut self, w: &[u8]) -> Option<()> {
            let end = self.at.checked_add(w.len())?;
            (self.b.get(self.at..end)? == w).then(|| self.at = end)
        }

        /// A member's value as its declared type reads it.
        fn scalar(&mut self, t: &Type) -> Option<Value> {
            let base = t.base();
            match self.peek()? {
                b'"' => {
                    let s = self.string()?;
                    match base {
                        Type::String => Some(Value::str(s)),
                        Type::Timestamp => parse_rfc3339(s).map(Value::Ts),
                        _ => None,
                    }
                }
                b't' | b'f' if *base == Type::Bool => {
                    let v = self.peek() == Some(b't');
                    self.word(if v { b"true" } else { b"false" })?;
                    Some(Value::Bool(v))
                }
                b'n' if t.is_nullable() => {
                    self.word(b"null")?;
                    Some(Value::Null)
                }
                b'-' | b'0'..=b'9' => {
                    let n = self.number()?;
                    match (base, n.small) {
                        // (`-0` is -0.0, as serde_json reads it.)
                        (Type::Float, Some(i)) if !(i == 0 && n.text.starts_with('-')) => Some(Value::Float(i as f64)),
                        (Type::Float, _) if !n.integer => {
                            n.text.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::Float)
                        }
                        (Type::Int, Some(i)) => Some(Value::Int(i)),
                        (Type::Timestamp, Some(i)) => Some(Value::Ts(i)),
                        (Type::Duration, Some(i)) => Some(Value::Dur(i)),
                        _ => None,
                    }
                }
                _ => None,
            }
        }

        /// A scalar member of no declared field, skipped (as well formed as serde requires).
        fn skip_scalar(&mut self) -> Option<()> {
            match self.peek()? {
                b'"' => self.string().map(|_| ()),
                b't' => self.word(b"true"),
                b'f' => self.word(b"false"),
                b'n' => self.word(b"null"),
                b'-' | b'0'..=b'9' => self.number().map(|_| ()),
                _ => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A record's decoding error names the field of a value of the wrong type (nested: its
    /// path) instead of its place in the text; JSON that does not parse keeps line and column.
    #[test]
    fn a_wrong_type_names_its_field_and_bad_json_its_place() {
        let inner = RecordType { fields: vec![("total".into(), Type::Float)] };
        let rt = RecordType {
            fields: vec![
                ("id".into(), Type::Int),
                ("order".into(), Type::Record(inner)),
                ("note".into(), Type::String),
            ],
        };
        let e = decode_record(br#"{"id":"seven","order":{"total":1.0},"note":"x"}"#, &rt).unwrap_err();
        assert_eq!(e, "id: expected int, found a string");
        let e = decode_record(br#"{"id":7,"order":{"total":"lots"},"note":"x"}"#, &rt).unwrap_err();
        assert_eq!(e, "order.total: expected float, found a string");
        let e = decode_record(br#"{"id":7,"order":{"total":1.0}"#, &rt).unwrap_err();
        assert!(e.contains("line 1 column"), "{e}");
        // (A failure does not leave its path to the next one.)
        let e = decode_record(br#"{"id":7,"order":{"total":1.0}}"#, &rt).unwrap_err();
        assert!(e.starts_with("missing field `note`"), "{e}");
    }

    use super::*;

    /// The flat-record fast path gives exactly what the serde path gives, for every record it
    /// takes: records built from pieces producers write (declared and unknown members in any
    /// order, repeated members, every scalar kind, numbers at the edges of what converts,
    /// escapes, nested values, whitespace, nulls), and each of them with one byte changed.
    #[test]
    fn the_flat_fast_path_reads_records_as_serde_does() {
        let rt = RecordType {
            fields: vec![
                ("ticker".into(), Type::String),
                ("price".into(), Type::Float),
                ("size".into(), Type::Int),
                ("ts".into(), Type::Timestamp),
                ("d".into(), Type::Duration.nullable()),
                ("ok".into(), Type::Bool.nullable()),
                ("note".into(), Type::String.nullable()),
                ("xs".into(), Type::List(Box::new(Type::Int)).nullable()),
            ],
        };
        let keys = ["ticker", "price", "size", "ts", "d", "ok", "note", "xs", "other", "tick\\u0065r", "é"];
        let values = [
            "\"T0001\"",
            "\"\"",
            "\"a\\\"b\"",
            "\"é→x\"",
            "\"2023-11-14T22:13:20.5Z\"",
            "\"2023-13-01T00:00:00Z\"",
            "0",
            "-0",
            "7",
            "-7",
            "007",
            "1.5",
            "-0.0",
            "1e3",
            "1E-3",
            "2.5e+2",
            "123456789012345678",
            "1234567890123456789",
            "-123456789012345678",
            "-9223372036854775808",
            "18446744073709551616",
            "9007199254740993",
            "0.1",
            "1e400",
            "1e-400",
            "564.07",
            "12.",
            ".5",
            "+1",
            "-",
            "true",
            "false",
            "null",
            "nul",
            "[1,2]",
            "{\"a\":1}",
            "[]",
        ];
        let ws = ["", " ", "\n\t ", "\r"];
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut pick = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        let (mut taken, mut tried) = (0, 0);
        for _ in 0..40_000 {
            let mut text = String::from(ws[pick(ws.len())]);
            text.push('{');
            // Mostly the declared fields, with values mostly of their types; then others.
            let mut members: Vec<(&str, &str)> = Vec::new();
            for (k, good) in [("ticker", "\"T0001\""), ("price", "564.07"), ("size", "236"), ("ts", "1699999999994")] {
                if pick(10) > 0 {
                    members.push((k, if pick(8) > 0 { good } else { values[pick(values.len())] }));
                }
            }
            for _ in 0..pick(3) {
                members.push((keys[pick(keys.len())], values[pick(values.len())]));
            }
            for i in (1..members.len()).rev() {
                members.swap(i, pick(i + 1));
            }
            for (m, (k, v)) in members.iter().enumerate() {
                if m > 0 {
                    text.push(',');
                }
                text.push_str(ws[pick(ws.len())]);
                text.push_str(&format!("\"{k}\""));
                text.push_str(ws[pick(ws.len())]);
                text.push(':');
                text.push_str(ws[pick(ws.len())]);
                text.push_str(v);
                text.push_str(ws[pick(ws.len())]);
            }
            text.push('}');
            text.push_str(ws[pick(ws.len())]);
            let mut cases = vec![text.clone().into_bytes()];
            let mut bytes = text.into_bytes();
            let at = pick(bytes.len());
            let swaps = b"{}[],:\"\\ 0-.eEtnx\xff";
            bytes[at] = swaps[pick(swaps.len())];
            cases.push(bytes);
            for b in cases {
                tried += 1;
                let Some(fast) = flat::record(&b, &rt) else { continue };
                taken += 1;
                let text = String::from_utf8_lossy(&b);
                let mut de = serde_json::Deserializer::from_slice(&b);
                let slow = RecordSeed(&rt).deserialize(&mut de).and_then(|v| de.end().map(|_| v));
                let slow = slow.unwrap_or_else(|e| panic!("the fast path took {text}, which serde refuses: {e}"));
                let same = fast.len() == slow.len()
                    && fast.iter().zip(&slow).all(|(a, b)| match (a, b) {
                        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
                        (a, b) => a == b,
                    });
                assert!(same, "{text}: fast {fast:?}, serde {slow:?}");
            }
        }
        assert!(taken * 10 > tried, "the fast path took {taken} of {tried} records");
    }

    /// Floats are written as ryu wrote them (shortest round trip, `e16` not `e+16`): checked
    /// against ryu itself over edge cases, every power of ten, prices and averages, and random
    /// bit patterns.
    #[test]
    fn floats_are_written_as_ryu_writes_them() {
        let check = |f: f64| {
            if !f.is_finite() {
                return;
            }
            let mut out = Vec::new();
            write_float(f, &mut out);
            assert_eq!(std::str::from_utf8(&out).unwrap(), ryu::Buffer::new().format_finite(f), "{f:e}");
        };
        for f in [0.0, -0.0, 0.1, 1e16, 1e15, 1e-5, 1e-7, 1.5e300, -2.5e-300, f64::MAX, f64::MIN_POSITIVE, 5e-324] {
            check(f);
        }
        for e in -330..310 {
            for m in [1.0, -1.5, 9.999999, 123.456] {
                check(m * 10f64.powi(e));
            }
        }
        // Powers of two and their neighbours: the lopsided rounding intervals where shortest-digit
        // algorithms most often disagree.
        for e in -1074i64..=1023 {
            // 2^e exactly, subnormal below 2^-1022.
            let p =
                if e >= -1022 { f64::from_bits(((e + 1023) as u64) << 52) } else { f64::from_bits(1 << (e + 1074)) };
            for f in [p, p.next_up(), p.next_down()] {
                check(f);
            }
        }
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            check(f64::from_bits(s));
            check((s % 10_000_000) as f64 / 100.0);
            check((s % 10_000_000) as f64 / 700.0);
        }
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2024-02-29T12:34:56.789Z"), Some(1_709_210_096_789));
        assert_eq!(parse_rfc3339("2024-02-29T14:34:56.789+02:00"), Some(1_709_210_096_789));
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(-1000));
        assert_eq!(parse_rfc3339("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        // An offset of six bytes that are not six characters: refused, not a panic.
        assert_eq!(parse_rfc3339("2024-05-01T00:00:00+1\u{e9}xx"), None);
        assert_eq!(parse_rfc3339("2024-05-01T00:00:00+01:\u{e9}"), None);
    }

    #[test]
    fn decoding_follows_the_schema() {
        let rt = RecordType {
            fields: vec![
                ("a".into(), Type::Int),
                ("b".into(), Type::Float),
                ("t".into(), Type::Timestamp),
                ("n".into(), Type::String.nullable()),
            ],
        };
        let v = decode_record(br#"{"b": 2, "a": 1, "extra": [1,{}], "t": "1970-01-01T00:00:01Z"}"#, &rt).unwrap();
        assert_eq!(v, vec![Value::Int(1), Value::Float(2.0), Value::Ts(1000), Value::Null]);
        assert!(decode_record(br#"{"a": "x", "b": 1, "t": 0}"#, &rt).unwrap_err().contains("expected int"));
        assert!(decode_record(br#"{"b": 1, "t": 0}"#, &rt).unwrap_err().contains("missing field `a`"));
        assert!(decode_record(b"not json", &rt).is_err());
    }

    #[test]
    fn maps_are_objects_in_key_order() {
        let ty = Type::Map(Box::new(Type::Int), Box::new(Type::String));
        // Keys by value (10 after 9), a repeated member's last value, "07" read as 7.
        let v = decode_value(br#"{"10": "ten", "9": "nine", "07": "seven", "9": "NINE"}"#, &ty).unwrap();
        let mut out = Vec::new();
        v.write_json(&ty, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#"{"7":"seven","9":"NINE","10":"ten"}"#);
        assert_eq!(v.map_get(&Value::Int(9)), Some(&Value::str("NINE")));
        assert_eq!(v.map_get(&Value::Int(8)), None);
        assert!(decode_value(br#"{"x": "a"}"#, &ty).unwrap_err().contains("not a map key of type int"));
        assert!(decode_value(br#"{"1": 2}"#, &ty).unwrap_err().contains("expected string"));
        assert!(decode_value(br#"["1"]"#, &ty).is_err());
        // Entries given in any order make one value: equal, and equal bytes.
        let a = Value::map(vec![(Value::str("b"), Value::Int(1)), (Value::str("a"), Value::Int(2))]);
        let b = Value::map(vec![(Value::str("a"), Value::Int(2)), (Value::str("b"), Value::Int(1))]);
        assert!(a.equals(&b));
        let st = Type::Map(Box::new(Type::String), Box::new(Type::Int));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.write_json(&st, &mut x);
        b.write_json(&st, &mut y);
        assert_eq!(x, y);
        assert_eq!(x, br#"{"a":2,"b":1}"#);
        // An int key of a float map is written as the float it equals.
        let ft = Type::Map(Box::new(Type::Float), Box::new(Type::Int));
        let m = Value::map(vec![(Value::Int(1), Value::Int(7)), (Value::Float(2.5), Value::Int(8))]);
        let mut o = Vec::new();
        m.write_json(&ft, &mut o);
        assert_eq!(o, br#"{"1.0":7,"2.5":8}"#);
    }
}
