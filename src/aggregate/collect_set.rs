//! `collect_set(x)`: the distinct non-null values of `x`, in the order of each one's first
//! occurrence by event time (ties: the order records arrived in), at most [`SET_LIMIT`] of them:
//! the earliest. ksqlDB's `collect_set` keeps arrival order, the same for input in event-time
//! order; event time makes the result the same whichever order records arrive in — after a
//! repartition written by several tasks, or when sessions merge.
//!
//! The state is the list of `{t: timestamp, v: x}` pairs sorted by `t`, one per value, `t` its
//! earliest event time seen (as `collect_list`'s). A state stored as a plain list of values (by
//! earlier versions, sorted by value) is read as values seen at the beginning of time.

use std::cmp::Ordering;
use std::sync::Arc;

use super::collect_list::{pair_list, pair_values, pairs, time, value};
use super::{not_ordered, one_arg, Doc, Example, Native, Signature, SignatureError};
use crate::types::Type;
use crate::value::Value;

/// The most values `collect_set` keeps (ksqlDB's `collect_set` default limit).
pub const SET_LIMIT: usize = 1000;

pub struct CollectSet;

static DOC: Doc = Doc {
    signature: "collect_set(x) -> list<the type of x>",
    summary: "the distinct non-null values of `x`, in the order of each one's first occurrence by event time (ties: arrival order; at most 1,000: the earliest)",
    example: Example {
        arg_type: "string?",
        call: "collect_set(x)",
        records: &[
            (1000, "\"home\""),
            (4000, "\"home\""),
            (5000, "\"pay\""),
            (2000, "\"cart\""),
            (2500, "null"),
            (3000, "\"home\""),
        ],
        result: "[\"home\", \"cart\", \"pay\"]",
    },
};

impl Native for CollectSet {
    fn name(&self) -> &'static str {
        "collect_set"
    }
    fn doc(&self) -> &'static Doc {
        &DOC
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let t = one_arg(args)?;
        if !t.is_ordered() {
            return Err(not_ordered("collect_set", t));
        }
        let t = t.base().clone();
        Ok(Signature { result: Type::List(Box::new(t.clone())), state: pair_list(t) })
    }
    fn init(&self) -> Value {
        Value::List(Arc::new(Vec::new()))
    }
    fn update(&self, state: &mut Value, args: &[Value], ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err("`collect_set` without its argument".into()) };
        if x.is_null() {
            return Ok(());
        }
        let items = list(state)?;
        let seen = items.iter().position(|p| value(p).cmp_total(x) == Ordering::Equal);
        if let Some(j) = seen {
            if time(&items[j]) <= ts {
                return Ok(());
            }
            // Seen later before: it moves to its earlier time.
            Arc::make_mut(items).remove(j);
        }
        // After every value first seen at the same time or earlier: ties keep arrival order.
        let at = items.partition_point(|p| time(p) <= ts);
        if at >= SET_LIMIT {
            return Ok(());
        }
        let items = Arc::make_mut(items);
        items.insert(at, Value::Record(Arc::new(vec![Value::Ts(ts), x.clone()])));
        items.truncate(SET_LIMIT);
        Ok(())
    }
    fn infallible(&self) -> bool {
        true
    }
    fn check(&self, state: &Value, args: &[Value], _ts: i64) -> Result<(), String> {
        match (args.first(), state) {
            (None, _) => Err("`collect_set` without its argument".into()),
            (Some(Value::Null), _) | (_, Value::List(_)) => Ok(()),
            _ => Err("a collect_set state is not a list".into()),
        }
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        let Value::List(b) = other else { return Err("a collect_set state is not a list".into()) };
        let a = list(state)?;
        // Both runs in time order: merged (a tie: this state's first, the session that started
        // first), each value kept at its earliest.
        let mut out: Vec<Value> = Vec::with_capacity((a.len() + b.len()).min(SET_LIMIT));
        let (mut i, mut j) = (0, 0);
        while out.len() < SET_LIMIT && (i < a.len() || j < b.len()) {
            let next = if j >= b.len() || (i < a.len() && time(&a[i]) <= time(&b[j])) {
                i += 1;
                &a[i - 1]
            } else {
                j += 1;
                &b[j - 1]
            };
            if !out.iter().any(|p| value(p).cmp_total(value(next)) == Ordering::Equal) {
                out.push(next.clone());
            }
        }
        *a = Arc::new(out);
        Ok(())
    }
    fn result(&self, state: &Value) -> Value {
        pair_values(state)
    }
}

fn list(state: &mut Value) -> Result<&mut Arc<Vec<Value>>, String> {
    pairs(state, "collect_set")
}
