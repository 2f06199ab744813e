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

/// Run an example's records through the engine; with `restart`, the first half in one run and
/// the rest in a second run whose local state was deleted, so the state is restored from the
/// changelog in between. The key's last non-null result, and how many there were.
fn run_example(
    a: &dyn Native,
    (window_name, window, emit): (&str, &str, &str),
    restart: bool,
) -> (serde_json::Value, usize) {
    let ex = &a.doc().example;
    let dir = temp_dir(&format!("agg-{}-{window_name}-{restart}", a.name()));
    let prog = dir.join("example.stream");
    std::fs::write(&prog, program(ex.call, ex.arg_type, window, emit)).unwrap();
    let input = dir.join("in.jsonl");
    let lines: Vec<String> =
        ex.records.iter().map(|(t, x)| format!("{{\"k\":\"a\",\"x\":{x},\"ts\":{t}}}\n")).collect();
    let state = dir.join("state");
    let mut late = 0;
    if restart {
        let half = lines.len() / 2;
        std::fs::write(&input, lines[..half].concat()).unwrap();
        let first = Run::new(prog.to_str().unwrap(), &state).input("in", &input).close(false).go().unwrap();
        late += first.late;
        std::fs::remove_dir_all(state.join("apps")).unwrap();
    }
    std::fs::write(&input, lines.concat()).unwrap();
    let summary = Run::new(prog.to_str().unwrap(), &state).input("in", &input).go().unwrap();
    late += summary.late;
    assert_eq!(late, 0, "{} in a {window_name} window: no record may be late", a.name());
    if restart {
        assert!(summary.restored > 0, "{}: the second run restored nothing", a.name());
    }
    let out = read_topic(&state, "out");
    // Sessions that merged leave tombstones (null values) for the sessions merged away; the
    // last record of the key is the result.
    let results: Vec<&serde_json::Value> = out.iter().map(|o| &o.value).filter(|v| !v.is_null()).collect();
    let last = results.last().unwrap_or_else(|| panic!("{}: no output", a.name()));
    (last["r"].clone(), results.len())
}

/// The most sessions (gap `gap`) open at once while the records arrive, and at the end:
/// sessionization written plainly, to show that each example makes sessions merge.
fn sessions(records: &[(i64, &str)], gap: i64) -> (usize, usize) {
    type Sessions = Vec<(i64, i64)>;
    let mut open: Sessions = Vec::new();
    let mut most = 0;
    for (t, _) in records {
        let (near, mut rest): (Sessions, Sessions) = open.iter().partition(|(s, e)| *t >= s - gap && *t <= e + gap);
        let start = near.iter().map(|x| x.0).chain([*t]).min().unwrap();
        let end = near.iter().map(|x| x.1).chain([*t]).max().unwrap();
        rest.push((start, end));
        open = rest;
        most = most.max(open.len());
    }
    (most, open.len())
}

#[test]
fn documented_examples_give_their_results() {
    for a in aggregate::ALL {
        let ex = &a.doc().example;
        assert_eq!(sessions(ex.records, 1500), (2, 1), "`{}`'s example must form two sessions that merge", ex.call);
        let want: serde_json::Value = serde_json::from_str(ex.result).unwrap();
        for &(name, window, emit) in WINDOWS {
            for restart in [false, true] {
                let (got, n) = run_example(*a, (name, window, emit), restart);
                assert_eq!(got, want, "`{}` in a {name} window (restart: {restart})", ex.call);
                if name != "none" {
                    assert_eq!(n, 1, "`{}` in a {name} window: one window, emitted once", ex.call);
                }
            }
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
