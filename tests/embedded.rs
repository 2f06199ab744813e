//! The embedded runtime end to end: results against independent references written plainly
//! here, split-invariance, restarts and restores, reproducibility, late records, bad input.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::data::{clicks, clicks_with_lag, orders_and_payments, write_clicks, write_orders_and_payments};
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
            Some(Trade {
                ticker: v["ticker"].as_str()?.to_string(),
                price: v["price"].as_f64()?,
                size: v["size"].as_i64()?,
                ts: v["ts"].as_i64()?,
            })
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
    let (w, late, _) = stats_reference_with_late_records(trades, partitions);
    (w, late)
}

/// Also the number of records late for at least one of their windows.
fn stats_reference_with_late_records(trades: &[Trade], partitions: u32) -> (BTreeMap<(String, i64), Stats>, u64, u64) {
    let (size, advance, grace) = (5_000i64, 1_000i64, 1_000i64);
    type Acc = (i64, i64, f64, f64, f64);
    let mut acc: BTreeMap<(String, i64), Acc> = BTreeMap::new();
    let mut stream_time: BTreeMap<u32, i64> = BTreeMap::new();
    let mut late = 0;
    let mut late_records = 0;
    for t in trades.iter().filter(|t| t.price > 0.0) {
        let before = late;
        let p = streamc::record::partition_for(t.ticker.as_bytes(), partitions);
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
        if late > before {
            late_records += 1;
        }
    }
    let windows = acc
        .into_iter()
        .map(|(k, (n, vol, sum, lo, hi))| {
            (k, Stats { trades: n, volume: vol, avg_price: sum / n as f64, low: lo, high: hi })
        })
        .collect();
    (windows, late, late_records)
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
    Run::new("examples/stats.stream", &four)
        .input("stocks", &input)
        .set("embedded.partitions=4")
        .threads(2)
        .go()
        .unwrap();
    assert_eq!(
        read_topic(&four, "stock-stats").iter().map(|r| r.partition).max(),
        Some(3),
        "four output partitions used"
    );
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

/// The entries of one store partition in an application's local state, read from its pages
/// (sled keys starting with 0x00 or 0x01, each a run of `uvarint(len) key uvarint(len) value`
/// held as an LZ4 block after the run's length in 4 bytes, little-endian; the checkpoint and the
/// layout's version start with 0xff), as src/runtime/pages.rs lays them out.
fn store_entries(state: &Path, app: &str, tree: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    // A run that just returned may still hold sled's file lock for a moment (its flusher
    // thread ends after the last handle is dropped): wait for it, with a generous bound.
    let path = state.join("apps").join(app).join("state");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let db = loop {
        match sled::open(&path) {
            Ok(db) => break db,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("cannot open {}: {e}", path.display()),
        }
    };
    let tree = db.open_tree(tree).unwrap();
    let mut rows = Vec::new();
    for (k, stored) in tree.iter().map(|kv| kv.unwrap()) {
        if k[0] > 1 {
            continue;
        }
        let page = lz4_flex::block::decompress_size_prepended(&stored).expect("an LZ4 block after its length");
        let field = |at: &mut usize| {
            let (mut n, mut shift) = (0usize, 0);
            loop {
                let b = page[*at];
                *at += 1;
                n |= usize::from(b & 0x7f) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            *at += n;
            page[*at - n..*at].to_vec()
        };
        let mut at = 0;
        while at < page.len() {
            let key = field(&mut at);
            rows.push((key, field(&mut at)));
        }
    }
    rows
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
    // Frequent commits: a long changelog.
    Run::new("examples/stats.stream", &state)
        .input("stocks", &partial)
        .set("commit.records=50")
        .close(false)
        .go()
        .unwrap();
    let entries = |state: &Path| store_entries(state, "stats", "stock_stats-aggregate#0");
    let before = entries(&state);
    assert!(before.len() > 20, "{}", before.len());
    // Lose the local state entirely: the changelog is the source of truth. A small cache makes
    // the replay hand local state to the writer as it goes, coalesced, in many steps; the store
    // comes back entry for entry.
    std::fs::remove_dir_all(state.join("apps").join("stats").join("state")).unwrap();
    let sum = Run::new("examples/stats.stream", &state)
        .input("stocks", &partial)
        .set("statestore.cache.max.bytes=4096")
        .close(false)
        .go()
        .unwrap();
    // Nothing to process and nothing to fix up: no window the changelog deleted came back.
    assert!(
        sum.restored > 2_000 && sum.records_in == 0 && sum.commits == 0,
        "the store was rebuilt from its changelog: {sum:?}"
    );
    assert!(entries(&state) == before, "the restored store differs");
    std::fs::remove_dir_all(state.join("apps").join("stats").join("state")).unwrap();
    std::fs::write(&partial, all).unwrap();
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &partial).go().unwrap();
    assert!(sum.restored > 2_000, "the store was rebuilt from its changelog: {sum:?}");
    let (want, _) = stats_reference(&trades(&input), 1);
    assert_eq!(final_windows(&state), want);

    // Damaged local state (garbage in sled's files) is wiped and rebuilt, not an error.
    let db = state.join("apps").join("stats").join("state");
    for f in std::fs::read_dir(&db).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            std::fs::write(&f, b"\x13\x37 not sled at all").unwrap();
        }
    }
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &partial).go().unwrap();
    assert!(sum.restored > 0, "{sum:?}");
    assert_eq!(final_windows(&state), want);
}

/// A changelog that passes the compaction threshold is compacted: a restore from it (local
/// state deleted) reads about one record per key instead of every update, the store comes back
/// entry for entry, and the results stay those of a plain fold.
#[test]
fn a_compacted_changelog_restores_each_key_once() {
    let dir = temp_dir("compacted");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 200_000, 3_000, 5, 0);
    let state = dir.join("state");
    let run = || {
        Run::new("bench/keys.stream", &state)
            .input("stocks", &input)
            .set("commit.records=200")
            .close(false)
            .go()
            .unwrap()
    };
    let first = run();
    let topic = state.join("log").join("topics").join("keys-per_key-aggregate-changelog");
    let compacted =
        std::fs::read_dir(&topic).unwrap().any(|e| e.unwrap().path().extension().is_some_and(|x| x == "compact"));
    assert!(compacted, "the changelog was compacted");
    let entries = |state: &Path| store_entries(state, "keys", "per_key-aggregate#0");
    let before = entries(&state);
    assert_eq!(before.len(), 3_000);
    std::fs::remove_dir_all(state.join("apps").join("keys").join("state")).unwrap();
    let second = run();
    assert_eq!(second.records_in, 0);
    // Every key once from the compacted part, and the updates since the last compaction.
    assert!(second.restored >= 3_000 && second.restored < first.records_in / 4, "{second:?}");
    assert!(entries(&state) == before, "the restored store differs");
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for l in std::fs::read_to_string(&input).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let e = want.entry(v["ticker"].as_str().unwrap().to_string()).or_default();
        *e = (e.0 + 1, e.1 + v["size"].as_i64().unwrap());
    }
    let mut got: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in read_topic(&state, "per-key") {
        got.insert(r.key.clone().unwrap(), (r.value["trades"].as_i64().unwrap(), r.value["volume"].as_i64().unwrap()));
    }
    assert_eq!(got, want);
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
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).set("late.to_topic=true").go().unwrap();
    let (want, late, late_records) = stats_reference_with_late_records(&trades(&input), 1);
    assert!(late > 100, "the input must produce late records: {late}");
    assert!(late > late_records, "some records must be late for several windows: {late} vs {late_records}");
    // Counted per record, not per window: a record late for two windows is one record dropped.
    assert_eq!(sum.late, late_records);
    assert_eq!(final_windows(&state), want);
    // Each record late for some window is also in `stats-late`, with the reason and its origin.
    let written = read_topic(&state, "stats-late");
    assert_eq!(written.len() as u64, late_records);
    assert!(written
        .iter()
        .all(|r| r.headers["streamc.error"].starts_with("late: window [")
            && r.headers["streamc.source.topic"] == "stocks"));
}

/// An output or changelog file cut short inside its committed records (a torn copy, a disk
/// fault) stops the next run with the file named, before anything is appended after the tear
/// (it used to exit 0 and append after a hole that `consume` then could not read past).
#[test]
fn a_run_over_an_output_file_cut_short_refuses_to_append() {
    let dir = temp_dir("torn-output");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 2_000, 5, 3, 0);
    let state = dir.join("state");
    Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    let more = dir.join("more.jsonl");
    write_trades(&more, 500, 5, 4, 0);
    for topic in ["stock-stats", "stats-stock_stats-aggregate-changelog"] {
        let data = state.join("log").join("topics").join(topic).join("0.log");
        let full = std::fs::read(&data).unwrap();
        std::fs::write(&data, &full[..full.len() - 5]).unwrap();
        let e = Run::new("examples/stats.stream", &state).input("stocks", &more).go().unwrap_err();
        assert!(e.contains("cut short") && e.contains(topic), "{e}");
        assert_eq!(std::fs::read(&data).unwrap().len(), full.len() - 5, "nothing appended to {topic}");
        std::fs::write(&data, &full).unwrap();
    }
    // The file put back: the run goes on.
    Run::new("examples/stats.stream", &state).input("stocks", &more).go().unwrap();
}

/// Invalid UTF-8 is not JSON text, also inside a member the program does not declare: the
/// record is a dead letter with the reason, and the records around it count.
#[test]
fn invalid_utf8_in_an_undeclared_field_is_a_dead_letter() {
    let dir = temp_dir("dlq-utf8");
    let input = dir.join("trades.jsonl");
    let mut bytes = br#"{"ticker":"A","price":1.5,"size":2,"ts":1000}"#.to_vec();
    bytes.push(b'\n');
    bytes.extend_from_slice(b"{\"ticker\":\"A\",\"price\":2.5,\"size\":3,\"ts\":1500,\"note\":\"caf\xe9\"}\n");
    bytes.extend_from_slice(b"{\"ticker\":\"A\",\"note\":\"\xff\xfe\",\"price\":3.5,\"size\":4,\"ts\":1600}\n");
    bytes.extend_from_slice(r#"{"ticker":"A","price":4.5,"size":5,"ts":1700,"note":"café"}"#.as_bytes());
    bytes.push(b'\n');
    std::fs::write(&input, &bytes).unwrap();
    let state = dir.join("state");
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    assert_eq!(sum.dead_letters, 2);
    let dlq = read_topic(&state, "stats-dlq");
    let offsets: Vec<&str> = dlq.iter().map(|r| r.headers["streamc.source.offset"].as_str()).collect();
    assert_eq!(offsets, ["1", "2"]);
    assert!(dlq.iter().all(|r| r.headers["streamc.error"].contains("invalid UTF-8")), "{:?}", dlq[0].headers);
    let out = final_windows(&state);
    let w = &out[&("A".to_string(), 0)];
    assert_eq!((w.trades, w.volume, w.low, w.high), (2, 7, 1.5, 4.5));
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
    assert!(dlq
        .iter()
        .all(|r| r.headers["streamc.source.topic"] == "stocks" && r.headers["streamc.source.partition"] == "0"));
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
            let value = if step == 3 && t == 1 {
                serde_json::Value::Null
            } else {
                serde_json::json!({"max_price": 95.0 + (t as f64) * 10.0 + step as f64})
            };
            limits.push((format!("T{t:04}"), value, ts));
        }
    }
    let state = dir.join("state");
    let envelope: Vec<String> = limits
        .iter()
        .map(|(k, v, ts)| serde_json::json!({"key": k, "value": v, "timestamp": ts}).to_string())
        .collect();
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
        .map(|r| {
            (
                r.value["ticker"].as_str().unwrap().to_string(),
                r.value["price"].as_f64().unwrap(),
                r.value["limit"].as_f64().unwrap(),
                r.value["at"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(want.len() > 100, "the data must produce alerts: {}", want.len());
    assert_eq!(got, want);
}

/// Clicks for the sessions example: ten users, each with bursts of activity separated by gaps
/// that are sometimes longer than the 30-minute session gap, delivered with up to 2 minutes of
/// disorder (within the 5-minute grace). Lines in delivery order: (user, page, dwell_ms, at).
#[derive(Debug, PartialEq)]
struct Session {
    end: i64,
    clicks: i64,
    checkouts: i64,
    avg_dwell: f64,
    last_page: String,
}

/// Sessions folded plainly: per user, clicks sorted by time; a click more than 30 minutes after
/// the previous one starts a new session. Keyed by (user, start).
fn sessions_reference(clicks: &[(String, String, i64, i64)]) -> BTreeMap<(String, i64), Session> {
    let gap = 30 * 60_000;
    let mut by_user: BTreeMap<&str, Vec<&(String, String, i64, i64)>> = BTreeMap::new();
    for c in clicks.iter().filter(|c| c.2 >= 0) {
        by_user.entry(&c.0).or_default().push(c);
    }
    let mut out = BTreeMap::new();
    for (user, mut cs) in by_user {
        cs.sort_by_key(|c| c.3);
        let mut i = 0;
        while i < cs.len() {
            let mut j = i + 1;
            while j < cs.len() && cs[j].3 - cs[j - 1].3 <= gap {
                j += 1;
            }
            let s = &cs[i..j];
            out.insert(
                (user.to_string(), s[0].3),
                Session {
                    end: s[j - i - 1].3,
                    clicks: s.len() as i64,
                    checkouts: s.iter().filter(|c| c.1.ends_with("/checkout")).count() as i64,
                    avg_dwell: s.iter().map(|c| c.2 as f64).sum::<f64>() / s.len() as f64,
                    last_page: s.iter().map(|c| c.1.clone()).max().unwrap(),
                },
            );
            i = j;
        }
    }
    out
}

fn session_of(v: &serde_json::Value) -> Session {
    Session {
        end: v["window_end"].as_i64().unwrap(),
        clicks: v["clicks"].as_i64().unwrap(),
        checkouts: v["checkouts"].as_i64().unwrap(),
        avg_dwell: v["avg_dwell"].as_f64().unwrap(),
        last_page: v["last_page"].as_str().unwrap().to_string(),
    }
}

#[test]
fn sessions_example_emits_each_final_session_once() {
    let dir = temp_dir("sessions");
    let input = dir.join("clicks.jsonl");
    let data = clicks(3_000, 3);
    write_clicks(&input, &data);
    let want = sessions_reference(&data);
    assert!(want.len() > 50, "the data must make many sessions: {}", want.len());
    let state = dir.join("state");
    let sum =
        Run::new("examples/sessions.stream", &state).input("clicks", &input).set("commit.records=97").go().unwrap();
    assert_eq!(sum.late, 0);
    let out = read_topic(&state, "user-sessions");
    let mut got = BTreeMap::new();
    for r in &out {
        let k = (r.key.clone().unwrap(), r.value["window_start"].as_i64().unwrap());
        assert!(got.insert(k.clone(), session_of(&r.value)).is_none(), "session {k:?} emitted twice");
    }
    assert_eq!(got.len(), want.len());
    for (k, w) in &want {
        let g = &got[k];
        assert_eq!((g.end, g.clicks, g.checkouts, &g.last_page), (w.end, w.clicks, w.checkouts, &w.last_page), "{k:?}");
        assert!((g.avg_dwell - w.avg_dwell).abs() < 1e-9, "{k:?}: {} vs {}", g.avg_dwell, w.avg_dwell);
    }
}

#[test]
fn merged_sessions_are_deleted_downstream_with_emit_changes() {
    let dir = temp_dir("sessions-changes");
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sessions.stream")).unwrap();
    let program = dir.join("changes.stream");
    std::fs::write(&program, src.replace("emit final", "emit changes")).unwrap();
    let input = dir.join("clicks.jsonl");
    let data = clicks(2_000, 11);
    write_clicks(&input, &data);
    let want = sessions_reference(&data);
    for partitions in [1, 3] {
        let state = dir.join(format!("state{partitions}"));
        // Frequent commits, so sessions are emitted before the clicks that merge them arrive.
        let sum = Run::new(program.to_str().unwrap(), &state)
            .input("clicks", &input)
            .set("commit.records=5")
            .set(&format!("embedded.partitions={partitions}"))
            .go()
            .unwrap();
        assert_eq!(sum.late, 0);
        // Apply the output as a table of (user, session start): updates upsert, tombstones delete
        // the session their headers name.
        let mut table: BTreeMap<(String, i64), Session> = BTreeMap::new();
        let mut tombstones = 0;
        for r in read_topic(&state, "user-sessions") {
            let user = r.key.clone().unwrap();
            if r.value.is_null() {
                tombstones += 1;
                let start: i64 = r.headers["streamc.window.start"].parse().unwrap();
                assert!(table.remove(&(user, start)).is_some(), "a tombstone for a session never emitted");
            } else {
                table.insert((user, r.value["window_start"].as_i64().unwrap()), session_of(&r.value));
            }
        }
        assert!(tombstones > 0, "merges must happen across commits");
        assert_eq!(table.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        for (k, w) in &want {
            let g = &table[k];
            assert_eq!((g.end, g.clicks, g.checkouts), (w.end, w.clicks, w.checkouts), "{k:?}");
        }
    }
}

/// Orders and payments for the orders example: most orders are paid once (some twice, some for
/// a wrong amount), payments land from 1 minute before to 15 minutes after the order, and each
/// topic is in time order. Returns (orders, payments) as (id, customer, total, placed) and
/// (id, amount, method, paid).
#[allow(clippy::type_complexity)]
/// The `big_spenders` query of the orders example, folded plainly: per customer and UTC day,
/// the count, sum, mean and sample standard deviation of order totals; a row is in the output
/// table while its sum exceeds 1000 (a row below it is deleted downstream by a tombstone).
fn check_big_spenders(state: &Path, orders: &[(String, String, f64, i64)]) {
    let day = 86_400_000i64;
    let mut groups: BTreeMap<(String, i64), Vec<f64>> = BTreeMap::new();
    for (_, customer, total, placed) in orders {
        groups.entry((customer.clone(), placed - placed.rem_euclid(day))).or_default().push(*total);
    }
    let mut want = BTreeMap::new();
    for (k, totals) in &groups {
        let n = totals.len() as f64;
        let sum: f64 = totals.iter().sum();
        if sum > 1000.0 {
            let mean = sum / n;
            let spread = (totals.len() > 1)
                .then(|| (totals.iter().map(|t| (t - mean) * (t - mean)).sum::<f64>() / (n - 1.0)).sqrt());
            want.insert(k.clone(), (totals.len() as i64, sum, mean, spread));
        }
    }
    let mut got = BTreeMap::new();
    for r in read_topic(state, "big-spenders") {
        let v = &r.value;
        if v.is_null() {
            // A window's result below the threshold is deleted downstream (the filter of a table).
            let start = r.headers.iter().find(|(k, _)| *k == "streamc.window.start").unwrap().1.parse().unwrap();
            got.remove(&(r.key.clone().unwrap(), start));
            continue;
        }
        let k = (v["customer"].as_str().unwrap().to_string(), v["window_start"].as_i64().unwrap());
        got.insert(
            k,
            (
                v["orders"].as_i64().unwrap(),
                v["spent"].as_f64().unwrap(),
                v["typical"].as_f64().unwrap(),
                v["spread"].as_f64(),
            ),
        );
    }
    assert!(want.len() >= 5, "the data must make big spenders: {}", want.len());
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, w) in &want {
        let g = &got[k];
        assert_eq!(g.0, w.0, "{k:?}");
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(close(g.1, w.1) && close(g.2, w.2), "{k:?}: {g:?} vs {w:?}");
        assert!(
            matches!((g.3, w.3), (Some(a), Some(b)) if close(a, b)) || (g.3.is_none() && w.3.is_none()),
            "{k:?}: {g:?} vs {w:?}"
        );
    }
}

/// Write the orders and payments as the orders example's two input files.
/// One row of `order-status`: order id, paid, method, shortfall, record time.
type OrderStatus = (String, bool, String, Option<f64>, i64);

/// Every record of `order-status`, sorted (the reference has no order across keys).
fn order_status(state: &Path) -> Vec<OrderStatus> {
    let mut got: Vec<OrderStatus> = read_topic(state, "order-status")
        .iter()
        .map(|r| {
            let v = &r.value;
            (
                v["order_id"].as_str().unwrap().to_string(),
                v["paid"].as_bool().unwrap(),
                v["method"].as_str().unwrap().to_string(),
                v["shortfall"].as_f64(),
                r.timestamp,
            )
        })
        .collect();
    got.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    got
}

#[test]
fn orders_example_left_joins_payments_within_ten_minutes() {
    let dir = temp_dir("orders");
    let (orders, pays) = orders_and_payments(600, 5);
    let (of, pf) = write_orders_and_payments(&dir, &orders, &pays);

    // Reference: every (order, payment) pair of one id at most 10 minutes apart, with the later
    // time; an order with no such payment once, unpaid, at its own time.
    let within = 10 * 60_000;
    let mut want: Vec<OrderStatus> = Vec::new();
    for (id, _, total, placed) in &orders {
        let matches: Vec<_> = pays.iter().filter(|p| &p.0 == id && (p.3 - placed).abs() <= within).collect();
        if matches.is_empty() {
            want.push((id.clone(), false, "unpaid".into(), Some(*total), *placed));
        }
        for p in matches {
            want.push((id.clone(), true, p.2.clone(), Some(total - p.1), p.3.max(*placed)));
        }
    }
    want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert!(want.iter().filter(|w| !w.1).count() > 50 && want.iter().filter(|w| w.1).count() > 300);

    for partitions in [1, 3] {
        let state = dir.join(format!("state{partitions}"));
        let sum = Run::new("examples/orders.stream", &state)
            .input("orders", &of)
            .input("payments", &pf)
            .set("commit.records=50")
            .set(&format!("embedded.partitions={partitions}"))
            .go()
            .unwrap();
        // (`big_spenders` may see late records with 3 partitions: its repartition topic
        // interleaves three tasks' outputs; the join sees none.)
        assert!(sum.records_in > 0);
        let got = order_status(&state);
        assert_eq!(got, want, "{partitions} partitions");
        if partitions == 1 {
            check_big_spenders(&state, &orders);
        }
    }

    // Stopped half-way (both inputs cut at one time), local state wiped, then resumed: the join
    // stores come back from their changelogs and the results are the same.
    let cut = orders[orders.len() / 2].3;
    let (of1, pf1) = (dir.join("orders-part.jsonl"), dir.join("payments-part.jsonl"));
    let head = |path: &Path, field: &str| {
        let text = std::fs::read_to_string(path).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[field].as_i64().unwrap() < cut)
            .collect();
        kept.join("\n") + "\n"
    };
    std::fs::write(&of1, head(&of, "placed")).unwrap();
    std::fs::write(&pf1, head(&pf, "paid")).unwrap();
    let state = dir.join("restarted");
    Run::new("examples/orders.stream", &state)
        .input("orders", &of1)
        .input("payments", &pf1)
        .set("commit.records=50")
        .close(false)
        .go()
        .unwrap();
    std::fs::remove_dir_all(state.join("apps/orders/state")).unwrap();
    std::fs::write(&of1, std::fs::read(&of).unwrap()).unwrap();
    std::fs::write(&pf1, std::fs::read(&pf).unwrap()).unwrap();
    let sum = Run::new("examples/orders.stream", &state)
        .input("orders", &of1)
        .input("payments", &pf1)
        .set("commit.records=50")
        .go()
        .unwrap();
    assert!(sum.restored > 0, "{sum:?}");
    let got = order_status(&state);
    assert_eq!(got, want, "after a restart");
}

#[test]
fn chaos_redeliveries_and_failures_do_not_change_the_results() {
    let dir = temp_dir("chaos");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 20_000, 7, 13, 800);
    let (plain, chaos) = (dir.join("plain"), dir.join("chaos"));
    fn stats_run<'a>(state: &'a Path, input: &Path) -> Run<'a> {
        Run::new("examples/stats.stream", state)
            .input("stocks", input)
            .set("commit.records=300")
            .set("embedded.partitions=3")
    }
    let run = |state| stats_run(state, &input);
    let base = run(&plain).go().unwrap();
    let sum = run(&chaos).chaos("seed=11,redeliver=0.001,fail=0.05").go().unwrap();
    assert!(sum.faults >= 20, "the layers must fire: {sum:?}");
    assert_eq!(
        (sum.records_in, sum.records_out, sum.commits),
        (base.records_in, base.records_out, base.commits),
        "counts are those of committed work"
    );
    for topic in ["stock-stats", "stats-stock_stats-aggregate-changelog"] {
        assert!(topic_bytes(&plain, topic) == topic_bytes(&chaos, topic), "{topic} differs under chaos");
    }
    let (want, _) = stats_reference(&trades(&input), 3);
    assert_eq!(final_windows(&chaos), want);

    // The join example too: both sides' stores are rebuilt after every fault.
    let (orders, pays) = orders_and_payments(400, 9);
    let (of, pf) = write_orders_and_payments(&dir, &orders, &pays);
    let (plain, chaos) = (dir.join("orders-plain"), dir.join("orders-chaos"));
    fn orders_run<'a>(state: &'a Path, of: &Path, pf: &Path) -> Run<'a> {
        Run::new("examples/orders.stream", state).input("orders", of).input("payments", pf).set("commit.records=40")
    }
    let run = |state| orders_run(state, &of, &pf);
    run(&plain).go().unwrap();
    let sum = run(&chaos).chaos("seed=5,redeliver=0.002,fail=0.05").go().unwrap();
    assert!(sum.faults >= 10, "the layers must fire: {sum:?}");
    for topic in ["order-status", "big-spenders"] {
        assert!(!topic_bytes(&plain, topic).iter().all(|f| f.is_empty()), "{topic} is empty");
        assert!(topic_bytes(&plain, topic) == topic_bytes(&chaos, topic), "{topic} differs under chaos");
    }
}

const SLIDING: &str = r#"
stream trades from "stocks" {
  key   ticker
  value json { ticker: string, price: float, size: int, ts: timestamp }
  time  ts
}
query moving {
  from trades
  group by ticker
  window sliding 3s grace 2s
  aggregate { n = count(), volume = sum(size), hi = max(price), mean = avg(price) }
  emit final
  to "moving"
}
"#;

#[test]
fn sliding_windows_hold_every_distinct_set_of_records_within_the_size() {
    let dir = temp_dir("sliding");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 4_000, 40, 8, 500);
    let program = dir.join("sliding.stream");
    std::fs::write(&program, SLIDING).unwrap();
    let state = dir.join("state");
    let sum =
        Run::new(program.to_str().unwrap(), &state).input("stocks", &input).set("commit.records=111").go().unwrap();
    assert_eq!(sum.late, 0);

    // Reference, offline: per ticker, a window [t − 3 s, t] ends at every record, and a window
    // [t + 1, t + 1 + 3 s] starts after every record that has a later one within it; each holds
    // every record between its bounds (inclusive).
    let size = 3_000;
    let mut by_ticker: BTreeMap<String, Vec<&Trade>> = BTreeMap::new();
    let all = trades(&input);
    for t in &all {
        by_ticker.entry(t.ticker.clone()).or_default().push(t);
    }
    type Row = (i64, i64, i64, f64, f64);
    let mut want: BTreeMap<(String, i64), Row> = BTreeMap::new();
    for (ticker, ts) in by_ticker.iter_mut() {
        ts.sort_by_key(|t| t.ts);
        // The records with times in [lo, hi], by binary search over the sorted times.
        let between = |lo: i64, hi: i64| &ts[ts.partition_point(|t| t.ts < lo)..ts.partition_point(|t| t.ts <= hi)];
        let mut starts = std::collections::BTreeSet::new();
        for t in ts.iter() {
            starts.insert(t.ts - size);
            if !between(t.ts + 1, t.ts + 1 + size).is_empty() {
                starts.insert(t.ts + 1);
            }
        }
        for s in starts {
            let inside = between(s, s + size);
            let n = inside.len() as i64;
            let volume = inside.iter().map(|t| t.size).sum();
            let hi = inside.iter().map(|t| t.price).fold(f64::MIN, f64::max);
            let mean = inside.iter().map(|t| t.price).sum::<f64>() / n as f64;
            want.insert((ticker.clone(), s), (s + size, n, volume, hi, mean));
        }
    }
    let mut got = BTreeMap::new();
    for r in read_topic(&state, "moving") {
        let v = &r.value;
        let k = (r.key.clone().unwrap(), v["window_start"].as_i64().unwrap());
        let row = (
            v["window_end"].as_i64().unwrap(),
            v["n"].as_i64().unwrap(),
            v["volume"].as_i64().unwrap(),
            v["hi"].as_f64().unwrap(),
            v["mean"].as_f64().unwrap(),
        );
        assert!(got.insert(k.clone(), row).is_none(), "window {k:?} emitted twice");
    }
    assert!(want.len() > 3_000, "{}", want.len());
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, w) in &want {
        let g = &got[k];
        assert_eq!((g.0, g.1, g.2, g.3), (w.0, w.1, w.2, w.3), "{k:?}");
        assert!((g.4 - w.4).abs() < 1e-9, "{k:?}: {} vs {}", g.4, w.4);
    }

    // Under faults (each reopen rebuilds the windows and recent records from local state and
    // the changelog), the output is the same, byte for byte.
    let chaos = dir.join("chaos");
    let sum = Run::new(program.to_str().unwrap(), &chaos)
        .input("stocks", &input)
        .set("commit.records=111")
        .chaos("seed=2,redeliver=0.002,fail=0.05")
        .go()
        .unwrap();
    assert!(sum.faults >= 10, "{sum:?}");
    assert!(topic_bytes(&state, "moving") == topic_bytes(&chaos, "moving"));
}

#[test]
fn session_results_do_not_depend_on_commit_points_even_with_late_records() {
    let dir = temp_dir("sessions-late");
    let input = dir.join("clicks.jsonl");
    // Up to 50 minutes of disorder against 30 m gap + 5 m grace: some clicks are late, some
    // arrive for sessions that closed but were not yet flushed.
    write_clicks(&input, &clicks_with_lag(3_000, 17, 50 * 60_000));
    let mut outs = Vec::new();
    for commit in ["1", "7", "100000"] {
        let state = dir.join(format!("state{commit}"));
        let sum = Run::new("examples/sessions.stream", &state)
            .input("clicks", &input)
            .set(&format!("commit.records={commit}"))
            .go()
            .unwrap();
        assert!(sum.late > 0, "{sum:?}");
        let mut got: Vec<(Option<String>, String)> =
            read_topic(&state, "user-sessions").into_iter().map(|r| (r.key, r.value.to_string())).collect();
        got.sort();
        outs.push((sum.late, got));
    }
    assert_eq!(outs[0], outs[1]);
    assert_eq!(outs[0], outs[2]);
}

const JOINED_COUNT: &str = r#"
stream orders from "orders" {
  key    order_id
  value  json { order_id: string, customer: string, total: float, placed: timestamp }
  time   placed
}
stream payments from "payments" {
  key    order_id
  value  json { order_id: string, amount: float, method: string, paid: timestamp }
  time   paid
}
query paid_count {
  from orders
  join payments within 10m on order_id
  group by order_id
  aggregate { payments = count(), paid = sum(payments.amount) }
  to "paid-count"
}
"#;

#[test]
fn a_join_feeding_an_aggregate_reads_its_state_after_faults() {
    let dir = temp_dir("join-agg");
    let (orders, pays) = orders_and_payments(300, 21);
    let (of, pf) = write_orders_and_payments(&dir, &orders, &pays);
    let program = dir.join("joined.stream");
    std::fs::write(&program, JOINED_COUNT).unwrap();
    let p = program.to_str().unwrap();
    let (plain, chaos) = (dir.join("plain"), dir.join("chaos"));
    Run::new(p, &plain).input("orders", &of).input("payments", &pf).set("commit.records=10").go().unwrap();
    // Reopened tasks start with an empty cache: updates driven by payments must read the count
    // from the store.
    let sum = Run::new(p, &chaos)
        .input("orders", &of)
        .input("payments", &pf)
        .set("commit.records=10")
        .chaos("seed=3,redeliver=0.01,fail=0.1")
        .go()
        .unwrap();
    assert!(sum.faults >= 10, "{sum:?}");
    assert!(topic_bytes(&plain, "paid-count") == topic_bytes(&chaos, "paid-count"));
    // And the last count per order is the number of payments within 10 minutes of it.
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for r in read_topic(&plain, "paid-count") {
        last.insert(r.key.unwrap(), r.value["payments"].as_i64().unwrap());
    }
    let mut want = BTreeMap::new();
    for (id, _, _, placed) in &orders {
        let n = pays.iter().filter(|p| &p.0 == id && (p.3 - placed).abs() <= 10 * 60_000).count() as i64;
        if n > 0 {
            want.insert(id.clone(), n);
        }
    }
    assert!(want.len() > 100);
    assert_eq!(last, want);
}

/// A bad record too large to copy whole (here 2 MB; on a broker about 1 MB would not fit with
/// its headers) is still dead-lettered: its value cut at 256 KiB, its size and SHA-256 in
/// headers; the good records around it are processed.
#[test]
fn an_oversized_bad_record_is_dead_lettered_cut_with_its_size_and_digest() {
    use sha2::{Digest, Sha256};
    let dir = temp_dir("dlq-big");
    let input = dir.join("trades.jsonl");
    let big = format!(r#"{{"ticker":"A","price":"{}","size":2,"ts":1000}}"#, "x".repeat(2_000_000));
    let lines = [
        r#"{"ticker":"A","price":1.5,"size":2,"ts":1000}"#.to_string(),
        big.clone(),
        r#"{"ticker":"A","price":2.5,"size":3,"ts":1500}"#.to_string(),
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let state = dir.join("state");
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    assert_eq!(sum.dead_letters, 1);
    let log = streamc::log::EmbeddedLog::open(&state, false).unwrap();
    let c = log.committed().unwrap();
    let dlq =
        log.reader("stats-dlq", 0, streamc::record::Pos::default()).read(c.end("stats-dlq", 0), usize::MAX).unwrap();
    assert_eq!(dlq.len(), 1);
    let rec = &dlq[0].record;
    let value = rec.value.as_deref().unwrap();
    assert_eq!(value.len(), 256 * 1024);
    assert_eq!(value, &big.as_bytes()[..256 * 1024], "the value's first 256 KiB");
    let header = |k: &str| {
        rec.headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    assert_eq!(header("streamc.value.size"), big.len().to_string());
    let digest: String = Sha256::digest(big.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(header("streamc.value.sha256"), digest);
    assert!(header("streamc.error").contains("expected float"), "{}", header("streamc.error"));
    assert_eq!(header("streamc.source.offset"), "1");
    let out = final_windows(&state);
    let w = &out[&("A".to_string(), 0)];
    assert_eq!((w.trades, w.volume), (2, 5), "the good records around it were aggregated");
}

/// Random bytes written into sled's database file of a finished run (sled 0.34 panics on such
/// files while it opens them): the local state is discarded with a warning and rebuilt from the
/// changelog, never a panic, and the results equal the reference.
#[test]
fn random_bytes_in_local_state_are_survived_for_every_seed() {
    let dir = temp_dir("sled-damage");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 6_000, 1_000, 11, 300);
    let all = std::fs::read_to_string(&input).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let partial = dir.join("partial.jsonl");
    std::fs::write(&partial, lines[..4_000].join("\n") + "\n").unwrap();
    let base = dir.join("base");
    Run::new("examples/stats.stream", &base)
        .input("stocks", &partial)
        .set("commit.records=100")
        .close(false)
        .go()
        .unwrap();
    let (want, _) = stats_reference(&trades(&input), 1);
    // The same input file, grown: ingestion resumes after the lines the base run took.
    std::fs::write(&partial, &all).unwrap();
    let mut rebuilt = 0;
    for seed in 1..=4u64 {
        let state = dir.join(format!("seed{seed}"));
        copy_dir(&base, &state);
        let db = state.join("apps").join("stats").join("state").join("db");
        let mut bytes = std::fs::read(&db).unwrap();
        // 20 runs of 64 bytes from a 64-bit LCG, at offsets it picks.
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 33
        };
        for _ in 0..20 {
            let at = next() as usize % bytes.len().saturating_sub(64).max(1);
            for b in bytes.iter_mut().skip(at).take(64) {
                *b = next() as u8;
            }
        }
        std::fs::write(&db, bytes).unwrap();
        let sum = Run::new("examples/stats.stream", &state).input("stocks", &partial).go().unwrap();
        if sum.restored > 0 {
            rebuilt += 1;
        }
        assert_eq!(final_windows(&state), want, "seed {seed}");
    }
    // (Where sled keeps what may vary; damage that missed everything live leaves nothing to do.)
    assert!(rebuilt > 0, "no seed damaged the local state");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A `select` of 3,000 `+`/`-` terms (a flat chain underneath) computes what a left-to-right
/// fold in the test computes, for ints and for floats (where grouping changes the rounding).
#[test]
fn a_long_arithmetic_chain_folds_left_to_right() {
    let dir = temp_dir("sum-chain");
    let terms: Vec<(char, i64)> = (0..3_000).map(|i| (if i % 3 == 0 { '-' } else { '+' }, (i * 37) % 1_000)).collect();
    let int_chain: String = terms.iter().map(|(op, v)| format!(" {op} {v}")).collect();
    let float_chain: String = terms.iter().map(|(op, v)| format!(" {op} {v}.1")).collect();
    let program = dir.join("chain.stream");
    std::fs::write(
        &program,
        format!(
            "stream s from \"s\" {{ value json {{ a: int, f: float }} }}\nquery q {{\n  from s\n  select {{ i = a{int_chain}, x = f{float_chain} }}\n  to \"out\"\n}}\n"
        ),
    )
    .unwrap();
    let input = dir.join("s.jsonl");
    let rows: Vec<(i64, f64)> = (0..50).map(|i| (i * 1_001 - 20_000, i as f64 * 0.37 - 5.0)).collect();
    std::fs::write(&input, rows.iter().map(|(a, f)| format!("{{\"a\":{a},\"f\":{f}}}\n")).collect::<String>()).unwrap();
    let state = dir.join("state");
    Run::new(program.to_str().unwrap(), &state).input("s", &input).go().unwrap();
    let got: Vec<(i64, f64)> = read_topic(&state, "out")
        .iter()
        .map(|r| (r.value["i"].as_i64().unwrap(), r.value["x"].as_f64().unwrap()))
        .collect();
    let want: Vec<(i64, f64)> = rows
        .iter()
        .map(|&(a, f)| {
            terms.iter().fold((a, f), |(i, x), &(op, v)| {
                let fv = format!("{v}.1").parse::<f64>().unwrap();
                if op == '+' {
                    (i + v, x + fv)
                } else {
                    (i - v, x - fv)
                }
            })
        })
        .collect();
    assert_eq!(got, want);
}

/// A `where` of 3,000 `or`ed comparisons (a balanced tree underneath) keeps exactly the records
/// one of them matches, as a plain filter in the test says.
#[test]
fn a_long_or_chain_filters_like_a_set() {
    let dir = temp_dir("or-chain");
    let wanted: Vec<i64> = (0..3_000).map(|i| i * 2).collect();
    let terms: Vec<String> = wanted.iter().map(|v| format!("a == {v}")).collect();
    let program = dir.join("chain.stream");
    std::fs::write(
        &program,
        format!(
            "stream s from \"s\" {{ value json {{ a: int }} }}\nquery q {{\n  from s\n  where {}\n  to \"out\"\n}}\n",
            terms.join(" or ")
        ),
    )
    .unwrap();
    let input = dir.join("s.jsonl");
    let values: Vec<i64> = (0..4_000).map(|i| (i * 7) % 9_000).collect();
    std::fs::write(&input, values.iter().map(|a| format!("{{\"a\":{a}}}\n")).collect::<String>()).unwrap();
    let state = dir.join("state");
    Run::new(program.to_str().unwrap(), &state).input("s", &input).go().unwrap();
    let got: Vec<i64> = read_topic(&state, "out").iter().map(|r| r.value["a"].as_i64().unwrap()).collect();
    let want: Vec<i64> = values.iter().copied().filter(|a| wanted.contains(a)).collect();
    assert!(!want.is_empty() && want.len() < values.len());
    assert_eq!(got, want);
}

/// Branches after a session aggregate with `emit changes`, keyed by window: when sessions merge,
/// the tombstone for each session as it was last sent goes to every branch (the result it
/// deletes may be in either), and the merged session goes to the branch its count picks. Three records of one key, the
/// third bridging the first two sessions, each run committing its outputs (so the first two
/// sessions are emitted before they merge).
#[test]
fn a_merged_session_is_deleted_from_every_branch() {
    let dir = temp_dir("branch-sessions");
    let prog = dir.join("p.stream");
    std::fs::write(
        &prog,
        "stream s from \"in\" {\n  key k\n  value json { k: string, ts: timestamp }\n  time ts\n}\n\n\
         query q {\n  from s\n  group by k\n  window session gap 5s grace 1m\n  aggregate { n = count() }\n  emit changes\n  \
         to \"busy\" windowed when n >= 3\n  to \"quiet\" windowed\n}\n",
    )
    .unwrap();
    let input = dir.join("in.jsonl");
    let state = dir.join("state");
    let line = |t: i64| format!("{{\"k\":\"a\",\"ts\":{}}}\n", 1_700_000_000_000 + t);
    std::fs::write(&input, line(0) + &line(10_000)).unwrap();
    Run::new(prog.to_str().unwrap(), &state).input("in", &input).close(false).go().unwrap();
    std::fs::write(&input, line(0) + &line(10_000) + &line(5_000)).unwrap();
    Run::new(prog.to_str().unwrap(), &state).input("in", &input).close(false).go().unwrap();
    let t0 = 1_700_000_000_000i64;
    let describe = |topic: &str| -> Vec<String> {
        read_topic(&state, topic)
            .iter()
            .map(|o| match o.value.as_object() {
                Some(v) => format!(
                    "{}..{} n={}",
                    v["window_start"].as_i64().unwrap() - t0,
                    v["window_end"].as_i64().unwrap() - t0,
                    v["n"]
                ),
                None => format!("delete {}", o.headers["streamc.window.start"].parse::<i64>().unwrap() - t0),
            })
            .collect()
    };
    // In the order written: the two sessions, then (in whichever order the merge deletes them)
    // both as they were sent, then the merged session in its branch.
    let sorted = |mut v: Vec<String>, from: usize, to: usize| {
        v[from..to].sort();
        v
    };
    assert_eq!(sorted(describe("quiet"), 2, 4), ["0..0 n=1", "10000..10000 n=1", "delete 0", "delete 10000"]);
    assert_eq!(sorted(describe("busy"), 0, 2), ["delete 0", "delete 10000", "0..10000 n=3"]);
}

/// `--close-windows-at-end` over no input closes nothing: a task that has seen no record has no
/// window, and setting its stream time past every window would make every record of a later run
/// late.
#[test]
fn closing_windows_over_no_input_leaves_later_records_on_time() {
    let dir = temp_dir("close-empty");
    let state = dir.join("state");
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &empty).go().unwrap();
    assert_eq!(sum.records_in, 0);
    let input = dir.join("trades.jsonl");
    write_trades(&input, 300, 3, 5, 0);
    let sum = Run::new("examples/stats.stream", &state).input("stocks", &input).go().unwrap();
    assert_eq!(sum.late, 0, "{sum:?}");
    assert!(sum.records_out > 0, "{sum:?}");
}
