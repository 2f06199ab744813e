//! Functions of maps (ksqlDB's map functions): keys and values as lists, a map from two lists,
//! and the union of two maps. A map's value at a key is `m[k]` (`element_at`, in `list.rs`),
//! its size `len(m)` (`text.rs`). Entries are always in the order of their keys, so every
//! result here is the same however the map was built.

use std::sync::Arc;

use super::{Args, Doc, Function};
use crate::types::Type;
use crate::value::{Value, MAX_LIST};

/// The key and value types of argument `i`, which must be a map (or the `null` literal).
pub(crate) fn map_types(a: &Args, i: usize, what: &str) -> Result<(Type, Type), String> {
    match a.types[i].base() {
        Type::Map(k, v) => Ok(((**k).clone(), (**v).clone())),
        Type::Null => Ok((Type::Error, Type::Error)),
        t => Err(format!("takes {what}, not {t}")),
    }
}

fn entries(v: &Value) -> &[(Value, Value)] {
    match v {
        Value::Map(es) => es,
        _ => &[],
    }
}

/// A map made by a function, refused past the size a list may have.
fn bounded(out: Vec<(Value, Value)>, what: &str) -> Result<Value, String> {
    let map = Value::map(out);
    if entries(&map).len() > MAX_LIST {
        return Err(format!("{what} of more than the {MAX_LIST} entries a map may hold"));
    }
    Ok(map)
}

pub struct MapKeys;

impl Function for MapKeys {
    fn name(&self) -> &'static str {
        "map_keys"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "map_keys(map<K, V>) -> list<K>",
            summary: "the map's keys, in order",
            examples: &[("map_keys(map { \"b\": 2, \"a\": 1 })", "[\"a\", \"b\"]"), ("map_keys(map {})", "[]")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        let (k, _) = map_types(a, 0, "a map")?;
        Ok(Type::List(Box::new(k)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::List(Arc::new(entries(&v[0]).iter().map(|(k, _)| k.clone()).collect())))
    }
}

pub struct MapValues;

impl Function for MapValues {
    fn name(&self) -> &'static str {
        "map_values"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "map_values(map<K, V>) -> list<V>",
            summary: "the map's values, in the order of their keys",
            examples: &[("map_values(map { \"b\": 2, \"a\": 1 })", "[1, 2]")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(1)?;
        let (_, v) = map_types(a, 0, "a map")?;
        Ok(Type::List(Box::new(v)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(Value::List(Arc::new(entries(&v[0]).iter().map(|(_, x)| x.clone()).collect())))
    }
}

pub struct AsMap;

impl Function for AsMap {
    fn name(&self) -> &'static str {
        "as_map"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "as_map(keys: list<K>, values: list<V>) -> map<K, V>",
            summary: "the map of each key to the value at its position (a repeated key: the last one's), up to the shorter list (ksqlDB's AS_MAP); a null key is an error",
            examples: &[
                ("as_map([\"a\", \"b\"], [1, 2])", "{\"a\": 1, \"b\": 2}"),
                ("as_map([\"a\", \"a\"], [1, 2])", "{\"a\": 2}"),
                ("as_map([\"a\", \"b\", \"c\"], [1])", "{\"a\": 1}"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        let list = |i: usize| match a.types[i].base() {
            Type::List(t) => Ok((**t).clone()),
            Type::Null => Ok(Type::Error),
            t => Err(format!("takes a list of keys and a list of values, not {t}")),
        };
        let (k, v) = (list(0)?, list(1)?);
        let k = match k {
            Type::Nullable(t) => *t,
            Type::Null => Type::Error,
            k => k,
        };
        if !k.is_scalar() {
            return Err(format!("takes keys of a scalar type, not {k}"));
        }
        Ok(Type::Map(Box::new(k), Box::new(v)).nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (Value::List(ks), Value::List(vs)) = (&v[0], &v[1]) else {
            return Ok(Value::Null);
        };
        let n = ks.len().min(vs.len());
        if ks[..n].iter().any(Value::is_null) {
            return Err("a map key is null".into());
        }
        bounded(ks[..n].iter().cloned().zip(vs[..n].iter().cloned()).collect(), "a map")
    }
}

pub struct MapUnion;

impl Function for MapUnion {
    fn name(&self) -> &'static str {
        "map_union"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "map_union(map<K, V>, map<K, V>) -> map<K, V>",
            summary: "the entries of both maps; where both have a key, the second map's value; a null map counts as empty, and both null give null (ksqlDB's MAP_UNION)",
            examples: &[
                ("map_union(map { \"a\": 1, \"b\": 2 }, map { \"b\": 3, \"c\": 4 })", "{\"a\": 1, \"b\": 3, \"c\": 4}"),
                ("map_union(map { \"a\": 1 }, null)", "{\"a\": 1}"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        map_types(a, 0, "two maps")?;
        map_types(a, 1, "two maps")?;
        // An empty `map {}` takes the other map's type.
        let empty = |t: &Type| matches!(t.base(), Type::Map(k, v) if k.is_error() && v.is_error());
        let both = match (a.types[0].base(), a.types[1].base()) {
            (t0, t1) if empty(t0) => Some(t1.clone()),
            (t0, t1) if empty(t1) => Some(t0.clone()),
            (t0, t1) => t0.unify(t1),
        };
        match both {
            Some(t) => Ok(t.base().clone().nullable_if(a.types.iter().all(|t| t.is_nullable()))),
            None => Err(format!("takes two maps of one type, not {} and {}", a.types[0], a.types[1])),
        }
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        if v.iter().all(Value::is_null) {
            return Ok(Value::Null);
        }
        // (`entries` of a null map: none.)
        let out: Vec<(Value, Value)> = entries(&v[0]).iter().chain(entries(&v[1])).cloned().collect();
        bounded(out, "a union")
    }
    fn sees_nulls(&self) -> bool {
        true
    }
}
