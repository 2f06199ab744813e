//! Control statements on a real broker (started by ./dev/test): the embedded scenario (hot
//! reload, compatible and incompatible replacements, `with reprocess`, a control-managed table)
//! on Kafka; a filter hot-reloaded inside one running instance with no rebalance; and a
//! thousand forged statements rejected.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cli::spawn;
use common::control::{
    changed_file_then_reset, check_big, forged_rejected, fresh_state_moves_and_drop, new_query_while_stopped, scenario,
    trades, two_inputs, Env,
};
use common::embedded::temp_dir;
use common::kafka::require;

/// Topics and application ids are unique to the test process, so re-runs on one broker never
/// meet earlier runs' records.
fn kafka_env(dir: &Path, app: &str) -> Env {
    let b = require();
    let app = format!("{app}-{}", std::process::id());
    Env::new(dir, &app, vec!["--bootstrap-servers".into(), b, "--set".into(), "commit.interval_ms=200".into()])
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn control_scenario_on_kafka() {
    let dir = temp_dir("kctl-scenario");
    let env = kafka_env(&dir, "kctl1");
    let (a, b) = two_inputs(&dir, 400, 3, (1, 2));
    scenario(&env, &a, &b, &[]);
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(90), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn filter_hot_reloaded_in_a_running_instance_without_rebalance() {
    let dir = temp_dir("kctl-live");
    let env = kafka_env(&dir, "kctl2");
    let (a, b) = two_inputs(&dir, 400, 3, (1, 2));
    env.produce_trades(&a);
    let log = dir.join("run.log");
    let program = env.program.to_str().unwrap().to_string();
    let mut run = spawn(&env.state, &env.args(&["run", &program]), &log);
    let first = trades(&a).iter().filter(|t| t.2 > 500).count();
    wait_for("the first input's outputs", || env.consume_versions("big").len() >= first);
    let s = format!(
        "replace query big {{ from trades where size > 800 select {{ ticker, size }} to \"{}\" }}",
        env.topic("big")
    );
    let (out, ok) = env.control(&s, &["--wait", "60"]);
    assert!(ok && out.contains("accepted replace big"), "{out}");
    env.produce_trades(&b);
    let total = first + trades(&b).iter().filter(|t| t.2 > 800).count();
    wait_for("the second input's outputs", || env.consume_versions("big").len() >= total);
    assert!(run.terminate(), "the instance stops cleanly");
    check_big(&env, &a, &b);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("rebalance ").count(), 1, "one assignment, none for the reload:\n{text}");
    assert!(text.contains("big-from partition 0: now query version 1"), "{text}");
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn a_thousand_forged_statements_are_rejected_on_kafka() {
    let dir = temp_dir("kctl-forged");
    let env = kafka_env(&dir, "kctl3");
    forged_rejected(&env, 1000, &[]);
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn changed_program_file_and_reset_on_kafka() {
    let dir = temp_dir("kctl-reset");
    let env = kafka_env(&dir, "kctl4");
    changed_file_then_reset(&env);
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn fresh_state_store_moves_and_drop_on_kafka() {
    let dir = temp_dir("kctl-fresh");
    let env = kafka_env(&dir, "kctl5");
    fresh_state_moves_and_drop(&env, &[]);
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn a_query_added_while_stopped_reads_from_the_start_on_kafka() {
    let dir = temp_dir("kctl-new");
    let env = kafka_env(&dir, "kctl6");
    new_query_while_stopped(&env);
}

/// Two instances share the input; a statement is applied by both (each at its own commit
/// boundary, recorded in the group's offsets as `status` shows), with no rebalance.
#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn two_instances_apply_the_same_statement_without_rebalance() {
    let dir = temp_dir("kctl-two");
    let env = kafka_env(&dir, "kctl7");
    let (a, b) = two_inputs(&dir, 400, 3, (1, 2));
    env.produce_trades(&a);
    let program = env.program.to_str().unwrap().to_string();
    let (log1, log2) = (dir.join("one.log"), dir.join("two.log"));
    let mut one = spawn(&dir.join("state-one"), &env.args(&["run", &program, "--set", "instance.id=one"]), &log1);
    let mut two = spawn(&dir.join("state-two"), &env.args(&["run", &program, "--set", "instance.id=two"]), &log2);
    let first = trades(&a).iter().filter(|t| t.2 > 500).count();
    wait_for("the first input's outputs", || env.consume_versions("big").len() >= first);
    let rebalances = || {
        std::fs::read_to_string(&log1).unwrap_or_default().matches("rebalance ").count()
            + std::fs::read_to_string(&log2).unwrap_or_default().matches("rebalance ").count()
    };
    // The group has settled: both joined, and no assignment for 3 s.
    let mut seen = (0, Instant::now());
    wait_for("the group to settle", || {
        let (l1, l2) =
            (std::fs::read_to_string(&log1).unwrap_or_default(), std::fs::read_to_string(&log2).unwrap_or_default());
        let n = rebalances();
        if n != seen.0 {
            seen = (n, Instant::now());
        }
        l1.contains("rebalance ") && l2.contains("rebalance ") && seen.1.elapsed() > Duration::from_secs(3)
    });
    let before = rebalances();
    let s = format!(
        "replace query big {{ from trades where size > 800 select {{ ticker, size }} to \"{}\" }}",
        env.topic("big")
    );
    let (out, ok) = env.control(&s, &["--wait", "60"]);
    assert!(ok, "{out}");
    // Every task of the group has committed with the statement applied.
    let status = || {
        let out = std::process::Command::new(common::cli::bin())
            .arg("--state-dir")
            .arg(&env.state)
            .args(env.args(&["status", &program]))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_for("both instances to apply the statement", || {
        let s = status();
        s.contains("big-from#0: 1, version 1") && s.contains("big-from#1: 1, version 1")
    });
    env.produce_trades(&b);
    let total = first + trades(&b).iter().filter(|t| t.2 > 800).count();
    wait_for("the second input's outputs", || env.consume_versions("big").len() >= total);
    assert!(one.terminate() && two.terminate(), "both stop cleanly");
    // (Shown when a check below fails.)
    for (name, log) in [("one", &log1), ("two", &log2)] {
        eprintln!("--- instance {name}:\n{}", std::fs::read_to_string(log).unwrap_or_default());
    }
    check_big(&env, &a, &b);
    assert_eq!(rebalances(), before, "the statement caused no rebalance");
    for log in [&log1, &log2] {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(text.contains("now query version 1"), "{text}");
    }
}
