//! Conversions between timestamps, durations and epoch milliseconds.

use super::{int, is_int, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

pub struct EpochMs;

impl Function for EpochMs {
    fn name(&self) -> &'static str {
        "epoch_ms"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "epoch_ms(timestamp) -> int",
            summary: "the timestamp as milliseconds since 1970-01-01T00:00:00Z",
            examples: &[("epoch_ms(from_epoch_ms(1700000000000))", "1700000000000")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&|t| *t == Type::Timestamp, "a timestamp")?;
        Ok(Type::Int.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(match &v[0] {
            Value::Ts(t) => Value::Int(*t),
            _ => Value::Null,
        })
    }
}

pub struct FromEpochMs;

impl Function for FromEpochMs {
    fn name(&self) -> &'static str {
        "from_epoch_ms"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "from_epoch_ms(int) -> timestamp",
            summary: "the timestamp that many milliseconds after 1970-01-01T00:00:00Z",
            examples: &[("from_epoch_ms(1700000000000) + 1s", "1700000001000")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&is_int, "an int")?;
        Ok(Type::Timestamp.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::Ts(int(&v[0])))
    }
}

pub struct Millis;

impl Function for Millis {
    fn name(&self) -> &'static str {
        "millis"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "millis(duration) -> int",
            summary: "the duration in milliseconds",
            examples: &[("millis(1m + 500ms)", "60500")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&|t| *t == Type::Duration, "a duration")?;
        Ok(Type::Int.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(match &v[0] {
            Value::Dur(d) => Value::Int(*d),
            _ => Value::Null,
        })
    }
}
