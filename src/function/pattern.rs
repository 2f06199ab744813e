//! Regular expressions (the `regex` crate's syntax: no look-around or back-references, linear
//! time on any input) and splitting. A pattern that does not compile is an evaluation error.

use std::cell::RefCell;

use regex::{Regex, RegexBuilder};
use rustc_hash::FxHashMap;

use super::{int, is_int, is_string, text, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

/// The compiled pattern (patterns are usually literals: each is compiled once per thread; at
/// most 64 are kept, compiled programs of at most 1 MiB).
fn regex(pattern: &str) -> Result<Regex, String> {
    thread_local! {
        static CACHE: RefCell<FxHashMap<String, Regex>> = RefCell::new(FxHashMap::default());
    }
    CACHE.with(|c| {
        if let Some(r) = c.borrow().get(pattern) {
            return Ok(r.clone());
        }
        // Patterns can come from records: each compiled program is kept small.
        let r = RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("bad regular expression {pattern:?}: {e}"))?;
        let mut c = c.borrow_mut();
        if c.len() >= 64 {
            c.clear();
        }
        c.insert(pattern.to_string(), r.clone());
        Ok(r)
    })
}

/// The arguments of `regexp_extract` and `regexp_extract_all`: (string, pattern[, group]).
fn check_extract(a: &Args) -> Result<(), String> {
    if !(2..=3).contains(&a.len()) {
        return Err(format!("takes 2 or 3 arguments, not {}", a.len()));
    }
    if !a.types[..2].iter().all(|t| is_string(t.base()) || **t == Type::Null)
        || (a.len() == 3 && !is_int(a.types[2].base()))
    {
        return Err("takes (string, string pattern[, int group])".into());
    }
    Ok(())
}

/// Their pattern, compiled, and the group asked for (0, the whole match, by default).
fn pattern_group(v: &[Value]) -> Result<(Regex, usize), String> {
    let group = if v.len() > 2 { int(&v[2]) } else { 0 };
    let r = regex(text(&v[1]))?;
    if group < 0 || group as usize >= r.captures_len() {
        return Err(format!("the pattern has no group {group}"));
    }
    Ok((r, group as usize))
}

pub struct RegexpMatches;

impl Function for RegexpMatches {
    fn name(&self) -> &'static str {
        "regexp_matches"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "regexp_matches(string, pattern: string) -> bool",
            summary: "whether the pattern matches somewhere in the string (anchor it with `^…$` for the whole string)",
            examples: &[
                ("regexp_matches(\"order-1234\", \"[0-9]{4}\")", "true"),
                ("regexp_matches(\"order-12\", \"^order-[0-9]{4}$\")", "false"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        a.all(&is_string, "strings")?;
        Ok(Type::Bool.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::Bool(regex(text(&v[1]))?.is_match(text(&v[0]))))
    }
}

pub struct RegexpExtract;

impl Function for RegexpExtract {
    fn name(&self) -> &'static str {
        "regexp_extract"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "regexp_extract(string, pattern: string[, group: int]) -> string?",
            summary: "the first match of the pattern, or of its numbered group (0, the default, is the whole match); null if it does not match",
            examples: &[
                ("regexp_extract(\"user=ann; id=42\", \"id=([0-9]+)\", 1)", "\"42\""),
                ("regexp_extract(\"no digits\", \"[0-9]+\")", "null"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        check_extract(a)?;
        Ok(Type::String.nullable())
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (r, group) = pattern_group(&v)?;
        Ok(r.captures(text(&v[0])).and_then(|c| c.get(group)).map(|m| Value::str(m.as_str())).unwrap_or(Value::Null))
    }
}

pub struct RegexpReplace;

impl Function for RegexpReplace {
    fn name(&self) -> &'static str {
        "regexp_replace"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "regexp_replace(string, pattern: string, replacement: string) -> string",
            summary: "every match of the pattern replaced; `$1` or `${name}` in the replacement is that group's text",
            examples: &[
                ("regexp_replace(\"a1b22c333\", \"[0-9]+\", \"#\")", "\"a#b#c#\""),
                ("regexp_replace(\"2024-07-15\", \"([0-9]+)-([0-9]+)-([0-9]+)\", \"$3/$2/$1\")", "\"15/07/2024\""),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(3)?;
        a.all(&is_string, "strings")?;
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::str(&regex(text(&v[1]))?.replace_all(text(&v[0]), text(&v[2]))))
    }
}

pub struct Split;

impl Function for Split {
    fn name(&self) -> &'static str {
        "split"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "split(string, separator: string) -> list<string>",
            summary: "the parts between occurrences of the separator (an empty separator: each character; an empty string: one empty part, as ksqlDB's SPLIT)",
            examples: &[
                ("split(\"a,b,,c\", \",\")", "[\"a\", \"b\", \"\", \"c\"]"),
                ("split(\"héllo\", \"\")", "[\"h\", \"é\", \"l\", \"l\", \"o\"]"),
                ("split(\"\", \"\")", "[\"\"]"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        a.all(&is_string, "strings")?;
        Ok(Type::List(Box::new(Type::String)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (s, sep) = (text(&v[0]), text(&v[1]));
        let parts: Vec<Value> = if s.is_empty() {
            vec![Value::str("")]
        } else if sep.is_empty() {
            s.chars().map(|c| Value::str(&c.to_string())).collect()
        } else {
            s.split(sep).map(Value::str).collect()
        };
        Ok(Value::List(parts.into()))
    }
}

pub struct RegexpSplitToArray;

impl Function for RegexpSplitToArray {
    fn name(&self) -> &'static str {
        "regexp_split_to_array"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "regexp_split_to_array(string, pattern: string) -> list<string>",
            summary: "the parts between matches of the pattern, empty ones included (an empty pattern: each character; ksqlDB's REGEXP_SPLIT_TO_ARRAY)",
            examples: &[
                ("regexp_split_to_array(\"a1b22c\", \"[0-9]+\")", "[\"a\", \"b\", \"c\"]"),
                ("regexp_split_to_array(\"a,b;;c\", \"[,;]\")", "[\"a\", \"b\", \"\", \"c\"]"),
                ("regexp_split_to_array(\"ab\", \"\")", "[\"a\", \"b\"]"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        a.all(&is_string, "strings")?;
        Ok(Type::List(Box::new(Type::String)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (s, p) = (text(&v[0]), text(&v[1]));
        let parts: Vec<Value> = if p.is_empty() {
            s.chars().take(crate::value::MAX_LIST + 1).map(|c| Value::str(&c.to_string())).collect()
        } else {
            regex(p)?.split(s).take(crate::value::MAX_LIST + 1).map(Value::str).collect()
        };
        if parts.len() > crate::value::MAX_LIST {
            return Err(format!("more than {} parts", crate::value::MAX_LIST));
        }
        Ok(Value::List(parts.into()))
    }
}

pub struct RegexpExtractAll;

impl Function for RegexpExtractAll {
    fn name(&self) -> &'static str {
        "regexp_extract_all"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "regexp_extract_all(string, pattern: string[, group: int]) -> list<string?>",
            summary: "every match of the pattern, or of its numbered group (0, the default, is the whole match; a group that took no part: null), in order (ksqlDB's REGEXP_EXTRACT_ALL, which takes the pattern first)",
            examples: &[
                ("regexp_extract_all(\"a1 b22 c333\", \"[0-9]+\")", "[\"1\", \"22\", \"333\"]"),
                ("regexp_extract_all(\"k=1, j=2\", \"([a-z])=([0-9])\", 2)", "[\"1\", \"2\"]"),
                ("regexp_extract_all(\"none\", \"[0-9]\")", "[]"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        check_extract(a)?;
        Ok(Type::List(Box::new(Type::String.nullable())).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (r, group) = pattern_group(&v)?;
        let all: Vec<Value> = r
            .captures_iter(text(&v[0]))
            .take(crate::value::MAX_LIST + 1)
            .map(|c| c.get(group).map(|m| Value::str(m.as_str())).unwrap_or(Value::Null))
            .collect();
        if all.len() > crate::value::MAX_LIST {
            return Err(format!("more than {} matches", crate::value::MAX_LIST));
        }
        Ok(Value::List(all.into()))
    }
}
