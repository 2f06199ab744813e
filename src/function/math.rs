//! Arithmetic functions.

use super::{finite, int, is_int, is_number, number, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

pub struct Abs;

impl Function for Abs {
    fn name(&self) -> &'static str {
        "abs"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "abs(number | duration) -> same",
            summary: "the absolute value, of the argument's type (an int overflow is an error)",
            examples: &[("abs(-3)", "3"), ("abs(-2.5)", "2.5")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&|t| is_number(t) || *t == Type::Duration, "a number or duration")?;
        Ok(a.types[0].clone())
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(match &v[0] {
            Value::Int(x) => Value::Int(x.checked_abs().ok_or("integer overflow in abs")?),
            Value::Float(x) => Value::Float(x.abs()),
            Value::Dur(x) => Value::Dur(x.checked_abs().ok_or("duration overflow in abs")?),
            _ => Value::Null,
        })
    }
}

pub struct Round;

impl Function for Round {
    fn name(&self) -> &'static str {
        "round"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "round(number[, digits: int]) -> float",
            summary: "rounded half away from zero, to `digits` decimal places (default 0; -15 to 15)",
            examples: &[("round(2.5)", "3.0"), ("round(3.14159, 2)", "3.14"), ("round(1234, -2)", "1200.0")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if !(1..=2).contains(&a.len()) {
            return Err(format!("takes 1 or 2 arguments, not {}", a.len()));
        }
        if !is_number(a.types[0].base()) || (a.len() == 2 && !is_int(a.types[1].base())) {
            return Err("takes (number[, int digits])".into());
        }
        Ok(Type::Float.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let digits = if v.len() > 1 { int(&v[1]).clamp(-15, 15) as i32 } else { 0 };
        let m = 10f64.powi(digits);
        finite((number(&v[0]) * m).round() / m, "round")
    }
}

/// A function from one number to a float.
pub struct Unary {
    name: &'static str,
    f: fn(f64) -> f64,
    doc: &'static Doc,
}

pub static FLOOR: Unary = Unary {
    name: "floor",
    f: f64::floor,
    doc: &Doc {
        signature: "floor(number) -> float",
        summary: "the largest whole number not above it",
        examples: &[("floor(-1.5)", "-2.0")],
    },
};
pub static CEIL: Unary = Unary {
    name: "ceil",
    f: f64::ceil,
    doc: &Doc {
        signature: "ceil(number) -> float",
        summary: "the smallest whole number not below it",
        examples: &[("ceil(1.2)", "2.0")],
    },
};

pub static TRUNC: Unary = Unary {
    name: "trunc",
    f: f64::trunc,
    doc: &Doc {
        signature: "trunc(number) -> float",
        summary: "the whole part, toward zero",
        examples: &[("trunc(-1.7)", "-1.0"), ("trunc(2.9)", "2.0")],
    },
};
pub static EXP: Unary = Unary {
    name: "exp",
    f: f64::exp,
    doc: &Doc {
        signature: "exp(number) -> float",
        summary: "e to the power of the number (a non-finite result is an error)",
        examples: &[("exp(0)", "1.0")],
    },
};
pub static LN: Unary = Unary {
    name: "ln",
    f: f64::ln,
    doc: &Doc {
        signature: "ln(number) -> float",
        summary: "the natural logarithm (of zero or a negative number: an error)",
        examples: &[("ln(1)", "0.0")],
    },
};
pub static LOG10: Unary = Unary {
    name: "log10",
    f: f64::log10,
    doc: &Doc {
        signature: "log10(number) -> float",
        summary: "the base-10 logarithm (of zero or a negative number: an error)",
        examples: &[("log10(1000)", "3.0")],
    },
};
pub static SIN: Unary = Unary {
    name: "sin",
    f: f64::sin,
    doc: &Doc {
        signature: "sin(number) -> float",
        summary: "the sine of an angle in radians",
        examples: &[("sin(0)", "0.0")],
    },
};
pub static COS: Unary = Unary {
    name: "cos",
    f: f64::cos,
    doc: &Doc {
        signature: "cos(number) -> float",
        summary: "the cosine of an angle in radians",
        examples: &[("cos(0)", "1.0")],
    },
};
pub static TAN: Unary = Unary {
    name: "tan",
    f: f64::tan,
    doc: &Doc {
        signature: "tan(number) -> float",
        summary: "the tangent of an angle in radians",
        examples: &[("tan(0)", "0.0")],
    },
};

impl Function for Unary {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&is_number, "a number")?;
        Ok(Type::Float.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        finite((self.f)(number(&v[0])), self.name)
    }
}

pub struct Sqrt;

impl Function for Sqrt {
    fn name(&self) -> &'static str {
        "sqrt"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "sqrt(number) -> float",
            summary: "the square root (of a negative number: an error)",
            examples: &[("sqrt(16)", "4.0")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&is_number, "a number")?;
        Ok(Type::Float.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let x = number(&v[0]);
        if x < 0.0 {
            return Err(format!("sqrt of a negative number ({x})"));
        }
        Ok(Value::Float(x.sqrt()))
    }
}

pub struct Pow;

impl Function for Pow {
    fn name(&self) -> &'static str {
        "pow"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "pow(number, number) -> float",
            summary: "the first number to the power of the second (a non-finite result is an error)",
            examples: &[("pow(2, 10)", "1024.0"), ("pow(4, 0.5)", "2.0")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        a.all(&is_number, "numbers")?;
        Ok(Type::Float.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        finite(number(&v[0]).powf(number(&v[1])), "pow")
    }
}

pub struct Sign;

impl Function for Sign {
    fn name(&self) -> &'static str {
        "sign"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "sign(number) -> int",
            summary: "-1, 0 or 1 as the number is negative, zero or positive",
            examples: &[("sign(-2.5)", "-1"), ("sign(0)", "0"), ("sign(7)", "1")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&is_number, "a number")?;
        Ok(Type::Int.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let x = number(&v[0]);
        Ok(Value::Int(if x > 0.0 {
            1
        } else if x < 0.0 {
            -1
        } else {
            0
        }))
    }
}
