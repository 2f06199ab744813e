//! Built-in functions. Each is a type implementing [`Function`] — its signature check, its
//! evaluation and its documentation with worked examples — so that a function lives in one
//! place; related functions share a file (`text`, `pattern`, `json`, `list`, `map`, `math`, `choice`,
//! `convert`, `time`, `calendar`).
//! `tests/functions.rs` runs every example through the engine and checks that every signature
//! is in docs/language.md. Nothing here reads the clock, randomness or the environment.

pub mod calendar;
pub mod choice;
pub mod convert;
pub mod json;
pub mod list;
pub mod map;
pub mod math;
pub mod pattern;
pub mod text;
pub mod time;

use std::fmt;

use crate::types::Type;
use crate::value::Value;

/// Every built-in function, in the order help texts list them.
pub static ALL: &[&dyn Function] = &[
    &text::LOWER,
    &text::UPPER,
    &text::TRIM,
    &text::Concat,
    &text::Len,
    &text::Substr,
    &text::CONTAINS,
    &text::STARTS_WITH,
    &text::ENDS_WITH,
    &text::Instr,
    &text::LPAD,
    &text::RPAD,
    &text::Initcap,
    &pattern::RegexpMatches,
    &pattern::RegexpExtract,
    &pattern::RegexpReplace,
    &pattern::Split,
    &pattern::RegexpSplitToArray,
    &pattern::RegexpExtractAll,
    &json::JsonExtract,
    &list::ElementAt,
    &list::ArrayContains,
    &list::Slice,
    &list::ArraySort,
    &list::ArrayDistinct,
    &list::ArrayJoin,
    &list::ARRAY_MIN,
    &list::ARRAY_MAX,
    &list::ARRAY_EXCEPT,
    &list::ARRAY_INTERSECT,
    &list::ARRAY_UNION,
    &map::MapKeys,
    &map::MapValues,
    &map::AsMap,
    &map::MapUnion,
    &math::Abs,
    &math::Round,
    &math::FLOOR,
    &math::CEIL,
    &math::Sqrt,
    &math::Pow,
    &math::TRUNC,
    &math::Sign,
    &math::EXP,
    &math::LN,
    &math::LOG10,
    &math::SIN,
    &math::COS,
    &math::TAN,
    &choice::Coalesce,
    &choice::GREATEST,
    &choice::LEAST,
    &convert::ToText,
    &convert::TO_INT,
    &convert::TO_FLOAT,
    &time::EpochMs,
    &time::FromEpochMs,
    &time::Millis,
    &calendar::FormatTimestamp,
    &calendar::ParseTimestamp,
    &calendar::ConvertTz,
];

/// The functions that take a lambda: the checker types them and the evaluator runs them
/// (`hir::ExprKind::Lambda`), not through [`Function`]. Their documentation, for editors and
/// help; `tests/functions.rs` evaluates the examples and finds the signatures in
/// docs/language.md.
pub static LAMBDAS: &[(&str, Doc)] = &[
    (
        "transform",
        Doc {
            signature:
                "transform(list<T>, x => U) -> list<U>, transform(map<K, V>, (k, v) => K2, (k, v) => V2) -> map<K2, V2>",
            summary: "each item mapped by the lambda; of a map, each entry's new key and new value",
            examples: &[
                ("transform([1, 2], x => x * 10)", "[10, 20]"),
                ("transform(map { \"a\": 1 }, (k, v) => upper(k), (k, v) => v + 1)", "{\"A\": 2}"),
            ],
        },
    ),
    (
        "filter",
        Doc {
            signature: "filter(list<T>, x => bool) -> list<T>, filter(map<K, V>, (k, v) => bool) -> map<K, V>",
            summary: "the items (or entries) for which the lambda is true",
            examples: &[
                ("filter([1, 5, 2], x => x > 1)", "[5, 2]"),
                ("filter(map { \"a\": 1, \"b\": 2 }, (k, v) => v > 1)", "{\"b\": 2}"),
            ],
        },
    ),
    (
        "reduce",
        Doc {
            signature:
                "reduce(list<T>, start: S, (acc, x) => S) -> S, reduce(map<K, V>, start: S, (acc, k, v) => S) -> S",
            summary: "the lambda folded over the items (or entries, in key order) from the start value; of a null list or map, the start value; from a null start value, null (ksqlDB's REDUCE)",
            examples: &[
                ("reduce([1, 2, 3], 0, (acc, x) => acc + x)", "6"),
                ("reduce(split(null, \",\"), 7, (acc, x) => acc + len(x))", "7"),
                ("reduce(map { \"a\": 1, \"b\": 2 }, \"\", (acc, k, v) => acc + k)", "\"ab\""),
            ],
        },
    ),
];

/// The documentation of the lambda function called `name`.
pub fn lambda_doc(name: &str) -> Option<&'static Doc> {
    LAMBDAS.iter().find(|(n, _)| *n == name).map(|(_, d)| d)
}

/// The built-in function called `name`.
pub fn lookup(name: &str) -> Option<&'static dyn Function> {
    ALL.iter().copied().find(|f| f.name() == name)
}

/// A built-in function.
pub trait Function: Sync + Send {
    fn name(&self) -> &'static str;
    fn doc(&self) -> &'static Doc;
    /// The result type for these argument types (none of them an error type), or what is
    /// wrong, as the rest of a sentence that starts with the function's name: "takes …".
    fn check(&self, args: &Args) -> Result<Type, String>;
    /// The result for these argument values. Unless [`Function::sees_nulls`], a null argument
    /// makes the result null without calling this.
    fn eval(&self, args: Vec<Value>) -> Result<Value, String>;
    /// Whether it is called with null arguments (otherwise its result is null).
    fn sees_nulls(&self) -> bool {
        false
    }
}

impl fmt::Debug for dyn Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq for dyn Function {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

/// Reference documentation of a function, rendered in docs/language.md.
#[derive(Debug)]
pub struct Doc {
    /// The call with its types, e.g. `lower(string) -> string`; also the help of a diagnostic.
    pub signature: &'static str,
    /// One sentence: what it computes.
    pub summary: &'static str,
    /// Worked examples: an expression over literals, and its result as JSON. Written by hand;
    /// `tests/functions.rs` evaluates each through the engine.
    pub examples: &'static [(&'static str, &'static str)],
}

/// The argument types of a call, with the checks functions share.
pub struct Args<'a> {
    pub types: &'a [&'a Type],
}

impl Args<'_> {
    pub fn len(&self) -> usize {
        self.types.len()
    }
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
    /// Whether any argument may be null (so may the result, for most functions).
    pub fn nullable(&self) -> bool {
        self.types.iter().any(|t| t.is_nullable())
    }
    /// Exactly `k` arguments.
    pub fn count(&self, k: usize) -> Result<(), String> {
        if self.len() == k {
            Ok(())
        } else {
            Err(format!("takes {}, not {}", plural(k, "argument"), self.len()))
        }
    }
    /// Every argument (a `null` literal aside) satisfies `pred`; `what` names what it takes.
    pub fn all(&self, pred: &dyn Fn(&Type) -> bool, what: &str) -> Result<(), String> {
        match self.types.iter().find(|t| !pred(t.base()) && ***t != Type::Null) {
            Some(t) => Err(format!("takes {what}, not {t}")),
            None => Ok(()),
        }
    }
}

pub(crate) fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

pub(crate) fn is_string(t: &Type) -> bool {
    *t == Type::String
}
pub(crate) fn is_number(t: &Type) -> bool {
    matches!(t, Type::Int | Type::Float)
}
pub(crate) fn is_int(t: &Type) -> bool {
    *t == Type::Int
}

/// A string argument's text ("" for any other value; the checker allows only strings).
pub(crate) fn text(v: &Value) -> &str {
    match v {
        Value::Str(s) => s,
        _ => "",
    }
}

/// An int argument (0 for any other value).
pub(crate) fn int(v: &Value) -> i64 {
    match v {
        Value::Int(x) => *x,
        _ => 0,
    }
}

/// A number argument as a float.
pub(crate) fn number(v: &Value) -> f64 {
    match v {
        Value::Int(x) => *x as f64,
        Value::Float(x) => *x,
        _ => 0.0,
    }
}

/// A float result, which must be finite.
pub(crate) fn finite(x: f64, what: &str) -> Result<Value, String> {
    if x.is_finite() {
        Ok(Value::Float(x))
    } else {
        Err(format!("{what} is not a finite number"))
    }
}
