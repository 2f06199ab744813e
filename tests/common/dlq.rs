//! The dead-letter replay scenario both backends run (`tests/dlq.rs`, `tests/kafka_dlq.rs`): a
//! program whose `price / qty` fails on `qty == 0` dead-letters those orders; a replay cut off
//! in its second batch, finished by the next one, and one more that appends nothing; the
//! program fixed (`if qty == 0 then 0 else …`) and run again: every order is counted once,
//! against a fold written here.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::cli::{bin, consume, write_isolated};

const V1: &str = r#"stream orders from "orders" {
  key   id
  value json { id: string, qty: int, price: int }
}

query per_id {
  from orders
  group by id
  aggregate { orders = count(), unit = sum(price / qty) }
  to "per-id"
}
"#;

/// 40 orders over 5 ids; every fourth has `qty` 0: (id, qty, price).
fn orders() -> Vec<(String, i64, i64)> {
    (0..40).map(|i| (format!("k{}", i % 5), if i % 4 == 3 { 0 } else { 1 + i % 3 }, 10 * i)).collect()
}

/// Run the scenario in `dir` on the backend `backend` names (`--bootstrap-servers …`, or
/// nothing for the embedded log), topics prefixed with `pfx.` and application id `app`.
pub fn replay_scenario(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let state = dir.join("state");
    std::fs::create_dir_all(dir.join("v1")).unwrap();
    std::fs::create_dir_all(dir.join("v2")).unwrap();
    let v1 = write_isolated(V1, pfx, &dir.join("v1").join("shop.stream"));
    let fixed = V1.replace("sum(price / qty)", "sum(if qty == 0 then 0 else price / qty)");
    let v2 = write_isolated(&fixed, pfx, &dir.join("v2").join("shop.stream"));
    let (v1, v2) = (v1.to_str().unwrap(), v2.to_str().unwrap());
    let data = dir.join("orders.jsonl");
    let lines: Vec<String> = orders()
        .iter()
        .map(|(id, qty, price)| serde_json::json!({ "id": id, "qty": qty, "price": price }).to_string())
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let set_app = format!("application.id={app}");
    let args = |head: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        a.extend(backend.iter().map(|s| s.to_string()));
        a.extend(["--set".to_string(), set_app.clone()]);
        a
    };
    let run = |head: &[&str]| -> (String, String) {
        let out = Command::new(bin()).arg("--state-dir").arg(&state).args(args(head)).output().unwrap();
        let (o, e) =
            (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "streamc {head:?} failed:\n{o}{e}");
        (o, e)
    };
    let orders_topic = format!("{pfx}.orders");
    run(&["produce", &orders_topic, data.to_str().unwrap(), "--program", v1]);
    let (_, e) = run(&["run", v1, "--drain"]);
    assert!(e.contains("10 dead letters"), "{e}");
    let (o, _) = run(&["dlq", "list", v1]);
    assert!(o.contains(&format!("{app}-dlq: 10 dead letters, 0 replayed")), "{o}");
    assert!(o.contains("division by zero in `/`") && o.contains(&orders_topic), "{o}");

    // A replay killed after its second batch of 3 was appended, before it was recorded.
    let cut = Command::new(bin())
        .arg("--state-dir")
        .arg(&state)
        .args(args(&["dlq", "replay", v1]))
        .env("STREAMC_TEST_DLQ_REPLAY_BATCH", "3")
        .env("STREAMC_TEST_DLQ_REPLAY_ABORT_AFTER", "2")
        .output()
        .unwrap();
    assert!(!cut.status.success(), "the replay was to be cut off");
    let (o, _) = run(&["dlq", "list", v1]);
    assert!(o.contains("3 replayed") && o.contains("a replay was cut off"), "{o}");
    let (o, _) = run(&["dlq", "replay", v1, "--reason", "division by zero"]);
    assert!(o.contains("finished a replay that was cut off: 3 dead letters it had appended"), "{o}");
    assert!(
        o.contains(&format!("replayed 4 dead letters of `{app}-dlq` (first offset 6, last 9): 4 to `{orders_topic}`")),
        "{o}"
    );
    let (o, _) = run(&["dlq", "replay", v1]);
    assert!(o.contains("replayed nothing") && o.contains("10 replayed before"), "{o}");

    // Each dead letter's record once more in the source topic, as it came.
    let source = consume(&state, &orders_topic, backend);
    assert_eq!(source.len(), 50, "40 produced, 10 replayed");
    let mut copies: BTreeMap<(String, String, i64), usize> = BTreeMap::new();
    for c in &source {
        *copies.entry((c.key.to_string(), c.value.to_string(), c.timestamp)).or_default() += 1;
    }
    for ((_, value, _), n) in copies {
        let dead = value.contains("\"qty\":0");
        assert_eq!(n, if dead { 2 } else { 1 }, "{value}");
    }

    let (_, e) = run(&["run", v2, "--drain"]);
    assert!(e.contains("processed 10 records") && e.contains("0 dead letters"), "{e}");
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (id, qty, price) in orders() {
        let w = want.entry(id).or_default();
        w.0 += 1;
        w.1 += if qty == 0 { 0 } else { price / qty };
    }
    let mut got: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for c in consume(&state, &format!("{pfx}.per-id"), backend) {
        let v = &c.value;
        got.insert(c.key.as_str().unwrap().to_string(), (v["orders"].as_i64().unwrap(), v["unit"].as_i64().unwrap()));
    }
    assert_eq!(got, want, "every order counted once");
}
