//! `earliest(x)` and `latest(x)`: the non-null value of `x` at the smallest / largest event
//! time in the group (or window). Ties: `earliest` keeps the first record to arrive, `latest`
//! the last; when sessions merge, a tie keeps the value of the session that started first.
//! The state is the pair `{t: timestamp, v: x}` (null before the first non-null value).

use std::sync::Arc;

use super::{one_arg, Doc, Example, Native, Signature, SignatureError};
use crate::types::{RecordType, Type};
use crate::value::Value;

pub struct ByTime {
    name: &'static str,
    /// Keep the value at the largest time (`latest`) rather than the smallest.
    last: bool,
    doc: &'static Doc,
}

pub static EARLIEST: ByTime = ByTime { name: "earliest", last: false, doc: &EARLIEST_DOC };
pub static LATEST: ByTime = ByTime { name: "latest", last: true, doc: &LATEST_DOC };

static EARLIEST_DOC: Doc = Doc {
    signature: "earliest(x) -> the type of x",
    summary: "the non-null value of `x` with the smallest event time (ties: the first to arrive)",
    example: Example {
        arg_type: "string?",
        call: "earliest(x)",
        records: &[(4000, "\"c\""), (1500, "\"b\""), (1000, "null"), (2500, "\"a\""), (1500, "\"b2\"")],
        result: "\"b\"",
    },
};

static LATEST_DOC: Doc = Doc {
    signature: "latest(x) -> the type of x",
    summary: "the non-null value of `x` with the largest event time (ties: the last to arrive)",
    example: Example {
        arg_type: "int?",
        call: "latest(x)",
        records: &[(1000, "1"), (4000, "4"), (2500, "25"), (4000, "44"), (5000, "null")],
        result: "44",
    },
};

impl ByTime {
    /// Whether a value at `t` replaces one at `held`.
    fn replaces(&self, t: i64, held: i64) -> bool {
        if self.last {
            t >= held
        } else {
            t < held
        }
    }
}

impl Native for ByTime {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let t = one_arg(args)?;
        let pair = RecordType { fields: vec![("t".into(), Type::Timestamp), ("v".into(), t.base().clone())] };
        Ok(Signature { result: t.clone(), state: Type::Record(pair).nullable() })
    }
    fn init(&self) -> Value {
        Value::Null
    }
    fn update(&self, state: &mut Value, args: &[Value], ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err(format!("`{}` without its argument", self.name)) };
        if x.is_null() {
            return Ok(());
        }
        let take = match time_of(state)? {
            None => true,
            Some(held) => self.replaces(ts, held),
        };
        if take {
            *state = Value::Record(Arc::new(vec![Value::Ts(ts), x.clone()]));
        }
        Ok(())
    }
    fn infallible(&self) -> bool {
        true
    }
    fn check(&self, state: &Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err(format!("`{}` without its argument", self.name)) };
        if !x.is_null() {
            time_of(state)?;
        }
        Ok(())
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        let take = match (time_of(state)?, time_of(&other)?) {
            (_, None) => false,
            (None, Some(_)) => true,
            // A tie keeps the value of the session that started first: this one.
            (Some(held), Some(t)) => {
                if self.last {
                    t > held
                } else {
                    t < held
                }
            }
        };
        if take {
            *state = other;
        }
        Ok(())
    }
    fn result(&self, state: &Value) -> Value {
        match state {
            Value::Record(pair) => pair.get(1).cloned().unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }
}

/// The event time a state holds its value at (None: no value yet).
fn time_of(state: &Value) -> Result<Option<i64>, String> {
    match state {
        Value::Null => Ok(None),
        Value::Record(pair) => match pair.first() {
            Some(Value::Ts(t)) | Some(Value::Int(t)) => Ok(Some(*t)),
            _ => Err("an earliest/latest state has no time".into()),
        },
        _ => Err("an earliest/latest state is not a pair".into()),
    }
}
