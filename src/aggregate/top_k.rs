//! `top_k(x, k)`: the `k` largest non-null values of `x`, largest first, repeats included;
//! `top_k_distinct(x, k)`: the `k` largest distinct values. `k` is an int literal from 1 to
//! [`K_LIMIT`] (E0307 otherwise), as in ksqlDB's `topk` and `topkdistinct`.
//!
//! The state is `{k: int, top: list<x>}`, the list sorted largest first and never longer than
//! `k`; it carries `k` because merging two sessions' states must cut the union back to it. The
//! result depends only on the multiset of values, not on arrival order or session merges.

use std::cmp::Ordering;
use std::sync::Arc;

use super::{not_ordered, ArgProblem, Doc, Example, Native, Signature, SignatureError};
use crate::ast::Literal;
use crate::types::{RecordType, Type};
use crate::value::Value;

/// The largest `k` allowed: the state holds up to `k` values.
pub const K_LIMIT: i64 = 1000;

pub struct TopK {
    name: &'static str,
    doc: &'static Doc,
    /// Keep each value once.
    distinct: bool,
}

pub static TOP_K: TopK = TopK { name: "top_k", doc: &DOC, distinct: false };
pub static TOP_K_DISTINCT: TopK = TopK { name: "top_k_distinct", doc: &DISTINCT_DOC, distinct: true };

static DOC: Doc = Doc {
    signature: "top_k(x, k) -> list<the type of x>",
    summary:
        "the `k` largest non-null values of `x`, largest first, repeats included (`k`: an int literal, 1 to 1,000)",
    example: Example {
        arg_type: "int?",
        call: "top_k(x, 3)",
        records: &[(1000, "5"), (4000, "9"), (5000, "1"), (2000, "9"), (2500, "null"), (3000, "7")],
        result: "[9, 9, 7]",
    },
};

static DISTINCT_DOC: Doc = Doc {
    signature: "top_k_distinct(x, k) -> list<the type of x>",
    summary: "the `k` largest distinct non-null values of `x`, largest first (`k`: an int literal, 1 to 1,000)",
    example: Example {
        arg_type: "int?",
        call: "top_k_distinct(x, 3)",
        records: &[(1000, "5"), (4000, "9"), (5000, "1"), (2000, "9"), (2500, "null"), (3000, "7")],
        result: "[9, 7, 5]",
    },
};

impl Native for TopK {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let [t, k] = args else { return Err(SignatureError::Arity("two arguments: a value and k")) };
        if !t.is_ordered() {
            return Err(not_ordered(self.name, t));
        }
        if !matches!(k, Type::Int | Type::Error) {
            return Err(SignatureError::Argument {
                arg: 1,
                problem: ArgProblem::NotConstant,
                message: format!("`{}`'s k is a {k}, not an int", self.name),
                label: "not an int",
                help: format!("write how many values to keep as a whole number: `{}(x, 5)`", self.name),
            });
        }
        let list = Type::List(Box::new(t.base().clone()));
        let state = RecordType { fields: vec![("k".into(), Type::Int), ("top".into(), list.clone())] };
        Ok(Signature { result: list, state: Type::Record(state).nullable() })
    }
    fn check_literals(&self, args: &[Option<&Literal>]) -> Result<(), SignatureError> {
        match args.get(1) {
            Some(Some(Literal::Int(k))) if (1..=K_LIMIT).contains(k) => Ok(()),
            _ => Err(SignatureError::Argument {
                arg: 1,
                problem: ArgProblem::NotConstant,
                message: format!("`{}`'s k must be an int literal from 1 to {K_LIMIT}", self.name),
                label: "not a literal from 1 to 1000",
                help: format!("k is how many values the state keeps, fixed by the program: `{}(x, 5)`", self.name),
            }),
        }
    }
    fn init(&self) -> Value {
        Value::Null
    }
    fn infallible(&self) -> bool {
        true
    }
    fn update(&self, state: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let (Some(x), Some(Value::Int(k))) = (args.first(), args.get(1)) else {
            return Err(format!("`{}` without its arguments", self.name));
        };
        if x.is_null() {
            return Ok(());
        }
        let k = (*k).clamp(1, K_LIMIT) as usize;
        if state.is_null() {
            *state = Value::Record(Arc::new(vec![Value::Int(k as i64), Value::List(Arc::new(Vec::new()))]));
        }
        let (_, top) = parts(state)?;
        // After every value at least as large (largest first; a repeat goes after its equals).
        let at = top.partition_point(|v| v.cmp_total(x) != Ordering::Less);
        if at >= k || (self.distinct && at > 0 && top[at - 1].cmp_total(x) == Ordering::Equal) {
            return Ok(());
        }
        let top = Arc::make_mut(top);
        top.insert(at, x.clone());
        top.truncate(k);
        Ok(())
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        if other.is_null() {
            return Ok(());
        }
        if state.is_null() {
            *state = other;
            return Ok(());
        }
        let mut other = other;
        let (kb, b) = parts(&mut other)?;
        let (kb, b) = (kb, b.clone());
        let (ka, a) = parts(state)?;
        let k = ka.max(kb);
        let mut out: Vec<Value> = Vec::with_capacity(k);
        let (mut i, mut j) = (0, 0);
        while out.len() < k && (i < a.len() || j < b.len()) {
            let next = if j >= b.len() || (i < a.len() && a[i].cmp_total(&b[j]) != Ordering::Less) {
                i += 1;
                &a[i - 1]
            } else {
                j += 1;
                &b[j - 1]
            };
            if self.distinct && out.last().is_some_and(|l| l.cmp_total(next) == Ordering::Equal) {
                continue;
            }
            out.push(next.clone());
        }
        *state = Value::Record(Arc::new(vec![Value::Int(k as i64), Value::List(Arc::new(out))]));
        Ok(())
    }
    fn result(&self, state: &Value) -> Value {
        match state {
            Value::Record(p) => p.get(1).cloned().unwrap_or_else(|| Value::List(Arc::new(Vec::new()))),
            _ => Value::List(Arc::new(Vec::new())),
        }
    }
}

/// `k` and the list of a non-null state.
fn parts(state: &mut Value) -> Result<(usize, &mut Arc<Vec<Value>>), String> {
    let Value::Record(p) = state else { return Err("a top_k state is not a record".into()) };
    let p = Arc::make_mut(p);
    let k = match p.first() {
        Some(Value::Int(k)) => (*k).clamp(1, K_LIMIT) as usize,
        _ => return Err("a top_k state has no k".into()),
    };
    match p.get_mut(1) {
        Some(Value::List(top)) => Ok((k, top)),
        _ => Err("a top_k state has no list".into()),
    }
}
