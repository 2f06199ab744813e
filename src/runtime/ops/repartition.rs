//! The end of a sub-topology whose next one keeps state by another key: each row is written
//! to the repartition topic keyed by its group key (the next sub-topology's tasks read it in
//! the partition of that key), its value in the internal wire format.

use std::sync::Arc;

use crate::eval::{eval, Row};
use crate::hir;
use crate::log::Record;
use crate::plan::physical::RepartitionSpec;
use crate::runtime::op::{Output, RecordError, Route, Stateful};
use crate::runtime::ops::sink::out_headers;
use crate::runtime::ops::{Ctx, Down, Operator};
use crate::runtime::wire::RecordWriter;
use crate::value::Value;

/// The header that marks a repartition record of a grouped table's row taken back out of its
/// group (docs/conventions.md).
pub const H_RETRACT: &str = "streamc.retract";

/// A repartition of the chain: the plan's [`RepartitionSpec`], and the writer of its rows.
pub(crate) struct Repartition(RepartitionSpec, RecordWriter);

impl Repartition {
    pub(crate) fn new(spec: RepartitionSpec) -> Repartition {
        let writer = RecordWriter::new(&spec.wire);
        Repartition(spec, writer)
    }
}

impl Stateful for Repartition {}

impl Operator for Repartition {
    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, _down: &mut Down) -> Result<(), RecordError> {
        let r = &self.0;
        let k = match group_key(&r.key, &row) {
            Ok(k) => k,
            // A grouped table's row taken back whose group cannot be evaluated was never sent
            // (its evaluation failed the same way when it came).
            Err(_) if row.retract => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut value = Vec::with_capacity(128);
        self.1.write_row(&row, &r.wire, &mut value);
        let mut headers = out_headers(cx.spec.version, row.tenant.as_deref());
        if row.retract {
            headers.push((H_RETRACT.to_string(), b"1".to_vec()));
        }
        cx.out.push(Output {
            topic: r.topic.clone(),
            route: Route::Key,
            record: Record { key: Some(k.key_bytes(&r.key_ty)), value: Some(value), timestamp: ts, headers },
        });
        cx.counters.records_out += 1;
        Ok(())
    }
}

/// The group key of a row: the value of its one expression, or the list of several.
fn group_key(exprs: &[hir::Expr], row: &Row) -> Result<Value, RecordError> {
    let mut vals = Vec::with_capacity(exprs.len());
    for e in exprs {
        vals.push(eval(e, row, &[]).map_err(RecordError)?);
    }
    Ok(if vals.len() == 1 { vals.pop().unwrap_or(Value::Null) } else { Value::List(Arc::new(vals)) })
}
