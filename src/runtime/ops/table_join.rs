//! A stream–table join (`join t on e`, `left join`): the row looks up the table's current row
//! for its key — a topic-fed table input of the task, or a control-managed table as of the
//! control offset the task applied — and goes on with it (an inner join drops a row with no
//! match; a left join passes it on with the table's side null).

use crate::eval::{eval, Row};
use crate::plan::physical::TableJoinSpec;
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
        row.joined.push(found);
        down.emit(row, ts, cx)
    }
}
