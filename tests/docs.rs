//! The examples of docs/language.md are programs the checker accepts: each code block (a whole
//! program, declarations of aggregates and functions, queries over sources the text describes,
//! a `select` clause, control statements) is checked, with declarations of the sources it uses
//! but does not declare itself. A block that stops checking (a renamed function, a changed rule)
//! fails here, not in a reader's hands.

use std::collections::BTreeSet;

/// Sources the examples use without declaring them, in the two shapes the text gives `orders`:
/// a stream (branches route its records) and a table (joined by a foreign key).
const STREAM_SOURCES: &str = r#"
stream trades from "stocks" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}

stream orders from "orders" {
  key    id
  value  json { id: string, amount: float, region: string, customer: string }
}

stream records from "records" {
  key    id
  value  json { id: string, items: list<int>, limit: int, prices: list<float>, tags: map<string, string>, hours: map<int, int> }
}
"#;

const TABLE_SOURCES: &str = r#"
table orders from "orders" {
  key    id
  value  json { id: string, amount: float, customer: string? }
}

table customers from "customers" {
  key    cid: string
  value  json { name: string, tier: string }
}
"#;

fn declared(block: &str) -> BTreeSet<String> {
    block
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next()) {
                (Some("stream" | "table"), Some(name)) => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// The source declarations of `prelude` whose names `block` does not declare itself.
fn undeclared(prelude: &str, block: &str) -> String {
    let mine = declared(block);
    prelude
        .split("\n\n")
        .filter(|decl| declared(decl).iter().all(|n| !mine.contains(n)))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn checks(text: &str) -> Result<(), String> {
    streamc::compile(text)
        .map(|_| ())
        .map_err(|d| d.iter().map(|d| format!("{:?}: {}", d.code, d.message)).collect::<Vec<_>>().join("; "))
}

#[test]
fn every_example_in_the_language_reference_checks() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/language.md")).unwrap();
    let mut blocks = Vec::new();
    let mut rest = doc.as_str();
    while let Some(start) = rest.find("\n```\n") {
        let body = &rest[start + 5..];
        let end = body.find("\n```").expect("an unclosed code block");
        blocks.push(&body[..end + 1]);
        rest = &body[end + 4..];
    }
    assert!(blocks.len() >= 10, "found only {} code blocks", blocks.len());
    let mut checked = 0;
    for block in blocks {
        let first = block.split_whitespace().next().unwrap_or("");
        if matches!(first, "update" | "delete" | "for" | "replace" | "drop") {
            // Control statements (one per line; `{ … }` stands for a query's body).
            for line in block.lines().filter(|l| !l.trim().is_empty() && !l.contains('…')) {
                let statement = line.split('#').next().unwrap_or(line).trim();
                streamc::syntax::parse_statement(statement)
                    .unwrap_or_else(|d| panic!("docs/language.md: `{statement}` does not parse: {d:?}"));
                checked += 1;
            }
            continue;
        }
        let text = if first == "select" {
            format!("query example {{\n  from records\n  {}\n  to \"out\"\n}}\n", block.replace('\n', "\n  "))
        } else {
            block.to_string()
        };
        // With the sources as streams, else with `orders` a table.
        let tries = [
            format!("{}\n\n{text}", undeclared(STREAM_SOURCES, &text)),
            format!(
                "{}\n\n{}\n\n{text}",
                undeclared(STREAM_SOURCES, &format!("{TABLE_SOURCES}{text}")),
                undeclared(TABLE_SOURCES, &text)
            ),
        ];
        let results: Vec<Result<(), String>> = tries.iter().map(|t| checks(t)).collect();
        assert!(
            results.iter().any(Result::is_ok),
            "docs/language.md: this example does not check:\n{block}\n{:?}",
            results
        );
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} examples checked");
}
