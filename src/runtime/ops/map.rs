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
