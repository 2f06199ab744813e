//! `to "topic"` (and a branch, `to "topic" when c`): a row becomes an output record — its key's
//! text (or, keyed by window, `[key, window_start, window_end]`), its value encoded as the
//! sink's format, the query's version and the row's tenant in headers. Also how a deletion
//! reaches the query's sinks (tombstones).

use std::borrow::Cow;
use std::sync::Arc;

use crate::ast::Format;
use crate::eval::{eval, Row};
use crate::plan::physical::{SinkSpec, TaskSpec};
use crate::runtime::op::{Building, Outputs, RecordError, Stateful};
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

/// A sink of the chain: the plan's [`SinkSpec`] and the writer of its JSON values.
pub(crate) struct Sink(SinkSpec, RecordWriter);

impl Sink {
    pub(crate) fn new(spec: SinkSpec) -> Sink {
        let writer = RecordWriter::new(&spec.value_ty);
        Sink(spec, writer)
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
    crate::codec::encode_registered_key(*format, &sink.topic, text, key, sink.key_ty.base()).map(Some)
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
    writer: &RecordWriter,
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
    match sink.format {
        Format::Json => b.value_with(|o| {
            let start = o.len();
            writer.write_row(row, &sink.value_ty, o);
            if let Some(t) = &row.tenant {
                // The tenant, as the last field `tenant` (the checker keeps the name free).
                o.pop();
                if o.len() - start > 1 {
                    o.push(b',');
                }
                o.extend_from_slice(b"\"tenant\":");
                tenant::write_json(t, o);
                o.push(b'}');
            }
        }),
        Format::String => match row.value.first() {
            Some(Value::Str(s)) => b.value(s.as_bytes()),
            Some(Value::Null) | None => {}
            Some(v) => b.value(v.to_string().as_bytes()),
        },
        Format::Csv(d) => {
            // The checker allows only scalar columns; a tenant's id is a last column.
            let types = sink.value_ty.fields.iter().map(|f| &f.1);
            let tenant: Vec<&[u8]> = row.tenant.as_deref().into_iter().collect();
            if row.joined.is_empty() {
                b.value(&crate::delimited::encode(&row.value, types, &tenant, d));
            } else {
                b.value(&crate::delimited::encode(&wire_row(row, &sink.value_ty), types, &tenant, d));
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
            b.value(&encoded.map_err(RecordError)?);
        }
    }
    b.done();
    Ok(())
}
