//! Conversions between types.

use super::{finite, is_number, is_string, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

pub struct ToText;

impl Function for ToText {
    fn name(&self) -> &'static str {
        "to_string"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "to_string(any) -> string",
            summary: "the value as text (a string as it is; null stays null)",
            examples: &[
                ("to_string(42)", "\"42\""),
                ("to_string(\"a\")", "\"a\""),
                ("to_string(map { \"b\": 2, \"a\": 1 })", "\"{a:1,b:2}\""),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(match &v[0] {
            Value::Null => Value::Null,
            Value::Str(x) => Value::Str(x.clone()),
            v => Value::str(&v.to_string()),
        })
    }
    fn sees_nulls(&self) -> bool {
        true
    }
}

/// A conversion to a number.
pub struct ToNumber {
    name: &'static str,
    int: bool,
    doc: &'static Doc,
}

pub static TO_INT: ToNumber = ToNumber {
    name: "to_int",
    int: true,
    doc: &Doc {
        signature: "to_int(number | string | bool) -> int",
        summary: "a float truncated toward zero, a bool as 0 or 1, a string parsed (not an int: an error)",
        examples: &[("to_int(-2.7)", "-2"), ("to_int(\" 12 \")", "12"), ("to_int(true)", "1")],
    },
};
pub static TO_FLOAT: ToNumber = ToNumber {
    name: "to_float",
    int: false,
    doc: &Doc {
        signature: "to_float(number | string | bool) -> float",
        summary: "a number as a float, a bool as 0.0 or 1.0, a string parsed (not a number: an error)",
        examples: &[("to_float(3)", "3.0"), ("to_float(\"2.5\")", "2.5")],
    },
};

impl Function for ToNumber {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&|t| is_number(t) || is_string(t) || *t == Type::Bool, "a number, string or bool")?;
        Ok((if self.int { Type::Int } else { Type::Float }).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        use Value::*;
        Ok(if self.int {
            match &v[0] {
                Int(x) => Int(*x),
                Float(x) if x.is_finite() && x.abs() < 9.2e18 => Int(x.trunc() as i64),
                Bool(x) => Int(*x as i64),
                Str(x) => Int(x.trim().parse().map_err(|_| format!("`{x}` is not an int"))?),
                v => return Err(format!("cannot convert {v} to int")),
            }
        } else {
            match &v[0] {
                Int(x) => Float(*x as f64),
                Float(x) => Float(*x),
                Bool(x) => Float(*x as i64 as f64),
                Str(x) => finite(x.trim().parse().map_err(|_| format!("`{x}` is not a float"))?, "to_float")?,
                v => return Err(format!("cannot convert {v} to float")),
            }
        })
    }
}
