//! The end of a sub-topology whose next one keeps state by another key: each row is written
//! to the repartition topic keyed by its group key (the next sub-topology's tasks read it in
//! the partition of that key), its value in the internal wire format.

use std::borrow::Cow;
use std::sync::Arc;

use crate::eval::{eval, Row};
use crate::format::json::RecordWriter;
use crate::hir;
use crate::plan::physical::RepartitionSpec;
use crate::runtime::op::{RecordError, Stateful};
use crate::runtime::ops::sink::headers;
use crate::runtime::ops::{Ctx, Down, InPlace, Operator};
use crate::types::Type;
use crate::value::Value;

/// The header that marks a repartition record of a grouped table's row taken back out of its
/// group (docs/conventions.md).
pub const H_RETRACT: &str = "streamc.retract";
/// A foreign-key join's repartition records: the key of the row they are about, the offset of
/// the update they come from, and on an unsubscription, that the row was deleted.
pub const H_FK_KEY: &str = "streamc.fk.key";
pub const H_FK_OFFSET: &str = "streamc.fk.offset";
pub const H_FK_DELETED: &str = "streamc.fk.deleted";
/// A grouped table's row updated within its group: the old row (in the internal wire format),
/// on the record of the new one.
pub const H_OLD: &str = "streamc.old";

/// A repartition of the chain: the plan's [`RepartitionSpec`], the writer of its rows, and a
/// grouped table's old row held for the new one of an update within its group (wire bytes).
pub(crate) struct Repartition(RepartitionSpec, RecordWriter, Option<Vec<u8>>);

impl Repartition {
    pub(crate) fn new(spec: RepartitionSpec) -> Repartition {
        let writer = RecordWriter::new(&spec.wire);
        Repartition(spec, writer, None)
    }
}

impl Stateful for Repartition {}

impl Operator for Repartition {
    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, _down: &mut Down) -> Result<(), RecordError> {
        let r = &self.0;
        // An update within one group: the old row waits for the new one (same group key, so
        // same partition) and goes on its record.
        let old = match cx.fk.in_place {
            InPlace::Old if row.retract => {
                crate::runtime::lineage::stash_old();
                let mut o = Vec::new();
                self.1.write_row(&row, &r.wire, &mut o);
                self.2 = Some(o);
                return Ok(());
            }
            InPlace::New => self.2.take(),
            _ => None,
        };
        self.2 = None;
        let k = match group_key(&r.key, &row) {
            Ok(k) => k,
            // A grouped table's row taken back whose group cannot be evaluated was never sent
            // (its evaluation failed the same way when it came).
            Err(_) if row.retract => return Ok(()),
            Err(e) => return Err(e),
        };
        // An old row that would make the record too large for the topic goes as a record of
        // its own, taken back, before the new one (as any move between groups does).
        let old = match old {
            Some(o) if 2 * o.len() + crate::runtime::topics::RECORD_OVERHEAD > cx.record_max => {
                let mut b = cx.out.record(&r.topic, ts);
                match &k {
                    Value::Str(s) => b.key(s.as_bytes()),
                    k => b.key_with(|out| k.write_json(&r.key_ty, out)),
                }
                b.value_with(|out| out.extend_from_slice(&o));
                headers(&mut b, cx.spec.version, row.tenant.as_deref());
                b.header(Cow::Borrowed(H_RETRACT), b"1");
                b.done();
                cx.counters.records_out += 1;
                None
            }
            o => o,
        };
        let mut b = cx.out.record(&r.topic, ts);
        // A foreign-key join's null foreign key: a record without a key (partition 0), not the
        // text `null`.
        if !(r.fk && k.is_null()) {
            match &k {
                Value::Str(s) => b.key(s.as_bytes()),
                k => b.key_with(|o| k.write_json(&r.key_ty, o)),
            }
        }
        b.value_with(|o| self.1.write_row(&row, &r.wire, o));
        headers(&mut b, cx.spec.version, row.tenant.as_deref());
        if row.retract {
            b.header(Cow::Borrowed(H_RETRACT), b"1");
        }
        if let Some(old) = old {
            b.header_with(H_OLD, |o| o.extend_from_slice(&old));
        }
        if r.fk {
            match &row.key {
                Value::Str(s) => b.header(Cow::Borrowed(H_FK_KEY), s.as_bytes()),
                k => b.header_with(H_FK_KEY, |o| k.write_json(&Type::Error, o)),
            }
            b.header_with(H_FK_OFFSET, |o| o.extend_from_slice(itoa::Buffer::new().format(cx.fk.offset).as_bytes()));
            if cx.fk.deleted && row.retract {
                b.header(Cow::Borrowed(H_FK_DELETED), b"1");
            }
        }
        b.done();
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

#[cfg(test)]
mod tests {
    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    const PROGRAM: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, venue: string }
}
query per_venue {
  from trades
  group by venue
  aggregate { n = count() }
  to "per-venue"
}
"#;

    /// A row leaves for the next sub-topology on the repartition topic, keyed by its group key,
    /// its value the row's fields as an object; a row taken back is marked so.
    #[test]
    fn a_row_is_written_keyed_by_its_group_and_a_retraction_is_marked() {
        let mut h = Harness::new(PROGRAM, 0);
        let mut chain = h.chain();
        let repartition = chain.last_mut().expect("the repartition").as_mut();
        let trade = row(Value::str("A"), vec![Value::str("A"), Value::Float(1.5), Value::str("xnas")]);
        assert!(h.send(repartition, trade.clone(), 10).unwrap().is_empty());
        let written = h.written();
        assert_eq!(written.len(), 1);
        let (topic, key, value) = &written[0];
        assert!(topic.ends_with("-repartition"), "{topic}");
        assert_eq!(key.as_deref(), Some("xnas"));
        assert_eq!(value.as_deref(), Some(r#"{"ticker":"A","price":1.5,"venue":"xnas"}"#));
        let retracted = crate::eval::Row { retract: true, ..trade };
        h.send(repartition, retracted, 11).unwrap();
        let last = h.out.iter().last().expect("a second record");
        assert!(last.headers().any(|(n, v)| n == super::H_RETRACT && v == b"1"));
        assert_eq!(h.counters.records_out, 2);
    }
}
