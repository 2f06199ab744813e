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

/// The sketches through the engine, against an exact fold written here: 40,000 records of 8 keys
/// in 2-hour windows, 5 to about 1,600 distinct users per window (so both of the HyperLogLog's
/// forms), with a restart (state restored from the changelog) half-way. Each window's `approx_count_distinct` is within 5% (about three
/// standard errors) of the exact count, and each `approx_percentile` within 1% of the value of
/// rank ⌊p·(n−1)⌋ of the window's sorted values (exact for p = 1).
#[test]
fn sketches_within_their_stated_error_through_the_engine() {
    let dir = temp_dir("agg-sketches");
    let prog = dir.join("sketches.stream");
    std::fs::write(
        &prog,
        "stream s from \"in\" {\n  key k\n  value json { k: string, u: string, x: float, ts: timestamp }\n  time ts\n}\n\n\
         query q {\n  from s\n  group by k\n  window tumbling 2h grace 10s\n  aggregate {\n    users = approx_count_distinct(u)\n    \
         p50 = approx_percentile(x, 0.5)\n    p99 = approx_percentile(x, 0.99)\n    top = approx_percentile(x, 1)\n  }\n  emit final\n  to \"out\" json\n}\n",
    )
    .unwrap();
    // A plain LCG, so the data is the same on every run.
    let mut seed: u64 = 42;
    let mut next = |m: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % m
    };
    type Window = (std::collections::BTreeSet<String>, Vec<f64>);
    let mut exact: std::collections::BTreeMap<(String, i64), Window> = Default::default();
    let mut lines = Vec::new();
    for i in 0..40_000u64 {
        let key = next(8);
        // Key k draws users from a pool whose size grows with k: from a handful to 100,000.
        let pool = [5, 50, 500, 2_000, 5_000, 20_000, 50_000, 100_000][key as usize];
        let user = format!("user-{}", next(pool));
        let x = (next(1_000_000) as f64 / 100.0 - 2_000.0) * if key % 2 == 0 { 1.0 } else { 0.001 };
        let ts = 1_700_000_000_000i64 + (i as i64) * 600;
        let w = exact.entry((format!("k{key}"), ts - ts % 7_200_000)).or_default();
        w.0.insert(user.clone());
        w.1.push(x);
        lines.push(format!("{{\"k\":\"k{key}\",\"u\":\"{user}\",\"x\":{x},\"ts\":{ts}}}\n"));
    }
    let input = dir.join("in.jsonl");
    let state = dir.join("state");
    std::fs::write(&input, lines[..20_000].concat()).unwrap();
    Run::new(prog.to_str().unwrap(), &state).input("in", &input).close(false).go().unwrap();
    std::fs::remove_dir_all(state.join("apps")).unwrap();
    std::fs::write(&input, lines.concat()).unwrap();
    let summary = Run::new(prog.to_str().unwrap(), &state).input("in", &input).go().unwrap();
    assert!(summary.restored > 0, "the second run restored nothing");
    let out = read_topic(&state, "out");
    assert_eq!(out.len(), exact.len(), "one result per key and window");
    let most = exact.values().map(|w| w.0.len()).max().unwrap();
    assert!(most > 1_023, "no window has enough distinct users for the dense form: {most}");
    for o in &out {
        let key = o.value["k"].as_str().unwrap().to_string();
        let start = o.value["window_start"].as_i64().unwrap();
        let (users, xs) = &exact[&(key.clone(), start)];
        let est = o.value["users"].as_i64().unwrap() as f64;
        let n = users.len() as f64;
        assert!((est - n).abs() <= 0.05 * n, "{key}@{start}: {est} distinct users estimated, {n} exact");
        let mut sorted = xs.clone();
        sorted.sort_by(f64::total_cmp);
        for (field, p) in [("p50", 0.5), ("p99", 0.99), ("top", 1.0)] {
            let want = sorted[(p * (sorted.len() as f64 - 1.0)) as usize];
            let got = o.value[field].as_f64().unwrap();
            let tolerance = if p == 1.0 { 0.0 } else { 0.01 * want.abs() + 1e-9 };
            assert!((got - want).abs() <= tolerance, "{key}@{start} {field}: {got}, exact {want}");
        }
    }
}

/// `undo` (a grouped table's old rows) is the inverse of `update`: for every aggregate that can
/// take a value back — the native ones that say so, and the standard library's with an `undo`
/// block — adding ten values and taking four of them back (in another order) gives the result
/// of adding only the six others, computed from scratch (floats to 1e-9 relative).
#[test]
fn undo_takes_back_what_update_added() {
    use streamc::eval::{uda_init, uda_result, uda_undo, uda_update};
    use streamc::value::Value;
    let values = [3.5, -1.0, 7.25, 0.0, 12.0, 7.25, -4.5, 100.0, 2.0, 9.5];
    let taken_back = [7, 1, 5, 0];
    let kept: Vec<f64> = (0..values.len()).filter(|i| !taken_back.contains(i)).map(|i| values[i]).collect();
    let close = |a: &Value, b: &Value| match (a, b) {
        (Value::Float(x), Value::Float(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => a == b,
    };
    let arg = |x: f64, ty: &str| match ty {
        "bool" => Value::Bool(x > 1.0),
        "int" => Value::Int(x as i64),
        _ => Value::Float(x),
    };
    let mut checked = Vec::new();
    for a in aggregate::ALL.iter().filter(|a| a.retractable()) {
        for ty in ["int", "float"] {
            let (mut all, mut fresh) = (a.init(), a.init());
            for x in values {
                a.update(&mut all, &[arg(x, ty)], 0).unwrap();
            }
            for i in taken_back {
                a.retract(&mut all, &[arg(values[i], ty)]).unwrap();
            }
            for &x in &kept {
                a.update(&mut fresh, &[arg(x, ty)], 0).unwrap();
            }
            assert!(close(&a.result(&all), &a.result(&fresh)), "{} over {ty}: {:?} vs {:?}", a.name(), all, fresh);
        }
        checked.push(a.name().to_string());
    }
    let program = streamc::compile("").unwrap();
    for d in program.aggregates.iter().filter(|d| d.undo.is_some()) {
        let ty = match &d.params[0].1 {
            streamc::types::Type::Bool => "bool",
            streamc::types::Type::Int => "int",
            _ => "float",
        };
        let (mut all, mut fresh) = (uda_init(d).unwrap(), uda_init(d).unwrap());
        for x in values {
            uda_update(d, &mut all, &[arg(x, ty)]).unwrap();
        }
        for i in taken_back {
            uda_undo(d, &mut all, &[arg(values[i], ty)]).unwrap();
        }
        for &x in &kept {
            uda_update(d, &mut fresh, &[arg(x, ty)]).unwrap();
        }
        let (r1, r2) = (uda_result(d, &all).unwrap(), uda_result(d, &fresh).unwrap());
        assert!(close(&r1, &r2), "{}: {r1:?} vs {r2:?}", d.name);
        checked.push(d.name.clone());
    }
    checked.sort();
    assert_eq!(checked, ["avg", "count", "count_if", "stddev", "sum", "variance"]);
}

/// A lambda inside a user-defined aggregate's `update` reads the aggregate's parameters, state
/// and earlier `let`s beside its own parameter (its locals come after theirs).
#[test]
fn a_lambda_in_an_aggregate_body_sees_the_bodys_names() {
    use streamc::eval::{uda_init, uda_result, uda_update};
    use streamc::value::Value;
    let program = streamc::compile(
        "aggregate recent_big(x: int, floor: int) -> list<int> {\n\
           init   { seen: list<int> = [] }\n\
           update { let big = x > floor; seen = if big then filter(seen, s => s != x and s > floor) + [x] else seen }\n\
           result transform(seen, s => s * 10)\n\
         }\n",
    )
    .unwrap();
    let d = program.aggregates.iter().find(|d| d.name == "recent_big").unwrap();
    let mut state = uda_init(d).unwrap();
    for x in [5, 1, 7, 5, 3] {
        uda_update(d, &mut state, &[Value::Int(x), Value::Int(2)]).unwrap();
    }
    let got = uda_result(d, &state).unwrap();
    let want = Value::List(std::sync::Arc::new(vec![Value::Int(70), Value::Int(50), Value::Int(30)]));
    assert_eq!(got, want);
}

/// A grouped table's stores can be kept by a replacement only with the same grouping and, for
/// its aggregate, the same arguments (a row taken back must leave the group it went into, with
/// what it added); a stream aggregate that becomes a table's is incompatible too.
#[test]
fn a_grouped_tables_state_follows_its_grouping_and_arguments() {
    let program = |source: &str, group: &str, agg: &str| {
        format!(
            "{source} accounts from \"accounts\" {{\n  key id\n  value json {{ id: string, region: string, n: int }}\n}}\n\
             query q {{\n  from accounts\n  group by {group}\n  aggregate {{ {agg} }}\n  to \"out\"\n}}\n"
        )
    };
    let topo = |text: String| streamc::plan::lower(&streamc::compile(&text).unwrap(), "app");
    let base = topo(program("table", "region", "t = sum(n)"));
    let report = |text: String| streamc::control::compare(&base, &topo(text), "q").incompatible;
    assert!(report(program("table", "region", "t = sum(n)")).is_empty());
    assert!(report(program("table", "  region", "t   = sum(n)")).is_empty(), "whitespace aside");
    let changed = report(program("table", "lower(region) as region", "t = sum(n)"));
    assert!(changed.iter().any(|r| r.contains("rows") && r.contains("grouping changed")), "{changed:?}");
    let changed = report(program("table", "region", "t = sum(n * 100)"));
    assert!(changed.iter().any(|r| r.contains("aggregate") && r.contains("grouping changed")), "{changed:?}");
    // The whole clause counts, not only its first line (explain shows that one).
    let multi = |arg: &str| program("table", "region", &format!("c = count()  # rows\n    t = sum({arg})"));
    let base_multi = topo(multi("n"));
    let changed = streamc::control::compare(&base_multi, &topo(multi("n * 100")), "q").incompatible;
    assert!(changed.iter().any(|r| r.contains("aggregate") && r.contains("grouping changed")), "{changed:?}");
    assert!(streamc::control::compare(&base_multi, &topo(multi("n")), "q").incompatible.is_empty());
    let changed = report(program("stream", "region", "t = sum(n)"));
    assert!(changed.iter().any(|r| r.contains("kind of state changed")), "{changed:?}");
}

/// A foreign-key join's three stores (rows by key, subscriptions, offsets) are built for its
/// foreign key: a replacement with another `on` can keep none of them (kept apart, an old
/// subscription would outlive the row that no longer refers to it), and one with the same join
/// keeps all three.
#[test]
fn a_foreign_key_joins_state_follows_its_join() {
    let program = |on: &str| {
        format!(
            "table orders from \"orders\" {{\n  key id\n  value json {{ id: string, customer: string, n: int }}\n}}\n\
             table customers from \"customers\" {{\n  key cid: string\n  value json {{ name: string }}\n}}\n\
             query q {{\n  from orders\n  join customers on {on}\n  select {{ id, name = customers.name }}\n  to \"out\"\n}}\n"
        )
    };
    let topo = |text: String| streamc::plan::lower(&streamc::compile(&text).unwrap(), "app");
    let base = topo(program("customer"));
    assert!(streamc::control::compare(&base, &topo(program("customer")), "q").incompatible.is_empty());
    let changed = streamc::control::compare(&base, &topo(program("lower(customer)")), "q").incompatible;
    for store in ["fk-rows", "fk-subscriptions", "fk-offsets"] {
        assert!(
            changed.iter().any(|r| r.contains(store) && r.contains("foreign-key join changed")),
            "{store}: {changed:?}"
        );
    }
}
