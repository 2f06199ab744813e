//! `count_distinct(x)`: the exact number of distinct non-null values of `x`; `collect_set(x)`:
//! those values themselves, as a list in the order they first arrived (at most [`SET_LIMIT`]:
//! the first), as ksqlDB's `collect_set` keeps them.
//!
//! `count_distinct`'s state is the set of values seen, kept as a list sorted by the language's
//! order, so it is stored and restored like any list and two sets merge by a sorted union; its
//! size grows with the number of distinct values in a group (or window): bound it with a window.
//! `collect_set`'s state is the list itself; two sessions merge as the earlier one's values, then
//! the later one's not among them.

use std::cmp::Ordering;
use std::sync::Arc;

use super::{not_ordered, one_arg, Doc, Example, Native, Signature, SignatureError};
use crate::types::Type;
use crate::value::Value;

/// The most values `collect_set` keeps (ksqlDB's `collect_set` default limit).
pub const SET_LIMIT: usize = 1000;

/// The set of distinct values, and what is made of it.
pub struct Distinct {
    name: &'static str,
    doc: &'static Doc,
    /// The result is the set itself, capped at [`SET_LIMIT`] values (`collect_set`); otherwise
    /// its size (`count_distinct`, uncapped).
    collect: bool,
}

pub static COUNT_DISTINCT: Distinct = Distinct { name: "count_distinct", doc: &DOC, collect: false };
pub static COLLECT_SET: Distinct = Distinct { name: "collect_set", doc: &SET_DOC, collect: true };

static SET_DOC: Doc = Doc {
    signature: "collect_set(x) -> list<the type of x>",
    summary: "the distinct non-null values of `x` in the order they first arrived (at most 1,000: the first; ksqlDB's COLLECT_SET)",
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
        result: "[\"home\", \"pay\", \"cart\"]",
        // Sessions [1000, 2000] (home, cart) and [4000, 5000] (home, pay) merge at 2500.
        session_result: Some("[\"home\", \"cart\", \"pay\"]"),
    },
};

static DOC: Doc = Doc {
    signature: "count_distinct(x) -> int",
    summary: "the exact number of distinct non-null values of `x` (its state holds each distinct value)",
    example: Example {
        arg_type: "string?",
        call: "count_distinct(x)",
        records: &[
            (1000, "\"home\""),
            (4000, "\"home\""),
            (5000, "\"pay\""),
            (2000, "\"cart\""),
            (2500, "null"),
            (3000, "\"home\""),
        ],
        result: "3",
        session_result: None,
    },
};

impl Native for Distinct {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let t = one_arg(args)?;
        if !t.is_ordered() {
            return Err(not_ordered(self.name, t));
        }
        let set = Type::List(Box::new(t.base().clone()));
        let result = if self.collect { set.clone() } else { Type::Int };
        Ok(Signature { result, state: set })
    }
    fn init(&self) -> Value {
        Value::List(Arc::new(Vec::new()))
    }
    fn update(&self, state: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err(format!("`{}` without its argument", self.name)) };
        if x.is_null() {
            return Ok(());
        }
        let set = list(state)?;
        if self.collect {
            if set.len() < SET_LIMIT && !set.iter().any(|v| v.cmp_total(x) == Ordering::Equal) {
                Arc::make_mut(set).push(x.clone());
            }
            return Ok(());
        }
        if let Err(at) = set.binary_search_by(|v| v.cmp_total(x)) {
            Arc::make_mut(set).insert(at, x.clone());
        }
        Ok(())
    }
    fn infallible(&self) -> bool {
        true
    }
    fn check(&self, state: &Value, args: &[Value], _ts: i64) -> Result<(), String> {
        match (args.first(), state) {
            (None, _) => Err(format!("`{}` without its argument", self.name)),
            (Some(Value::Null), _) | (_, Value::List(_)) => Ok(()),
            _ => Err("a distinct-values state is not a list".into()),
        }
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        let Value::List(b) = other else { return Err(format!("a {} state is not a list", self.name)) };
        let a = list(state)?;
        if self.collect {
            let mut out = a.to_vec();
            for x in b.iter() {
                if out.len() < SET_LIMIT && !out.iter().any(|v| v.cmp_total(x) == Ordering::Equal) {
                    out.push(x.clone());
                }
            }
            *a = Arc::new(out);
            return Ok(());
        }
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp_total(&b[j]) {
                Ordering::Less => {
                    out.push(a[i].clone());
                    i += 1;
                }
                Ordering::Greater => {
                    out.push(b[j].clone());
                    j += 1;
                }
                Ordering::Equal => {
                    out.push(a[i].clone());
                    i += 1;
                    j += 1;
                }
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
        *a = Arc::new(out);
        Ok(())
    }
    fn result(&self, state: &Value) -> Value {
        match state {
            Value::List(_) if self.collect => state.clone(),
            Value::List(set) => Value::Int(set.len() as i64),
            _ if self.collect => Value::List(Arc::new(Vec::new())),
            _ => Value::Null,
        }
    }
}

fn list(state: &mut Value) -> Result<&mut Arc<Vec<Value>>, String> {
    match state {
        Value::List(set) => Ok(set),
        _ => Err("a distinct-values state is not a list".into()),
    }
}
