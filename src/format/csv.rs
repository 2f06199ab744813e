//! The `csv` format (ksqlDB's `DELIMITED`): a value is one record of delimited text whose
//! columns are the declared fields in order. Quoting follows RFC 4180 (the `csv` crate): a field
//! holding the delimiter, a quote or a line end is quoted, a quote inside doubled.
//!
//! Reading: exactly as many columns as fields; an empty column is null (a non-nullable `string`
//! reads it as the empty string; any other non-nullable type refuses it); a string column is
//! taken as it is (invalid UTF-8 replaced), the others are read from their text with the
//! surrounding spaces ignored: `int` and `duration` (ms) as decimal integers, `float` finite,
//! `bool` `true`/`false` in any case, `timestamp` as epoch milliseconds or RFC 3339.
//! Writing: a column per field in order; null is an empty column; a string as it is; other
//! scalars as their JSON text (a timestamp or duration as integer milliseconds).

use crate::types::{RecordType, Type};
use crate::value::{map_key, Value};

/// The columns of one record. A value with no bytes is one empty column.
fn columns(bytes: &[u8], delimiter: u8) -> Result<csv::ByteRecord, String> {
    let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).delimiter(delimiter).from_reader(bytes);
    let mut rec = csv::ByteRecord::new();
    let read = r.read_byte_record(&mut rec).map_err(|e| format!("not a csv record: {e}"))?;
    if !read {
        rec.push_field(b"");
        return Ok(rec);
    }
    let mut more = csv::ByteRecord::new();
    if r.read_byte_record(&mut more).map_err(|e| format!("not a csv record: {e}"))? {
        return Err("the value holds more than one csv record (a line end outside quotes)".into());
    }
    Ok(rec)
}

fn column_count(rec: &csv::ByteRecord, rt: &RecordType) -> Result<(), String> {
    if rec.len() == rt.fields.len() {
        return Ok(());
    }
    let names: Vec<&str> = rt.fields.iter().map(|(n, _)| n.as_str()).collect();
    Err(format!(
        "a csv record of {} column{}, expected {} ({})",
        rec.len(),
        if rec.len() == 1 { "" } else { "s" },
        rt.fields.len(),
        names.join(", ")
    ))
}

/// One column's value, of type `ty`.
fn column(text: &[u8], i: usize, name: &str, ty: &Type) -> Result<Value, String> {
    if let Type::String = ty.base() {
        if text.is_empty() && ty.is_nullable() {
            return Ok(Value::Null);
        }
        return Ok(Value::str(&String::from_utf8_lossy(text)));
    }
    let Ok(s) = std::str::from_utf8(text) else {
        return Err(format!("column {} (`{name}`) is not UTF-8", i + 1));
    };
    let s = s.trim();
    if s.is_empty() {
        return if ty.is_nullable() {
            Ok(Value::Null)
        } else {
            Err(format!("column {} (`{name}`) is empty, and a {ty} cannot be null", i + 1))
        };
    }
    let lower;
    let s = if let Type::Bool = ty.base() {
        lower = s.to_ascii_lowercase();
        lower.as_str()
    } else {
        s
    };
    let base = ty.base().to_string();
    let a = if base.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    map_key(s, ty).map_err(|_| format!("column {} (`{name}`): `{s}` is not {a} {base}", i + 1))
}

/// A csv value decoded by the record type of its columns.
pub fn decode(bytes: &[u8], rt: &RecordType, delimiter: u8) -> Result<Vec<Value>, String> {
    let rec = columns(bytes, delimiter)?;
    column_count(&rec, rt)?;
    rec.iter().zip(&rt.fields).enumerate().map(|(i, (text, (name, ty)))| column(text, i, name, ty)).collect()
}

/// Only the columns at `want` (indexes into `rt`), the others not read: the key and time of a
/// record before its task decodes it in full. None where not wanted.
pub fn decode_some(bytes: &[u8], rt: &RecordType, delimiter: u8, want: &[usize]) -> Result<Vec<Option<Value>>, String> {
    let rec = columns(bytes, delimiter)?;
    column_count(&rec, rt)?;
    let mut out = vec![None; rt.fields.len()];
    for &i in want {
        if let (Some(text), Some((name, ty))) = (rec.get(i), rt.fields.get(i)) {
            out[i] = Some(column(text, i, name, ty)?);
        }
    }
    Ok(out)
}

/// Write values of the scalar types `types` (null: an empty column) as one csv record, with
/// no line end, followed by `extra` columns of raw bytes (a tenant's id).
pub fn encode<'a>(values: &[Value], types: impl Iterator<Item = &'a Type>, extra: &[&[u8]], delimiter: u8) -> Vec<u8> {
    let mut cols: Vec<Vec<u8>> = Vec::with_capacity(values.len() + extra.len());
    for (v, t) in values.iter().zip(types) {
        let mut b = Vec::new();
        match v {
            Value::Null => {}
            Value::Str(s) => b.extend_from_slice(s.as_bytes()),
            v => v.write_json(t, &mut b),
        }
        cols.push(b);
    }
    cols.extend(extra.iter().map(|e| e.to_vec()));
    let mut w = csv::WriterBuilder::new()
        .delimiter(delimiter)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::with_capacity(64));
    // Writing into a Vec cannot fail.
    let _ = w.write_record(&cols);
    let mut out = w.into_inner().unwrap_or_default();
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

/// The `csv` format with its delimiter.
pub struct Csv(pub u8);

impl crate::format::ValueFormat for Csv {
    fn decode(&self, bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
        decode(bytes, rt, self.0)
    }

    fn decode_some(&self, bytes: &[u8], rt: &RecordType, want: &[usize]) -> Result<Vec<Option<Value>>, String> {
        decode_some(bytes, rt, self.0, want)
    }

    fn encode(
        &self,
        values: &[Value],
        rt: &RecordType,
        tenant: Option<&[u8]>,
        _target: crate::format::Target,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        // The checker allows only scalar columns; a tenant's id is a last column.
        let extra: Vec<&[u8]> = tenant.into_iter().collect();
        out.extend_from_slice(&encode(values, rt.fields.iter().map(|f| &f.1), &extra, self.0));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> RecordType {
        RecordType {
            fields: vec![
                ("name".into(), Type::String),
                ("n".into(), Type::Int.nullable()),
                ("x".into(), Type::Float),
                ("ok".into(), Type::Bool),
                ("at".into(), Type::Timestamp),
            ],
        }
    }

    #[test]
    fn reads_quoted_fields_empty_columns_spaces_and_line_ends() {
        let v = decode(b"\"a, \"\"b\"\"\",,1.5, TRUE ,2024-02-29T12:34:56.789Z\r\n", &rt(), b',').unwrap();
        assert_eq!(v[0], Value::str("a, \"b\""));
        assert_eq!(v[1], Value::Null);
        assert_eq!(v[2], Value::Float(1.5));
        assert_eq!(v[3], Value::Bool(true));
        assert_eq!(v[4], Value::Ts(1_709_210_096_789));
        let v = decode(b"|7|-2|false|0", &rt(), b'|').unwrap();
        assert_eq!(v[0], Value::str(""));
        assert_eq!(v[1], Value::Int(7));
    }

    #[test]
    fn refuses_what_does_not_match_with_the_reason() {
        let e = |b: &[u8]| decode(b, &rt(), b',').unwrap_err();
        assert_eq!(e(b"a,1,2.0,true"), "a csv record of 4 columns, expected 5 (name, n, x, ok, at)");
        assert_eq!(e(b"a,1,x,true,0"), "column 3 (`x`): `x` is not a float");
        assert_eq!(e(b"a,1,NaN,true,0"), "column 3 (`x`): `NaN` is not a float");
        assert_eq!(e(b"a,1,,true,0"), "column 3 (`x`) is empty, and a float cannot be null");
        assert_eq!(e(b"a,1.5,1,true,0"), "column 2 (`n`): `1.5` is not an int");
        assert_eq!(e(b"a,1,1,yes,0"), "column 4 (`ok`): `yes` is not a bool");
        assert!(e(b"a,1,1,true,0\nb,1,1,true,0").contains("more than one csv record"));
        // An unterminated quote runs to the end of the value: one column.
        assert_eq!(e(b"\"a,1,1,true,0"), "a csv record of 1 column, expected 5 (name, n, x, ok, at)");
    }

    #[test]
    fn writes_what_it_reads() {
        let t = rt();
        let row = vec![Value::str("a,\"b\"\nc"), Value::Null, Value::Float(0.1), Value::Bool(false), Value::Ts(5)];
        let b = encode(&row, t.fields.iter().map(|f| &f.1), &[], b',');
        assert_eq!(b, b"\"a,\"\"b\"\"\nc\",,0.1,false,5");
        assert_eq!(decode(&b, &t, b',').unwrap(), row);
        let one = RecordType { fields: vec![("s".into(), Type::String)] };
        let b = encode(&[Value::str("")], one.fields.iter().map(|f| &f.1), &[], b'\t');
        assert_eq!(decode(&b, &one, b'\t').unwrap(), vec![Value::str("")]);
        assert_eq!(encode(&[Value::Int(3)], [Type::Int].iter(), &[b"t1"], b';'), b"3;t1");
    }
}
