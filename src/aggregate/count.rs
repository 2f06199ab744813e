//! `count()` / `count(*)` counts records; `count(x)` counts records whose `x` is not null.

use super::{Doc, Example, Native, Signature, SignatureError};
use crate::types::Type;
use crate::value::Value;

pub struct Count;

static DOC: Doc = Doc {
    signature: "count() -> int, count(x) -> int",
    summary: "the number of records; with an argument, of records whose `x` is not null",
    example: Example {
        arg_type: "int?",
        call: "count(x)",
        records: &[(1000, "3"), (4000, "5"), (5000, "5"), (2000, "null"), (3000, "7")],
        result: "4",
    },
};

impl Native for Count {
    fn name(&self) -> &'static str {
        "count"
    }
    fn doc(&self) -> &'static Doc {
        &DOC
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        if args.len() > 1 {
            return Err(SignatureError::Arity("no argument or one"));
        }
        Ok(Signature { result: Type::Int, state: Type::Int })
    }
    fn init(&self) -> Value {
        Value::Int(0)
    }
    fn update(&self, state: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        if args.first().is_none_or(|v| !v.is_null()) {
            add(state, 1)?;
        }
        Ok(())
    }
    fn infallible(&self) -> bool {
        true
    }
    fn check(&self, state: &Value, args: &[Value], _ts: i64) -> Result<(), String> {
        match state {
            _ if args.first().is_some_and(Value::is_null) => Ok(()),
            Value::Int(n) if *n < i64::MAX => Ok(()),
            Value::Int(_) => Err("integer overflow in `count`".into()),
            _ => Err("a count's state is not an int".into()),
        }
    }
    fn retractable(&self) -> bool {
        true
    }
    fn retract(&self, state: &mut Value, args: &[Value]) -> Result<(), String> {
        if args.first().is_none_or(|v| !v.is_null()) {
            add(state, -1)?;
        }
        Ok(())
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        match other {
            Value::Int(m) => add(state, m),
            _ => Err("a count's state is not an int".into()),
        }
    }
}

fn add(state: &mut Value, m: i64) -> Result<(), String> {
    match state {
        Value::Int(n) => {
            *n = n.checked_add(m).ok_or("integer overflow in `count`")?;
            Ok(())
        }
        _ => Err("a count's state is not an int".into()),
    }
}
