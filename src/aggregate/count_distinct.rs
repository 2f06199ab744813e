//! `count_distinct(x)`: the exact number of distinct non-null values of `x`.
//!
//! The state is the set of values seen, kept as a list sorted by the language's order, so it
//! is stored and restored like any list and two sets merge by a sorted union. Its size grows
//! with the number of distinct values in a group (or window): bound it with a window.

use std::cmp::Ordering;
use std::sync::Arc;

use super::{not_ordered, one_arg, Doc, Example, Native, Signature, SignatureError};
use crate::types::Type;
use crate::value::Value;

pub struct CountDistinct;

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
    },
};

impl Native for CountDistinct {
    fn name(&self) -> &'static str {
        "count_distinct"
    }
    fn doc(&self) -> &'static Doc {
        &DOC
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let t = one_arg(args)?;
        if !t.is_ordered() {
            return Err(not_ordered("count_distinct", t));
        }
        Ok(Signature { result: Type::Int, state: Type::List(Box::new(t.base().clone())) })
    }
    fn init(&self) -> Value {
        Value::List(Arc::new(Vec::new()))
    }
    fn update(&self, state: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err("`count_distinct` without its argument".into()) };
        if x.is_null() {
            return Ok(());
        }
        let set = list(state)?;
        if let Err(at) = set.binary_search_by(|v| v.cmp_total(x)) {
            Arc::make_mut(set).insert(at, x.clone());
        }
        Ok(())
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        let Value::List(b) = other else { return Err("a count_distinct state is not a list".into()) };
        let a = list(state)?;
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
            Value::List(set) => Value::Int(set.len() as i64),
            _ => Value::Null,
        }
    }
}

fn list(state: &mut Value) -> Result<&mut Arc<Vec<Value>>, String> {
    match state {
        Value::List(set) => Ok(set),
        _ => Err("a count_distinct state is not a list".into()),
    }
}
