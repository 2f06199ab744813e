//! `min(x)` and `max(x)`: the smallest and largest non-null value of `x`, by the language's
//! order (numbers by value, strings by bytes, timestamps, durations, `false < true`).

use super::{not_ordered, one_arg, Doc, Example, Native, Signature, SignatureError};
use crate::types::Type;
use crate::value::Value;

pub struct Extreme {
    name: &'static str,
    /// Keep the larger value (`max`) rather than the smaller.
    largest: bool,
    doc: &'static Doc,
}

pub static MIN: Extreme = Extreme { name: "min", largest: false, doc: &MIN_DOC };
pub static MAX: Extreme = Extreme { name: "max", largest: true, doc: &MAX_DOC };

static MIN_DOC: Doc = Doc {
    signature: "min(x) -> the type of x",
    summary: "the smallest non-null value of `x` (numbers, strings, timestamps, durations, bools)",
    example: Example {
        arg_type: "float?",
        call: "min(x)",
        records: &[(1000, "2.5"), (4000, "7"), (2000, "null"), (3000, "-1.25")],
        result: "-1.25",
    },
};

static MAX_DOC: Doc = Doc {
    signature: "max(x) -> the type of x",
    summary: "the largest non-null value of `x` (numbers, strings, timestamps, durations, bools)",
    example: Example {
        arg_type: "string",
        call: "max(x)",
        records: &[(1000, "\"pear\""), (4000, "\"plum\""), (2500, "\"apple\"")],
        result: "\"plum\"",
    },
};

impl Native for Extreme {
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
        Ok(Signature { result: t.clone(), state: t.clone().nullable() })
    }
    fn init(&self) -> Value {
        Value::Null
    }
    fn update(&self, acc: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let Some(x) = args.first() else { return Err(format!("`{}` without its argument", self.name)) };
        // Numbers of one kind compared in place (every record and window of an aggregate runs
        // this), by the same order as `cmp_total`.
        match (&mut *acc, x) {
            (_, Value::Null) => return Ok(()),
            (Value::Float(a), Value::Float(b)) => {
                let o = b.total_cmp(a);
                if (self.largest && o.is_gt()) || (!self.largest && o.is_lt()) {
                    *a = *b;
                }
                return Ok(());
            }
            (Value::Int(a), Value::Int(b)) => {
                if (self.largest && *b > *a) || (!self.largest && *b < *a) {
                    *a = *b;
                }
                return Ok(());
            }
            _ => {}
        }
        let better = acc.is_null() || {
            let o = x.cmp_total(acc);
            if self.largest {
                o.is_gt()
            } else {
                o.is_lt()
            }
        };
        if better {
            *acc = x.clone();
        }
        Ok(())
    }
    fn infallible(&self) -> bool {
        true
    }
    fn check(&self, _state: &Value, args: &[Value], _ts: i64) -> Result<(), String> {
        match args.first() {
            Some(_) => Ok(()),
            None => Err(format!("`{}` without its argument", self.name)),
        }
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        self.update(state, &[other], 0)
    }
}
