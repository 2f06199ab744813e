//! `sum(x)`: the sum of the non-null values of `x` (ints, floats or durations).

use super::{one_arg, ArgProblem, Doc, Example, Native, Signature, SignatureError};
use crate::types::Type;
use crate::value::Value;

pub struct Sum;

static DOC: Doc = Doc {
    signature: "sum(x: int | float | duration) -> the type of x",
    summary: "the sum of the non-null values of `x`; null when there are none",
    example: Example {
        arg_type: "int?",
        call: "sum(x)",
        records: &[(1000, "3"), (4000, "-1"), (2000, "null"), (3000, "5")],
        result: "7",
    },
};

impl Native for Sum {
    fn name(&self) -> &'static str {
        "sum"
    }
    fn doc(&self) -> &'static Doc {
        &DOC
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let t = one_arg(args)?;
        if !t.is_numeric() && *t.base() != Type::Duration {
            return Err(SignatureError::Argument {
                arg: 0,
                problem: ArgProblem::NotNumeric,
                message: format!("`sum` of a {t}"),
                label: "not a number",
                help: "`sum` adds ints, floats or durations; count records with `count()`".into(),
            });
        }
        Ok(Signature { result: t.clone(), state: t.clone().nullable() })
    }
    fn init(&self) -> Value {
        Value::Null
    }
    fn update(&self, acc: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err("`sum` without its argument".into()) };
        // The common cases in place (every record and window of an aggregate runs this).
        match (&mut *acc, x) {
            (_, Value::Null) => return Ok(()),
            (Value::Int(a), Value::Int(b)) => {
                *a = a.checked_add(*b).ok_or("integer overflow in `sum`")?;
                return Ok(());
            }
            (Value::Float(a), Value::Float(b)) => {
                let s = *a + b;
                if !s.is_finite() {
                    return Err("`sum` is not a finite number".into());
                }
                *a = s;
                return Ok(());
            }
            _ => {}
        }
        let next = match (&*acc, x) {
            (_, Value::Null) => return Ok(()),
            (Value::Null, x) => x.clone(),
            (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or("integer overflow in `sum`")?),
            (Value::Dur(a), Value::Dur(b)) => Value::Dur(a.checked_add(*b).ok_or("duration overflow in `sum`")?),
            (Value::Float(a), Value::Float(b)) => {
                let s = a + b;
                if !s.is_finite() {
                    return Err("`sum` is not a finite number".into());
                }
                Value::Float(s)
            }
            (Value::Float(a), Value::Int(b)) | (Value::Int(b), Value::Float(a)) => Value::Float(a + *b as f64),
            _ => return Err("bad operand for `sum`".into()),
        };
        *acc = next;
        Ok(())
    }
    fn check(&self, acc: &Value, args: &[Value], ts: i64) -> Result<(), String> {
        match (acc, args.first()) {
            (_, Some(Value::Null)) | (Value::Null, Some(_)) => Ok(()),
            (Value::Int(a), Some(Value::Int(b))) => {
                a.checked_add(*b).map(|_| ()).ok_or("integer overflow in `sum`".into())
            }
            (Value::Float(a), Some(Value::Float(b))) if (a + b).is_finite() => Ok(()),
            _ => self.update(&mut acc.clone(), args, ts),
        }
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        self.update(state, &[other], 0)
    }
    fn retractable(&self) -> bool {
        true
    }
    /// Subtracts: the sum of what is left (0, not null, once every non-null value was taken
    /// back, since the state does not count them).
    fn retract(&self, acc: &mut Value, args: &[Value]) -> Result<(), String> {
        let negated = match args.first() {
            None => return Err("`sum` without its argument".into()),
            Some(Value::Null) => return Ok(()),
            Some(Value::Int(x)) => Value::Int(x.checked_neg().ok_or("integer overflow in `sum`")?),
            Some(Value::Dur(x)) => Value::Dur(x.checked_neg().ok_or("duration overflow in `sum`")?),
            Some(Value::Float(x)) => Value::Float(-x),
            Some(_) => return Err("bad operand for `sum`".into()),
        };
        self.update(acc, &[negated], 0)
    }
}
