//! `select` (a new value computed from the row) and `key by` (a new key, same partition: the
//! repartition that follows, if state needs it, is an operator of its own).

use crate::eval::{eval, Row};
use crate::hir;
use crate::runtime::op::{RecordError, Stateful};
use crate::runtime::ops::{Ctx, Down, Operator};

/// `select { … }`: the row's value becomes the fields computed; what a join added is gone.
pub(crate) struct Map {
    fields: Vec<hir::Expr>,
}

impl Map {
    pub(crate) fn new(fields: Vec<hir::Expr>) -> Map {
        Map { fields }
    }
}

impl Stateful for Map {}

impl Operator for Map {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        // A row taken back (a grouped table's key deleted) has no value to compute from.
        if !row.retract {
            row.value = eval_all(&self.fields, &row)?;
        }
        row.joined.clear();
        down.emit(row, ts, cx)
    }
}

/// Evaluate each expression on a row, in order.
pub(super) fn eval_all(exprs: &[hir::Expr], row: &Row) -> Result<Vec<crate::value::Value>, RecordError> {
    let mut v = Vec::with_capacity(exprs.len());
    for e in exprs {
        v.push(eval(e, row, &[]).map_err(RecordError)?);
    }
    Ok(v)
}

/// The key appended to the value as a field (before a repartition whose key does not keep it
/// whole); what a join added stays.
pub(crate) struct KeyAsField;

impl Stateful for KeyAsField {}

impl Operator for KeyAsField {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        if !row.retract {
            row.value.push(row.key.clone());
        }
        down.emit(row, ts, cx)
    }
}

/// `key by e`: the row's key becomes `e`.
pub(crate) struct Rekey {
    key: hir::Expr,
}

impl Rekey {
    pub(crate) fn new(key: hir::Expr) -> Rekey {
        Rekey { key }
    }
}

impl Stateful for Rekey {}

impl Operator for Rekey {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        row.key = eval(&self.key, &row, &[]).map_err(RecordError)?;
        down.emit(row, ts, cx)
    }
}

#[cfg(test)]
mod tests {
    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    /// `select` computes the new value from the row; `key by` changes the key only.
    #[test]
    fn select_computes_the_value_and_key_by_the_key() {
        let program = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int }
}
query notional {
  from trades
  key by size
  select { ticker, notional = price * to_float(size) }
  to "notional"
}
"#;
        let mut h = Harness::new(program, 0);
        let mut chain = h.chain();
        let input = row(Value::str("T"), vec![Value::str("T"), Value::Float(2.5), Value::Int(4)]);
        let rekeyed = h.send(chain[0].as_mut(), input, 7).unwrap();
        assert_eq!(rekeyed.len(), 1);
        assert_eq!(rekeyed[0].0.key, Value::Int(4));
        assert_eq!(rekeyed[0].1, 7);
        let mapped = h.send(chain[1].as_mut(), rekeyed[0].0.clone(), 7).unwrap();
        assert_eq!(mapped[0].0.value, vec![Value::str("T"), Value::Float(10.0)]);
        assert_eq!(mapped[0].0.key, Value::Int(4));
    }
}
