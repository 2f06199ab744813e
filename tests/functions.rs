//! Every built-in function's documented examples (`streamc::function::Doc`), evaluated through
//! the embedded engine in one `select`; the expected results are the ones written by hand in
//! each function's file. And every function's signature is in docs/language.md.

mod common;

use common::embedded::{read_topic, temp_dir, Run};
use streamc::function;

#[test]
fn documented_examples_give_their_results() {
    let examples: Vec<(&str, &str, &str)> = function::ALL
        .iter()
        .map(|f| (f.name(), f.doc()))
        .chain(function::LAMBDAS.iter().map(|(n, d)| (*n, d)))
        .flat_map(|(name, d)| d.examples.iter().map(move |(e, r)| (name, *e, *r)))
        .collect();
    for f in function::ALL {
        assert!(!f.doc().examples.is_empty(), "`{}` has no example", f.name());
    }
    let fields: Vec<String> = examples.iter().enumerate().map(|(i, (_, e, _))| format!("e{i} = {e}")).collect();
    let program = format!(
        "stream s from \"in\" {{\n  key k\n  value json {{ k: string }}\n}}\n\nquery q {{\n  from s\n  select {{\n    {}\n  }}\n  to \"out\" json\n}}\n",
        fields.join(",\n    ")
    );
    let dir = temp_dir("functions");
    let prog = dir.join("examples.stream");
    std::fs::write(&prog, &program).unwrap();
    let input = dir.join("in.jsonl");
    std::fs::write(&input, "{\"k\":\"a\"}\n").unwrap();
    let state = dir.join("state");
    let summary = Run::new(prog.to_str().unwrap(), &state).input("in", &input).go().unwrap();
    assert_eq!(summary.dead_letters, 0, "an example failed to evaluate:\n{program}");
    let out = read_topic(&state, "out");
    assert_eq!(out.len(), 1, "{out:?}");
    for (i, (name, expr, want)) in examples.iter().enumerate() {
        let want: serde_json::Value = serde_json::from_str(want).unwrap();
        let got = &out[0].value[format!("e{i}")];
        let same = match (got.as_f64(), want.as_f64()) {
            (Some(a), Some(b)) => a == b && got.is_f64() == want.is_f64(),
            _ => *got == want,
        };
        assert!(same, "`{name}`: {expr} gave {got}, its documentation says {want}");
    }
}

#[test]
fn every_function_is_documented_in_the_language_reference() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/language.md")).unwrap();
    for sig in function::ALL.iter().map(|f| f.doc().signature).chain(function::LAMBDAS.iter().map(|(_, d)| d.signature))
    {
        assert!(doc.contains(sig), "docs/language.md lacks `{sig}`");
    }
}

#[test]
fn names_are_unique_and_not_aggregates() {
    let mut names: Vec<&str> =
        function::ALL.iter().map(|f| f.name()).chain(function::LAMBDAS.iter().map(|(n, _)| *n)).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "two functions share a name");
    for name in names {
        assert!(streamc::aggregate::lookup(name).is_none(), "`{name}` is both a function and an aggregate");
    }
}

/// `between` and `xs[i]` parse with the precedence docs/language.md gives, and mean what it
/// says: each expression here evaluated through the engine, its expected value worked out by
/// hand.
#[test]
fn between_and_indexing_by_their_documented_precedence() {
    let cases: &[(&str, &str)] = &[
        // Comparison level: arithmetic binds tighter, `and`/`or`/`not` looser.
        ("1 + 1 between 2 and 3", "true"),
        ("4 between 1 + 1 and 2 * 2", "true"),
        ("5 between 1 and 4 or true", "true"),
        ("not 3 between 1 and 2", "true"),
        ("3 not between 1 and 2 and 1 == 1", "true"),
        ("2 between 2 and 2", "true"),
        ("2.5 between 1 and 2", "false"),
        ("\"b\" between \"a\" and \"c\"", "true"),
        ("null between 1 and 2", "null"),
        ("0 between 1 and null", "false"),
        ("5 not between 1 and null", "null"),
        ("0 not between 1 and null", "true"),
        // Indexing binds tighter than unary minus and any operator.
        ("-[1, 2, 3][2]", "-2"),
        ("[1, 2, 3][1] + [10, 20][-1]", "21"),
        ("[[1, 2], [3]][2][1]", "3"),
        ("[1, 2, 3][0]", "null"),
        ("[1, 2, 3][-4]", "null"),
        ("[1, 2][1 + 1]", "2"),
        ("len([1] + [2, 3] + [])", "3"),
        // `in (a, b)` is `in [a, b]`, at comparison precedence.
        ("2 in (1, 2, 3)", "true"),
        ("\"x\" not in (\"a\", \"b\",)", "true"),
        ("1 + 1 in (2, 3) and 4 in (5, 6)", "false"),
        ("not 1 in (1, 2)", "false"),
        ("null in (1, 2)", "null"),
        ("3 in ([1, 2][1], 1 + 2)", "true"),
    ];
    select_gives("between-index", "", cases);
}

/// Evaluate each case's expression as a field of one `select` (after `defs`), over one record
/// `{"k": "a"}`, through the embedded engine; each must give its expected JSON.
fn select_gives(name: &str, defs: &str, cases: &[(&str, &str)]) {
    let fields: Vec<String> = cases.iter().enumerate().map(|(i, (e, _))| format!("e{i} = {e}")).collect();
    let program = format!(
        "{defs}stream s from \"in\" {{\n  key k\n  value json {{ k: string }}\n}}\n\nquery q {{\n  from s\n  select {{\n    {}\n  }}\n  to \"out\" json\n}}\n",
        fields.join(",\n    ")
    );
    let dir = temp_dir(name);
    let prog = dir.join("p.stream");
    std::fs::write(&prog, &program).unwrap();
    let input = dir.join("in.jsonl");
    std::fs::write(&input, "{\"k\":\"a\"}\n").unwrap();
    let state = dir.join("state");
    let summary = Run::new(prog.to_str().unwrap(), &state).input("in", &input).go().unwrap();
    assert_eq!(summary.dead_letters, 0, "a case failed to evaluate:\n{program}");
    let out = read_topic(&state, "out");
    for (i, (expr, want)) in cases.iter().enumerate() {
        let want: serde_json::Value = serde_json::from_str(want).unwrap();
        assert_eq!(out[0].value[format!("e{i}")], want, "{expr}");
    }
}

/// Maps worked out by hand: literals (a later equal key wins, int keys in order of value),
/// `m[k]`, the map functions, lambdas over entries, `==` regardless of how entries were given,
/// nesting, and a user-defined function over a map.
#[test]
fn maps() {
    let cases: &[(&str, &str)] = &[
        ("map { \"b\": 1, \"a\": 2, \"b\": 3 }", "{\"a\": 2, \"b\": 3}"),
        ("map_keys(map { 10: \"x\", 9: \"y\", -1: \"z\" })", "[-1, 9, 10]"),
        ("map { 10: \"x\", 9: \"y\" }", "{\"9\": \"y\", \"10\": \"x\"}"),
        ("map { k: len(k) }[\"a\"]", "1"),
        ("map { k: 1 }[\"zz\"]", "null"),
        ("map { \"a\": 1, \"b\": 2 } == map { \"b\": 2, \"a\": 1 }", "true"),
        ("map { \"a\": 1 } == map { \"a\": 2 }", "false"),
        ("len(map {})", "0"),
        ("map_values(map_union(map { \"x\": [1] }, map { \"y\": [2, 3] }))", "[[1], [2, 3]]"),
        ("map { \"n\": map { \"m\": true } }[\"n\"][\"m\"]", "true"),
        ("filter(map { 1: \"a\", 2: \"b\", 3: \"c\" }, (n, s) => n != 2)", "{\"1\": \"a\", \"3\": \"c\"}"),
        ("transform(map { \"a\": 1, \"b\": 2 }, (s, n) => n * 10, (s, n) => s)", "{\"10\": \"a\", \"20\": \"b\"}"),
        ("transform(map { \"a\": 1, \"b\": 2 }, (s, n) => 0, (s, n) => s)", "{\"0\": \"b\"}"),
        ("reduce(map { \"b\": 2, \"a\": 1 }, \"\", (acc, s, n) => acc + s + to_string(n))", "\"a1b2\""),
        ("reduce(map {}, 5, (acc, s, n) => acc + n)", "5"),
        ("filter(map { \"x\": 1, \"y\": 7 }, (key, n) => n > len(k))", "{\"y\": 7}"),
        ("as_map([true, false], [\"t\", \"f\"])", "{\"false\": \"f\", \"true\": \"t\"}"),
        ("total(map { \"p\": 2, \"q\": 3 })", "5"),
        ("to_string(map { 2: [1], 1: [] })", "\"{1:[],2:[1]}\""),
    ];
    select_gives("maps", "function total(m: map<string, int>) -> int = reduce(m, 0, (a, s, n) => a + n)\n\n", cases);
}

/// `transform`, `filter` and `reduce` with lambdas, worked out by hand: nesting, shadowing, the
/// record's fields and an enclosing function's parameters in a body, null lists and conditions.
#[test]
fn lambdas_over_lists() {
    let cases: &[(&str, &str)] = &[
        ("transform([1, 2, 3], x => x * 10)", "[10, 20, 30]"),
        ("filter([1, 5, 2, 8], x => x > 2)", "[5, 8]"),
        ("reduce([1, 2, 3, 4], 0, (acc, x) => acc + x)", "10"),
        ("reduce([1.5, 2.25], 0.0, (acc, x) => acc + x)", "3.75"),
        ("reduce([2, 3], 1.0, (acc, x) => acc * x)", "6.0"),
        ("transform([[1, 2], [3]], xs => reduce(xs, 0, (a, x) => a + x))", "[3, 3]"),
        ("transform([1, 2], x => transform([10, 20], x => x + 1))", "[[11, 21], [11, 21]]"),
        ("transform([1, 2], x => filter([1, 2, 3], y => y > x))", "[[2, 3], [3]]"),
        ("transform([1, 2], x => x + len(k))", "[2, 3]"),
        ("transform(if k == \"a\" then null else [1], x => x + 1)", "null"),
        ("filter([1, null, 3], x => x > 1)", "[3]"),
        ("reduce(filter([1, 2], x => x > 5), 7, (a, x) => a + x)", "7"),
        ("sum_squares([1, 2, 3])", "14"),
        ("transform([\"a\", \"bc\"], s => upper(s) + \"!\")", "[\"A!\", \"BC!\"]"),
    ];
    select_gives(
        "lambdas",
        "function sum_squares(xs: list<int>) -> int = reduce(xs, 0, (a, x) => a + x * x)\n\n",
        cases,
    );
}
