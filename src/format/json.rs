//! JSON values: an object of the record's fields (decoding in `crate::value`'s flat reader).

use crate::eval::Row;
use crate::format::{wire_row, Target, ValueFormat};
use crate::types::RecordType;
use crate::value::Value;

/// The `json` format.
pub struct Json;

impl ValueFormat for Json {
    fn decode(&self, bytes: &[u8], rt: &RecordType) -> Result<Vec<Value>, String> {
        crate::value::decode_record(bytes, rt)
    }

    fn decode_some(&self, bytes: &[u8], rt: &RecordType, want: &[usize]) -> Result<Vec<Option<Value>>, String> {
        crate::value::decode_fields(bytes, rt, want)
    }

    fn encode(
        &self,
        values: &[Value],
        rt: &RecordType,
        tenant: Option<&[u8]>,
        _target: Target,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        write_record(values, rt, out);
        if let Some(t) = tenant {
            add_tenant(t, out);
        }
        Ok(true)
    }
}

/// Add the tenant to the object just written to the end of `out`, as its last field `tenant`
/// (the checker keeps the name free).
pub(crate) fn add_tenant(t: &[u8], out: &mut Vec<u8>) {
    let empty = out.ends_with(b"{}");
    out.pop();
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(b"\"tenant\":");
    crate::format::scoped::write_json(t, out);
    out.push(b'}');
}

/// A record's fields as a JSON object.
pub fn write_record(fields: &[Value], rt: &RecordType, out: &mut Vec<u8>) {
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
pub struct RecordWriter {
    /// Per field: `"name":`.
    names: Vec<Vec<u8>>,
}

impl RecordWriter {
    pub fn new(rt: &RecordType) -> RecordWriter {
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
    pub fn write_row(&self, row: &Row, rt: &RecordType, out: &mut Vec<u8>) {
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
pub fn write_row(row: &Row, wire: &RecordType, out: &mut Vec<u8>) {
    if row.joined.is_empty() {
        write_record(&row.value, wire, out);
    } else {
        write_record(&wire_row(row, wire), wire, out);
    }
}
