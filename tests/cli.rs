//! The `streamc` binary as a user runs it.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn streamc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_streamc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh, empty directory, deleted at the end of a test that passes.
fn temp_dir(name: &str) -> common::embedded::TempDir {
    common::embedded::TempDir::new(&format!("streamc-cli-{name}-"))
}

#[test]
fn explain_stats_shows_the_store_and_its_changelog_and_no_repartition() {
    let o = streamc(&["explain", "examples/stats.stream"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1 sub-topology"), "{out}");
    assert!(out.contains("store: stock_stats-aggregate"), "{out}");
    assert!(out.contains("changelog stats-stock_stats-aggregate-changelog (compacted"), "{out}");
    assert!(!out.contains("-repartition"), "no repartition topic or node: {out}");
    assert!(out.contains("no repartition"), "{out}");
    assert!(out.contains("grace 1s (effective)"), "{out}");
}

#[test]
fn grouping_by_another_field_adds_a_repartition_topic_and_a_sub_topology() {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/stats.stream")).unwrap();
    let changed = src.replace("group by ticker", "group by size");
    assert_ne!(src, changed);
    let dir = temp_dir("size");
    let file = dir.join("stats.stream");
    std::fs::write(&file, changed).unwrap();
    let o = streamc(&["explain", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("2 sub-topologies"), "{out}");
    assert!(out.contains("Sub-topology 1"), "{out}");
    assert!(out.contains("stats-stock_stats-group-by-size-repartition  repartition"), "{out}");
}

#[test]
fn check_reports_three_independent_mistakes_and_fails() {
    let o = streamc(&["check", "tests/errors/three_mistakes.stream"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.matches('×').count(), 3, "{err}");
    for code in ["E0201", "E0306", "E0200"] {
        assert!(err.contains(code), "{code} missing from {err}");
    }
    assert!(err.contains("did you mean `price`?"), "{err}");
    assert!(err.contains("three_mistakes.stream:10:9"), "the first error points at line 10, column 9:\n{err}");
}

#[test]
fn check_accepts_every_example() {
    let mut files: Vec<String> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"))
        .unwrap()
        .map(|e| format!("examples/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".stream"))
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let o = streamc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).matches(": ok").count(), files.len());
}

#[test]
fn explain_formats_and_query_filter() {
    let o = streamc(&["explain", "examples/orders.stream", "--format", "json", "--query", "big_spenders"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let subs = v["subtopologies"].as_array().unwrap();
    assert_eq!(subs.len(), 2);
    assert!(subs.iter().all(|s| s["query"] == "big_spenders"));
    let topics: Vec<&str> = v["topics"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(topics.contains(&"orders-big_spenders-group-by-customer-repartition"), "{topics:?}");
    assert!(!topics.iter().any(|t| t.contains("paid_orders")), "{topics:?}");

    let dot = stdout(&streamc(&["explain", "examples/stats.stream", "--format", "dot"]));
    assert!(dot.starts_with("digraph") && dot.contains("shape=cylinder"), "{dot}");
    // The topics, and the value types on the edges as the text form has them.
    assert!(
        dot.contains("\"topic:stocks\" -> \"stock_stats-from\"")
            && dot.contains("\"stock_stats-to\" -> \"topic:stock-stats\""),
        "{dot}"
    );
    assert!(dot.contains("key string\\nvalue {ticker: string, price: float, size: int,\\nts: timestamp}"), "{dot}");
    let mermaid = stdout(&streamc(&["explain", "examples/stats.stream", "--format", "mermaid"]));
    assert!(mermaid.starts_with("flowchart TD"), "{mermaid}");
}

#[test]
fn application_id_from_config_names_the_topics() {
    let o = streamc(&["explain", "examples/stats.stream", "--set", "application.id=prod-stats"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("prod-stats-stock_stats-aggregate-changelog"));
    let dir = temp_dir("cfg");
    let cfg = dir.join("c.yaml");
    std::fs::write(&cfg, "application:\n  id: from-file\n").unwrap();
    let o = streamc(&["explain", "examples/stats.stream", "--config", cfg.to_str().unwrap()]);
    assert!(stdout(&o).contains("from-file-stock_stats-aggregate-changelog"), "{}", stderr(&o));
}

#[test]
fn usage_errors_are_clear() {
    let o = streamc(&["explain", "examples/stats.stream", "--set", "no.such.key=1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown field `no`"), "{}", stderr(&o));
    let o = streamc(&["explain", "examples/stats.stream", "--query", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no query `nope`"), "{}", stderr(&o));
    let o = streamc(&["check", "does/not/exist.stream"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn check_a_control_statement_against_a_program() {
    let o = streamc(&[
        "check",
        "examples/alerts.stream",
        "--statement",
        "update watch[\"AAPL\"] = { note = \"x\", threshold = 1.0 }",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("statement: ok"));
    let o =
        streamc(&["check", "examples/alerts.stream", "--statement", "update limits[\"AAPL\"] = { max_price = 1.0 }"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0700"), "{}", stderr(&o));
}

/// A query may not write into Kafka's own topics, the application's internal topics, or a
/// topic named like another application's internal topics: `check` and `run` refuse the
/// program with E0505 at its `to`, `check --statement` the statement; a topic listed in
/// `topics.allow_internal_sinks` is allowed.
#[test]
fn writing_into_internal_topics_is_refused_unless_allowed() {
    let dir = temp_dir("reserved");
    let program = |sink: &str| {
        format!(
            "stream events from \"events\" {{\n  key user\n  value json {{ user: string, ts: timestamp }}\n  time ts\n}}\n\
             query out {{\n  from events\n  select {{ user }}\n  to \"{sink}\"\n}}\n"
        )
    };
    let file = dir.join("shop.stream");
    let state = dir.join("state");
    for (sink, why) in [
        ("__consumer_offsets", "a topic of Kafka itself"),
        ("shop-control", "this application's control topic"),
        ("shop-control-status", "this application's control status topic"),
        ("shop-dlq", "this application's dead letters topic"),
        ("shop-dlq-replays", "this application's dead-letter replays topic"),
        ("shop-metrics", "this application's metrics topic"),
        ("billing-totals-aggregate-changelog", "named like a store's changelog"),
        ("billing-by-user-repartition", "named like a repartition topic"),
        ("billing-control-status", "named like a control status topic"),
    ] {
        std::fs::write(&file, program(sink)).unwrap();
        let f = file.to_str().unwrap();
        let o = streamc(&["check", f]);
        assert_eq!(o.status.code(), Some(1), "{sink}: {}", stderr(&o));
        assert!(stderr(&o).contains("E0505") && stderr(&o).contains(why), "{sink}: {}", stderr(&o));
        let o = streamc(&["--state-dir", state.to_str().unwrap(), "run", f, "--drain"]);
        assert_eq!(o.status.code(), Some(1), "{sink}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{sink}: {}", stderr(&o));
    }
    // Allowed when listed, and only the topic listed.
    std::fs::write(&file, program("__audit")).unwrap();
    let f = file.to_str().unwrap();
    let o = streamc(&["check", f, "--set", "topics.allow_internal_sinks=[__audit]"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = streamc(&["check", f, "--set", "topics.allow_internal_sinks=[__other]"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // Other names are the user's own: `-metrics` or `-late` of another application, a name
    // that only contains a reserved word.
    for sink in ["page-metrics", "orders-late", "changelog-of-orders", "control", "access-control"] {
        std::fs::write(&file, program(sink)).unwrap();
        let o = streamc(&["check", file.to_str().unwrap()]);
        assert!(o.status.success(), "{sink}: {}", stderr(&o));
    }
    // A statement that adds a query writing into the control topic.
    let o = streamc(&["check", f, "--statement", "query loop { from events select { user } to \"shop-control\" }"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("E0505"), "{}", stderr(&o));
}

/// Settings that cannot mean anything are refused before anything is written, naming the key
/// and its range.
#[test]
fn settings_out_of_range_are_refused_before_anything_is_written() {
    let dir = temp_dir("ranges");
    let state = dir.join("state");
    let s = state.to_str().unwrap();
    for (args, says) in [
        (vec!["--set", "embedded.partitions=100000"], "`embedded.partitions` is 100000; it must be between 1 and 4096"),
        (vec!["--set", "embedded.partitions=0"], "`embedded.partitions` is 0; it must be between 1 and 4096"),
        (vec!["--set", "commit.records=0"], "`commit.records` is 0; it must be at least 1"),
        (vec!["--threads", "0"], "--threads"),
    ] {
        let mut a = vec!["--state-dir", s, "run", "examples/stats.stream", "--drain"];
        a.extend(args.iter().copied());
        let o = streamc(&a);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!state.exists(), "{args:?} wrote {}", state.display());
    }
    let o = streamc(&["--state-dir", s, "produce", "stocks", "--partitions", "0"]);
    assert!(!o.status.success() && stderr(&o).contains("--partitions"), "{}", stderr(&o));
    assert!(!state.exists());
}

/// One `streamc run` of an application per state directory: a second one is refused while the
/// first runs, even after the first's local state was deleted under it; once the first has
/// stopped, a run goes ahead.
#[test]
fn a_second_run_of_one_application_on_one_state_directory_is_refused() {
    let dir = temp_dir("one-writer");
    let state = dir.join("state");
    let s = state.to_str().unwrap().to_string();
    let input = dir.join("trades.jsonl");
    let o = streamc(&["gen", "trades", "--count", "2000", "--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&input, &o.stdout).unwrap();
    let arg = format!("stocks={}", input.display());
    // The first run: without --drain it runs until killed.
    let mut first = Command::new(env!("CARGO_BIN_EXE_streamc"))
        .args(["--state-dir", &s, "run", "examples/stats.stream", "--input", &arg])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (generously) until it has committed results: it holds its lock by then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let o = streamc(&["--state-dir", &s, "consume", "stock-stats", "--exit-at-end", "--from-beginning"]);
        if o.status.success() && !o.stdout.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the first run committed nothing in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::remove_dir_all(state.join("apps")).unwrap();
    let o = streamc(&["--state-dir", &s, "run", "examples/stats.stream", "--drain"]);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("another `streamc run` of `stats` is using"), "{}", stderr(&o));
    // Nor may a reset delete what the live run is writing.
    let o = streamc(&["--state-dir", &s, "run", "examples/stats.stream", "--reset", "--drain"]);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("another `streamc run` of `stats` is using"), "{}", stderr(&o));
    assert!(state.join("log").join("topics").join("stats-stock_stats-aggregate-changelog").exists());
    first.kill().unwrap();
    first.wait().unwrap();
    let o = streamc(&["--state-dir", &s, "run", "examples/stats.stream", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Input is never dropped or ignored without a word: blank lines of `--input` and `produce` are
/// counted and reported, `--input` for a topic the program does not read is refused, and
/// `kafka.*` settings without a broker are named as ignored.
#[test]
fn ignored_input_and_settings_are_reported() {
    let dir = temp_dir("said");
    let state = dir.join("state");
    let s = state.to_str().unwrap();
    let input = dir.join("trades.jsonl");
    let good = r#"{"ticker":"A","price":1.5,"size":2,"ts":1000}"#;
    std::fs::write(&input, format!("{good}\n\n  \n{good}\n\n")).unwrap();
    let arg = format!("stocks={}", input.display());
    let o = streamc(&["--state-dir", s, "run", "examples/stats.stream", "--input", &arg, "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("3 blank lines skipped"), "{}", stderr(&o));
    assert!(stderr(&o).contains("processed 2 records"), "{}", stderr(&o));
    let o = streamc(&[
        "--state-dir",
        s,
        "produce",
        "stocks",
        input.to_str().unwrap(),
        "--program",
        "examples/stats.stream",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("produced 2 records to stocks (3 blank lines skipped)"), "{}", stderr(&o));
    let other = format!("trades={}", input.display());
    let o = streamc(&["--state-dir", s, "run", "examples/stats.stream", "--input", &other, "--drain"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("the program reads no topic `trades` (it reads stocks)"), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "run", "examples/stats.stream", "--drain", "--set", "kafka.linger.ms=5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: kafka.linger.ms ignored"), "{}", stderr(&o));
}

/// A broker that cannot be reached is an error naming its address (not an internal topic),
/// from every command that talks to it.
#[test]
fn an_unreachable_broker_is_named() {
    let dir = temp_dir("unreachable");
    let s = dir.join("state");
    let s = s.to_str().unwrap();
    for args in [vec!["run", "examples/stats.stream", "--drain"], vec!["consume", "stock-stats", "--exit-at-end"]] {
        let mut a = vec!["--state-dir", s, "--bootstrap-servers", "127.0.0.1:1"];
        a.extend(args.iter().copied());
        let o = streamc(&a);
        assert!(!o.status.success(), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains("cannot reach Kafka at 127.0.0.1:1 within 10 s"), "{args:?}: {e}");
        assert!(!e.contains("-control"), "{args:?} names an internal topic: {e}");
    }
}

/// Every example ships a fixture, and `streamc test` passes it (the expected outputs in the
/// fixtures are worked out by hand, see their comments).
#[test]
fn every_example_passes_its_fixture() {
    let mut n = 0;
    for e in std::fs::read_dir("examples").unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "stream") {
            let fixture = p.with_extension("test.yaml");
            assert!(fixture.exists(), "{} has no fixture {}", p.display(), fixture.display());
            let o = streamc(&["test", p.to_str().unwrap(), fixture.to_str().unwrap()]);
            let err = stderr(&o);
            assert!(o.status.success(), "{}: {err}", fixture.display());
            assert!(err.contains(": ok") && err.contains("1 fixture, 0 failed"), "{err}");
            n += 1;
        }
    }
    assert!(n >= 5, "only {n} examples");
}

/// A fixture that expects something else fails with exit code 1 and shows both sides; a
/// malformed fixture is an error naming the file.
#[test]
fn a_failing_fixture_shows_what_differs() {
    let dir = temp_dir("fixture");
    let wrong = std::fs::read_to_string("examples/alerts.test.yaml")
        .unwrap()
        .replace("price: 151.5, limit: 150.0", "price: 151.5, limit: 149.0");
    let f = dir.join("wrong.test.yaml");
    std::fs::write(&f, wrong).unwrap();
    let o = streamc(&["test", "examples/alerts.stream", f.to_str().unwrap(), "examples/alerts.test.yaml"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("wrong.test.yaml: FAILED"), "{err}");
    assert!(err.contains(r#"- 2: key: "A", value: {"ticker":"A","price":151.5,"limit":149.0,"at":6000}"#), "{err}");
    assert!(err.contains(r#"+ 2: key: "A", value: {"ticker":"A","price":151.5,"limit":150.0,"at":6000}"#), "{err}");
    assert!(err.contains("alerts.test.yaml: ok"), "the other fixture still runs: {err}");
    assert!(err.contains("2 fixtures, 1 failed"), "{err}");

    let bad = dir.join("bad.test.yaml");
    std::fs::write(&bad, "inputs:\n  stocks:\n    - {valeu: 1}\n").unwrap();
    let o = streamc(&["test", "examples/alerts.stream", bad.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.test.yaml") && err.contains("unknown field `valeu`"), "{err}");
    let o = streamc(&["test", "examples/alerts.stream", "examples/sessions.test.yaml"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("sessions.test.yaml: `inputs`: the program reads no topic `clicks`"), "{err}");
}

/// `streamc test` of avro topics (an in-process registry): fixtures that register different
/// schemas in different orders each read their own records (the schema ids of one fixture are
/// never taken for another's), and outputs read back as JSON.
#[test]
fn fixtures_of_avro_topics_each_read_their_own_schemas() {
    let dir = temp_dir("avro-fixtures");
    let program = dir.join("two.stream");
    std::fs::write(
        &program,
        "stream a from \"a\" {\n  value avro { n: int }\n}\n\nstream b from \"b\" {\n  value avro { s: string, f: float }\n}\n\n\
         query qa {\n  from a\n  select { n }\n  to \"out-a\"\n}\n\nquery qb {\n  from b\n  select { s, f }\n  to \"out-b\" avro\n}\n",
    )
    .unwrap();
    let both = dir.join("both.test.yaml");
    std::fs::write(
        &both,
        "inputs:\n  a:\n    - value: {n: 1}\n  b:\n    - value: {s: x, f: 1.5}\nexpect:\n  out-a:\n    - {value: {n: 1}}\n  out-b:\n    - {value: {s: x, f: 1.5}}\n",
    )
    .unwrap();
    let only_b = dir.join("only-b.test.yaml");
    std::fs::write(
        &only_b,
        "inputs:\n  b:\n    - value: {s: y, f: 2.5}\nexpect:\n  out-a: []\n  out-b:\n    - {value: {s: y, f: 2.5}}\n",
    )
    .unwrap();
    let o = streamc(&["test", program.to_str().unwrap(), both.to_str().unwrap(), only_b.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("2 fixtures, 0 failed"), "{err}");
}

/// An embedded run without `--drain` says what it does when it starts, and SIGTERM stops it
/// cleanly: exit 0, its summary printed, what it processed committed.
#[test]
fn an_embedded_run_says_it_waits_and_stops_cleanly_on_sigterm() {
    let dir = temp_dir("sigterm");
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let trades: String =
        (0..5).map(|i| format!("{{\"ticker\":\"T{i}\",\"price\":10.0,\"size\":1,\"ts\":{}}}\n", 1_000 + i)).collect();
    let input = dir.join("trades.jsonl");
    std::fs::write(&input, trades).unwrap();
    let s = state.to_str().unwrap();
    let o = streamc(&[
        "--state-dir",
        s,
        "produce",
        "stocks",
        input.to_str().unwrap(),
        "--program",
        "examples/stats.stream",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = dir.join("run.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamc"))
        .args(["--state-dir", s, "run", "examples/stats.stream"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Wait (on conditions, with a generous bound) for the start line and for the five trades'
    // results to be committed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let out = streamc(&["--state-dir", s, "consume", "stock-stats", "--exit-at-end", "--from-beginning"]);
        if text.contains("waiting for input (Ctrl-C stops it)") && stdout(&out).lines().count() >= 5 {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the run did not start or process its input:\n{text}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status:?}\n{text}");
    assert!(text.contains("running `stats` on the embedded log in "), "{text}");
    assert!(text.lines().any(|l| l.starts_with("processed 5 records in ")), "{text}");
    // Stopped cleanly: a second run finds everything committed and processes nothing again.
    let o = streamc(&["--state-dir", s, "run", "examples/stats.stream", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).lines().any(|l| l.starts_with("processed 0 records in ")), "{}", stderr(&o));
}

/// Every argument and option of every command has a line of help.
#[test]
fn every_argument_and_option_has_help() {
    let commands: &[&[&str]] = &[
        &["check"],
        &["explain"],
        &["run"],
        &["test"],
        &["produce"],
        &["consume"],
        &["keygen"],
        &["control"],
        &["deploy"],
        &["status"],
        &["gen", "trades"],
    ];
    for c in commands {
        let mut args = c.to_vec();
        args.push("--help");
        let o = streamc(&args);
        assert!(o.status.success(), "{c:?}: {}", stderr(&o));
        let out = stdout(&o);
        let lines: Vec<&str> = out.lines().collect();
        let mut section = false;
        for (i, line) in lines.iter().enumerate() {
            if *line == "Arguments:" || *line == "Options:" {
                section = true;
                continue;
            }
            if line.trim().is_empty() {
                // (In clap's long layout a blank line separates entries; a new heading ends it.)
                section = section && lines.get(i + 1).is_none_or(|n| n.starts_with(' '));
                continue;
            }
            // An entry is `  <NAME>  help` or `  -x, --name <V>  help`, or (clap's long layout)
            // the entry alone with its help on the next, deeper line.
            if section && line.starts_with("  ") && !line.starts_with("          ") {
                let entry = line.trim_start();
                let inline = entry.split("  ").skip(1).map(str::trim).find(|s| !s.is_empty());
                let below = lines.get(i + 1).filter(|n| n.starts_with("          ") && !n.trim().is_empty());
                assert!(inline.is_some() || below.is_some(), "`streamc {}`: `{entry}` has no help\n{out}", c.join(" "));
            }
        }
    }
}

/// `produce` warns when rows of a table get no key (its key is not in the value), and not when
/// an envelope gives them one.
#[test]
fn produce_warns_when_table_rows_have_no_key() {
    let dir = temp_dir("keyless");
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let plain = dir.join("plain.jsonl");
    std::fs::write(&plain, "{\"max_price\": 10.0}\n").unwrap();
    let s = state.to_str().unwrap();
    let o = streamc(&[
        "--state-dir",
        s,
        "produce",
        "limits",
        plain.to_str().unwrap(),
        "--program",
        "examples/alerts.stream",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: 1 of these records have no key, and `limits` is a table")
            && stderr(&o).contains("--envelope"),
        "{}",
        stderr(&o)
    );
    let env = dir.join("env.jsonl");
    std::fs::write(&env, "{\"key\": \"A\", \"value\": {\"max_price\": 10.0}}\n").unwrap();
    let o = streamc(&[
        "--state-dir",
        s,
        "produce",
        "limits",
        env.to_str().unwrap(),
        "--envelope",
        "--program",
        "examples/alerts.stream",
    ]);
    assert!(o.status.success() && !stderr(&o).contains("warning"), "{}", stderr(&o));
}

/// `--input` remembers what of a file is in a topic for the log, not for one application: a
/// second program reading the same topic from the same file appends nothing again.
#[test]
fn input_bookkeeping_is_per_topic_and_file() {
    let dir = temp_dir("input-per-topic");
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let s = state.to_str().unwrap();
    let input = format!("stocks={}", Path::new("examples/data/trades.jsonl").display());
    let o = streamc(&["--state-dir", s, "run", "examples/stats.stream", "--input", &input, "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "run", "examples/alerts.stream", "--input", &input, "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "stocks", "--exit-at-end", "--from-beginning"]);
    let lines =
        std::fs::read_to_string("examples/data/trades.jsonl").unwrap().lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(stdout(&o).lines().count(), lines, "the file was appended once");
}

/// The README's picture of the stats example is what `explain --format svg` draws today.
#[test]
fn the_readme_picture_is_current() {
    let o = streamc(&["explain", "examples/stats.stream", "--format", "svg"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = std::fs::read_to_string("docs/stats.svg").unwrap();
    assert!(
        stdout(&o) == want,
        "docs/stats.svg is out of date: streamc explain examples/stats.stream --format svg > docs/stats.svg"
    );
}

/// `explode` makes at most 100,000 records of one record: a longer list makes it a dead letter
/// with the reason, and the records around it go on.
#[test]
fn explode_past_its_cap_is_a_dead_letter() {
    let dir = temp_dir("explode-cap");
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let program = dir.join("chars.stream");
    std::fs::write(
        &program,
        "stream lines from \"lines\" {\n  key id\n  value json { id: string, text: string }\n}\n\nquery chars {\n  from lines\n  select { id, c = explode(split(text, \"\")) }\n  to \"chars\"\n}\n",
    )
    .unwrap();
    let input = dir.join("lines.jsonl");
    let long = "x".repeat(100_001);
    std::fs::write(
        &input,
        format!("{{\"id\":\"a\",\"text\":\"ab\"}}\n{{\"id\":\"b\",\"text\":\"{long}\"}}\n{{\"id\":\"c\",\"text\":\"cd\"}}\n"),
    )
    .unwrap();
    let s = state.to_str().unwrap();
    let p = program.to_str().unwrap();
    let o = streamc(&["--state-dir", s, "run", p, "--input", &format!("lines={}", input.display()), "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&streamc(&["--state-dir", s, "consume", "chars", "--exit-at-end", "--from-beginning"]));
    assert_eq!(out.lines().count(), 4, "a, b of `ab` and c, d of `cd`:\n{out}");
    let dlq =
        stdout(&streamc(&["--state-dir", s, "consume", "chars-dlq", "--exit-at-end", "--from-beginning", "--headers"]));
    assert_eq!(dlq.lines().count(), 1, "{dlq}");
    assert!(
        dlq.contains("explode: 100001 items, more than the 100000 one record may become"),
        "{}",
        &dlq[..dlq.len().min(600)]
    );
}

/// `emit final idle 1s`: on an input that stops, a window closes once the run has had no input
/// for a second of wall-clock time (without it, it would wait for stream time to pass its end
/// forever). Waits on the condition, with a generous bound.
#[test]
fn emit_final_idle_closes_windows_when_the_input_stops() {
    let dir = temp_dir("idle");
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let prog = dir.join("idle.stream");
    std::fs::write(
        &prog,
        "stream clicks from \"clicks\" {\n  key user\n  value json { user: string, at: timestamp }\n  time at\n}\n\n\
         query per_minute {\n  from clicks\n  group by user\n  window tumbling 1m\n  aggregate { n = count() }\n  \
         emit final idle 1s\n  to \"counts\"\n}\n",
    )
    .unwrap();
    let input = dir.join("clicks.jsonl");
    let lines = [("a", 1_000), ("b", 5_000), ("a", 30_000), ("a", 59_000)];
    let text: String =
        lines.iter().map(|(u, t)| format!("{{\"user\":\"{u}\",\"at\":{}}}\n", 1_700_000_040_000i64 + t)).collect();
    std::fs::write(&input, text).unwrap();
    let s = state.to_str().unwrap();
    let p = prog.to_str().unwrap();
    let o = streamc(&["--state-dir", s, "produce", "clicks", input.to_str().unwrap(), "--program", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = dir.join("run.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamc"))
        .args(["--state-dir", s, "run", p])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let got = loop {
        let out = streamc(&["--state-dir", s, "consume", "counts", "--exit-at-end", "--from-beginning"]);
        let got: Vec<serde_json::Value> = stdout(&out).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if got.len() >= 2 {
            break got;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("no window closed:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut counts: Vec<(String, i64)> = got
        .iter()
        .map(|r| (r["value"]["user"].as_str().unwrap().to_string(), r["value"]["n"].as_i64().unwrap()))
        .collect();
    counts.sort();
    // The window [1700000040000, 1700000100000): a's three clicks, b's one.
    assert_eq!(counts, [("a".to_string(), 3), ("b".to_string(), 1)]);
    assert!(got.iter().all(|r| r["value"]["window_start"] == 1_700_000_040_000i64), "{got:?}");
}

/// `status` gives each task's state as the records its changelog partitions hold: what a reader
/// of the changelog counts, compacted or not.
#[test]
fn status_gives_each_tasks_state_in_changelog_records() {
    let dir = temp_dir("status-state");
    let s = dir.join("state");
    let s = s.to_str().unwrap();
    let trades = dir.join("trades.jsonl");
    let o = streamc(&["gen", "trades", "--count", "3000", "--tickers", "40", "--seed", "3"]);
    std::fs::write(&trades, &o.stdout).unwrap();
    let o = streamc(&[
        "--state-dir",
        s,
        "run",
        "examples/stats.stream",
        "--drain",
        "--input",
        &format!("stocks={}", trades.display()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = streamc(&[
        "--state-dir",
        s,
        "consume",
        "stats-stock_stats-aggregate-changelog",
        "--exit-at-end",
        "--from-beginning",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut want = std::collections::BTreeMap::<u64, u64>::new();
    for l in stdout(&o).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        *want.entry(v["partition"].as_u64().unwrap()).or_default() += 1;
    }
    assert!(want.values().sum::<u64>() > 0);
    let o = streamc(&["--state-dir", s, "status", "examples/stats.stream"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let said: std::collections::BTreeMap<u64, u64> = out
        .lines()
        .filter_map(|l| {
            let p = l.split_once('#')?.1.split_once(':')?.0.parse().ok()?;
            let n = l.split_once("; state ")?.1.split_once(' ')?.0.parse().ok()?;
            Some((p, n))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(said, want, "{out}");
}

/// `consume` that prints nothing says why on stderr: without --from-beginning it starts at the
/// topic's end (after the records it holds), or the topic holds none.
#[test]
fn a_consume_that_prints_nothing_says_why() {
    let dir = temp_dir("consume-none");
    let s = dir.to_str().unwrap();
    let data = dir.join("two.jsonl");
    std::fs::write(&data, "{\"a\":1}\n{\"a\":2}\n").unwrap();
    let o = streamc(&["--state-dir", s, "produce", "two", data.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "two", "--exit-at-end"]);
    assert!(o.status.success() && stdout(&o).is_empty(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("without --from-beginning, consume starts at the end of `two`, after the 2 records"),
        "{}",
        stderr(&o)
    );
    let o = streamc(&["--state-dir", s, "consume", "two", "--exit-at-end", "--from-beginning"]);
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "produce", "none", "/dev/null"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "none", "--exit-at-end", "--from-beginning"]);
    assert!(o.status.success() && stdout(&o).is_empty(), "{}", stderr(&o));
    assert!(stderr(&o).contains("`none` holds no committed record"), "{}", stderr(&o));
}

/// `consume` as `kafka-console-consumer`: it follows the topic by default (a record produced
/// while it waits is printed), and stops at the end, after N records, or after a quiet spell
/// when told to; `--partition` with `--offset` starts there.
#[test]
fn consume_follows_by_default_and_stops_when_told() {
    use std::io::BufRead;
    let dir = temp_dir("consume-follow");
    let s = dir.to_str().unwrap();
    let data = dir.join("three.jsonl");
    std::fs::write(&data, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").unwrap();
    let o = streamc(&["--state-dir", s, "produce", "three", data.to_str().unwrap(), "--partitions", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let offsets = |o: &Output| -> Vec<u64> {
        stdout(o)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["offset"].as_u64().unwrap())
            .collect()
    };
    let o = streamc(&["--state-dir", s, "consume", "three", "--from-beginning", "--max-messages", "2"]);
    assert_eq!(offsets(&o), [0, 1], "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "three", "--partition", "0", "--offset", "1", "--exit-at-end"]);
    assert_eq!(offsets(&o), [1, 2], "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "three", "--partition", "0", "--offset", "latest", "--exit-at-end"]);
    assert_eq!(offsets(&o), Vec::<u64>::new(), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "three", "--from-beginning", "--timeout-ms", "300"]);
    assert_eq!(offsets(&o), [0, 1, 2], "{}", stderr(&o));
    assert!(stderr(&o).contains("no record for 300 ms: stopped after 3 records"), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "three", "--partition", "4", "--exit-at-end"]);
    assert!(!o.status.success() && stderr(&o).contains("`three` has no partition 4 (it has 1)"), "{}", stderr(&o));
    let o = streamc(&["--state-dir", s, "consume", "three", "--offset", "1"]);
    assert!(!o.status.success() && stderr(&o).contains("--partition"), "{}", stderr(&o));

    // Following from the end (of the topic, of one partition): the record produced after it
    // started is printed.
    let follow = |args: &[&str], value: i64| -> serde_json::Value {
        let mut child = Command::new(env!("CARGO_BIN_EXE_streamc"))
            .args(["--state-dir", s, "consume", "three"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // (It says it waits once it is at the end: produce only then, or the record would be
        // before its start.)
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("waiting for new records"), "{line}");
        std::fs::write(&data, format!("{{\"a\":{value}}}\n")).unwrap();
        let o = streamc(&["--state-dir", s, "produce", "three", data.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut first = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut first);
            let _ = tx.send(first);
        });
        let first = rx.recv_timeout(std::time::Duration::from_secs(120)).unwrap_or_default();
        let _ = child.kill();
        let _ = child.wait();
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{args:?}: {e}: {first:?}"))
    };
    let v = follow(&[], 4);
    assert_eq!((v["offset"].as_u64(), v["value"]["a"].as_i64()), (Some(3), Some(4)));
    // (An offset past the end starts at the end, as on Kafka.)
    let v = follow(&["--partition", "0", "--offset", "1000"], 5);
    assert_eq!((v["offset"].as_u64(), v["value"]["a"].as_i64()), (Some(4), Some(5)));
    let o = streamc(&["--state-dir", s, "consume", "three", "--max-messages", "0"]);
    assert!(!o.status.success(), "{}", stderr(&o));
}

/// A live run that mostly waited for input gives its rate over the time it spent processing,
/// and says how long that was, not over the time it waited.
#[test]
fn a_live_runs_rate_is_over_its_processing_time() {
    let dir = temp_dir("live-rate");
    let s = dir.to_str().unwrap();
    let err = dir.join("run.err");
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamc"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--state-dir", s, "run", "examples/stats.stream", "--input", "stocks=examples/data/trades.jsonl"])
        .args(["--set", "commit.interval_ms=100"])
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    // Once its results are committed, it waits: two seconds of that, then it is stopped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while stdout(&streamc(&["--state-dir", s, "consume", "stock-stats", "--from-beginning", "--exit-at-end"]))
        .is_empty()
    {
        assert!(std::time::Instant::now() < deadline, "no result committed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&err).unwrap();
    let line = text.lines().find(|l| l.starts_with("processed 2000 records in ")).unwrap_or_else(|| panic!("{text}"));
    let secs = |at: &str| -> f64 { at.split('s').next().unwrap().parse().unwrap() };
    let (total, rest) = line["processed 2000 records in ".len()..].split_once(" (").unwrap();
    let (busy, _) = rest.split_once(" of it processing: ").unwrap_or_else(|| panic!("{line}"));
    assert!(secs(total) >= 2.0 && secs(busy) < secs(total) - 1.0, "{line}");
}
