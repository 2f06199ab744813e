//! The embedded runtime end to end: results against independent references written plainly
//! here, split-invariance, restarts and restores, reproducibility, late records, bad input.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::embedded::{read_topic, temp_dir, topic_bytes, write_trades, Run};

/// One trade as the reference reads it.
struct Trade {
    ticker: String,
    price: f64,
    size: i64,
    ts: i64,
}

fn trades(path: &Path) -> Vec<Trade> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some(Trade { ticker: v["ticker"].as_str()?.to_string(), price: v["price"].as_f64()?, size: v["size"].as_i64()?, ts: v["ts"].as_i64()? })
        })
        .collect()
}

#[derive(Debug, PartialEq)]
struct Stats {
    trades: i64,
    volume: i64,
    avg_price: f64,
    low: f64,
    high: f64,
}

/// The stats example, folded plainly: hopping 5 s windows advancing 1 s, grace 1 s, over
/// trades with price > 0, in input order. Returns the final windows and the late drops (a
/// record is late for a window when stream time — the largest time seen so far in its
/// partition — has reached the window's end plus grace).
fn stats_reference(trades: &[Trade], partitions: u32) -> (BTreeMap<(String, i64), Stats>, u64) {
    let (size, advance, grace) = (5_000i64, 1_000i64, 1_000i64);
    type Acc = (i64, i64, f64, f64, f64);
    let mut acc: BTreeMap<(String, i64), Acc> = BTreeMap::new();
    let mut stream_time: BTreeMap<u32, i64> = BTreeMap::new();
    let mut late = 0;
    for t in trades.iter().filter(|t| t.price > 0.0) {
        let p = streamc::log::partition_for(t.ticker.as_bytes(), partitions);
        let st = stream_time.entry(p).or_insert(i64::MIN);
        *st = (*st).max(t.ts);
        let mut start = (t.ts - size + advance).max(0) / advance * advance;
        while start <= t.ts {
            if t.ts < start + size {
                if start + size + grace <= *st {
                    late += 1;
                } else {
                    let e = acc.entry((t.ticker.clone(), start)).or_insert((0, 0, 0.0, f64::MAX, f64::MIN));
                    e.0 += 1;
                    e.1 += t.size;
                    e.2 += t.price;
                    e.3 = e.3.min(t.price);
                    e.4 = e.4.max(t.price);
                }
            }
            start += advance;
        }
    }
    let windows = acc
        .into_iter()
        .map(|(k, (n, vol, sum, lo, hi))| (k, Stats { trades: n, volume: vol, avg_price: sum / n as f64, low: lo, high: hi }))
        .collect();
    (windows, late)
}

/// The last emitted value of every (ticker, window start) in the output topic.
fn final_windows(state: &Path) -> BTreeMap<(String, i64), Stats> {
    let mut out = BTreeMap::new();
    for r in read_topic(state, "stock-stats") {
        let v = &r.value;
        assert_eq!(r.key.as_deref(), v["ticker"].as_str(), "the key is the ticker");
        let start = v["window_start"].as_i64().unwrap();
        assert_eq!(v["window_end"].as_i64().unwrap(), start + 5_000);
        out.insert(
            (v["ticker"].as_str().unwrap().to_string(), start),
            Stats {
                trades: v["trades"].as_i64().unwrap(),
                volume: v["volume"].as_i64().unwrap(),
                avg_price: v["avg_price"].as_f64().unwrap(),
                low: v["low"].as_f64().unwrap(),
                high: v["high"].as_f64().unwrap(),
            },
        );
    }
    out
}

#[test]
fn stats_example_matches_the_reference() {
    let dir = temp_dir("stats-ref");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 30_000, 20, 7, 500);
    let state = dir.join("state");
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    let (want, late) = stats_reference(&trades(&input), 1);
    assert_eq!(late, 0, "disorder within grace: nothing is late");
    assert_eq!(sum.late, 0);
    let got = final_windows(&state);
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    assert!(sum.commits >= 3, "commits every 10,000 records: {sum:?}");
}

#[test]
fn results_do_not_depend_on_partitions_threads_or_restarts() {
    let dir = temp_dir("split");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 20_000, 37, 11, 900);
    let (want, _) = stats_reference(&trades(&input), 1);

    let one = dir.join("one");
    Run::new("examples/stats.stream", &one).input("stocks", &input).go().unwrap();
    assert_eq!(final_windows(&one), want);

    let four = dir.join("four");
    Run::new("examples/stats.stream", &four).input("stocks", &input).set("embedded.partitions=4").threads(2).go().unwrap();
    assert_eq!(read_topic(&four, "stock-stats").iter().map(|r| r.partition).max(), Some(3), "four output partitions used");
    assert_eq!(final_windows(&four), want);

    // Half the input, stop without closing windows; then the rest: the run resumes its
    // --input file, its offsets and its state.
    let restart = dir.join("restart");
    let all = std::fs::read_to_string(&input).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let partial = dir.join("partial.jsonl");
    std::fs::write(&partial, lines[..lines.len() / 2].join("\n") + "\n").unwrap();
    Run::new("examples/stats.stream", &restart).input("stocks", &partial).close(false).go().unwrap();
    std::fs::write(&partial, all.clone()).unwrap();
    let second = Run::new("examples/stats.stream", &restart).input("stocks", &partial).go().unwrap();
    assert_eq!(second.records_in as usize, lines.len() - lines.len() / 2, "only the new half is processed");
    assert_eq!(second.restored, 0, "intact local state restores nothing");
    assert_eq!(final_windows(&restart), want);
}

#[test]
fn local_state_is_restored_from_the_changelog() {
    let dir = temp_dir("restore");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 12_000, 9, 3, 500);
    let all = std::fs::read_to_string(&input).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let partial = dir.join("partial.jsonl");
    std::fs::write(&partial, lines[..7_000].join("\n") + "\n").unwrap();
    let state = dir.join("state");
    Run::new("examples/stats.stream", &state).input("stocks", &partial).close(false).go().unwrap();
    // Lose the local state entirely: the changelog is the source of truth.
    std::fs::remove_dir_all(state.join("apps").join("stats").join("state")).unwrap();
    std::fs::write(&partial, all).unwrap();
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &partial).go().unwrap();
    assert!(sum.restored > 0, "the store was rebuilt from its changelog: {sum:?}");
    let (want, _) = stats_reference(&trades(&input), 1);
    assert_eq!(final_windows(&state), want);
}

#[test]
fn one_thread_runs_are_reproducible_byte_for_byte() {
    let dir = temp_dir("bytes");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 15_000, 13, 5, 2_000);
    let (a, b) = (dir.join("a"), dir.join("b"));
    Run::new("examples/stats.stream", &a).input("stocks", &input).set("commit.records=777").go().unwrap();
    Run::new("examples/stats.stream", &b).input("stocks", &input).set("commit.records=777").go().unwrap();
    for topic in ["stock-stats", "stats-stock_stats-aggregate-changelog", "stocks"] {
        let (x, y) = (topic_bytes(&a, topic), topic_bytes(&b, topic));
        assert!(!x.iter().all(|f| f.is_empty()), "{topic} is empty");
        assert!(x == y, "{topic} differs between two identical runs");
    }
}

#[test]
fn late_records_are_dropped_and_counted_like_the_reference() {
    let dir = temp_dir("late");
    let input = dir.join("trades.jsonl");
    // Disorder of up to 4 s against a grace of 1 s: some records are late for some windows.
    write_trades(&input, 10_000, 5, 21, 4_000);
    let state = dir.join("state");
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    let (want, late) = stats_reference(&trades(&input), 1);
    assert!(late > 100, "the input must produce late records: {late}");
    assert_eq!(sum.late, late);
    assert_eq!(final_windows(&state), want);
}

#[test]
fn bad_records_go_to_the_dead_letter_topic_with_the_reason() {
    let dir = temp_dir("dlq");
    let input = dir.join("trades.jsonl");
    let good = r#"{"ticker":"A","price":1.5,"size":2,"ts":1000}"#;
    let lines = [
        good,
        "not json at all",
        r#"{"ticker":"A","price":"cheap","size":2,"ts":1000}"#,
        r#"{"ticker":"A","size":2,"ts":1000}"#,
        r#"{"ticker":"A","price":2.5,"size":3,"ts":"1970-01-01T00:00:01.500Z"}"#,
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let state = dir.join("state");
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    assert_eq!(sum.dead_letters, 3);
    let dlq = read_topic(&state, "stats-dlq");
    assert_eq!(dlq.len(), 3);
    let offsets: Vec<&str> = dlq.iter().map(|r| r.headers["streamc.source.offset"].as_str()).collect();
    assert_eq!(offsets, ["1", "2", "3"]);
    assert!(dlq.iter().all(|r| r.headers["streamc.source.topic"] == "stocks" && r.headers["streamc.source.partition"] == "0"));
    assert!(dlq[1].headers["streamc.error"].contains("expected float"), "{:?}", dlq[1].headers);
    assert!(dlq[2].headers["streamc.error"].contains("missing field `price`"), "{:?}", dlq[2].headers);
    // The good records were aggregated: window [0, 5000) has both.
    let out = final_windows(&state);
    let w = &out[&("A".to_string(), 0)];
    assert_eq!((w.trades, w.volume, w.low, w.high), (2, 5, 1.5, 2.5));

    // on_error: fail stops with the record named.
    let state2 = dir.join("state2");
    let err = Run::new("examples/stats.stream", &state2).input("stocks", &input).set("on_error=fail").go().unwrap_err();
    assert!(err.contains("stocks partition 0 offset 1"), "{err}");
}

#[test]
fn alerts_example_joins_trades_with_the_limits_table_in_timestamp_order() {
    let dir = temp_dir("alerts");
    let trades_file = dir.join("trades.jsonl");
    write_trades(&trades_file, 5_000, 4, 17, 300);
    let trades = trades(&trades_file);
    // Limits change over time: at 1 s, 2 s, … each ticker gets a new limit; one is deleted.
    let base = streamc::gen::BASE_TS;
    let mut limits = Vec::new();
    for step in 0..5i64 {
        for t in 0..4 {
            let ts = base + step * 1_000;
            let value = if step == 3 && t == 1 { serde_json::Value::Null } else { serde_json::json!({"max_price": 95.0 + (t as f64) * 10.0 + step as f64}) };
            limits.push((format!("T{t:04}"), value, ts));
        }
    }
    let state = dir.join("state");
    let envelope: Vec<String> = limits.iter().map(|(k, v, ts)| serde_json::json!({"key": k, "value": v, "timestamp": ts}).to_string()).collect();
    let limits_file = dir.join("limits.jsonl");
    std::fs::write(&limits_file, envelope.join("\n") + "\n").unwrap();
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_streamc"))
        .arg("--state-dir")
        .arg(&state)
        .args(["produce", "limits", limits_file.to_str().unwrap(), "--envelope"])
        .status()
        .unwrap();
    assert!(st.success());
    Run::new("examples/alerts.stream", &state).input("stocks", &trades_file).go().unwrap();

    // Reference: merge the two inputs, each in its own order, taking the earlier head next (the
    // table first on ties), keeping the table's current value per key; a trade above its
    // ticker's limit is an alert.
    let mut table: BTreeMap<String, f64> = BTreeMap::new();
    let mut want = Vec::new();
    let (mut li, mut ti) = (0, 0);
    while ti < trades.len() {
        if li < limits.len() && limits[li].2 <= trades[ti].ts {
            let (k, v, _) = &limits[li];
            match v.get("max_price").and_then(|m| m.as_f64()) {
                Some(m) => table.insert(k.clone(), m),
                None => table.remove(k),
            };
            li += 1;
            continue;
        }
        let t = &trades[ti];
        if let Some(limit) = table.get(&t.ticker) {
            if t.price > *limit {
                want.push((t.ticker.clone(), t.price, *limit, t.ts));
            }
        }
        ti += 1;
    }
    let got: Vec<(String, f64, f64, i64)> = read_topic(&state, "price-alerts")
        .iter()
        .map(|r| (r.value["ticker"].as_str().unwrap().to_string(), r.value["price"].as_f64().unwrap(), r.value["limit"].as_f64().unwrap(), r.value["at"].as_i64().unwrap()))
        .collect();
    assert!(want.len() > 100, "the data must produce alerts: {}", want.len());
    assert_eq!(got, want);
}
