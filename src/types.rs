//! The types of the language, shared by the checker, the plan and (later) the runtime.

use std::fmt;

use crate::ast::PrimType;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(into = "String")]
pub enum Type {
    String,
    Int,
    Float,
    Bool,
    Timestamp,
    Duration,
    List(Box<Type>),
    /// `map<K, V>`: K a non-null scalar; entries kept in the order of their keys.
    Map(Box<Type>, Box<Type>),
    Record(RecordType),
    /// A composite key: the values of several `group by` items, written as a JSON array.
    Tuple(Vec<Type>),
    Nullable(Box<Type>),
    /// The type of the `null` literal: assignable to any nullable type.
    Null,
    /// The type of an expression that already has a reported error; it matches everything so
    /// that one mistake produces one diagnostic.
    Error,
}

/// An ordered list of named fields.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize)]
pub struct RecordType {
    pub fields: Vec<(String, Type)>,
}

impl RecordType {
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|(n, _)| n == name)
    }
    pub fn get(&self, name: &str) -> Option<(usize, &Type)> {
        self.index_of(name).map(|i| (i, &self.fields[i].1))
    }
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(n, _)| n.as_str())
    }
}

impl From<PrimType> for Type {
    fn from(p: PrimType) -> Type {
        match p {
            PrimType::String => Type::String,
            PrimType::Int => Type::Int,
            PrimType::Float => Type::Float,
            PrimType::Bool => Type::Bool,
            PrimType::Timestamp => Type::Timestamp,
            PrimType::Duration => Type::Duration,
        }
    }
}

impl Type {
    /// The type without its nullability.
    pub fn base(&self) -> &Type {
        match self {
            Type::Nullable(t) => t,
            t => t,
        }
    }
    pub fn is_nullable(&self) -> bool {
        matches!(self, Type::Nullable(_) | Type::Null)
    }
    pub fn is_error(&self) -> bool {
        matches!(self, Type::Error)
    }
    /// This type, made nullable.
    pub fn nullable(self) -> Type {
        match self {
            Type::Nullable(_) | Type::Null | Type::Error => self,
            t => Type::Nullable(Box::new(t)),
        }
    }
    /// Nullable if `cond`.
    pub fn nullable_if(self, cond: bool) -> Type {
        if cond {
            self.nullable()
        } else {
            self
        }
    }
    pub fn is_numeric(&self) -> bool {
        matches!(self.base(), Type::Int | Type::Float | Type::Error)
    }
    /// Ordered types can be compared with `<` and aggregated with `min`/`max`.
    pub fn is_ordered(&self) -> bool {
        matches!(
            self.base(),
            Type::Int | Type::Float | Type::String | Type::Timestamp | Type::Duration | Type::Bool | Type::Error
        )
    }
    /// Scalars can be keys and can be compared for equality.
    pub fn is_scalar(&self) -> bool {
        matches!(
            self.base(),
            Type::Int | Type::Float | Type::String | Type::Timestamp | Type::Duration | Type::Bool | Type::Error
        )
    }

    /// Whether a value of type `self` may be stored where `to` is expected.
    pub fn assignable_to(&self, to: &Type) -> bool {
        match (self, to) {
            (Type::Error, _) | (_, Type::Error) => true,
            (Type::Null, t) => t.is_nullable(),
            (Type::Nullable(a), Type::Nullable(b)) => a.assignable_to(b),
            (Type::Nullable(_), _) => false,
            (a, Type::Nullable(b)) => a.assignable_to(b),
            (Type::Int, Type::Float) => true,
            (Type::List(a), Type::List(b)) => a.assignable_to(b),
            (Type::Map(ka, va), Type::Map(kb, vb)) => ka.assignable_to(kb) && va.assignable_to(vb),
            (Type::Record(a), Type::Record(b)) => {
                // Every field of the target must be given (or be nullable); extra fields are errors.
                a.fields.iter().all(|(n, t)| b.get(n).is_some_and(|(_, bt)| t.assignable_to(bt)))
                    && b.fields.iter().all(|(n, t)| a.get(n).is_some() || t.is_nullable())
            }
            (a, b) => a == b,
        }
    }

    /// Item types unify as types do, except that an empty literal's (`[]`, `map {}`: the error
    /// type, which fits anything) takes the other's: `coalesce(xs, [])` is a `list<int>`.
    fn unify_item(&self, other: &Type) -> Option<Type> {
        match (self, other) {
            (Type::Error, t) | (t, Type::Error) => Some(t.clone()),
            (a, b) => a.unify(b),
        }
    }

    /// The common type of two branches (`if`, list items, `coalesce`), if there is one.
    pub fn unify(&self, other: &Type) -> Option<Type> {
        match (self, other) {
            (Type::Error, _) | (_, Type::Error) => Some(Type::Error),
            (Type::Null, Type::Null) => Some(Type::Null),
            (Type::Null, t) | (t, Type::Null) => Some(t.clone().nullable()),
            _ => {
                let nullable = self.is_nullable() || other.is_nullable();
                let base = match (self.base(), other.base()) {
                    (a, b) if a == b => a.clone(),
                    (Type::Int, Type::Float) | (Type::Float, Type::Int) => Type::Float,
                    (Type::List(a), Type::List(b)) => Type::List(Box::new(a.unify_item(b)?)),
                    (Type::Map(ka, va), Type::Map(kb, vb)) => {
                        Type::Map(Box::new(ka.unify_item(kb)?), Box::new(va.unify_item(vb)?))
                    }
                    _ => return None,
                };
                Some(base.nullable_if(nullable))
            }
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::String => f.write_str("string"),
            Type::Int => f.write_str("int"),
            Type::Float => f.write_str("float"),
            Type::Bool => f.write_str("bool"),
            Type::Timestamp => f.write_str("timestamp"),
            Type::Duration => f.write_str("duration"),
            Type::List(t) => write!(f, "list<{t}>"),
            Type::Map(k, v) => write!(f, "map<{k}, {v}>"),
            Type::Record(r) => write!(f, "{r}"),
            Type::Tuple(ts) => {
                f.write_str("[")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str("]")
            }
            Type::Nullable(t) => write!(f, "{t}?"),
            Type::Null => f.write_str("null"),
            Type::Error => f.write_str("<error>"),
        }
    }
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (n, t)) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}: {t}")?;
        }
        f.write_str("}")
    }
}

impl From<Type> for String {
    fn from(t: Type) -> String {
        t.to_string()
    }
}
