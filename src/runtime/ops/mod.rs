//! The operators of a task's chain, one file per processor kind of the physical plan
//! ([`crate::plan::physical::Op`]), each implementing [`Operator`]. The stateful ones live with
//! their state: the window aggregate (its window kinds in `runtime::window`, its record cache
//! in `runtime::agg`), the stream–stream join step (the joins' state in
//! `runtime::stream_join`). Here too what they share: [`Ctx`], [`Down`], [`Operator`].
//!
//! Adding a processor kind: a variant of `Op` in the plan, a file here with its type and its
//! unit tests (driven alone by `testing::Harness`: a program's task spec, state in memory), and
//! its line in [`build`].

mod aggregate;
pub(crate) use aggregate::changed_entries_max;
mod explode;
mod filter;
pub(crate) mod group_table;
mod map;
pub(crate) mod repartition;
pub(crate) mod sink;
mod stream_join;
mod table_join;
#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use crate::ast::EmitMode;
use crate::eval::{eval, Row};
use crate::plan::physical::{Decode, Op, TaskSpec};
use crate::runtime::op::{Change, Counters, Outputs, RecordError, Stateful, StoreRead};
use crate::runtime::stream_join::StreamJoins;
use crate::runtime::tables::TableInputs;
use crate::value::Value;

use aggregate::Aggregate;
use filter::{Dropped, Filter};
use sink::PostSinks;
use stream_join::JoinStep;

pub(crate) use stream_join::right as join_right;

/// The task's shared state an operator works with while it handles a row, stream time or a
/// flush.
pub(crate) struct Ctx<'a> {
    pub(crate) spec: &'a TaskSpec,
    pub(crate) counters: &'a mut Counters,
    /// Why the record being processed is late, if it is.
    pub(crate) late_reason: &'a mut Option<String>,
    /// Store changes operators make, in order: as records arrive (tables, joins, a window
    /// kind's own), flushed at the next commit; during a flush, the flush's own.
    pub(crate) changes: &'a mut Vec<Change>,
    pub(crate) stores: &'a dyn StoreRead,
    /// Records to write.
    pub(crate) out: &'a mut Outputs,
    /// Errors of rows no input record caused (a join's null rows passed on as stream time
    /// moves, an aggregate's results), reported at the next flush.
    pub(crate) orphans: &'a mut Vec<RecordError>,
    /// The stream time of the task's aggregate.
    pub(crate) stream_time: &'a mut i64,
    /// The window bounds of the windowed result row running down the chain after the
    /// aggregate (for its sink key and its tombstone).
    pub(crate) result_window: &'a mut Option<(i64, i64)>,
    /// The task's topic-fed table inputs (a table join reads them).
    pub(crate) tables: &'a mut TableInputs,
    /// The control-managed tables as of the control offset the task applied.
    pub(crate) globals: &'a crate::control::Tables,
    /// The task's stream–stream joins' state (each join step works on its side).
    pub(crate) joins: &'a mut StreamJoins,
    /// A foreign-key join's marks for the records its repartitions write.
    pub(crate) fk: &'a mut FkMarks,
    /// The largest record any topic the task writes takes (a result larger than it would fail
    /// every commit).
    pub(crate) record_max: usize,
    /// Whether the result an aggregate's result row running down the chain replaces was sent
    /// (Kafka Streams' old value of a `Change`): a `where` deletes a result downstream only if
    /// the one it replaces was.
    pub(crate) before: Before,
}

/// Whether the result an aggregate's result row replaces was sent (see [`Ctx::before`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Before {
    /// Not known (not tracked, or could not be worked out): as if it had been.
    #[default]
    Unknown,
    /// No: the group or window had no result before, or the query's `where` dropped it.
    NotSent,
    /// Yes.
    Sent,
}

/// What a foreign-key join's repartition records carry besides the row (docs/conventions.md,
/// `streamc.fk.*`): the offset of the update of the query's table they come from, and whether
/// an unsubscription is the row's deletion (its result is deleted) rather than a move to
/// another foreign key.
///
/// And for a grouped table's repartition: a row updated within its group is one record, the
/// new row with the old one in a header (`streamc.old`), so that the group's task applies
/// both at once and no commit falls between them (Kafka Streams' KIP-904).
#[derive(Debug, Default)]
pub(crate) struct FkMarks {
    pub(crate) offset: i64,
    pub(crate) deleted: bool,
    pub(crate) in_place: InPlace,
}

/// Where a grouped table's update within one group is (see [`FkMarks`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InPlace {
    #[default]
    No,
    /// The old row, taken back: held by the repartition until…
    Old,
    /// …the new row, written with it.
    New,
}

/// Whether a row of a table (an aggregate's result, a table–table join's) went through `ops`,
/// the rest of its query (`where`, `select` and sinks only; any other operator: not known), to
/// its sinks.
pub(crate) fn sent(ops: &[Op], mut row: Row) -> Before {
    for op in ops {
        match op {
            Op::Filter(pred) => match eval(pred, &row, &[]) {
                Ok(Value::Bool(true)) => {}
                Ok(_) => return Before::NotSent,
                Err(_) => return Before::Unknown,
            },
            Op::Map(fields) => match fields.iter().map(|e| eval(e, &row, &[])).collect() {
                Ok(v) => {
                    row.value = v;
                    row.joined.clear();
                }
                Err(_) => return Before::Unknown,
            },
            Op::Sink(_) => {}
            _ => return Before::Unknown,
        }
    }
    Before::Sent
}

/// What every operator of a task's chain is. The physical plan gives a task its chain
/// (`TaskSpec::ops`, then `TaskSpec::post` after an aggregate); the task builds one object per
/// entry (`runtime::ops::build`) and runs rows down it: an operator gets a row and passes what
/// it makes of it — none, one or several rows — to the rest of the chain ([`Down`]). At a
/// commit each operator, in chain order, first sees stream time advance, then flushes (what it
/// emits then goes down the chain too).
pub(crate) trait Operator: Stateful + Send {
    /// A row at `ts` from upstream (the task's input, or the operator before it).
    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError>;

    /// Before a commit's flush: stream time as it now is (`close_all`: the end of a finite
    /// input with `--close-windows-at-end`, which closes every window).
    fn advance(&mut self, _close_all: bool, _cx: &mut Ctx, _down: &mut Down) {}

    /// At a commit: write its store changes to `cx.changes` and emit what it holds back.
    fn flush(&mut self, _cx: &mut Ctx, _down: &mut Down) {}

    /// How many changed entries it holds back until its next flush that a commit would let go
    /// of (an aggregate's changed keys or windows).
    fn held(&self) -> usize {
        0
    }

    /// The most changed entries one record can make here (a hopping window's windows per
    /// record), so that a commit is never asked for before a few records' worth.
    fn changes_per_record(&self) -> usize {
        0
    }

    /// The record being processed is through (`ok`), or failed: what it did is taken back (a
    /// record is applied all or nothing), where the operator keeps what it needs for that.
    fn settle(&mut self, _ok: bool) {}
}

/// The rest of a chain after an operator: where it sends the rows it makes.
pub(crate) struct Down<'c> {
    rest: &'c mut [Box<dyn Operator>],
    /// The index of the first operator of `rest` in the chain (for its count).
    at: usize,
}

impl<'c> Down<'c> {
    /// The chain from operator `at` on.
    pub(crate) fn from(chain: &'c mut [Box<dyn Operator>], at: usize) -> Down<'c> {
        let at = at.min(chain.len());
        Down { rest: &mut chain[at..], at }
    }

    /// `rest`, the chain after operator `at - 1`.
    pub(crate) fn after(rest: &'c mut [Box<dyn Operator>], at: usize) -> Down<'c> {
        Down { rest, at }
    }

    /// Send a row down: to the next operator (none: the end of the chain, nothing to do).
    pub(crate) fn emit(&mut self, row: Row, ts: i64, cx: &mut Ctx) -> Result<(), RecordError> {
        let Some((op, rest)) = self.rest.split_first_mut() else { return Ok(()) };
        if let Some(n) = cx.counters.ops_in.get_mut(self.at) {
            *n += 1;
        }
        op.on_row(row, ts, cx, &mut Down { rest, at: self.at + 1 })
    }
}

/// The operators of a task, one per entry of its chain (`ops`, then `post`), in order: the
/// index of each is its plan index (`StreamInput::op`, the operator counts).
pub(crate) fn build(spec: &TaskSpec) -> Vec<Box<dyn Operator>> {
    let post_sinks = Arc::new(PostSinks::of(spec));
    let table_sink = spec.table_sink_spec();
    let emit_changes = spec.agg.as_ref().is_some_and(|a| a.emit == EmitMode::Changes);
    let mut chain: Vec<Box<dyn Operator>> = Vec::with_capacity(spec.ops.len() + spec.post.len());
    // Rows after an explode are items of a record, not the record: a filter that drops one
    // deletes nothing downstream.
    let mut exploded = false;
    for (i, op) in spec.ops.iter().chain(&spec.post).enumerate() {
        let in_post = i >= spec.ops.len();
        if i == spec.ops.len() {
            exploded = false;
        }
        // Before a grouped table's grouping, a row that stops here takes the key's old row
        // out of its group.
        let retracts = spec.table_group.is_some_and(|g| i < g);
        chain.push(match op {
            Op::Filter(pred) => {
                let dropped = match (table_sink, in_post, exploded) {
                    _ if retracts => Dropped::Retract,
                    (_, _, true) => Dropped::Nothing,
                    // The chain after an aggregate: a result row that does not match is deleted
                    // downstream (`emit changes`).
                    (_, true, false) if emit_changes => Dropped::Result(post_sinks.clone()),
                    (_, true, false) => Dropped::Nothing,
                    // A table query deletes a row that does not match downstream.
                    (Some(sink), false, false) => Dropped::TableRow(Box::new(sink.clone())),
                    (None, false, false) => Dropped::Nothing,
                };
                Box::new(Filter::new(pred.clone(), dropped))
            }
            Op::Map(fields) => Box::new(map::Map::new(fields.clone())),
            Op::Explode { fields, at } => {
                exploded = true;
                Box::new(explode::Explode::new(fields.clone(), at.clone()))
            }
            Op::Rekey(e) => Box::new(map::Rekey::new(e.clone())),
            Op::KeyAsField => Box::new(map::KeyAsField),
            Op::Repartition(r) => Box::new(repartition::Repartition::new(r.clone())),
            Op::JoinTable(j) => Box::new(table_join::TableJoin(j.clone())),
            Op::GroupTable { store, group, nulls } => {
                let key_ty = match &spec.main.decode {
                    Decode::Source(src) => src.key_type(),
                    Decode::Internal { key, .. } => key.clone(),
                };
                Box::new(group_table::GroupTable::new(*store, group.clone(), *nulls, key_ty, spec.tenant))
            }
            Op::JoinStream { side } => Box::new(JoinStep::new(*side)),
            Op::Aggregate => match Aggregate::new(spec, post_sinks.clone()) {
                Some(a) => Box::new(a),
                None => Box::new(Unplanned("an aggregate step without an aggregate")),
            },
            Op::Sink(sink) => Box::new(sink::Sink::new(sink.clone())),
        });
    }
    chain
}

/// A step the plan describes inconsistently: every row it gets is an error (never built from
/// a plan `plan::physical::specs` made).
struct Unplanned(&'static str);

impl Stateful for Unplanned {}

impl Operator for Unplanned {
    fn on_row(&mut self, _row: Row, _ts: i64, _cx: &mut Ctx, _down: &mut Down) -> Result<(), RecordError> {
        Err(RecordError(self.0.to_string()))
    }
}
