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
            summary: "the strings joined, in order; a null one is skipped (ksqlDB's CONCAT: never null)",
            examples: &[
                ("concat(\"a\", \"-\", \"b\")", "\"a-b\""),
                ("concat(\"a\", null, \"b\")", "\"ab\""),
                ("concat(null)", "\"\""),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if a.is_empty() {
            return Err("takes at least one argument".into());
        }
        a.all(&is_string, "strings")?;
        Ok(Type::String)
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        // (`text` of a null is "".)
        Ok(Value::str(&v.iter().map(text).collect::<String>()))
    }
    fn sees_nulls(&self) -> bool {
        true
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

pub struct Instr;

impl Function for Instr {
    fn name(&self) -> &'static str {
        "instr"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "instr(string, substring: string[, position: int[, occurrence: int]]) -> int",
            summary: "the position (1 is the first character) of the substring's occurrence-th match (default the first) searching from `position` (default 1; negative: from that far from the end, backwards); 0 if there is none (ksqlDB's INSTR)",
            examples: &[
                ("instr(\"CORPORATE FLOOR\", \"OR\")", "2"),
                ("instr(\"CORPORATE FLOOR\", \"OR\", 3)", "5"),
                ("instr(\"CORPORATE FLOOR\", \"OR\", 3, 2)", "14"),
                ("instr(\"CORPORATE FLOOR\", \"OR\", -3)", "5"),
                ("instr(\"CORPORATE FLOOR\", \"OR\", -3, 2)", "2"),
                ("instr(\"CORPORATE FLOOR\", \"MORE\")", "0"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if !(2..=4).contains(&a.len())
            || !a.types[..2].iter().all(|t| is_string(t.base()) || **t == Type::Null)
            || !a.types[2..].iter().all(|t| *t.base() == Type::Int || **t == Type::Null)
        {
            return Err("takes (string, string substring[, int position[, int occurrence]])".into());
        }
        Ok(Type::Int.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let s: Vec<char> = text(&v[0]).chars().collect();
        let sub: Vec<char> = text(&v[1]).chars().collect();
        let position = v.get(2).map_or(1, int);
        let occurrence = v.get(3).map_or(1, int);
        let n = s.len() as i64;
        let at = |i: i64| i >= 0 && i + sub.len() as i64 <= n && s[i as usize..i as usize + sub.len()] == sub[..];
        if occurrence < 1 || position == 0 {
            return Ok(Value::Int(0));
        }
        let mut seen = 0;
        if position > 0 {
            for i in position - 1..n.max(0) {
                if at(i) {
                    seen += 1;
                    if seen == occurrence {
                        return Ok(Value::Int(i + 1));
                    }
                }
            }
        } else {
            let mut i = n + position;
            while i >= 0 {
                if at(i) {
                    seen += 1;
                    if seen == occurrence {
                        return Ok(Value::Int(i + 1));
                    }
                }
                i -= 1;
            }
        }
        Ok(Value::Int(0))
    }
}

/// `lpad` and `rpad`.
pub struct Pad {
    left: bool,
}

pub static LPAD: Pad = Pad { left: true };
pub static RPAD: Pad = Pad { left: false };

impl Function for Pad {
    fn name(&self) -> &'static str {
        if self.left {
            "lpad"
        } else {
            "rpad"
        }
    }
    fn doc(&self) -> &'static Doc {
        if self.left {
            &Doc {
                signature: "lpad(string, length: int, padding: string) -> string",
                summary: "the string made `length` characters long: the padding repeated before it, or its first `length` characters; null for an empty padding or a negative length (ksqlDB's LPAD)",
                examples: &[("lpad(\"Foo\", 7, \"Bar\")", "\"BarBFoo\""), ("lpad(\"Foo\", 2, \"Bar\")", "\"Fo\""), ("lpad(\"Foo\", 5, \"\")", "null")],
            }
        } else {
            &Doc {
                signature: "rpad(string, length: int, padding: string) -> string",
                summary: "the string made `length` characters long: the padding repeated after it, or its first `length` characters; null for an empty padding or a negative length (ksqlDB's RPAD)",
                examples: &[("rpad(\"Foo\", 7, \"Bar\")", "\"FooBarB\""), ("rpad(\"Foo\", 2, \"Bar\")", "\"Fo\"")],
            }
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(3)?;
        let ok = |i: usize, p: &dyn Fn(&Type) -> bool| p(a.types[i].base()) || *a.types[i] == Type::Null;
        if !(ok(0, &is_string) && ok(1, &|t| *t == Type::Int) && ok(2, &is_string)) {
            return Err("takes (string, int length, string padding)".into());
        }
        Ok(Type::String.nullable())
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (s, len, pad) = (text(&v[0]), int(&v[1]), text(&v[2]));
        if pad.is_empty() || len < 0 {
            return Ok(Value::Null);
        }
        // (A length past what a list may hold would be a huge string: bounded like lists.)
        if len as usize > crate::value::MAX_LIST * 100 {
            return Err(format!("a padded length of {len} characters"));
        }
        let len = len as usize;
        let chars: Vec<char> = s.chars().collect();
        if chars.len() >= len {
            return Ok(Value::str(&chars[..len].iter().collect::<String>()));
        }
        let fill: String = pad.chars().cycle().take(len - chars.len()).collect();
        Ok(Value::str(&if self.left { fill + s } else { s.to_string() + &fill }))
    }
}

pub struct Initcap;

impl Function for Initcap {
    fn name(&self) -> &'static str {
        "initcap"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "initcap(string) -> string",
            summary: "each word (runs of characters between whitespace) with its first letter in upper case and the rest in lower case (ksqlDB's INITCAP)",
            examples: &[("initcap(\"the hOuse  on the HILL\")", "\"The House  On The Hill\"")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        a.all(&is_string, "a string")?;
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let mut out = String::new();
        let mut start = true;
        for c in text(&v[0]).chars() {
            if c.is_whitespace() {
                start = true;
                out.push(c);
            } else if start {
                out.extend(c.to_uppercase());
                start = false;
            } else {
                out.extend(c.to_lowercase());
            }
        }
        Ok(Value::str(&out))
    }
}
