//! `collect_list(x)`: the values of `x`, nulls included (as ksqlDB's `collect_list` keeps them),
//! in event-time order (ties: the order records arrived in), at most [`LIST_LIMIT`] of them: the
//! earliest.
//!
//! The state is the list of `{t: timestamp, v: x}` pairs sorted by `t`, so that the result is
//! the same whichever order records arrive in and however sessions merge: two lists merge like
//! two sorted runs (on a tie, the session that started first comes first; two records with one
//! event time are always in the same session, so a tie across sessions cannot happen).

use std::sync::Arc;

use super::{one_arg, Doc, Example, Native, Signature, SignatureError};
use crate::types::{RecordType, Type};
use crate::value::Value;

/// The most values `collect_list` keeps: the earliest by event time (ksqlDB's `collect_list`
/// keeps its first 1,000 too, by arrival).
pub const LIST_LIMIT: usize = 1000;

pub struct CollectList;

static DOC: Doc = Doc {
    signature: "collect_list(x) -> list<the type of x>",
    summary:
        "the values of `x`, nulls included, in event-time order (ties: arrival order; at most 1,000: the earliest)",
    example: Example {
        arg_type: "string?",
        call: "collect_list(x)",
        records: &[
            (1000, "\"home\""),
            (4000, "\"home\""),
            (5000, "\"pay\""),
            (2000, "\"cart\""),
            (2000, "\"cart2\""),
            (2500, "null"),
            (3000, "\"search\""),
        ],
        result: "[\"home\", \"cart\", \"cart2\", null, \"search\", \"home\", \"pay\"]",
    },
};

impl Native for CollectList {
    fn name(&self) -> &'static str {
        "collect_list"
    }
    fn doc(&self) -> &'static Doc {
        &DOC
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let t = one_arg(args)?.clone();
        Ok(Signature { result: Type::List(Box::new(t.clone())), state: pair_list(t) })
    }
    fn init(&self) -> Value {
        Value::List(Arc::new(Vec::new()))
    }
    fn update(&self, state: &mut Value, args: &[Value], ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err("`collect_list` without its argument".into()) };
        let items = list(state)?;
        // After every item at the same time or earlier: ties keep arrival order.
        let at = items.partition_point(|p| time(p) <= ts);
        if at >= LIST_LIMIT {
            return Ok(());
        }
        let items = Arc::make_mut(items);
        items.insert(at, Value::Record(Arc::new(vec![Value::Ts(ts), x.clone()])));
        items.truncate(LIST_LIMIT);
        Ok(())
    }
    fn infallible(&self) -> bool {
        true
    }
    fn check(&self, state: &Value, args: &[Value], _ts: i64) -> Result<(), String> {
        match (args.first(), state) {
            (None, _) => Err("`collect_list` without its argument".into()),
            (Some(Value::Null), _) | (_, Value::List(_)) => Ok(()),
            _ => Err("a collect_list state is not a list".into()),
        }
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        let Value::List(b) = other else { return Err("a collect_list state is not a list".into()) };
        let a = list(state)?;
        let mut out = Vec::with_capacity((a.len() + b.len()).min(LIST_LIMIT));
        let (mut i, mut j) = (0, 0);
        while out.len() < LIST_LIMIT && (i < a.len() || j < b.len()) {
            // On a tie this state's item first: it is the session that started first.
            if j >= b.len() || (i < a.len() && time(&a[i]) <= time(&b[j])) {
                out.push(a[i].clone());
                i += 1;
            } else {
                out.push(b[j].clone());
                j += 1;
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
    pairs(state, "collect_list")
}

/// The state of an aggregate kept as `{t, v}` pairs (`collect_list`, `collect_set`): the list of
/// `{t: timestamp, v: x}` records.
pub(super) fn pair_list(x: Type) -> Type {
    let pair = RecordType { fields: vec![("t".into(), Type::Timestamp), ("v".into(), x)] };
    Type::List(Box::new(Type::Record(pair)))
}

/// The pairs of such a state (`name`: the aggregate's, for the error).
pub(super) fn pairs<'a>(state: &'a mut Value, name: &str) -> Result<&'a mut Arc<Vec<Value>>, String> {
    match state {
        Value::List(items) => Ok(items),
        _ => Err(format!("a {name} state is not a list")),
    }
}

/// The values of such a state, in order.
pub(super) fn pair_values(state: &Value) -> Value {
    let items = match state {
        Value::List(items) => items.iter().map(|p| value(p).clone()).collect(),
        _ => Vec::new(),
    };
    Value::List(Arc::new(items))
}

/// The event time of a `{t, v}` pair (a restored state may hold it as an int; an item that is
/// no pair, as `collect_set`'s earlier version stored its values: the beginning of time).
pub(super) fn time(pair: &Value) -> i64 {
    match pair {
        Value::Record(p) => match p.first() {
            Some(Value::Ts(t)) | Some(Value::Int(t)) => *t,
            _ => i64::MIN,
        },
        _ => i64::MIN,
    }
}

/// The value of a `{t, v}` pair (an item that is no pair: itself).
pub(super) fn value(pair: &Value) -> &Value {
    match pair {
        Value::Record(p) => p.get(1).unwrap_or(&Value::Null),
        v => v,
    }
}
