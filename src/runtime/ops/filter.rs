//! `where`: rows for which the predicate is true go on; the others stop here, and in a table
//! (a table query, or the results of an aggregate with `emit changes`) are deleted downstream.

use std::sync::Arc;

use crate::eval::{eval, Row};
use crate::hir;
use crate::plan::physical::SinkSpec;
use crate::runtime::op::{RecordError, Stateful};
use crate::runtime::ops::sink::{tombstone, PostSinks};
use crate::runtime::ops::{Before, Ctx, Down, Operator};
use crate::value::Value;

/// What a row that does not match becomes downstream.
pub(crate) enum Dropped {
    /// Nothing (a stream).
    Nothing,
    /// A table query's row: a tombstone for its key at the query's sink, as Kafka Streams'
    /// table filter sends one for a row that does not pass (it may never have matched: a
    /// delete of a key a table does not hold changes nothing).
    TableRow(Box<SinkSpec>),
    /// An aggregate's result row (`emit changes`): a tombstone for its key and window at every
    /// sink of the query, if the result it replaces was sent ([`Ctx::before`]). With `emit
    /// final` a window's one result is simply not sent.
    Result(Arc<PostSinks>),
    /// A grouped table's row, before the grouping: the row goes on taken back
    /// (`Row::retract`), so that the key's old row leaves its group.
    Retract,
}

pub(crate) struct Filter {
    pred: hir::Expr,
    dropped: Dropped,
}

impl Filter {
    pub(crate) fn new(pred: hir::Expr, dropped: Dropped) -> Filter {
        Filter { pred, dropped }
    }
}

impl Stateful for Filter {}

impl Operator for Filter {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        // A row taken back has no value to test: it goes on as it is.
        if row.retract || eval(&self.pred, &row, &[]).map_err(RecordError)? == Value::Bool(true) {
            return down.emit(row, ts, cx);
        }
        match &self.dropped {
            Dropped::Nothing => {}
            Dropped::Retract => {
                row.retract = true;
                return down.emit(row, ts, cx);
            }
            // (Kafka Streams with old values, as ksqlDB runs it: a table–table join's result
            // that was not sent is not deleted.)
            Dropped::TableRow(_) if cx.before == Before::NotSent => {}
            Dropped::TableRow(sink) => {
                tombstone(cx.out, sink, &row.key, None, ts, row.tenant.as_deref(), cx.spec.version);
                cx.counters.records_out += 1;
            }
            // (Kafka Streams with `sendOldValues`, as ksqlDB runs it: a result that was not
            // sent is not deleted.)
            Dropped::Result(_) if cx.before == Before::NotSent => {}
            Dropped::Result(sinks) => {
                let window = *cx.result_window;
                sinks.delete(&row.key, window, ts, row.tenant.as_deref(), cx);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::runtime::ops::testing::{row, Harness};
    use crate::runtime::ops::Before;
    use crate::value::Value;

    const TABLE: &str = r#"
table accounts from "accounts" {
  key    id: int
  value  json { balance: int }
}
query rich { from accounts where balance >= 100 to "rich" }
"#;

    /// A table query's row that matches goes on; one that does not is deleted at the sink (a
    /// tombstone), unless the result it replaces was not sent.
    #[test]
    fn a_table_row_that_does_not_match_is_deleted_downstream_if_it_was_sent() {
        let mut h = Harness::new(TABLE, 0);
        let mut chain = h.chain();
        let filter = chain[0].as_mut();
        let got = h.send(filter, row(Value::Int(1), vec![Value::Int(150)]), 10).unwrap();
        assert_eq!(got.len(), 1);
        assert!(h.written().is_empty());
        let got = h.send(filter, row(Value::Int(1), vec![Value::Int(50)]), 11).unwrap();
        assert!(got.is_empty());
        assert_eq!(h.written(), [("rich".to_string(), Some("1".to_string()), None)]);
        h.out.clear();
        h.before = Before::NotSent;
        let got = h.send(filter, row(Value::Int(2), vec![Value::Int(5)]), 12).unwrap();
        assert!(got.is_empty() && h.written().is_empty(), "a result never sent is not deleted");
    }

    /// A stream's record that does not match stops here and nothing is written; a predicate
    /// that cannot be evaluated is the record's error.
    #[test]
    fn a_stream_record_that_does_not_match_stops_and_a_failing_predicate_is_an_error() {
        let program = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int }
}
query big { from trades where size * 1000000000000 > 5 to "big" }
"#;
        let mut h = Harness::new(program, 0);
        let mut chain = h.chain();
        let filter = chain[0].as_mut();
        let t = |size: i64| row(Value::str("T"), vec![Value::str("T"), Value::Float(1.0), Value::Int(size)]);
        assert_eq!(h.send(filter, t(1), 1).unwrap().len(), 1);
        assert!(h.send(filter, t(0), 2).unwrap().is_empty());
        assert!(h.written().is_empty());
        let e = h.send(filter, t(i64::MAX), 3).unwrap_err();
        assert!(e.0.contains("overflow"), "{}", e.0);
    }
}
