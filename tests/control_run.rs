//! Control statements on the embedded backend: a filter hot-reloaded between two inputs, a
//! compatible aggregate replaced with its state kept, an incompatible replacement rejected
//! (then accepted `with reprocess`), a control-managed table updated, the same outputs on a
//! replay with injected faults, and a thousand forged statements all rejected.

mod common;

use std::collections::BTreeMap;

use common::control::{
    changed_file_then_reset, check_big, forged_rejected, fresh_state_moves_and_drop, new_query_while_stopped,
    reserved_sink_statement_rejected, scenario, trades, two_inputs, Env,
};
use common::embedded::temp_dir;

#[test]
fn hot_reload_update_state_and_replay() {
    let dir = temp_dir("control-embedded");
    let (a, b) = two_inputs(&dir, 400, 3, (1, 2));
    let mut outputs = Vec::new();
    for (i, flags) in [vec![], vec!["--chaos", "seed=7,redeliver=0.005,fail=0.05"]].into_iter().enumerate() {
        let d = dir.join(format!("r{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let env = Env::new(&d, "ctl", vec![]);
        scenario(&env, &a, &b, &flags);
        outputs.push(["big", "totals", "watched", "totals_n"].map(|t| env.consume_versions(t)));
    }
    assert_eq!(outputs[0], outputs[1], "a replay with injected faults switches at the same input positions");
}

#[test]
fn a_thousand_forged_statements_are_all_rejected() {
    let dir = temp_dir("control-forged");
    let env = Env::new(&dir, "forge", vec![]);
    forged_rejected(&env, 1200, &[]);
}

/// `deploy` makes the running queries those of a new file: a changed filter, a new query
/// (reading its input from the start) and a dropped one; `status` shows the result.
#[test]
fn deploy_and_status() {
    let dir = temp_dir("control-deploy");
    let env = Env::new(&dir, "dep", vec![]);
    let (a, b) = two_inputs(&dir, 300, 3, (1, 2));
    env.produce_trades(&a);
    let program = env.program.to_str().unwrap().to_string();
    env.run(&["run", &program, "--drain"]);
    // The next version of the file, under the same name (the name is the application).
    let v2 = dir.join("v2");
    std::fs::create_dir_all(&v2).unwrap();
    let text = std::fs::read_to_string(&env.program).unwrap();
    let watched = text.find("query watched").unwrap();
    let new_text = text[..watched].replace("where size > 500", "where size > 800")
        + &format!(
            "query small {{\n  from trades\n  where size < 50\n  select {{ ticker, size }}\n  to \"{}\"\n}}\n",
            env.topic("small")
        );
    let file2 = v2.join(env.program.file_name().unwrap());
    std::fs::write(&file2, new_text).unwrap();
    let key = env.key.to_str().unwrap().to_string();
    let f2 = file2.to_str().unwrap().to_string();
    let out = std::process::Command::new(common::cli::bin())
        .arg("--state-dir")
        .arg(&env.state)
        .args(env.args(&["deploy", &f2, "--key", &key, "--dry-run"]))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{report}");
    for line in [
        "query big:\n  no state",
        "query totals: unchanged",
        "query small: new",
        "query watched: dropped",
        "replace query big",
        "drop query watched",
    ] {
        assert!(report.contains(line), "missing {line:?} in:\n{report}");
    }
    assert!(common::control::Env::statuses(&env).is_empty(), "--dry-run posts nothing");
    env.run(&["deploy", &f2, "--key", &key]);
    let status_now = || {
        let o = std::process::Command::new(common::cli::bin())
            .arg("--state-dir")
            .arg(&env.state)
            .args(env.args(&["status", &program]))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // Posted while the application is stopped: its tasks have not applied the statements yet,
    // and status says so (rather than show the old versions as if current).
    let before = status_now();
    assert!(before.contains("not yet at the latest program: 3 control records to apply"), "{before}");
    assert!(before.contains("have not yet applied the latest statements"), "{before}");
    env.produce_trades(&b);
    env.run(&["run", &program, "--drain"]);
    assert!(!status_now().contains("not yet"), "after a run every task has applied them");
    let st = env.statuses();
    assert_eq!(st.len(), 3);
    assert!(st.values().all(|s| s["accepted"] == true), "{st:?}");
    check_big(&env, &a, &b);
    let mut small: Vec<i64> =
        env.consume_versions("small").iter().map(|(_, v, _)| v["size"].as_i64().unwrap()).collect();
    let mut want: Vec<i64> = trades(&a).into_iter().chain(trades(&b)).filter(|t| t.2 < 50).map(|t| t.2).collect();
    small.sort();
    want.sort();
    assert_eq!(small, want, "a new query reads its input from the start");
    let status = std::process::Command::new(common::cli::bin())
        .arg("--state-dir")
        .arg(&env.state)
        .args(env.args(&["status", &program]))
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    for line in [
        "program version 3",
        "big: version 1, from control offset 0",
        "small: version 2",
        "totals: version 0, from the program file",
        "rejected statements: 0",
    ] {
        assert!(status.contains(line), "missing {line:?} in:\n{status}");
    }
    assert!(!status.contains("watched:"), "{status}");
}

/// A deploy is all or nothing: a file whose change of `totals` cannot keep its state (a sum of
/// another type) without `--reprocess`, one with a query the application would reject (a sink
/// into its own control topic), or one that moves state to other tasks (a new group key, refused
/// in any mode) posts nothing, not even its acceptable statements, and exits 1, `--dry-run`
/// included. With `--reprocess` the first file deploys.
#[test]
fn deploy_is_all_or_nothing() {
    let dir = temp_dir("control-deploy-all");
    let env = Env::new(&dir, "depall", vec![]);
    let (a, _) = two_inputs(&dir, 100, 3, (5, 6));
    env.produce_trades(&a);
    let program = env.program.to_str().unwrap().to_string();
    env.run(&["run", &program, "--drain"]);
    let text = std::fs::read_to_string(&env.program).unwrap();
    let key = env.key.to_str().unwrap().to_string();
    let deploy = |new_text: String, flags: &[&str]| {
        let v = dir.join(format!("v{}", flags.len() + new_text.len()));
        std::fs::create_dir_all(&v).unwrap();
        let file = v.join(env.program.file_name().unwrap());
        std::fs::write(&file, new_text).unwrap();
        let f = file.to_str().unwrap().to_string();
        let mut args = vec!["deploy", f.as_str(), "--key", key.as_str()];
        args.extend_from_slice(flags);
        common::cli::streamc_output(&env.state, &env.args(&args))
    };
    let retyped = text.replace("where size > 500", "where size > 900").replace("sum(size)", "sum(price)");
    for flags in [&["--dry-run"][..], &[]] {
        let out = deploy(retyped.clone(), flags);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        assert!(err.contains("totals cannot keep its state") && err.contains("nothing was posted"), "{err}");
    }
    let reserved =
        format!("{text}query loop {{\n  from trades\n  select {{ ticker }}\n  to \"{}-control\"\n}}\n", env.app);
    for flags in [&["--dry-run"][..], &[]] {
        let out = deploy(reserved.clone(), flags);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        assert!(
            err.contains("the application would reject `query loop") && err.contains("nothing was posted"),
            "{err}"
        );
    }
    // A new group key moves the state to other tasks: refused whatever the mode.
    let regrouped = text.replace("where size > 500", "where size > 900").replace("group by ticker", "group by size");
    let out = deploy(regrouped, &["--reprocess"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("E0703") && err.contains("would reject `replace query totals"), "{err}");
    assert!(env.statuses().is_empty(), "nothing was posted: {:?}", env.statuses());
    let out = deploy(retyped, &["--reprocess"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    env.run(&["run", &program, "--drain"]);
    let st = env.statuses();
    assert_eq!(st.len(), 2, "{st:?}");
    assert!(st.values().all(|s| s["accepted"] == true), "{st:?}");
}

/// A program file changed since the application first ran: a compatible change runs (with the
/// report), an incompatible one is refused until `--reset`, which reprocesses the input.
#[test]
fn changed_program_file_and_reset() {
    let dir = temp_dir("control-reset");
    let env = Env::new(&dir, "rst", vec![]);
    changed_file_then_reset(&env);
}

#[test]
fn fresh_state_store_moves_and_drop_with_two_threads() {
    let dir = temp_dir("control-fresh");
    let env = Env::new(&dir, "fresh", vec![]);
    fresh_state_moves_and_drop(&env, &["--threads", "2"]);
}

#[test]
fn a_query_added_while_stopped_reads_from_the_start() {
    let dir = temp_dir("control-new");
    let env = Env::new(&dir, "newq", vec![]);
    new_query_while_stopped(&env);
}

#[test]
fn a_statement_writing_into_an_internal_topic_is_rejected() {
    let dir = temp_dir("control-reserved");
    let env = Env::new(&dir, "resv", vec![]);
    reserved_sink_statement_rejected(&env);
}

/// `streamc status` gives each task's input lag: the input's end offset minus the task's
/// committed position, per input partition (here: what was produced after the last run).
#[test]
fn status_reports_each_task_s_input_lag() {
    let dir = temp_dir("status-lag");
    let state = dir.join("state");
    let (first, second) = (dir.join("first.jsonl"), dir.join("second.jsonl"));
    common::embedded::write_trades(&first, 700, 7, 3, 0);
    common::embedded::write_trades(&second, 450, 7, 4, 0);
    let prog = "examples/stats.stream";
    let produce = |f: &std::path::Path| {
        common::cli::streamc(
            &state,
            &["produce", "stocks", f.to_str().unwrap(), "--program", prog, "--set", "embedded.partitions=3"],
        )
    };
    let lags = || {
        let o = common::cli::streamc_output(&state, &["status", prog]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
        // `  stock_stats-from#P: …; input lag N (stocks/P N)`
        let lags: Vec<(String, u64)> = out
            .lines()
            .filter_map(|l| {
                let (task, rest) = l.trim().split_once(": ")?;
                let n = rest.split("input lag ").nth(1)?.split(' ').next()?.parse().ok()?;
                Some((task.to_string(), n))
            })
            .collect();
        assert_eq!(lags.len(), 3, "one line per task (3 partitions):\n{out}");
        lags
    };
    produce(&first);
    common::cli::streamc(&state, &["run", prog, "--drain"]);
    assert!(lags().iter().all(|(_, n)| *n == 0), "caught up after a drained run: {:?}", lags());
    produce(&second);
    let after = lags();
    assert_eq!(after.iter().map(|(_, n)| n).sum::<u64>(), 450, "{after:?}");
    common::cli::streamc(&state, &["run", prog, "--drain"]);
    assert!(lags().iter().all(|(_, n)| *n == 0), "{:?}", lags());
}

/// A statement too long for a command line (over 128 KB: a table row with a 200 KB note) is
/// posted from a file (`-f FILE`) and from standard input (`-`), and the run applies both.
#[test]
fn a_long_statement_is_posted_from_a_file_or_standard_input() {
    let dir = temp_dir("control-long");
    let env = Env::new(&dir, "long", vec![]);
    let (a, b) = two_inputs(&dir, 50, 3, (1, 2));
    env.produce_trades(&a);
    let program = env.program.to_str().unwrap().to_string();
    env.run(&["run", &program, "--drain"]);
    let note = "n".repeat(200_000);
    let from_file = dir.join("statement.txt");
    std::fs::write(&from_file, format!("update watch[\"T0001\"] = {{ note = \"{note}\", threshold = 0.0 }}")).unwrap();
    let (out, ok) = env.control_with(&["-f", from_file.to_str().unwrap()], None);
    assert!(ok, "{}", &out[..out.len().min(2000)]);
    let stdin = format!("update watch[\"T0002\"] = {{ note = \"{note}x\", threshold = 0.0 }}");
    let (out, ok) = env.control_with(&["-"], Some(&stdin));
    assert!(ok, "{}", &out[..out.len().min(2000)]);
    env.produce_trades(&b);
    env.run(&["run", &program, "--drain"]);
    let st = env.statuses();
    assert_eq!(st.len(), 2, "{st:?}");
    assert!(st.values().all(|s| s["accepted"].as_bool() == Some(true)), "{st:?}");
    // The second input's trades of those tickers joined the rows with the long notes.
    let notes: BTreeMap<String, usize> = env
        .last_by_key(&env.topic("watched"))
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?["note"].as_str()?.len())))
        .collect();
    assert_eq!(notes.get("\"T0001\""), Some(&200_000), "{notes:?}");
    assert_eq!(notes.get("\"T0002\""), Some(&200_001), "{notes:?}");
    // Neither a statement nor a file: a clear error.
    let (out, ok) = env.control_with(&[], None);
    assert!(!ok && out.contains("STATEMENT"), "{out}");
}
