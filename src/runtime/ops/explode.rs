//! `explode(xs)` in a `select`: one row per item of a list field (Kafka Streams' flatMap,
//! ksqlDB's EXPLODE); a null list makes no row, and a record may become at most
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
    /// The field that holds the list.
    at: usize,
}

impl Explode {
    pub(crate) fn new(fields: Vec<hir::Expr>, at: usize) -> Explode {
        Explode { fields, at }
    }
}

impl Stateful for Explode {}

impl Operator for Explode {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        let mut v = eval_all(&self.fields, &row)?;
        let items = match std::mem::replace(&mut v[self.at], Value::Null) {
            Value::List(items) => items,
            // A null list: no record.
            _ => return Ok(()),
        };
        if items.len() > MAX_EXPLODE {
            return Err(RecordError(format!(
                "explode: {} items, more than the {MAX_EXPLODE} one record may become",
                items.len()
            )));
        }
        row.value = v;
        row.joined.clear();
        // Each item goes down the rest of the chain as a record of its own.
        for item in items.iter() {
            let mut r = row.clone();
            r.value[self.at] = item.clone();
            down.emit(r, ts, cx)?;
        }
        Ok(())
    }
}
