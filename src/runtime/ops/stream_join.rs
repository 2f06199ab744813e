//! The step of a task's chain where a stream–stream join takes its main side's rows, and
//! where the joined stream's records come in; the join's state (both sides' records, their
//! stream time) is in `runtime::stream_join`.

use std::sync::Arc;

use crate::eval::{eval, Row};
use crate::plan::physical::StreamInput;
use crate::runtime::lineage;
use crate::runtime::op::{scoped, Input, RecordError, Stateful};
use crate::runtime::ops::{Ctx, Down, Operator};

/// The step of a task's chain where its `side`-th stream–stream join takes main-side rows
/// (`Op::JoinStream`); the joined stream's records come in through [`right`]. Both work on
/// the join's state in [`StreamJoins`], and send the joined rows down the rest of the chain.
pub(crate) struct JoinStep {
    side: usize,
}

impl JoinStep {
    pub(crate) fn new(side: usize) -> JoinStep {
        JoinStep { side }
    }
}

impl Stateful for JoinStep {}

impl Operator for JoinStep {
    /// A main-side row: stored for later records of the joined stream, and joined with the
    /// joined stream's stored records within its bounds.
    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        let side = self.side;
        let spec = cx.spec;
        let si = &spec.streams[side];
        let k = eval(&si.on, &row, &[]).map_err(RecordError)?;
        if k.is_null() {
            // A null key matches nothing: a left join passes the record on at once. Its time
            // counts, but (as in Kafka Streams) it brings no pass over the pending records.
            cx.joins.observe(side, ts);
            if si.left {
                let mut r = row;
                r.joined.push(None);
                down.emit(r, ts, cx)?;
            }
            return Ok(());
        }
        join_time(side, true, ts, cx, down);
        let kb = scoped(spec.tenant, row.tenant.as_ref(), k.key_bytes(&si.on.ty))?;
        let (rows, stored) = cx.joins.left(side, si, kb, row, ts, cx.changes);
        if !stored && rows.is_empty() {
            join_late(side, ts, si, cx);
        }
        send(rows, cx, down)
    }

    /// `--close-windows-at-end`: every window of the join closes; a left join emits its
    /// unmatched records (a chained join still takes what the one before it passes on).
    fn advance(&mut self, close_all: bool, cx: &mut Ctx, down: &mut Down) {
        if close_all {
            cx.joins.close(self.side);
            join_time(self.side, true, i64::MAX, cx, down);
        }
    }
}

/// A record of the joined stream of join `side` (decoded; `raw` its value's bytes, `offset`
/// its input offset): stored for later main-side rows, and joined with the main side's stored
/// rows whose bounds hold it. `down` is the chain after the join step.
pub(crate) fn right(
    side: usize,
    input: Input,
    raw: Option<Vec<u8>>,
    offset: u64,
    cx: &mut Ctx,
    down: &mut Down,
) -> Result<(), RecordError> {
    let spec = cx.spec;
    let si = &spec.streams[side];
    let ts = input.ts;
    if input.row.key.is_null() {
        return Err(RecordError("the join key is null".into()));
    }
    join_time(side, false, ts, cx, down);
    let kb = scoped(spec.tenant, input.row.tenant.as_ref(), input.row.key.key_bytes(&si.on.ty))?;
    let value = Arc::new(input.row.value);
    let (matched, stored) = cx.joins.right(side, si, kb, input.row.key, value, raw, ts, offset, cx.changes);
    if !stored && matched.is_empty() {
        join_late(side, ts, si, cx);
    }
    send(matched, cx, down)
}

/// Rows a join made, down the chain in order (each with its own lineage under `streamc trace`;
/// the record's own after them).
fn send(rows: Vec<(Row, i64)>, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
    let own = lineage::on().then(lineage::current);
    for (r, t) in rows {
        lineage::next();
        down.emit(r, t, cx)?;
    }
    if let Some(own) = own {
        lineage::reset(own);
    }
    Ok(())
}

/// A record at `ts` reached join `side`: the join's stream time moves; if the record is at
/// it, a left join passes on its pending records whose windows closed; each side drops what
/// it no longer keeps. Those rows are not the record's: an error evaluating one is reported
/// at the next flush (as a result's is), and lateness they meet is not the record's.
/// (`main`: the record is the main side's.)
fn join_time(side: usize, main: bool, ts: i64, cx: &mut Ctx, down: &mut Down) {
    let spec = cx.spec;
    let si = &spec.streams[side];
    let mut rows = Vec::new();
    if cx.joins.observe(side, ts) && si.left {
        rows = cx.joins.closed_pending(side, si, main, cx.changes);
    }
    cx.joins.expire(side, si, cx.changes);
    if rows.is_empty() {
        return;
    }
    let reason = cx.late_reason.take();
    let own = lineage::on().then(lineage::current);
    for (r, t) in rows {
        lineage::next();
        if let Err(e) = down.emit(r, t, cx) {
            cx.orphans.push(e);
        }
    }
    if let Some(own) = own {
        lineage::reset(own);
    }
    // (They are written whatever becomes of the record.)
    cx.out.keep_so_far();
    *cx.late_reason = reason;
}

/// A record too old for its side to keep that matched nothing: dropped, as late.
fn join_late(side: usize, ts: i64, si: &StreamInput, cx: &mut Ctx) {
    if cx.late_reason.is_some() {
        return;
    }
    cx.counters.late += 1;
    *cx.late_reason = Some(format!(
        "late: its join side keeps records for {} + {} + grace {} (time {ts}, stream time {})",
        crate::ast::Duration(si.before),
        crate::ast::Duration(si.after),
        crate::ast::Duration(si.grace),
        cx.joins.time(side)
    ));
}

#[cfg(test)]
mod tests {
    use crate::runtime::ops::testing::{row, Harness};
    use crate::value::Value;

    const PROGRAM: &str = r#"
stream clicks from "clicks" {
  key    user
  value  json { user: string, page: string }
}
stream buys from "buys" {
  key    user
  value  json { user: string, amount: float }
}
query j {
  from clicks
  join buys within 10s on user
  to "j"
}
"#;

    /// A click is kept for buys to come; a buy of the same user within the bounds joins it
    /// (the click's row with the buy as its joined side), one of another user or too far in
    /// time does not.
    #[test]
    fn records_of_both_sides_join_by_key_within_the_bounds() {
        let mut h = Harness::new(PROGRAM, 0);
        let mut chain = h.chain();
        let step = chain[0].as_mut();
        let click = row(Value::str("ann"), vec![Value::str("ann"), Value::str("/home")]);
        assert!(h.send(step, click, 100_000).unwrap().is_empty(), "nothing to join yet");
        let buy = |user: &str, amount: f64| row(Value::str(user), vec![Value::str(user), Value::Float(amount)]);
        let raw = |amount: f64| Some(format!(r#"{{"user":"x","amount":{amount}}}"#).into_bytes());
        let got = h.send_right(0, buy("ann", 9.5), 105_000, 0, raw(9.5)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.value, vec![Value::str("ann"), Value::str("/home")]);
        let (k, side) = got[0].0.joined[0].clone().expect("the buy");
        assert_eq!((k, side.as_ref().clone()), (Value::str("ann"), vec![Value::str("ann"), Value::Float(9.5)]));
        assert!(h.send_right(0, buy("bob", 1.0), 105_500, 1, raw(1.0)).unwrap().is_empty(), "another key");
        assert!(h.send_right(0, buy("ann", 2.0), 111_000, 2, raw(2.0)).unwrap().is_empty(), "11 s after: outside");
    }
}
