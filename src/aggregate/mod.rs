//! Native aggregates. Each is one file implementing [`Native`]: its signature (argument and
//! result types), its state (a [`Value`] of a declared type, so the runtime stores and restores
//! it without knowing what it means), how a record updates the state, how two states merge
//! (session windows), how a record is taken back out (a grouped table's old rows; optional), its result, and a documented example that `tests/aggregates.rs` runs
//! through the engine. The checker finds aggregates by name in [`ALL`]; the runtime calls them
//! only through the trait.
//!
//! Adding one: write `src/aggregate/<name>.rs` implementing [`Native`], list it in [`ALL`], and
//! document it in docs/language.md (the test requires its signature there).

pub mod approx_count_distinct;
pub mod approx_percentile;
pub mod collect_list;
pub mod collect_set;
pub mod count;
pub mod count_distinct;
pub mod earliest_latest;
pub mod min_max;
pub mod sum;
pub mod top_k;

use std::fmt;

use crate::ast::Literal;
use crate::types::Type;
use crate::value::Value;

/// Every native aggregate, in the order help texts list them.
pub static ALL: &[&dyn Native] = &[
    &count::Count,
    &sum::Sum,
    &min_max::MIN,
    &min_max::MAX,
    &count_distinct::COUNT_DISTINCT,
    &earliest_latest::EARLIEST,
    &earliest_latest::LATEST,
    &collect_list::CollectList,
    &collect_set::CollectSet,
    &top_k::TOP_K,
    &top_k::TOP_K_DISTINCT,
    &approx_count_distinct::ApproxCountDistinct,
    &approx_percentile::ApproxPercentile,
];

/// The native aggregate called `name`.
pub fn lookup(name: &str) -> Option<&'static dyn Native> {
    ALL.iter().copied().find(|a| a.name() == name)
}

/// The names of the native aggregates, in [`ALL`] order.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|a| a.name())
}

/// A built-in aggregate function.
pub trait Native: Sync + Send {
    /// The name programs call it by.
    fn name(&self) -> &'static str;
    /// Its reference documentation and worked example.
    fn doc(&self) -> &'static Doc;
    /// Check a call's argument types: the result type and the state type, or why not.
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError>;
    /// Check the arguments that must be written as literals (`top_k`'s k): each argument's
    /// literal, or None where it is an expression. Called after [`Native::signature`] accepted
    /// the types.
    fn check_literals(&self, _args: &[Option<&Literal>]) -> Result<(), SignatureError> {
        Ok(())
    }
    /// The state of a group (or window) before any record.
    fn init(&self) -> Value;
    /// Add one record's argument values, at event time `ts`.
    fn update(&self, state: &mut Value, args: &[Value], ts: i64) -> Result<(), String>;
    /// Whether [`Native::update`] with these arguments would succeed, the state left as it is:
    /// a record is added to all of an aggregate's calls and windows or to none, so each is
    /// checked before any is updated. It must fail exactly when `update` would. By default it
    /// updates a copy (cheap for a scalar state; an aggregate whose state is a list overrides it).
    fn check(&self, state: &Value, args: &[Value], ts: i64) -> Result<(), String> {
        self.update(&mut state.clone(), args, ts)
    }
    /// `update` cannot fail on a state of its type (as `init` and the store give it) and
    /// arguments of the types its signature took, so nothing need be checked before it (a state
    /// damaged in a way its type does not show excepted).
    fn infallible(&self) -> bool {
        false
    }
    /// Fold a second state into the first (sessions that merge).
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String>;
    /// It can take a record back out of a state ([`Native::retract`]): an aggregate over a
    /// grouped table needs it for a row's old value.
    fn retractable(&self) -> bool {
        false
    }
    /// Take one record's argument values back out of the state: the inverse of `update`.
    fn retract(&self, _state: &mut Value, _args: &[Value]) -> Result<(), String> {
        Err(format!("`{}` cannot take a value back", self.name()))
    }
    /// The aggregate's value from its state.
    fn result(&self, state: &Value) -> Value {
        state.clone()
    }
}

impl fmt::Debug for dyn Native {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The types of a checked call.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// The type of the aggregate's value in the output.
    pub result: Type,
    /// The type of its state: stores and changelogs hold the state as JSON of this type, and
    /// the state-compatibility report compares it.
    pub state: Type,
}

/// Why a call does not type-check.
#[derive(Clone, Debug, PartialEq)]
pub enum SignatureError {
    /// The wrong number of arguments; what it takes, e.g. "one argument".
    Arity(&'static str),
    /// Argument `arg` has a type the aggregate does not take.
    Argument { arg: usize, problem: ArgProblem, message: String, label: &'static str, help: String },
}

/// The kind of an argument's type error (it picks the diagnostic code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgProblem {
    NotNumeric,
    NotOrdered,
    /// An argument that must be a literal in a range (`top_k`'s k), or of the wrong type.
    NotConstant,
}

/// Reference documentation of an aggregate, rendered in docs/language.md.
#[derive(Debug)]
pub struct Doc {
    /// The call with its types, e.g. `count_distinct(x) -> int`.
    pub signature: &'static str,
    /// One sentence: what it computes.
    pub summary: &'static str,
    pub example: Example,
}

/// A worked example: one key's records, all in one window, and the aggregate's result. The
/// expected result is written by hand; `tests/aggregates.rs` runs it through the engine. In
/// arrival order the records form two sessions (gap 1.5 s) that a later record bridges, so the
/// example exercises `merge` too.
#[derive(Debug)]
pub struct Example {
    /// The declared type of the argument field `x` in the example's stream, e.g. `string?`.
    pub arg_type: &'static str,
    /// The call as written over the field `x`, e.g. `count_distinct(x)`.
    pub call: &'static str,
    /// Per record, in arrival order: its event time (ms) and the value of `x` as JSON.
    pub records: &'static [(i64, &'static str)],
    /// The aggregate's value over those records, as JSON.
    pub result: &'static str,
}

/// The one-argument check shared by aggregates over a single value.
pub(crate) fn one_arg(args: &[Type]) -> Result<&Type, SignatureError> {
    match args {
        [t] => Ok(t),
        _ => Err(SignatureError::Arity("one argument")),
    }
}

/// An argument error for types without an order (min, max, count_distinct, earliest, latest).
pub(crate) fn not_ordered(name: &str, t: &Type) -> SignatureError {
    SignatureError::Argument {
        arg: 0,
        problem: ArgProblem::NotOrdered,
        message: format!("`{name}` of a {t}, which has no order"),
        label: "not an ordered type",
        help: format!("`{name}` takes numbers, strings, timestamps, durations or bools"),
    }
}
