//! `to "topic"` (and a branch, `to "topic" when c`): a row becomes an output record — its key's
//! text (or, keyed by window, `[key, window_start, window_end]`), its value encoded as the
//! sink's format, the query's version and the row's tenant in headers. Also how a deletion
//! reaches the query's sinks (tombstones).

use std::sync::Arc;

use crate::ast::Format;
use crate::eval::{eval, Row};
use crate::log::Record;
use crate::plan::physical::{SinkSpec, TaskSpec};
use crate::runtime::op::{Output, RecordError, Route, Stateful};
use crate::runtime::ops::{Ctx, Down, Operator};
use crate::runtime::tenant::{self, H_TENANT};
use crate::runtime::wire::{wire_row, RecordWriter};
use crate::types::Type;
use crate::value::Value;

/// The version of the query that wrote a record (docs/conventions.md).
pub const H_VERSION: &str = "streamc.query.version";
/// On the tombstone of a merged-away session: which session it deletes.
pub const H_WINDOW_START: &str = "streamc.window.start";
pub const H_WINDOW_END: &str = "streamc.window.end";

/// A sink of the chain: the plan's [`SinkSpec`], the writer of its JSON values, and the length
/// of the last value it wrote (each value's buffer is allocated at about its size, once).
pub(crate) struct Sink(SinkSpec, RecordWriter, usize);

impl Sink {
    pub(crate) fn new(spec: SinkSpec) -> Sink {
        let writer = RecordWriter::new(&spec.value_ty);
        Sink(spec, writer, 128)
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
        let key = match &sink.key_schema {
            Some(_) => registered_key(sink, &row.key).map_err(RecordError)?,
            None => sink_key(&row.key, &sink.key_ty, row.tenant.as_deref(), window),
        };
        let out = sink_record(sink, &self.1, self.2, &row, ts, cx.spec.version, key)?;
        self.2 = out.record.value.as_ref().map_or(self.2, Vec::len);
        cx.out.push(out);
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
            cx.out.push(tombstone(sink, key, window, ts, tenant, cx.spec.version));
            cx.counters.records_out += 1;
        }
    }
}

/// A tombstone for `key` at a sink; with a window, its bounds in headers (and in the key, if
/// the sink is keyed by window).
pub(crate) fn tombstone(
    sink: &SinkSpec,
    key: &Value,
    window: Option<(i64, i64)>,
    ts: i64,
    tenant: Option<&[u8]>,
    version: u64,
) -> Output {
    let mut headers = out_headers(version, tenant);
    if let Some((start, end)) = window {
        headers.push((H_WINDOW_START.to_string(), start.to_string().into_bytes()));
        headers.push((H_WINDOW_END.to_string(), end.to_string().into_bytes()));
    }
    // (A key the registry could not be asked for is recorded as a registry failure, which stops
    // the run before this is committed: the text key is never written.)
    let (key, route) = match &sink.key_schema {
        Some(_) => registered_key(sink, key).unwrap_or_else(|_| sink_key(key, &sink.key_ty, tenant, None)),
        None => sink_key(key, &sink.key_ty, tenant, window.filter(|_| sink.windowed)),
    };
    Output { topic: sink.topic.clone(), route, record: Record { key, value: None, timestamp: ts, headers } }
}

/// A key of a sink whose keys are avro or protobuf (`to … key avro|protobuf`), framed with the
/// schema registered under `<topic>-key` when the program started (a null key: no key). Routed
/// by those bytes, as a Kafka producer with that key serializer partitions.
fn registered_key(sink: &SinkSpec, key: &Value) -> Result<(Option<Vec<u8>>, Route), String> {
    let Some((format, text)) = &sink.key_schema else { return Err("a sink without a key format".into()) };
    if key.is_null() {
        return Ok((None, Route::Key));
    }
    let bytes = crate::codec::encode_registered_key(*format, &sink.topic, text, key, sink.key_ty.base())?;
    Ok((Some(bytes), Route::Key))
}

/// The headers of a record a task writes: the version of the query that wrote it, and the
/// record's tenant (raw bytes) in a tenant-scoped query.
pub(crate) fn out_headers(version: u64, tenant: Option<&[u8]>) -> Vec<(String, Vec<u8>)> {
    let mut h = Vec::with_capacity(2);
    h.push((H_VERSION.to_string(), itoa::Buffer::new().format(version).as_bytes().to_vec()));
    if let Some(t) = tenant {
        h.push((H_TENANT.to_string(), t.to_vec()));
    }
    h
}

/// An output record's key: the key's text (docs/conventions.md), or for a tenant's record the JSON
/// array `[tenant, key]`, so that different tenants' results never share a key.
fn output_key(key: &Value, key_ty: &Type, tenant: Option<&[u8]>) -> Option<Vec<u8>> {
    match tenant {
        None if key.is_null() => None,
        None => Some(key.key_bytes(key_ty)),
        Some(t) => {
            let mut b = Vec::with_capacity(t.len() + 32);
            b.push(b'[');
            tenant::write_json(t, &mut b);
            b.push(b',');
            key.write_json(key_ty, &mut b);
            b.push(b']');
            Some(b)
        }
    }
}

/// A sink record's key and where it goes: the output key, or with a window (`to … windowed`)
/// the windowed key `[key, window_start, window_end]`, routed by the key without the window.
fn sink_key(key: &Value, key_ty: &Type, tenant: Option<&[u8]>, window: Option<(i64, i64)>) -> (Option<Vec<u8>>, Route) {
    let plain = output_key(key, key_ty, tenant);
    let Some((start, end)) = window else { return (plain, Route::Key) };
    let wkey = Value::List(Arc::new(vec![key.clone(), Value::Ts(start), Value::Ts(end)]));
    let wty = Type::Tuple(vec![key_ty.clone(), Type::Timestamp, Type::Timestamp]);
    let route = plain.map(Route::Bytes).unwrap_or(Route::Partition(0));
    (output_key(&wkey, &wty, tenant), route)
}

fn sink_record(
    sink: &SinkSpec,
    writer: &RecordWriter,
    size_hint: usize,
    row: &Row,
    ts: i64,
    version: u64,
    (key, route): (Option<Vec<u8>>, Route),
) -> Result<Output, RecordError> {
    let headers = out_headers(version, row.tenant.as_deref());
    let value = match sink.format {
        Format::Json => {
            // (Capped: one very large value does not size the next.)
            let mut b = Vec::with_capacity((size_hint + size_hint / 4).min(64 << 10));
            writer.write_row(row, &sink.value_ty, &mut b);
            if let Some(t) = &row.tenant {
                // The tenant, as the last field `tenant` (the checker keeps the name free).
                b.pop();
                if b.len() > 1 {
                    b.push(b',');
                }
                b.extend_from_slice(b"\"tenant\":");
                tenant::write_json(t, &mut b);
                b.push(b'}');
            }
            Some(b)
        }
        Format::String => match row.value.first() {
            Some(Value::Str(s)) => Some(s.as_bytes().to_vec()),
            Some(Value::Null) | None => None,
            Some(v) => Some(v.to_string().into_bytes()),
        },
        Format::Csv(d) => {
            // The checker allows only scalar columns; a tenant's id is a last column.
            let types = sink.value_ty.fields.iter().map(|f| &f.1);
            let tenant: Vec<&[u8]> = row.tenant.as_deref().into_iter().collect();
            if row.joined.is_empty() {
                Some(crate::delimited::encode(&row.value, types, &tenant, d))
            } else {
                Some(crate::delimited::encode(&wire_row(row, &sink.value_ty), types, &tenant, d))
            }
        }
        Format::Avro | Format::Protobuf => {
            // The schema was registered for the topic when the program started or changed.
            let schema = sink.registry_schema.as_deref().unwrap_or_default();
            let encode = |values: &[Value]| {
                crate::codec::encode_registered(sink.format, &sink.topic, schema, values, &sink.value_ty)
            };
            let encoded =
                if row.joined.is_empty() { encode(&row.value) } else { encode(&wire_row(row, &sink.value_ty)) };
            Some(encoded.map_err(RecordError)?)
        }
    };
    Ok(Output { topic: sink.topic.clone(), route, record: Record { key, value, timestamp: ts, headers } })
}
