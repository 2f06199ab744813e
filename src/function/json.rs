//! JSON held in a string field.

use super::{is_string, text, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

/// One step of a path: a member name or an array index.
enum Step {
    Name(String),
    Index(usize),
}

/// `$.a.b[0]['c d']` as steps; `None` if it is not such a path.
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut rest = path.strip_prefix('$')?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            out.push(Step::Name(r[..end].to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            out.push(Step::Name(r[..end].to_string()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            out.push(Step::Index(r[..end].trim().parse().ok()?));
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(out)
}

pub struct JsonExtract;

impl Function for JsonExtract {
    fn name(&self) -> &'static str {
        "json_extract"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "json_extract(string, path: string) -> string?",
            summary: "the value at a path (`$`, then `.name`, `['name']` or `[index]` steps) of the JSON text: a string as itself, any other value as JSON text; null if the text is not JSON or nothing is there (ksqlDB's EXTRACTJSONFIELD)",
            examples: &[
                ("json_extract(\"{\\\"user\\\": {\\\"name\\\": \\\"ann\\\", \\\"tags\\\": [1, 2]}}\", \"$.user.name\")", "\"ann\""),
                ("json_extract(\"{\\\"user\\\": {\\\"tags\\\": [1, 2]}}\", \"$.user.tags\")", "\"[1,2]\""),
                ("json_extract(\"{\\\"a\\\": [10, 20]}\", \"$.a[1]\")", "\"20\""),
                ("json_extract(\"not json\", \"$.a\")", "null"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(2)?;
        a.all(&is_string, "strings")?;
        Ok(Type::String.nullable())
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let path = text(&v[1]);
        let steps = steps(path)
            .ok_or_else(|| format!("bad JSON path {path:?}: write `$`, then `.name`, `['name']` or `[index]` steps"))?;
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(text(&v[0])) else { return Ok(Value::Null) };
        let mut at = &doc;
        for s in &steps {
            let next = match s {
                Step::Name(n) => at.get(n.as_str()),
                Step::Index(i) => at.get(*i),
            };
            match next {
                Some(x) => at = x,
                None => return Ok(Value::Null),
            }
        }
        Ok(match at {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::String(s) => Value::str(s),
            other => Value::str(&other.to_string()),
        })
    }
}
