//! Interactive queries on the embedded default: `streamc query` reads an aggregate's, a windowed
//! aggregate's and a table's store — from local state once the application stopped, and through
//! the running instance's `/stores` while it runs — and every answer equals a fold of the input
//! written here.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cli::{spawn, streamc, streamc_fails, streamc_output};
use common::embedded::{temp_dir, trades_of, write_trades};

const PROGRAM: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}

table names from "names" {
  key    ticker
  value  json { ticker: string, name: string }
}

query volume {
  from trades
  group by ticker
  aggregate { trades = count(), shares = sum(size) }
  to "volume"
}

query per_second {
  from trades
  group by ticker
  window tumbling 1s grace 1d
  aggregate { trades = count(), shares = sum(size) }
  to "per-second"
}

query named {
  from trades
  left join names on ticker
  select { ticker, name = names.name }
  to "named"
}
"#;

/// ticker → (count, sum of sizes).
fn volume(ts: &[(String, i64, i64)]) -> BTreeMap<String, (i64, i64)> {
    let mut m = BTreeMap::new();
    for (t, size, _) in ts {
        let e = m.entry(t.clone()).or_insert((0, 0));
        e.0 += 1;
        e.1 += size;
    }
    m
}

/// (ticker, window start) → (count, sum of sizes), 1 s tumbling windows.
fn per_second(ts: &[(String, i64, i64)]) -> BTreeMap<(String, i64), (i64, i64)> {
    let mut m = BTreeMap::new();
    for (t, size, at) in ts {
        let e = m.entry((t.clone(), at.div_euclid(1000) * 1000)).or_insert((0, 0));
        e.0 += 1;
        e.1 += size;
    }
    m
}

fn query(state: &Path, prog: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut a = vec!["query", prog];
    a.extend_from_slice(args);
    let out = streamc_output(state, &a);
    assert!(out.status.success(), "query {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn volume_rows(rows: &[serde_json::Value]) -> BTreeMap<String, (i64, i64)> {
    rows.iter()
        .map(|r| {
            assert_eq!(r["key"], r["value"]["ticker"]);
            (
                r["key"].as_str().unwrap().to_string(),
                (r["value"]["trades"].as_i64().unwrap(), r["value"]["shares"].as_i64().unwrap()),
            )
        })
        .collect()
}

fn window_rows(rows: &[serde_json::Value]) -> BTreeMap<(String, i64), (i64, i64)> {
    rows.iter()
        .map(|r| {
            let v = &r["value"];
            assert_eq!(v["window_end"].as_i64().unwrap() - v["window_start"].as_i64().unwrap(), 1000);
            (
                (r["key"].as_str().unwrap().to_string(), v["window_start"].as_i64().unwrap()),
                (v["trades"].as_i64().unwrap(), v["shares"].as_i64().unwrap()),
            )
        })
        .collect()
}

/// Every way of asking (one key, all keys, a key range, a prefix, windows of a key in a time
/// range, a table's key) answers what the fold of `ts` says.
fn check_answers(state: &Path, prog: &str, ts: &[(String, i64, i64)], names: &BTreeMap<&str, &str>) {
    let want = volume(ts);
    assert_eq!(volume_rows(&query(state, prog, &["volume-aggregate"])), want, "every key");
    for (t, v) in &want {
        let rows = query(state, prog, &["volume-aggregate", t]);
        assert_eq!(volume_rows(&rows), BTreeMap::from([(t.clone(), *v)]), "key {t}");
    }
    let keys: Vec<&String> = want.keys().collect();
    let (lo, hi) = (keys[2].as_str(), keys[5].as_str());
    let range: BTreeMap<String, (i64, i64)> =
        want.iter().filter(|(k, _)| k.as_str() >= lo && k.as_str() <= hi).map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(volume_rows(&query(state, prog, &["volume-aggregate", "--from-key", lo, "--to-key", hi])), range);
    let prefix = &keys[0][..4];
    let with_prefix: BTreeMap<String, (i64, i64)> =
        want.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(volume_rows(&query(state, prog, &["volume-aggregate", "--prefix", prefix])), with_prefix);

    let windows = per_second(ts);
    assert_eq!(window_rows(&query(state, prog, &["per_second-aggregate"])), windows, "every window");
    let key = keys[1].as_str();
    let starts: Vec<i64> = windows.keys().filter(|(k, _)| k == key).map(|(_, s)| *s).collect();
    assert!(starts.len() >= 2, "the data gives the key several windows: {starts:?}");
    let (from, to) = (starts[1], starts[starts.len() - 1]);
    let some: BTreeMap<(String, i64), (i64, i64)> =
        windows.iter().filter(|((k, s), _)| k == key && *s >= from && *s <= to).map(|(k, v)| (k.clone(), *v)).collect();
    let rows = query(state, prog, &["per_second-aggregate", key, "--from", &from.to_string(), "--to", &to.to_string()]);
    assert_eq!(window_rows(&rows), some, "windows of {key} starting in [{from}, {to}]");

    for (t, name) in names {
        let rows = query(state, prog, &["named-join-names", t]);
        assert_eq!(rows.len(), 1, "{t}: {rows:?}");
        assert_eq!(rows[0]["value"], serde_json::json!({ "ticker": t, "name": name }));
    }
}

#[test]
fn stores_are_read_after_the_run_and_through_the_running_instance() {
    let dir = temp_dir("query");
    let state = dir.join("state");
    let prog_path = dir.join("q.stream");
    std::fs::write(&prog_path, PROGRAM).unwrap();
    let prog = prog_path.to_str().unwrap();
    let first = dir.join("first.jsonl");
    write_trades(&first, 3000, 12, 7, 0);
    // A producer's table: a key written twice (the last row counts), keys not in the trades.
    let names_file = dir.join("names.jsonl");
    std::fs::write(
        &names_file,
        [
            r#"{"ticker":"T0000","name":"first name"}"#,
            r#"{"ticker":"T0001","name":"One"}"#,
            r#"{"ticker":"T0000","name":"Zero"}"#,
            r#"{"ticker":"ZZZ","name":"none traded"}"#,
        ]
        .map(|l| format!("{l}\n"))
        .concat(),
    )
    .unwrap();
    let names = BTreeMap::from([("T0000", "Zero"), ("T0001", "One"), ("ZZZ", "none traded")]);
    let ts = trades_of(&first);
    streamc(
        &state,
        &[
            "run",
            prog,
            "--input",
            &format!("names={}", names_file.display()),
            "--input",
            &format!("trades={}", first.display()),
            "--drain",
        ],
    );
    // Stopped: read from local state.
    check_answers(&state, prog, &ts, &names);

    // Running (with more input arriving): asked through the instance, which answers from its
    // tasks' committed state.
    let log = dir.join("run.log");
    let mut run = spawn(&state, &["run", prog, "--http-addr", "127.0.0.1:0"], &log);
    let served = state.join("apps").join("q").join("http-addr");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !served.exists() {
        assert!(
            Instant::now() < deadline,
            "the run never served: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = dir.join("second.jsonl");
    write_trades(&second, 2000, 12, 8, 0);
    // The second batch continues after the first in event time.
    let shift = ts.iter().map(|t| t.2).max().unwrap() + 1000 - trades_of(&second).iter().map(|t| t.2).min().unwrap();
    let shifted: String = std::fs::read_to_string(&second)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ts"] = serde_json::json!(v["ts"].as_i64().unwrap() + shift);
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&second, shifted).unwrap();
    streamc(&state, &["produce", "trades", second.to_str().unwrap(), "--program", prog]);
    let mut all = ts.clone();
    all.extend(trades_of(&second));
    let want = volume(&all);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = streamc_output(&state, &["query", prog, "volume-aggregate"]);
        if out.status.success() {
            let rows: Vec<serde_json::Value> =
                String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            if volume_rows(&rows) == want {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the running instance never answered the fold of both batches: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    check_answers(&state, prog, &all, &names);
    // The instance's own endpoints: the stores it serves, and clear errors.
    let addr = std::fs::read_to_string(&served).unwrap();
    let stores = http_get(&addr, "/stores");
    assert!(stores.starts_with("HTTP/1.0 200") || stores.starts_with("HTTP/1.1 200"), "{stores}");
    for s in ["volume-aggregate", "per_second-aggregate", "named-join-names"] {
        assert!(stores.contains(&format!("\"name\":\"{s}\"")), "{stores}");
    }
    let missing = http_get(&addr, "/stores/nope?key=x");
    assert!(missing.contains(" 404 ") && missing.contains("no store `nope`"), "{missing}");
    let bad = http_get(&addr, "/stores/volume-aggregate?from=1");
    assert!(bad.contains(" 400 "), "{bad}");
    assert!(bad.contains("not windowed"), "{bad}");
    assert!(run.terminate(), "the run did not stop cleanly on SIGTERM");
    assert!(!served.exists(), "the served address outlived the run");

    // Errors of the command itself.
    let err = streamc_fails(&state, &["query", prog, "nope"]);
    assert!(err.contains("no store `nope`") && err.contains("volume-aggregate"), "{err}");
    let err = streamc_fails(&state, &["query", prog, "named-join-names", "--from", "soon"]);
    assert!(err.contains("is not a time"), "{err}");
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// A windowed store whose windows all closed (the run ended with --close-windows-at-end) gives
/// no row: nothing on stdout, exit 0, and stderr says so and why; a key-value store's key that
/// is not there says so too, without the windows' reason.
#[test]
fn an_empty_answer_is_said_on_stderr_with_why_a_windowed_store_may_hold_none() {
    let dir = temp_dir("query-empty");
    let state = dir.join("state");
    let prog_path = dir.join("q.stream");
    std::fs::write(&prog_path, PROGRAM).unwrap();
    let prog = prog_path.to_str().unwrap();
    let trades = dir.join("trades.jsonl");
    write_trades(&trades, 200, 3, 1, 0);
    let input = format!("trades={}", trades.display());
    streamc(&state, &["run", prog, "--input", &input, "--drain", "--close-windows-at-end"]);
    let o = streamc_output(&state, &["query", prog, "per_second-aggregate", "T0000"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.is_empty(), "{out}{err}");
    assert!(
        err.contains("no rows: `per_second-aggregate` holds none") && err.contains("--close-windows-at-end"),
        "{err}"
    );
    let o = streamc_output(&state, &["query", prog, "volume-aggregate", "NOPE"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.is_empty(), "{out}{err}");
    assert!(err.contains("no rows: `volume-aggregate` holds none") && !err.contains("windowed"), "{err}");
}
