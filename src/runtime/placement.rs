//! Where a value line goes when `produce`, `run --input` or `streamc test` appends it: its key
//! from the source's key field, its timestamp from its time field, its value in the source's
//! format (the lines of an avro or protobuf source are JSON objects of its fields).

use crate::hir;
use crate::record::Record;
use crate::value::Value;

/// A record for one value line (JSON or csv): the key from the stream's `key FIELD`, the timestamp from
/// its `time` field, else `append_time`. A line that does not decode is still appended (the
/// task sends it to the dead-letter topic with the reason). For many lines of one source, make
/// a [`LinePlacer`] once.
pub fn value_record(source: Option<&hir::Source>, line: &[u8], append_time: i64) -> Record {
    LinePlacer::new(source).record(line, append_time)
}

/// Places the value lines of one source (see [`value_record`]): where its key and time fields
/// are in the record as written is found once, and each line decodes only those two fields
/// (its task decodes the whole record).
pub struct LinePlacer<'a> {
    source: Option<&'a hir::Source>,
    /// An avro or protobuf source's lines are JSON objects of its fields: placed as JSON, then
    /// written in its format with the schema (this text, derived from its fields) registered for
    /// its topic (`schemas::register`, by the caller).
    registered: Option<(hir::Source, String)>,
    /// Keys of a `key … avro|protobuf` source: written in that format with the schema (this
    /// text, derived from the key's type) registered under `<topic>-key` (`schemas::register_key`,
    /// by the caller).
    registered_key: Option<String>,
    /// The key field: its index in the declared value, and in the record as written.
    key: Option<(usize, usize)>,
    /// The wire indexes to decode: the key's, then the time's.
    want: Vec<usize>,
    time: Option<usize>,
}

impl<'a> LinePlacer<'a> {
    pub fn new(source: Option<&'a hir::Source>) -> LinePlacer<'a> {
        let Some(src) = source else {
            return LinePlacer { source, registered: None, registered_key: None, key: None, want: vec![], time: None };
        };
        let wire_index = |i: usize| src.wire.index_of(&src.value.fields[i].0);
        let key = match src.key {
            hir::KeySpec::Field(i) => wire_index(i).map(|wi| (i, wi)),
            _ => None,
        };
        let time = src.time.and_then(wire_index);
        let want = key.map(|(_, wi)| wi).into_iter().chain(time).collect();
        let registered = crate::format::schema_text(src.format, &src.wire, src.topic.as_deref().unwrap_or(""))
            .map(|text| (hir::Source { format: crate::ast::Format::Json, ..src.clone() }, text));
        let topic = src.topic.as_deref().unwrap_or("");
        let registered_key = src
            .key_format
            .and_then(|f| crate::format::key_schema_text(f, &src.key_type(), topic, src.key_name().unwrap_or("key")));
        LinePlacer { source, registered, registered_key, key, want, time }
    }

    /// A record for a line, its value written as Avro (Protobuf) when the source is avro
    /// (protobuf) and the line is a JSON object of its fields (else as it is: its task
    /// dead-letters it).
    pub fn record(&self, line: &[u8], append_time: i64) -> Record {
        let Some((json, _)) = &self.registered else { return self.place(self.source, line, append_time) };
        let mut rec = self.place(Some(json), line, append_time);
        rec.value = Some(self.registered_value(line).unwrap_or_else(|| line.to_vec()));
        rec
    }

    /// A JSON object of an avro or protobuf source's fields, written in its format; None if it
    /// is not one (or the source is of another format).
    pub fn registered_value(&self, json: &[u8]) -> Option<Vec<u8>> {
        let (src, text) = self.registered.as_ref()?;
        let values = crate::value::decode_record(json, &src.wire).ok()?;
        let format = self.source?.format;
        let target = crate::format::Target { topic: src.topic.as_deref()?, schema: text };
        crate::format::encode(format, &values, &src.wire, target).ok()?
    }

    /// A key of a `key … avro|protobuf` source, given as text (an envelope's `key`), written in
    /// that format; None if the source's keys are text, or the text is not of the key's type
    /// (then written as it is: its task dead-letters the record).
    pub fn registered_key(&self, text: &[u8]) -> Option<Vec<u8>> {
        let src = self.source?;
        let ty = src.key_type();
        let key = crate::runtime::wire::decode_key(Some(text), &ty).ok()?;
        self.encode_key(&key)
    }

    fn encode_key(&self, key: &Value) -> Option<Vec<u8>> {
        let (src, text) = (self.source?, self.registered_key.as_ref()?);
        let target = crate::format::Target { topic: src.topic.as_deref()?, schema: text };
        crate::format::encode_key(src.key_format?, key, &src.key_type(), target).ok()
    }

    /// A key value's bytes: in the source's key format, else as text.
    fn key_bytes(&self, key: &Value, ty: &crate::types::Type) -> Vec<u8> {
        match self.registered_key {
            Some(_) => self.encode_key(key).unwrap_or_else(|| key.key_bytes(ty)),
            None => key.key_bytes(ty),
        }
    }

    fn place(&self, source: Option<&hir::Source>, line: &[u8], append_time: i64) -> Record {
        let mut rec = Record { key: None, value: Some(line.to_vec()), timestamp: append_time, headers: vec![] };
        let Some(src) = source else { return rec };
        if src.format == crate::ast::Format::String {
            // A `string` value is its one field: the line is the key if the stream is keyed by it.
            if let hir::KeySpec::Field(i) = src.key {
                rec.key = Some(self.key_bytes(&Value::str(&String::from_utf8_lossy(line)), &src.value.fields[i].1));
            }
            return rec;
        }
        if self.want.is_empty() {
            return rec;
        }
        if let Ok(fields) = crate::format::decode_some(src, line, &self.want) {
            if let Some((i, wi)) = self.key {
                // (An absent field of a nullable type is null, as the full decode has it.)
                let ty = &src.value.fields[i].1;
                rec.key = match &fields[wi] {
                    Some(v) => Some(self.key_bytes(v, ty)),
                    None if ty.is_nullable() => Some(Value::Null.key_bytes(ty)),
                    None => None,
                };
            }
            if let Some(Some(Value::Ts(t))) = self.time.map(|wi| &fields[wi]) {
                rec.timestamp = *t;
            }
        }
        rec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--input` and `produce --program` key a record by its declared key field, for a `string`
    /// value (the line is the one field) as for `json`.
    #[test]
    fn input_lines_are_keyed_by_the_declared_field() {
        let program = crate::compile(
            "stream lines from \"lines\" {\n  key line\n  value string as line\n}\n\
             stream events from \"events\" {\n  key user\n  value json { user: string, n: int }\n}\n",
        )
        .unwrap();
        let rec = value_record(Some(&program.sources[0]), b"GET /index.html", 7);
        assert_eq!(rec.key.as_deref(), Some(&b"GET /index.html"[..]));
        assert_eq!(rec.timestamp, 7);
        let rec = value_record(Some(&program.sources[1]), br#"{"user":"ann","n":1}"#, 7);
        assert_eq!(rec.key.as_deref(), Some(&b"ann"[..]));
        assert_eq!(value_record(None, b"x", 7).key, None);
    }

    #[test]
    fn csv_lines_are_placed_by_their_key_and_time_columns() {
        let program = crate::compile(
            "stream trades from \"trades\" {\n  key ticker\n  value csv { venue: string, ticker: string, at: timestamp }\n  time at\n}\n\
             stream events from \"events\" {\n  key user\n  value csv delimiter \"|\" { tenant: string, user: int }\n  tenant tenant\n}\n",
        )
        .unwrap();
        let trades = LinePlacer::new(Some(&program.sources[0]));
        // A quoted key column after a quoted column holding the delimiter; an RFC 3339 time.
        let rec = trades.record(b"\"NYSE, floor\",\"AAPL\",2024-02-29T12:34:56.789Z\r\n", 7);
        assert_eq!(rec.key.as_deref(), Some(&b"AAPL"[..]));
        assert_eq!(rec.timestamp, 1_709_210_096_789);
        // Time as epoch ms, spaces around it.
        assert_eq!(trades.record(b"x,MSFT, 1700000000000 ", 7).timestamp, 1_700_000_000_000);
        // A line that does not read (a column short): no key, the append time; the task
        // dead-letters it.
        let rec = trades.record(b"x,AAPL", 7);
        assert_eq!((rec.key, rec.timestamp), (None, 7));
        // The tenant column comes before the key: the key is still the `user` column (an int,
        // its text).
        let rec = LinePlacer::new(Some(&program.sources[1])).record(b"acme|0042", 7);
        assert_eq!(rec.key.as_deref(), Some(&b"42"[..]));
    }
}
