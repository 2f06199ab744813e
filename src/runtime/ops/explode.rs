//! `explode(xs)` in a `select`: one row per item of a list field (Kafka Streams' flatMap,
//! ksqlDB's EXPLODE); several in one `select` are zipped, as ksqlDB's table functions are: as
//! many rows as the longest list has items, a shorter list's field null past its end. A null
//! list counts as empty (no row when every list is), and a record may become at most
//! [`MAX_EXPLODE`] rows (past it, it is bad input: a dead letter with the reason).

use crate::eval::Row;
use crate::hir;
use crate::runtime::op::{RecordError, Stateful};
use crate::runtime::ops::map::eval_all;
use crate::runtime::ops::{Ctx, Down, Operator};
use crate::value::Value;

/// The most records `explode` makes of one record.
pub(crate) const MAX_EXPLODE: usize = 100_000;

pub(crate) struct Explode {
    fields: Vec<hir::Expr>,
    /// The fields that hold the lists.
    at: Vec<usize>,
}

impl Explode {
    pub(crate) fn new(fields: Vec<hir::Expr>, at: Vec<usize>) -> Explode {
        Explode { fields, at }
    }
}

impl Stateful for Explode {}

impl Operator for Explode {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        let mut v = eval_all(&self.fields, &row)?;
        let lists: Vec<_> = self
            .at
            .iter()
            .map(|&at| match std::mem::replace(&mut v[at], Value::Null) {
                Value::List(items) => Some(items),
                // A null list: no item.
                _ => None,
            })
            .collect();
        let n = lists.iter().map(|l| l.as_ref().map_or(0, |l| l.len())).max().unwrap_or(0);
        if n > MAX_EXPLODE {
            return Err(RecordError(format!("explode: {n} items, more than the {MAX_EXPLODE} one record may become")));
        }
        row.value = v;
        row.joined.clear();
        // Each item goes down the rest of the chain as a record of its own.
        for i in 0..n {
            let mut r = row.clone();
            for (&at, list) in self.at.iter().zip(&lists) {
                r.value[at] = list.as_ref().and_then(|l| l.get(i)).cloned().unwrap_or(Value::Null);
            }
            down.emit(r, ts, cx)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    /// Two exploded lists are zipped: as many rows as the longer has items, the shorter's
    /// field null past its end; a record whose lists are both empty or null makes none.
    #[test]
    fn explodes_are_zipped_and_empty_lists_make_no_rows() {
        let program = r#"
stream orders from "orders" {
  key    id
  value  json { id: string, items: list<string>, counts: list<int>? }
}
query lines { from orders select { id, item = explode(items), n = explode(counts) } to "lines" }
"#;
        let mut h = Harness::new(program, 0);
        let mut chain = h.chain();
        let explode = chain[0].as_mut();
        let list = |v: Vec<Value>| Value::List(Arc::new(v));
        let order =
            |items: Vec<Value>, counts: Value| row(Value::str("o1"), vec![Value::str("o1"), list(items), counts]);
        let got = h
            .send(explode, order(vec![Value::str("a"), Value::str("b"), Value::str("c")], list(vec![Value::Int(1)])), 5)
            .unwrap();
        let values: Vec<Vec<Value>> = got.into_iter().map(|(r, _)| r.value).collect();
        assert_eq!(
            values,
            [
                vec![Value::str("o1"), Value::str("a"), Value::Int(1)],
                vec![Value::str("o1"), Value::str("b"), Value::Null],
                vec![Value::str("o1"), Value::str("c"), Value::Null],
            ]
        );
        assert!(h.send(explode, order(vec![], Value::Null), 6).unwrap().is_empty());
    }
}
