//! `to "topic"` (and a branch, `to "topic" when c`): a row becomes an output record — its key's
//! text (or, keyed by window, `[key, window_start, window_end]`), its value encoded as the
//! sink's format, the query's version and the row's tenant in headers. Also how a deletion
//! reaches the query's sinks (tombstones).

use std::borrow::Cow;
use std::sync::Arc;

use crate::eval::{eval, Row};
use crate::format::{RowEncoder, Target};
use crate::plan::physical::{SinkSpec, TaskSpec};
use crate::runtime::op::{Building, Outputs, RecordError, Stateful};
use crate::runtime::ops::{Ctx, Down, Operator};
use crate::runtime::tenant::{self, H_TENANT};
use crate::types::Type;
use crate::value::Value;

/// The version of the query that wrote a record (docs/conventions.md).
pub const H_VERSION: &str = "streamc.query.version";
/// On the tombstone of a merged-away session: which session it deletes.
pub const H_WINDOW_START: &str = "streamc.window.start";
pub const H_WINDOW_END: &str = "streamc.window.end";

/// A sink of the chain: the plan's [`SinkSpec`] and the encoder of its values.
pub(crate) struct Sink(SinkSpec, RowEncoder);

impl Sink {
    pub(crate) fn new(spec: SinkSpec) -> Sink {
        // (A registry format's schema was registered for the topic when the program started or
        // changed.)
        let encoder = RowEncoder::new(spec.format, &spec.value_ty, &spec.topic, spec.registry_schema.as_deref());
        Sink(spec, encoder)
    }
}

impl Stateful for Sink {}

impl Operator for Sink {
    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        let sink = &self.0;
        if let Some(c) = &sink.when {
            if !matches!(eval(c, &row, &[]).map_err(RecordError)?, Value::Bool(true)) {
                return down.emit(row, ts, cx);
            }
        }
        let window = match (sink.windowed, *cx.result_window) {
            (false, _) => None,
            (true, Some(w)) => Some(w),
            (true, None) => return Err(RecordError("a windowed key without a window".into())),
        };
        sink_record(sink, &self.1, &row, ts, cx.spec.version, window, cx.out)?;
        cx.counters.records_out += 1;
        Ok(())
    }
}

/// The sinks of the chain after a task's aggregate: a result deleted (a session merged away,
/// a result row a filter no longer passes) is deleted at each, since with branches it may
/// have gone to any of them.
pub(crate) struct PostSinks(Vec<SinkSpec>);

impl PostSinks {
    pub(crate) fn of(spec: &TaskSpec) -> PostSinks {
        PostSinks(spec.post_sinks().cloned().collect())
    }

    /// Delete a result downstream: a tombstone for its key (and window) at every sink, a
    /// window's bounds in headers (filters and projections do not apply to deletions).
    pub(crate) fn delete(&self, key: &Value, window: Option<(i64, i64)>, ts: i64, tenant: Option<&[u8]>, cx: &mut Ctx) {
        for sink in &self.0 {
            tombstone(cx.out, sink, key, window, ts, tenant, cx.spec.version);
            cx.counters.records_out += 1;
        }
    }
}

/// Write a tombstone for `key` at a sink to `out`; with a window, its bounds in headers (and in
/// the key, if the sink is keyed by window).
pub(crate) fn tombstone(
    out: &mut Outputs,
    sink: &SinkSpec,
    key: &Value,
    window: Option<(i64, i64)>,
    ts: i64,
    tenant: Option<&[u8]>,
    version: u64,
) {
    let mut b = out.record(&sink.topic, ts);
    // (A key the registry could not be asked for is recorded as a registry failure, which stops
    // the run before this is committed: the text key is never written.)
    match &sink.key_schema {
        Some(_) => match registered_key(sink, key) {
            Ok(Some(k)) => b.key(&k),
            Ok(None) => {}
            Err(_) => sink_key(&mut b, key, &sink.key_ty, tenant, None),
        },
        None => sink_key(&mut b, key, &sink.key_ty, tenant, window.filter(|_| sink.windowed)),
    }
    headers(&mut b, version, tenant);
    if let Some((start, end)) = window {
        b.header_with(H_WINDOW_START, |o| o.extend_from_slice(itoa::Buffer::new().format(start).as_bytes()));
        b.header_with(H_WINDOW_END, |o| o.extend_from_slice(itoa::Buffer::new().format(end).as_bytes()));
    }
    b.done();
}

/// A key of a sink whose keys are avro or protobuf (`to … key avro|protobuf`), framed with the
/// schema registered under `<topic>-key` when the program started (a null key: no key). Routed
/// by those bytes, as a Kafka producer with that key serializer partitions.
fn registered_key(sink: &SinkSpec, key: &Value) -> Result<Option<Vec<u8>>, String> {
    let Some((format, text)) = &sink.key_schema else { return Err("a sink without a key format".into()) };
    if key.is_null() {
        return Ok(None);
    }
    crate::format::encode_key(*format, key, sink.key_ty.base(), Target { topic: &sink.topic, schema: text }).map(Some)
}

/// The headers of a record a task writes: the version of the query that wrote it, and the
/// record's tenant (raw bytes) in a tenant-scoped query.
pub(crate) fn headers(b: &mut Building, version: u64, tenant: Option<&[u8]>) {
    b.header_with(H_VERSION, |o| o.extend_from_slice(itoa::Buffer::new().format(version).as_bytes()));
    if let Some(t) = tenant {
        b.header(Cow::Borrowed(H_TENANT), t);
    }
}

/// An output record's key (docs/conventions.md): the key's text, or for a tenant's record the
/// JSON array `[tenant, key]`, so that different tenants' results never share a key. None: no
/// key (a null key of no tenant).
fn has_output_key(key: &Value, tenant: Option<&[u8]>) -> bool {
    tenant.is_some() || !key.is_null()
}

/// Append the output key of `key` (see [`has_output_key`]) to `out`.
fn write_output_key(key: &Value, key_ty: &Type, tenant: Option<&[u8]>, out: &mut Vec<u8>) {
    match (tenant, key) {
        (None, Value::Str(s)) => out.extend_from_slice(s.as_bytes()),
        (None, v) => v.write_json(key_ty, out),
        (Some(t), _) => {
            out.push(b'[');
            tenant::write_json(t, out);
            out.push(b',');
            key.write_json(key_ty, out);
            out.push(b']');
        }
    }
}

/// A sink record's key and where it goes: the output key, or with a window (`to … windowed`)
/// the windowed key `[key, window_start, window_end]`, routed by the key without the window.
fn sink_key(b: &mut Building, key: &Value, key_ty: &Type, tenant: Option<&[u8]>, window: Option<(i64, i64)>) {
    let plain = has_output_key(key, tenant);
    let Some((start, end)) = window else {
        if plain {
            b.key_with(|o| write_output_key(key, key_ty, tenant, o));
        }
        return;
    };
    if plain {
        b.route_bytes(|o| write_output_key(key, key_ty, tenant, o));
    } else {
        b.partition(0);
    }
    let wkey = Value::List(Arc::new(vec![key.clone(), Value::Ts(start), Value::Ts(end)]));
    let wty = Type::Tuple(vec![key_ty.clone(), Type::Timestamp, Type::Timestamp]);
    b.key_with(|o| write_output_key(&wkey, &wty, tenant, o));
}

/// Write a row's record at a sink to `out`: its key, headers and value in the sink's format.
fn sink_record(
    sink: &SinkSpec,
    encoder: &RowEncoder,
    row: &Row,
    ts: i64,
    version: u64,
    window: Option<(i64, i64)>,
    out: &mut Outputs,
) -> Result<(), RecordError> {
    let mut b = out.record(&sink.topic, ts);
    match &sink.key_schema {
        Some(_) => {
            if let Some(k) = registered_key(sink, &row.key).map_err(RecordError)? {
                b.key(&k);
            }
        }
        None => sink_key(&mut b, &row.key, &sink.key_ty, row.tenant.as_deref(), window),
    }
    headers(&mut b, version, row.tenant.as_deref());
    b.try_value_with(|o| encoder.encode(row, o)).map_err(RecordError)?;
    b.done();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    const PROGRAM: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, note: string }
}
query j { from trades select { ticker, price } to "j" }
query c { from trades select { ticker, price } to "c" csv delimiter "|" }
query s { from trades select { note } to "s" string }
query b {
  from trades
  select { ticker, price }
  to "big"  when price > 100
  to "rest" when true
}
"#;

    fn trade(price: f64) -> crate::eval::Row {
        row(Value::str("A"), vec![Value::str("A"), Value::Float(price)])
    }

    /// A `json` sink writes the key's text and the value as an object of the row's fields;
    /// a tenant's record is keyed `[tenant, key]` and carries `tenant` as its last field; every
    /// record names the query's version in a header.
    #[test]
    fn a_json_sink_writes_the_key_and_an_object_with_the_tenant_last() {
        let mut h = Harness::new(PROGRAM, 0);
        let mut chain = h.chain();
        let sink = chain.last_mut().expect("a sink").as_mut();
        assert!(h.send(sink, trade(1.5), 10).unwrap().is_empty(), "a sink passes nothing down");
        let mut tenanted = trade(2.0);
        tenanted.tenant = Some(Arc::from(&b"acme"[..]));
        h.send(sink, tenanted, 11).unwrap();
        assert_eq!(
            h.written(),
            [
                ("j".to_string(), Some("A".to_string()), Some(r#"{"ticker":"A","price":1.5}"#.to_string())),
                (
                    "j".to_string(),
                    Some(r#"["acme","A"]"#.to_string()),
                    Some(r#"{"ticker":"A","price":2.0,"tenant":"acme"}"#.to_string())
                ),
            ]
        );
        let first = h.out.iter().next().expect("a record");
        let headers: Vec<(&str, &[u8])> = first.headers().collect();
        assert_eq!(headers, [(super::H_VERSION, &b"0"[..])]);
        assert_eq!(h.counters.records_out, 2);
    }

    /// A `csv` sink writes one delimited record of the row's fields, a tenant's id as a last
    /// column.
    #[test]
    fn a_csv_sink_writes_one_delimited_record_with_the_tenant_last() {
        let mut h = Harness::new(PROGRAM, 1);
        let mut chain = h.chain();
        let sink = chain.last_mut().expect("a sink").as_mut();
        h.send(sink, trade(1.5), 10).unwrap();
        let mut tenanted = trade(3.25);
        tenanted.tenant = Some(Arc::from(&b"acme"[..]));
        h.send(sink, tenanted, 11).unwrap();
        let values: Vec<Option<String>> = h.written().into_iter().map(|(_, _, v)| v).collect();
        assert_eq!(values, [Some("A|1.5".to_string()), Some("A|3.25|acme".to_string())]);
    }

    /// A `string` sink writes its one field as text; a null field writes a record with no
    /// value.
    #[test]
    fn a_string_sink_writes_its_field_as_text_and_a_null_as_no_value() {
        let mut h = Harness::new(PROGRAM, 2);
        let mut chain = h.chain();
        let sink = chain.last_mut().expect("a sink").as_mut();
        h.send(sink, row(Value::str("A"), vec![Value::str("hello, world")]), 10).unwrap();
        h.send(sink, row(Value::str("A"), vec![Value::Null]), 11).unwrap();
        let values: Vec<Option<String>> = h.written().into_iter().map(|(_, _, v)| v).collect();
        assert_eq!(values, [Some("hello, world".to_string()), None]);
    }

    /// A branch writes the rows its condition holds for, and passes the others on to the next
    /// branch.
    #[test]
    fn a_branch_writes_what_its_condition_holds_for_and_passes_the_rest_on() {
        let mut h = Harness::new(PROGRAM, 3);
        let mut chain = h.chain();
        let n = chain.len();
        let big = chain[n - 2].as_mut();
        assert!(h.send(big, trade(150.0), 10).unwrap().is_empty());
        let passed = h.send(big, trade(50.0), 11).unwrap();
        assert_eq!(passed.len(), 1);
        assert_eq!(passed[0].0.value, vec![Value::str("A"), Value::Float(50.0)]);
        let topics: Vec<String> = h.written().into_iter().map(|(t, _, _)| t).collect();
        assert_eq!(topics, ["big"]);
    }
}
