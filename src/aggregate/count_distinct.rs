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

/// The set of distinct values, and what is made of it.
pub struct Distinct {
    name: &'static str,
    doc: &'static Doc,
}

pub static COUNT_DISTINCT: Distinct = Distinct { name: "count_distinct", doc: &DOC };

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
        Ok(Signature { result: Type::Int, state: set })
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
        _ => Err("a distinct-values state is not a list".into()),
    }
}
