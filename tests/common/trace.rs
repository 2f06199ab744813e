//! `streamc trace` scenarios both backends run (`tests/trace.rs`, `tests/kafka_trace.rs`): a
//! program runs over its inputs; results are traced, and each result's inputs are checked
//! against a fold written here over the input files (which records, in input order, a result
//! took in).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as J;

use super::cli::{bin, consume, write_isolated};
use super::embedded::write_trades;

/// A program's files and the backend it runs on.
pub struct Env {
    pub state: PathBuf,
    pub program: PathBuf,
    /// `--bootstrap-servers …`, or nothing for the embedded log.
    pub backend: Vec<String>,
    pub pfx: String,
}

impl Env {
    /// `src` with topics prefixed `pfx.`, in `dir/<app>.stream` (the application id).
    pub fn new(dir: &Path, src: &str, pfx: &str, app: &str, backend: &[&str]) -> Env {
        let program = write_isolated(src, pfx, &dir.join(format!("{app}.stream")));
        Env {
            state: dir.join("state"),
            program,
            backend: backend.iter().map(|s| s.to_string()).collect(),
            pfx: pfx.to_string(),
        }
    }

    pub fn topic(&self, t: &str) -> String {
        format!("{}.{t}", self.pfx)
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin()).arg("--state-dir").arg(&self.state).args(&self.backend).args(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "streamc {args:?} failed:\n{err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Append a JSON-lines file to topic `t` (keys and timestamps as the program declares them).
    pub fn produce(&self, t: &str, file: &Path) {
        let program = self.program.to_str().unwrap();
        self.ok(&["produce", &self.topic(t), file.to_str().unwrap(), "--program", program, "--partitions", "2"]);
    }

    /// Run the program over what its inputs hold (twice: a chained query reads what the first
    /// run wrote; the second closes every window at the end), committing every 37 records on
    /// the embedded log, so that a commit coalesces some of an aggregate's updates.
    pub fn run(&self) {
        let program = self.program.to_str().unwrap();
        self.ok(&["run", program, "--drain", "--set", "commit.records=37"]);
        self.ok(&["run", program, "--drain", "--set", "commit.records=37", "--close-windows-at-end"]);
    }

    /// The records of topic `t` as `consume` prints them.
    pub fn output_of(&self, t: &str) -> Vec<super::cli::Consumed> {
        self.output(t)
    }

    pub fn output(&self, t: &str) -> Vec<super::cli::Consumed> {
        let b: Vec<&str> = self.backend.iter().map(String::as_str).collect();
        consume(&self.state, &self.topic(t), &b)
    }

    /// `streamc trace` of the record at `partition`/`offset` of topic `t`: the line about it,
    /// and its inputs.
    pub fn trace(&self, t: &str, partition: u64, offset: u64) -> (J, Vec<J>) {
        let (p, o) = (partition.to_string(), offset.to_string());
        let program = self.program.to_str().unwrap();
        let out = self.ok(&["trace", program, "--topic", &self.topic(t), "--partition", &p, "--offset", &o]);
        parse(&out)
    }

    /// `streamc trace` that refuses (exit 1): its stderr.
    pub fn trace_fails(&self, args: &[&str]) -> String {
        let program = self.program.to_str().unwrap();
        let mut all = vec!["trace", program];
        all.extend_from_slice(args);
        let out = self.cmd(&all);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "trace {args:?}: {err}");
        err
    }

    pub fn trace_args(&self, args: &[&str]) -> (J, Vec<J>) {
        let program = self.program.to_str().unwrap();
        let mut all = vec!["trace", program];
        all.extend_from_slice(args);
        parse(&self.ok(&all))
    }
}

fn parse(out: &str) -> (J, Vec<J>) {
    let mut lines = out.lines().map(|l| serde_json::from_str::<J>(l).unwrap());
    let head = lines.next().expect("a first line");
    let inputs: Vec<J> = lines.collect();
    assert_eq!(head["inputs"].as_u64(), Some(inputs.len() as u64), "{out}");
    (head, inputs)
}

/// `count` trades over `tickers` at `rate` a second, `disorder_ms` out of order at most.
fn spread_trades(path: &Path, count: u64, tickers: u64, seed: u64, rate: u64, disorder_ms: u64) {
    let o = streamc::gen::TradesOptions { count, tickers, seed, rate, disorder_ms };
    let mut f = std::fs::File::create(path).unwrap();
    streamc::gen::trades(&o, &mut f).unwrap();
}

/// A trade of the input files: (ticker, price, size, ts) and its line in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Trade {
    pub ticker: String,
    pub size: i64,
    pub ts: i64,
    pub value: J,
}

pub fn trades(path: &Path) -> Vec<Trade> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: J = serde_json::from_str(l).unwrap();
            Trade {
                ticker: v["ticker"].as_str().unwrap().to_string(),
                size: v["size"].as_i64().unwrap(),
                ts: v["ts"].as_i64().unwrap(),
                value: v,
            }
        })
        .collect()
}

/// The inputs a trace printed of topic `t`, as their values, in input order (offset order:
/// one ticker's trades are in one partition, in the order of the file).
fn values_of(inputs: &[J], t: &str) -> Vec<J> {
    inputs.iter().filter(|i| i["topic"] == t).map(|i| i["value"].clone()).collect()
}

const HOPPING: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
query stats {
  from trades
  where size > 100
  group by ticker
  window hopping 4s advance 2s grace 30s
  aggregate { n = count(), vol = sum(size) }
  to "stats"
}
"#;

/// Hopping windows, `emit changes`: a result took in the first `n` trades of its ticker in its
/// window that pass the `where`, in input order (a commit coalesces updates: `n` says how many).
pub fn hopping(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    windows(dir, backend, pfx, app, HOPPING, false);
}

/// Sliding windows (both ends inclusive), the same way: a window made after some of its
/// records came (from the key's recent records) holds them too.
pub fn sliding(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let program = HOPPING.replace("window hopping 4s advance 2s grace 30s", "window sliding 3s grace 30s");
    windows(dir, backend, pfx, app, &program, true);
}

fn windows(dir: &Path, backend: &[&str], pfx: &str, app: &str, program: &str, inclusive: bool) {
    let env = Env::new(dir, program, pfx, app, backend);
    let file = dir.join("trades.jsonl");
    spread_trades(&file, 300, 3, 7, 20, 800);
    env.produce("trades", &file);
    env.run();
    let all = trades(&file);
    let out = env.output("stats");
    assert!(out.len() > 20, "{} results", out.len());
    // Results spread over the run: early, middle, late, and the last.
    let picks: Vec<usize> = (0..out.len()).step_by(out.len() / 7).chain([out.len() - 1]).collect();
    for i in picks {
        let r = &out[i];
        let (head, inputs) = env.trace("stats", r.partition, r.offset);
        assert_eq!(head["result"]["offset"].as_u64(), Some(r.offset));
        assert_eq!(head["query"], "stats");
        assert_eq!(head["version"], 0);
        let (start, end) = (r.value["window_start"].as_i64().unwrap(), r.value["window_end"].as_i64().unwrap());
        let n = r.value["n"].as_u64().unwrap() as usize;
        let want: Vec<J> = all
            .iter()
            .filter(|t| {
                J::String(t.ticker.clone()) == r.key
                    && t.size > 100
                    && t.ts >= start
                    && (t.ts < end || inclusive && t.ts == end)
            })
            .take(n)
            .map(|t| t.value.clone())
            .collect();
        assert_eq!(values_of(&inputs, &env.topic("trades")), want, "result {i}: {}", r.value);
        let vol: i64 = want.iter().map(|v| v["size"].as_i64().unwrap()).sum();
        assert_eq!(r.value["vol"].as_i64(), Some(vol));
        for input in &inputs {
            assert_eq!(input["key"], r.key, "an input's key is the result's");
            assert!(input["partition"].as_u64().is_some() && input["offset"].as_u64().is_some());
        }
    }
    // `--key`: the latest result of a key.
    let last = out.iter().rev().find(|r| r.key == "T0001").unwrap();
    let (head, _) = env.trace_args(&["--topic", &env.topic("stats"), "--key", "T0001"]);
    assert_eq!(head["result"]["offset"].as_u64(), Some(last.offset));
    assert_eq!(head["result"]["partition"].as_u64(), Some(last.partition));
    let ws = last.value["window_start"].as_i64().unwrap();
    let e = out
        .iter()
        .rev()
        .find(|r| r.key == "T0001" && r.value["window_start"].as_i64() < Some(ws))
        .expect("an earlier window of T0001");
    let start = e.value["window_start"].as_i64().unwrap().to_string();
    let (head, _) = env.trace_args(&["--topic", &env.topic("stats"), "--key", "T0001", "--window-start", &start]);
    assert_eq!(head["result"]["offset"].as_u64(), Some(e.offset));
}

const SESSIONS: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
query sessions {
  from trades
  group by ticker
  window session gap 400ms grace 60s
  aggregate { n = count(), vol = sum(size) }
  emit final
  to "sessions"
}
"#;

/// Trades of 4 tickers with gaps of 50 ms to 1.5 s (sessions of one and of several trades);
/// then, later in the file, a trade in the middle of some 700 ms gaps, which merges the two
/// sessions around it.
fn session_trades(path: &Path) {
    let mut x: u64 = 7;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut at = [1_700_000_000_000i64; 4];
    let (mut lines, mut bridges) = (Vec::new(), Vec::new());
    let line = |t: usize, ts: i64, size: u64| {
        serde_json::json!({ "ticker": format!("S{t}"), "price": 10.0, "size": size, "ts": ts }).to_string()
    };
    for _ in 0..160 {
        let t = (next() % 4) as usize;
        let gap = [50, 150, 700, 1500][(next() % 4) as usize];
        if gap == 700 && next() % 2 == 0 {
            bridges.push(line(t, at[t] + 350, 1 + next() % 500));
        }
        at[t] += gap;
        lines.push(line(t, at[t], 1 + next() % 500));
    }
    lines.extend(bridges);
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Session windows, `emit final`: a session's result took in every trade of its ticker from
/// its first to its last, merged sessions' included.
pub fn sessions(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, SESSIONS, pfx, app, backend);
    let file = dir.join("trades.jsonl");
    session_trades(&file);
    env.produce("trades", &file);
    env.run();
    let all = trades(&file);
    let out = env.output("sessions");
    assert!(out.len() > 10, "{} sessions", out.len());
    let merged = out.iter().filter(|r| r.value["n"].as_i64() > Some(1)).count();
    assert!(merged > 3, "sessions of several trades: {merged}");
    for r in out.iter().step_by(3) {
        let (start, end) = (r.value["window_start"].as_i64().unwrap(), r.value["window_end"].as_i64().unwrap());
        let (_, inputs) = env.trace("sessions", r.partition, r.offset);
        let want: Vec<J> = all
            .iter()
            .filter(|t| J::String(t.ticker.clone()) == r.key && t.ts >= start && t.ts <= end)
            .map(|t| t.value.clone())
            .collect();
        assert_eq!(r.value["n"].as_u64(), Some(want.len() as u64), "{}", r.value);
        assert_eq!(values_of(&inputs, &env.topic("trades")), want, "{}", r.value);
    }
}

const JOIN: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
table names from "names" {
  key    ticker
  value  json { ticker: string, name: string, ts: timestamp }
  time   ts
}
query named {
  from trades
  left join names on ticker
  select { ticker, size, name = names.name }
  to "named"
}
"#;

/// A stream–table join: a result came from its trade and from the table's row for the ticker
/// as of the trade's time (the latest update at or before it), if there was one.
pub fn join(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, JOIN, pfx, app, backend);
    let file = dir.join("trades.jsonl");
    write_trades(&file, 120, 3, 5, 0);
    let all = trades(&file);
    let t0 = all.iter().map(|t| t.ts).min().unwrap();
    // Names: T0000 from the start, renamed midway; T0001 named midway; T0002 never.
    let names = [("T0000", "Zero", t0 - 1000), ("T0001", "One", t0 + 50), ("T0000", "Zero v2", t0 + 70)];
    let names_file = dir.join("names.jsonl");
    let text: String = names
        .iter()
        .map(|(t, n, ts)| format!("{}\n", serde_json::json!({ "ticker": t, "name": n, "ts": ts })))
        .collect();
    std::fs::write(&names_file, text).unwrap();
    env.produce("names", &names_file);
    env.produce("trades", &file);
    env.run();
    let out = env.output("named");
    assert_eq!(out.len(), all.len());
    let mut with_names = 0;
    for r in out.iter().step_by(4) {
        let (head, inputs) = env.trace("named", r.partition, r.offset);
        assert_eq!(head["result"]["value"], r.value);
        let trades_in = values_of(&inputs, &env.topic("trades"));
        assert_eq!(trades_in.len(), 1, "{inputs:?}");
        let trade = &trades_in[0];
        assert_eq!((&trade["ticker"], &trade["size"]), (&r.value["ticker"], &r.value["size"]));
        let ts = trade["ts"].as_i64().unwrap();
        let row: Vec<J> = names
            .iter()
            .rev()
            .find(|(t, _, at)| *t == trade["ticker"] && *at <= ts)
            .map(|(t, n, at)| serde_json::json!({ "ticker": t, "name": n, "ts": at }))
            .into_iter()
            .collect();
        assert_eq!(values_of(&inputs, &env.topic("names")), row, "{}", r.value);
        with_names += row.len();
    }
    assert!(with_names > 5, "results with a table row: {with_names}");
}

const WINDOWED_JOIN: &str = r#"
stream clicks from "clicks" {
  key    user
  value  json { user: string, page: string, ts: timestamp }
  time   ts
}
stream buys from "buys" {
  key    user
  value  json { user: string, amount: int, ts: timestamp }
  time   ts
}
query visits {
  from clicks
  left join buys within 2s on user
  select { user, page, amount = buys.amount }
  to "visits"
}
"#;

/// A stream–stream left join: a result came from its click and the buy it was joined with (of
/// the same user, at most 2 s apart), or from its click alone when no buy came in time.
pub fn windowed_join(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, WINDOWED_JOIN, pfx, app, backend);
    let t0 = 1_700_000_000_000i64;
    let clicks: Vec<J> = (0..40)
        .map(|i| serde_json::json!({ "user": format!("u{}", i % 4), "page": format!("p{i}"), "ts": t0 + i * 700 }))
        .collect();
    let buys: Vec<J> = (0..12)
        .map(|j| serde_json::json!({ "user": format!("u{}", j % 3), "amount": 100 + j, "ts": t0 + j * 2300 + 50 }))
        .collect();
    let write = |name: &str, rows: &[J]| {
        let f = dir.join(name);
        std::fs::write(&f, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
        f
    };
    env.produce("clicks", &write("clicks.jsonl", &clicks));
    env.produce("buys", &write("buys.jsonl", &buys));
    env.run();
    let out = env.output("visits");
    assert!(out.len() >= clicks.len(), "{} results", out.len());
    let (mut paired, mut alone) = (0, 0);
    for r in &out {
        let (_, inputs) = env.trace("visits", r.partition, r.offset);
        let click = clicks.iter().find(|c| c["page"] == r.value["page"]).unwrap();
        assert_eq!(values_of(&inputs, &env.topic("clicks")), vec![click.clone()], "{}", r.value);
        let got = values_of(&inputs, &env.topic("buys"));
        if r.value["amount"].is_null() {
            assert!(got.is_empty(), "{}: {got:?}", r.value);
            alone += 1;
        } else {
            let buy = buys.iter().find(|b| b["amount"] == r.value["amount"]).unwrap();
            assert_eq!(buy["user"], click["user"]);
            assert!((buy["ts"].as_i64().unwrap() - click["ts"].as_i64().unwrap()).abs() <= 2000);
            assert_eq!(got, vec![buy.clone()], "{}", r.value);
            paired += 1;
        }
    }
    assert!(paired > 5 && alone > 5, "{paired} joined, {alone} alone");
}

const TABLE_JOIN: &str = r#"
table prices from "prices" {
  key    id
  value  json { id: string, price: int, ts: timestamp }
  time   ts
}
table stock from "stock" {
  key    id
  value  json { id: string, qty: int, ts: timestamp }
  time   ts
}
query valued {
  from prices
  join stock on id
  select { id, price, qty = stock.qty }
  to "valued"
}
"#;

/// A table–table join: a result came from each table's row for its key as of its time (the
/// latest record of the key in each table at or before it).
pub fn table_join(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, TABLE_JOIN, pfx, app, backend);
    let t0 = 1_700_000_000_000i64;
    let prices: Vec<J> = (0..30)
        .map(|i| serde_json::json!({ "id": format!("k{}", i % 3), "price": 100 + i, "ts": t0 + i * 1000 }))
        .collect();
    let stock: Vec<J> = (0..20)
        .map(|j| serde_json::json!({ "id": format!("k{}", j % 4), "qty": 1000 + j, "ts": t0 + j * 1500 + 500 }))
        .collect();
    let write = |name: &str, rows: &[J]| {
        let f = dir.join(name);
        std::fs::write(&f, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
        f
    };
    env.produce("prices", &write("prices.jsonl", &prices));
    env.produce("stock", &write("stock.jsonl", &stock));
    env.run();
    let out = env.output("valued");
    assert!(out.len() > 20, "{} results", out.len());
    let latest = |rows: &[J], id: &J, at: i64| {
        rows.iter().rev().find(|r| &r["id"] == id && r["ts"].as_i64() <= Some(at)).cloned()
    };
    for r in out.iter().step_by(2) {
        let (_, inputs) = env.trace("valued", r.partition, r.offset);
        let (p, s) = (latest(&prices, &r.key, r.timestamp).unwrap(), latest(&stock, &r.key, r.timestamp).unwrap());
        assert_eq!((&p["price"], &s["qty"]), (&r.value["price"], &r.value["qty"]), "{}", r.value);
        assert_eq!(values_of(&inputs, &env.topic("prices")), vec![p], "{}", r.value);
        assert_eq!(values_of(&inputs, &env.topic("stock")), vec![s], "{}", r.value);
    }
}

const TABLE_AGGREGATE: &str = r#"
table accounts from "accounts" {
  key    id
  value  json { id: string, region: string, balance: int, ts: timestamp }
  time   ts
}
query per_region {
  from accounts
  group by region
  aggregate { n = count(), total = sum(balance) }
  to "per-region"
}
"#;

/// An aggregate of a table (through a repartition by region): a region's result came from the
/// current row of each account in the region, accounts that moved to another region or were
/// updated since taken out.
pub fn table_aggregate(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, TABLE_AGGREGATE, pfx, app, backend);
    let t0 = 1_700_000_000_000i64;
    let mut x: u64 = 3;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    // 8 accounts over 3 regions: updates in place, and moves between regions.
    let rows: Vec<J> = (0..80)
        .map(|i| {
            let (id, region, balance) = (next() % 8, next() % 3, next() % 1000);
            serde_json::json!({ "id": format!("a{id}"), "region": format!("r{region}"), "balance": balance, "ts": t0 + i * 100 })
        })
        .collect();
    let f = dir.join("accounts.jsonl");
    std::fs::write(&f, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    env.produce("accounts", &f);
    env.run();
    let out = env.output("per-region");
    assert!(out.len() > 10, "{} results", out.len());
    // (Which rows a region held when a result was sent depends on how the application
    // interleaved the two input partitions' records on the repartition topic: what is checked
    // is that the inputs are one row of each account in the region, that they add up to the
    // result, and that none is later than it.)
    for r in &out {
        let (_, inputs) = env.trace("per-region", r.partition, r.offset);
        let got = values_of(&inputs, &env.topic("accounts"));
        assert_eq!(r.value["n"].as_u64(), Some(got.len() as u64), "{}: {got:?}", r.value);
        let total: i64 = got.iter().map(|w| w["balance"].as_i64().unwrap()).sum();
        assert_eq!(r.value["total"].as_i64(), Some(total), "{}: {got:?}", r.value);
        let ids: std::collections::BTreeSet<&str> = got.iter().map(|g| g["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), got.len(), "one row per account: {got:?}");
        for g in &got {
            assert_eq!(g["region"], r.key, "{got:?}");
            assert!(g["ts"].as_i64() <= Some(r.timestamp), "{got:?}");
            assert!(rows.contains(g));
        }
    }
}

const REGROUPED: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
query by_size {
  from trades
  group by size / 250 as bucket
  aggregate { n = count(), vol = sum(size) }
  to "by-size"
}
"#;

/// A group key other than the input's (a repartition merges the two input partitions): a
/// bucket's result came from the first trades of that bucket of each input partition (in the
/// partition's order; how many of each depends on how the application interleaved them),
/// adding up to the result.
pub fn regrouped(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, REGROUPED, pfx, app, backend);
    let file = dir.join("trades.jsonl");
    spread_trades(&file, 200, 5, 9, 50, 300);
    env.produce("trades", &file);
    env.run();
    let out = env.output("by-size");
    assert!(out.len() >= 3, "{} results", out.len());
    let (inputs_of_trades, all) = (env.topic("trades"), env.output_of("trades"));
    for r in &out {
        let (_, inputs) = env.trace("by-size", r.partition, r.offset);
        let bucket = r.key.as_i64().unwrap();
        assert_eq!(r.value["n"].as_u64(), Some(inputs.len() as u64), "{}", r.value);
        let vol: i64 = inputs.iter().map(|i| i["value"]["size"].as_i64().unwrap()).sum();
        assert_eq!(r.value["vol"].as_i64(), Some(vol), "{}", r.value);
        for p in 0..2u64 {
            let mine: Vec<u64> = inputs
                .iter()
                .filter(|i| i["topic"] == inputs_of_trades && i["partition"].as_u64() == Some(p))
                .map(|i| i["offset"].as_u64().unwrap())
                .collect();
            let first: Vec<u64> = all
                .iter()
                .filter(|c| c.partition == p && c.value["size"].as_i64().unwrap() / 250 == bucket)
                .map(|c| c.offset)
                .take(mine.len())
                .collect();
            assert_eq!(mine, first, "{}: partition {p}", r.value);
        }
    }
}

const CHAIN: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
query big {
  from trades
  where size > 300
  select { ticker, size, ts }
  to "big"
}
stream bigs from "big" {
  key    ticker
  value  json { ticker: string, size: int, ts: timestamp }
  time   ts
}
query counts {
  from bigs
  group by ticker
  aggregate { n = count(), vol = sum(size) }
  to "counts"
}
"#;

/// A chain of two queries: a count of the first one's results is traced back to the trades
/// they came from.
pub fn chain(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, CHAIN, pfx, app, backend);
    let file = dir.join("trades.jsonl");
    spread_trades(&file, 150, 3, 3, 50, 200);
    // The chained query's input exists before the first run (Kafka refuses a missing one).
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    env.produce("big", &empty);
    env.produce("trades", &file);
    env.run();
    let all = trades(&file);
    let out = env.output("counts");
    assert!(out.len() >= 3);
    for r in out.iter().step_by(2).chain(out.last()) {
        let (head, inputs) = env.trace("counts", r.partition, r.offset);
        assert_eq!(head["query"], "counts");
        let n = r.value["n"].as_u64().unwrap() as usize;
        let want: Vec<J> = all
            .iter()
            .filter(|t| J::String(t.ticker.clone()) == r.key && t.size > 300)
            .take(n)
            .map(|t| t.value.clone())
            .collect();
        assert_eq!(values_of(&inputs, &env.topic("trades")), want, "{}", r.value);
        assert!(inputs.iter().all(|i| i["topic"] == env.topic("trades")), "only external inputs: {inputs:?}");
    }
}

/// What `trace` refuses, with the reason.
pub fn refusals(dir: &Path, backend: &[&str], pfx: &str, app: &str) {
    let env = Env::new(dir, HOPPING, pfx, app, backend);
    let file = dir.join("trades.jsonl");
    write_trades(&file, 20, 2, 1, 0);
    env.produce("trades", &file);
    env.run();
    let stats = env.topic("stats");
    let err = env.trace_fails(&["--topic", &stats, "--partition", "0", "--offset", "100000"]);
    assert!(err.contains("has no record at offset 100000"), "{err}");
    let err = env.trace_fails(&["--topic", &env.topic("trades"), "--partition", "0", "--offset", "0"]);
    assert!(err.contains("no query of the program writes topic"), "{err}");
    let err = env.trace_fails(&["--topic", &stats, "--key", "nobody"]);
    assert!(err.contains("has no record of key nobody"), "{err}");
    let joins = r#"
table a from "a" { key id value json { id: string, bid: string } }
table b from "b" { key id value json { id: string, y: int } }
query ab { from a join b on bid select { id, bid, b.y } to "ab" }
"#;
    let program = write_isolated(joins, pfx, &dir.join("joins.stream"));
    let out = Command::new(bin())
        .arg("--state-dir")
        .arg(&env.state)
        .args(backend)
        .args([
            "trace",
            program.to_str().unwrap(),
            "--topic",
            &format!("{pfx}.ab"),
            "--partition",
            "0",
            "--offset",
            "0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("does not follow a foreign-key join yet (query `ab`)"), "{err}");
}

/// Inputs the broker no longer holds: the trace says which records are gone.
pub fn gone(dir: &Path, bootstrap: &str, pfx: &str, app: &str) {
    let backend = ["--bootstrap-servers", bootstrap];
    let env = Env::new(dir, HOPPING, pfx, app, &backend);
    let file = dir.join("trades.jsonl");
    spread_trades(&file, 60, 2, 2, 20, 0);
    env.produce("trades", &file);
    env.run();
    let out = env.output("stats");
    super::kafka::delete_records(bootstrap, &env.topic("trades"), 0, 3);
    super::kafka::delete_records(bootstrap, &env.topic("trades"), 1, 3);
    let (p, o) = (out[0].partition.to_string(), out[0].offset.to_string());
    let err = env.trace_fails(&["--topic", &env.topic("stats"), "--partition", &p, "--offset", &o]);
    assert!(err.contains("before offset 3 are gone"), "{err}");
}
