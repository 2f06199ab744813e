//! Functions of lists (ksqlDB's array functions): an item by position (`xs[i]` is
//! `element_at(xs, i)`), membership, a slice, sorting, distinct items and joining into text.
//! Positions count from 1, and from the end when negative, as ksqlDB and SQL arrays do; a
//! position past either end gives null, not an error.

use std::cmp::Ordering;
use std::sync::Arc;

use super::{int, is_int, is_string, text, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

/// The item type of argument `i`, which must be a list (or the `null` literal).
fn item_type(a: &Args, i: usize, what: &str) -> Result<Type, String> {
    match a.types[i].base() {
        Type::List(t) => Ok((**t).clone()),
        Type::Null => Ok(Type::Null),
        t => Err(format!("takes {what}, not {t}")),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::List(l) => l,
        _ => &[],
    }
}

/// The 0-based index of 1-based position `pos` (negative: from the end) in a list of `n`.
fn index(pos: i64, n: usize) -> Option<usize> {
    let n = n as i64;
    let i = if pos > 0 { pos - 1 } else { n + pos };
    (pos != 0 && (0..n).contains(&i)).then_some(i as usize)
}

pub struct ElementAt;

impl Function for ElementAt {
    fn name(&self) -> &'static str {
        "element_at"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "element_at(list<T>, position: int) -> T?, element_at(map<K, V>, key: K) -> V?",
            summary: "the item at a position: 1 is the first, -1 the last; null past either end; of a map, the value at a key, null if it has none (`xs[i]` and `m[k]` are the same)",
            examples: &[
                ("map { \"a\": 1, \"b\": 2 }[\"b\"]", "2"),
                ("element_at(map { \"a\": 1 }, \"z\")", "null"),
                ("element_at([10, 20, 30], 1)", "10"),
                ("[10, 20, 30][-1]", "30"),
                ("[10, 20, 30][4]", "null"),
                ("split(\"a,b,c\", \",\")[2]", "\"b\""),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        if let Type::Map(k, v) = a.types[0].base() {
            if a.types[1].base().unify(k).is_none() {
                return Err(format!("takes a map and a key of its key type, not {} and {}", a.types[0], a.types[1]));
            }
            return Ok(v.as_ref().clone().nullable());
        }
        let item = item_type(a, 0, "a list and a position, or a map and a key")?;
        if !is_int(a.types[1].base()) && *a.types[1] != Type::Null {
            return Err(format!("takes a list and an int position, not {}", a.types[1]));
        }
        Ok(item.nullable())
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        if let Value::Map(_) = &v[0] {
            return Ok(v[0].map_get(&v[1]).cloned().unwrap_or(Value::Null));
        }
        let xs = items(&v[0]);
        Ok(index(int(&v[1]), xs.len()).map(|i| xs[i].clone()).unwrap_or(Value::Null))
    }
}

pub struct ArrayContains;

impl Function for ArrayContains {
    fn name(&self) -> &'static str {
        "array_contains"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "array_contains(list<T>, T) -> bool",
            summary: "whether the list has an item equal to the value (`x in xs` asks the same)",
            examples: &[("array_contains([\"a\", \"b\"], \"b\")", "true"), ("array_contains([1, 2], 3)", "false")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        let item = item_type(a, 0, "a list and a value")?;
        if item.unify(a.types[1]).is_none() {
            return Err(format!("takes a list and a value of its item type, not {} and {}", a.types[0], a.types[1]));
        }
        Ok(Type::Bool.nullable_if(a.types[0].is_nullable() || a.types[1].is_nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::Bool(items(&v[0]).iter().any(|x| x.equals(&v[1]))))
    }
}

pub struct Slice;

impl Function for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "slice(list<T>, from: int, to: int) -> list<T>",
            summary: "the items from position `from` to `to`, both included (1 is the first, -1 the last); positions past the ends are clamped",
            examples: &[
                ("slice([1, 2, 3, 4], 2, 3)", "[2, 3]"),
                ("slice([1, 2, 3, 4], -2, -1)", "[3, 4]"),
                ("slice([1, 2, 3], 3, 1)", "[]"),
                ("slice([1, 2, 3], 0, 9)", "[1, 2, 3]"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(3)?;
        let item = item_type(a, 0, "a list and two positions")?;
        a.types[1..]
            .iter()
            .all(|t| is_int(t.base()) || **t == Type::Null)
            .then_some(())
            .ok_or_else(|| format!("takes a list and two int positions, not {} and {}", a.types[1], a.types[2]))?;
        Ok(Type::List(Box::new(item)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let xs = items(&v[0]);
        let n = xs.len() as i64;
        // Positions as 0-based offsets, clamped to the list.
        let at = |pos: i64| {
            if pos > 0 {
                pos - 1
            } else if pos < 0 {
                n + pos
            } else {
                0
            }
        };
        let (from, to) = (at(int(&v[1])).max(0), at(int(&v[2])).min(n - 1));
        let out = if from <= to { xs[from as usize..=to as usize].to_vec() } else { Vec::new() };
        Ok(Value::List(Arc::new(out)))
    }
}

pub struct ArraySort;

impl Function for ArraySort {
    fn name(&self) -> &'static str {
        "array_sort"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "array_sort(list<T>[, descending: bool]) -> list<T>, T ordered",
            summary: "the items sorted, smallest first (largest first when `descending` is true); nulls last",
            examples: &[
                ("array_sort([3, 1, 2])", "[1, 2, 3]"),
                ("array_sort([\"b\", null, \"a\"], true)", "[\"b\", \"a\", null]"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if !(1..=2).contains(&a.len()) {
            return Err(format!("takes a list and optionally a bool, not {}", super::plural(a.len(), "argument")));
        }
        let item = item_type(a, 0, "a list")?;
        if !item.is_ordered() && *item.base() != Type::Null {
            return Err(format!("takes a list of an ordered type, not {}", a.types[0]));
        }
        if a.len() == 2 && *a.types[1].base() != Type::Bool {
            return Err(format!("takes a bool as its second argument, not {}", a.types[1]));
        }
        Ok(Type::List(Box::new(item)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let descending = matches!(v.get(1), Some(Value::Bool(true)));
        let mut out = items(&v[0]).to_vec();
        out.sort_by(|a, b| match (a.is_null(), b.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ if descending => b.cmp_total(a),
            _ => a.cmp_total(b),
        });
        Ok(Value::List(Arc::new(out)))
    }
}

pub struct ArrayDistinct;

impl Function for ArrayDistinct {
    fn name(&self) -> &'static str {
        "array_distinct"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "array_distinct(list<T>) -> list<T>",
            summary: "the items without repeats, each where it first appears",
            examples: &[("array_distinct([2, 1, 2, 3, 1])", "[2, 1, 3]")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        let item = item_type(a, 0, "a list")?;
        Ok(Type::List(Box::new(item)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let mut out: Vec<Value> = Vec::new();
        // Quadratic, but lists are short; `equals` is the language's equality (1 == 1.0).
        for x in items(&v[0]) {
            if !out.iter().any(|y| y.equals(x) || (y.is_null() && x.is_null())) {
                out.push(x.clone());
            }
        }
        Ok(Value::List(Arc::new(out)))
    }
}

pub struct ArrayJoin;

impl Function for ArrayJoin {
    fn name(&self) -> &'static str {
        "array_join"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "array_join(list<T>[, separator: string]) -> string",
            summary: "the items as text, joined by the separator (default `,`), as ksqlDB's ARRAY_JOIN writes them: a null item as `null`, a float as Java writes a double (`1.0`, `1.0E7`), other items as `to_string` does",
            examples: &[
                ("array_join([\"a\", \"b\", null, \"c\"], \"-\")", "\"a-b-null-c\""),
                ("array_join([1, 2])", "\"1,2\""),
                ("array_join([0.0, 2.5, 10000000.0, 0.0001])", "\"0.0,2.5,1.0E7,1.0E-4\""),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        if !(1..=2).contains(&a.len()) {
            return Err(format!("takes a list and optionally a separator, not {}", super::plural(a.len(), "argument")));
        }
        item_type(a, 0, "a list")?;
        if a.len() == 2 && !is_string(a.types[1].base()) && *a.types[1] != Type::Null {
            return Err(format!("takes a string separator, not {}", a.types[1]));
        }
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let sep = v.get(1).map(text).unwrap_or(",");
        let parts: Vec<String> = items(&v[0])
            .iter()
            .map(|x| match x {
                Value::Null => "null".to_string(),
                Value::Str(s) => s.to_string(),
                Value::Float(f) => java_double(*f),
                x => x.to_string(),
            })
            .collect();
        Ok(Value::str(&parts.join(sep)))
    }
}

/// A double as Java's `Double.toString` writes it: plain from 10^-3 up to 10^7, with at least one
/// digit after the point (`1.0`); else in scientific notation (`1.0E7`, `1.5E-5`).
pub(crate) fn java_double(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let point = |m: &str| if m.contains('.') { m.to_string() } else { format!("{m}.0") };
    if (1e-3..1e7).contains(&x.abs()) {
        return point(&format!("{x}"));
    }
    let s = format!("{x:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    format!("{}E{e}", point(m))
}

/// `array_min` and `array_max`.
pub struct ArrayExtreme {
    max: bool,
}

pub static ARRAY_MIN: ArrayExtreme = ArrayExtreme { max: false };
pub static ARRAY_MAX: ArrayExtreme = ArrayExtreme { max: true };

impl Function for ArrayExtreme {
    fn name(&self) -> &'static str {
        if self.max {
            "array_max"
        } else {
            "array_min"
        }
    }
    fn doc(&self) -> &'static Doc {
        if self.max {
            &Doc {
                signature: "array_max(list<T>) -> T?, T ordered",
                summary: "the largest non-null item; null if there is none (ksqlDB's ARRAY_MAX)",
                examples: &[
                    ("array_max([3, null, 7, 1])", "7"),
                    ("array_max([\"b\", \"a\"])", "\"b\""),
                    ("array_max([null])", "null"),
                ],
            }
        } else {
            &Doc {
                signature: "array_min(list<T>) -> T?, T ordered",
                summary: "the smallest non-null item; null if there is none (ksqlDB's ARRAY_MIN)",
                examples: &[("array_min([3, null, 7, 1])", "1"), ("array_min([])", "null")],
            }
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        let item = item_type(a, 0, "a list")?;
        if !item.is_ordered() && !matches!(item.base(), Type::Null | Type::Error) {
            return Err(format!("takes a list of an ordered type, not {}", a.types[0]));
        }
        Ok(item.base().clone().nullable())
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let best = items(&v[0]).iter().filter(|x| !x.is_null()).reduce(|a, b| {
            let o = b.cmp_total(a);
            if (self.max && o == Ordering::Greater) || (!self.max && o == Ordering::Less) {
                b
            } else {
                a
            }
        });
        Ok(best.cloned().unwrap_or(Value::Null))
    }
}

/// `array_except`, `array_intersect` and `array_union`: the distinct items (nulls are an item
/// like another), in the order of the first list, then the second's.
pub struct ArraySet {
    name: &'static str,
    doc: &'static Doc,
}

pub static ARRAY_EXCEPT: ArraySet = ArraySet {
    name: "array_except",
    doc: &Doc {
        signature: "array_except(list<T>, list<T>) -> list<T>",
        summary: "the distinct items of the first list that the second does not have, in the first's order (ksqlDB's ARRAY_EXCEPT)",
        examples: &[("array_except([1, 2, 2, 3, null], [3, 4])", "[1, 2, null]")],
    },
};
pub static ARRAY_INTERSECT: ArraySet = ArraySet {
    name: "array_intersect",
    doc: &Doc {
        signature: "array_intersect(list<T>, list<T>) -> list<T>",
        summary: "the distinct items of the first list that the second has too, in the first's order (ksqlDB's ARRAY_INTERSECT)",
        examples: &[("array_intersect([3, 1, 2, 1], [1, 3, 5])", "[3, 1]")],
    },
};
pub static ARRAY_UNION: ArraySet = ArraySet {
    name: "array_union",
    doc: &Doc {
        signature: "array_union(list<T>, list<T>) -> list<T>",
        summary: "the distinct items of both lists, the first's in its order, then the second's new ones (ksqlDB's ARRAY_UNION)",
        examples: &[("array_union([1, 2, 1], [3, 2, 4])", "[1, 2, 3, 4]")],
    },
};

/// The language's equality of two items, with null equal to null.
fn same(a: &Value, b: &Value) -> bool {
    a.equals(b) || (a.is_null() && b.is_null())
}

impl Function for ArraySet {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        let (x, y) = (item_type(a, 0, "two lists")?, item_type(a, 1, "two lists")?);
        let item = match (x.base(), y.base()) {
            (Type::Null | Type::Error, _) => y,
            (_, Type::Null | Type::Error) => x,
            _ => x
                .unify(&y)
                .ok_or_else(|| format!("takes two lists of one item type, not {} and {}", a.types[0], a.types[1]))?,
        };
        Ok(Type::List(Box::new(item)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (xs, ys) = (items(&v[0]), items(&v[1]));
        let mut out: Vec<Value> = Vec::new();
        let add = |x: &Value, out: &mut Vec<Value>| {
            if !out.iter().any(|y| same(x, y)) {
                out.push(x.clone());
            }
        };
        match self.name {
            "array_except" => xs.iter().filter(|x| !ys.iter().any(|y| same(x, y))).for_each(|x| add(x, &mut out)),
            "array_intersect" => xs.iter().filter(|x| ys.iter().any(|y| same(x, y))).for_each(|x| add(x, &mut out)),
            _ => xs.iter().chain(ys).for_each(|x| add(x, &mut out)),
        }
        if out.len() > crate::value::MAX_LIST {
            return Err(format!(
                "{}: {} items, more than a list may hold ({})",
                self.name,
                out.len(),
                crate::value::MAX_LIST
            ));
        }
        Ok(Value::List(Arc::new(out)))
    }
}
