//! A stream–table join (`join t on e`, `left join`): the row looks up the table's current row
//! for its key — a topic-fed table input of the task, or a control-managed table as of the
//! control offset the task applied — and goes on with it (an inner join drops a row with no
//! match; a left join passes it on with the table's side null).

use crate::eval::{eval, Row};
use crate::plan::physical::TableJoinSpec;
use crate::runtime::lineage;
use crate::runtime::op::{RecordError, Stateful};
use crate::runtime::ops::{Ctx, Down, Operator};

/// A stream–table join of the chain: the plan's [`TableJoinSpec`].
pub(crate) struct TableJoin(pub(crate) TableJoinSpec);

impl Stateful for TableJoin {}

impl Operator for TableJoin {
    fn on_row(&mut self, mut row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        let j = &self.0;
        let k = eval(&j.on, &row, &[]).map_err(RecordError)?;
        let found = match (j.table, &j.global) {
            (Some(t), _) => cx.tables.row(t, &k, row.tenant.as_ref(), cx.stores)?.map(|r| (k, r)),
            (None, Some(name)) => {
                let kb = crate::control::table_key(row.tenant.as_deref(), &k.key_bytes(&j.on.ty));
                cx.globals.get(name).and_then(|t| t.get(&kb)).cloned().map(|r| (k, r))
            }
            (None, None) => None,
        };
        if found.is_none() && !j.left {
            return Ok(());
        }
        // `streamc trace`: the table's row is part of what the joined row came from.
        let traced = match (&found, j.table, lineage::on()) {
            (Some((k, _)), Some(t), true) => {
                let before = lineage::current();
                cx.tables.trace_join(t, k, row.tenant.as_ref());
                Some(before)
            }
            _ => None,
        };
        row.joined.push(found);
        let r = down.emit(row, ts, cx);
        if let Some(before) = traced {
            lineage::reset(before);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    const PROGRAM: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float }
}
table names from "names" {
  key    ticker: string
  value  json { name: string }
}
query inner { from trades join names on ticker to "inner" }
query outer { from trades left join names on ticker to "outer" }
"#;

    fn trade(t: &str) -> crate::eval::Row {
        row(Value::str(t), vec![Value::str(t), Value::Float(1.5)])
    }

    /// A row takes the table's current row for its key, read from the table's store as the
    /// changelog holds it; an inner join drops a row with no match, a left join passes it on
    /// with the table's side null.
    #[test]
    fn a_row_takes_the_tables_row_and_a_miss_is_dropped_or_null() {
        for (sub, left) in [(0, false), (1, true)] {
            let mut h = Harness::new(PROGRAM, sub);
            let store = h.spec.tables[0].store;
            h.stores.0.entry(store).or_default().insert(b"A".to_vec(), br#"{"name":"Acme"}"#.to_vec());
            let mut chain = h.chain();
            let join = chain[0].as_mut();
            let got = h.send(join, trade("A"), 10).unwrap();
            assert_eq!(got.len(), 1);
            let (k, side) = got[0].0.joined[0].clone().expect("a match");
            assert_eq!((k, side.as_ref().clone()), (Value::str("A"), vec![Value::str("Acme")]));
            let got = h.send(join, trade("B"), 11).unwrap();
            match left {
                false => assert!(got.is_empty(), "an inner join drops a row with no match"),
                true => assert_eq!(got[0].0.joined, vec![None], "a left join passes it on, null"),
            }
        }
    }
}
