//! Every native aggregate's documented example (`streamc::aggregate::Doc`), run through the
//! embedded engine in a tumbling window, in session windows that merge, and without a window;
//! the expected results are the ones written by hand in each aggregate's file. And every
//! aggregate's signature is in docs/language.md.

mod common;

use common::embedded::{read_topic, temp_dir, Run};
use streamc::aggregate::{self, Native};

/// The windows each example runs in. Its records arrive out of order by up to 2 s; the session
/// gap of 1.5 s makes some of them start sessions of their own that a later record bridges.
const WINDOWS: &[(&str, &str, &str)] = &[
    ("tumbling", "window tumbling 1h grace 10s", "emit final"),
    ("session", "window session gap 1500ms grace 10s", "emit final"),
    ("none", "", ""),
];

fn program(call: &str, arg_type: &str, window: &str, emit: &str) -> String {
    format!(
        "stream s from \"in\" {{\n  key k\n  value json {{ k: string, x: {arg_type}, ts: timestamp }}\n  time ts\n}}\n\n\
         query q {{\n  from s\n  group by k\n  {window}\n  aggregate {{ r = {call} }}\n  {emit}\n  to \"out\" json\n}}\n"
    )
}

fn run_example(a: &dyn Native, (window_name, window, emit): (&str, &str, &str)) -> serde_json::Value {
    let ex = &a.doc().example;
    let dir = temp_dir(&format!("agg-{}-{window_name}", a.name()));
    let prog = dir.join("example.stream");
    std::fs::write(&prog, program(ex.call, ex.arg_type, window, emit)).unwrap();
    let input = dir.join("in.jsonl");
    let lines: Vec<String> = ex.records.iter().map(|(t, x)| format!("{{\"k\":\"a\",\"x\":{x},\"ts\":{t}}}")).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let state = dir.join("state");
    let summary = Run::new(prog.to_str().unwrap(), &state).input("in", &input).go().unwrap();
    assert_eq!(summary.late, 0, "{} in a {window_name} window: no record may be late", a.name());
    let out = read_topic(&state, "out");
    // Sessions that merged leave tombstones (null values) for the sessions merged away; the
    // last record of the key is the result.
    let last = out.iter().rev().find(|o| !o.value.is_null()).unwrap_or_else(|| panic!("{}: no output", a.name()));
    last.value["r"].clone()
}

#[test]
fn documented_examples_give_their_results() {
    for a in aggregate::ALL {
        let want: serde_json::Value = serde_json::from_str(a.doc().example.result).unwrap();
        for &(name, window, emit) in WINDOWS {
            let got = run_example(*a, (name, window, emit));
            assert_eq!(got, want, "`{}` in a {name} window", a.doc().example.call);
        }
    }
}

#[test]
fn every_aggregate_is_documented_in_the_language_reference() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/language.md")).unwrap();
    for a in aggregate::ALL {
        let sig = a.doc().signature;
        assert!(doc.contains(sig), "docs/language.md lacks `{sig}`");
    }
}

#[test]
fn names_are_unique_and_refused_as_user_definitions() {
    let mut names: Vec<&str> = aggregate::names().collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "two aggregates share a name");
    for name in aggregate::names() {
        let src = format!(
            "aggregate {name}(x: int) -> int {{\n  init {{ s = 0 }}\n  update {{ s = s + x }}\n  result s\n}}\n"
        );
        let err = common::compile(&src).expect_err(name);
        assert!(common::codes(&err).contains(&"E0204".to_string()), "{name}: {:?}", common::codes(&err));
    }
}
