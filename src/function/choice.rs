//! Functions that choose one of their arguments.

use super::{Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

/// The arguments' common type: the first unified with each of the others.
fn common(a: &Args) -> Result<Type, String> {
    if a.is_empty() {
        return Err("takes at least one argument".into());
    }
    let mut u = a.types[0].clone();
    for t in &a.types[1..] {
        u = u.unify(t).ok_or_else(|| format!("takes arguments of one type, not {u} and {t}"))?;
    }
    Ok(u)
}

pub struct Coalesce;

impl Function for Coalesce {
    fn name(&self) -> &'static str {
        "coalesce"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "coalesce(T?, ..., T) -> T",
            summary: "the first argument that is not null (non-null as soon as one argument's type is)",
            examples: &[("coalesce(null, 2, 3)", "2"), ("coalesce(null, null)", "null")],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        let u = common(a)?;
        let any_non_null = a.types.iter().any(|t| !t.is_nullable());
        Ok(u.base().clone().nullable_if(!any_non_null))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        Ok(v.into_iter().find(|v| !v.is_null()).unwrap_or(Value::Null))
    }
    fn sees_nulls(&self) -> bool {
        true
    }
}

/// The largest or smallest of the arguments, by the language's order.
pub struct Extreme {
    name: &'static str,
    largest: bool,
    doc: &'static Doc,
}

pub static GREATEST: Extreme = Extreme {
    name: "greatest",
    largest: true,
    doc: &Doc {
        signature: "greatest(T, ...) -> T, T ordered",
        summary: "the largest argument that is not null (null only if all are), as ksqlDB and PostgreSQL do",
        examples: &[("greatest(3, 7.5, 5)", "7.5"), ("greatest(\"b\", \"a\")", "\"b\""), ("greatest(null, 2, 1)", "2")],
    },
};
pub static LEAST: Extreme = Extreme {
    name: "least",
    largest: false,
    doc: &Doc {
        signature: "least(T, ...) -> T, T ordered",
        summary: "the smallest argument that is not null (null only if all are)",
        examples: &[("least(3, 1, 2)", "1"), ("least(4, null)", "4")],
    },
};

impl Function for Extreme {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doc(&self) -> &'static Doc {
        self.doc
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        let u = common(a)?;
        if !u.is_ordered() {
            return Err(format!("takes ordered values, not {u}"));
        }
        // Nulls are skipped: the result is null only if every argument may be.
        let any_non_null = a.types.iter().any(|t| !t.is_nullable());
        Ok(u.base().clone().nullable_if(!any_non_null))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let largest = self.largest;
        Ok(v.into_iter()
            .filter(|v| !v.is_null())
            .reduce(|a, b| {
                let o = b.cmp_total(&a);
                if (largest && o.is_gt()) || (!largest && o.is_lt()) {
                    b
                } else {
                    a
                }
            })
            .unwrap_or(Value::Null))
    }
    fn sees_nulls(&self) -> bool {
        true
    }
}
