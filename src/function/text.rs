//! Text functions: case, trimming, concatenation, length, substrings, searches.

use super::{int, is_int, is_string, text, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

/// A function from one string to a string.
pub struct Map {
    name: &'static str,
    f: fn(&str) -> String,
    doc: &'static Doc,
}

pub static LOWER: Map = Map {
    name: "lower",
    f: str::to_lowercase,
    doc: &Doc {
        signature: "lower(string) -> string",
        summary: "the string in lower case (Unicode)",
        examples: &[("lower(\"ÀbC\")", "\"àbc\"")],
    },
};
pub static UPPER: Map = Map {
    name: "upper",
    f: str::to_uppercase,
    doc: &Doc {
        signature: "upper(string) -> string",
        summary: "the string in upper case (Unicode)",
        examples: &[("upper(\"straße\")", "\"STRASSE\"")],
    },
};
pub static TRIM: Map = Map {
    name: "trim",
    f: |s| s.trim().to_string(),
    doc: &Doc {
        signature: "trim(string) -> string",
        summary: "the string without leading and trailing white space",
        examples: &[("trim(\"  a b \")", "\"a b\"")],
    },
};

impl Function for Map {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&is_string, "a string")?;
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::str(&(self.f)(text(&v[0]))))
    }
}

pub struct Concat;

impl Function for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "concat(string, ...) -> string",
            summary: "the strings joined, in order (null if any is null)",
            examples: &[("concat(\"a\", \"-\", \"b\")", "\"a-b\""), ("concat(\"a\", null)", "null")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if a.is_empty() {
            return Err("takes at least one argument".into());
        }
        a.all(&is_string, "strings")?;
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::str(&v.iter().map(text).collect::<String>()))
    }
}

pub struct Len;

impl Function for Len {
    fn name(&self) -> &'static str {
        "len"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "len(string | list | map) -> int",
            summary: "the number of characters of a string, of items of a list, or of entries of a map",
            examples: &[("len(\"héllo\")", "5"), ("len([1, 2, 3])", "3"), ("len(map { \"a\": 1 })", "1")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&|t| is_string(t) || matches!(t, Type::List(_) | Type::Map(..)), "a string, a list or a map")?;
        Ok(Type::Int.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(match &v[0] {
            Value::Str(x) => Value::Int(x.chars().count() as i64),
            Value::List(l) => Value::Int(l.len() as i64),
            Value::Map(m) => Value::Int(m.len() as i64),
            _ => Value::Null,
        })
    }
}

pub struct Substr;

impl Function for Substr {
    fn name(&self) -> &'static str {
        "substr"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "substr(string, start: int[, length: int]) -> string",
            summary: "the characters from `start` (1 is the first; 0 and below count as 1), at most `length` of them",
            examples: &[
                ("substr(\"streamc\", 2, 3)", "\"tre\""),
                ("substr(\"streamc\", 7)", "\"c\""),
                ("substr(\"ab\", 9)", "\"\""),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if !(2..=3).contains(&a.len()) {
            return Err(format!("takes 2 or 3 arguments, not {}", a.len()));
        }
        if !is_string(a.types[0].base()) || !a.types[1..].iter().all(|t| is_int(t.base())) {
            return Err("takes (string, int[, int])".into());
        }
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let start = (int(&v[1]).max(1) - 1) as usize;
        let len = if v.len() > 2 { int(&v[2]).max(0) as usize } else { usize::MAX };
        Ok(Value::str(&text(&v[0]).chars().skip(start).take(len).collect::<String>()))
    }
}

/// A test of a string against another.
pub struct Test {
    name: &'static str,
    f: fn(&str, &str) -> bool,
    doc: &'static Doc,
}

pub static CONTAINS: Test = Test {
    name: "contains",
    f: |s, p| s.contains(p),
    doc: &Doc {
        signature: "contains(string, string) -> bool",
        summary: "whether the first string contains the second",
        examples: &[("contains(\"streamc\", \"eam\")", "true")],
    },
};
pub static STARTS_WITH: Test = Test {
    name: "starts_with",
    f: |s, p| s.starts_with(p),
    doc: &Doc {
        signature: "starts_with(string, string) -> bool",
        summary: "whether the first string starts with the second",
        examples: &[("starts_with(\"streamc\", \"stream\")", "true")],
    },
};
pub static ENDS_WITH: Test = Test {
    name: "ends_with",
    f: |s, p| s.ends_with(p),
    doc: &Doc {
        signature: "ends_with(string, string) -> bool",
        summary: "whether the first string ends with the second",
        examples: &[("ends_with(\"streamc\", \"x\")", "false")],
    },
};

impl Function for Test {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        a.all(&is_string, "strings")?;
        Ok(Type::Bool.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::Bool((self.f)(text(&v[0]), text(&v[1]))))
    }
}
