//! Control statements in tests: a program with a stateless query, an aggregate and a join with a
//! control-managed table; keys; forged statements; and folds that say what the outputs must be.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use streamc::control::{self, KeyFile};
use streamc::record::Record;

use super::cli::{bin, streamc, write_isolated};
use super::embedded::write_trades;

pub const PROGRAM: &str = r#"
stream trades from "stocks" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
table watch {
  key   ticker: string
  value { note: string, threshold: float }
}
query big {
  from trades
  where size > 500
  select { ticker, size }
  to "big"
}
query totals {
  from trades
  group by ticker
  aggregate { n = count(), vol = sum(size) }
  to "totals"
}
query watched {
  from trades
  join watch on ticker
  where price >= watch.threshold
  select { ticker, price, note = watch.note }
  to "watched"
}
"#;

/// A test's files: the program (topics prefixed), a trusted key and the config trusting it.
pub struct Env {
    pub dir: PathBuf,
    pub state: PathBuf,
    pub program: PathBuf,
    pub key: PathBuf,
    pub config: PathBuf,
    pub app: String,
    pub pfx: String,
    /// Backend flags (`--bootstrap-servers …`, `--set …`).
    pub extra: Vec<String>,
}

impl Env {
    pub fn new(dir: &Path, app: &str, extra: Vec<String>) -> Env {
        Env::with_program(dir, app, extra, PROGRAM)
    }

    /// The same, for another program.
    pub fn with_program(dir: &Path, app: &str, extra: Vec<String>, text: &str) -> Env {
        let pfx = app.to_string();
        let program = write_isolated(text, &pfx, &dir.join(format!("{app}.stream")));
        let key = dir.join("ops.key");
        let state = dir.join("state");
        let out = Command::new(bin()).args(["keygen", key.to_str().unwrap(), "--id", "ops"]).output().unwrap();
        assert!(out.status.success());
        let config = dir.join("trust.yaml");
        std::fs::write(&config, String::from_utf8(out.stdout).unwrap()).unwrap();
        Env { dir: dir.to_path_buf(), state, program, key, config, app: app.to_string(), pfx, extra }
    }

    pub fn topic(&self, t: &str) -> String {
        format!("{}.{t}", self.pfx)
    }

    /// Backend flags and the config, then `args`.
    pub fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut v: Vec<&str> = args.to_vec();
        v.push("--config");
        v.push(self.config.to_str().unwrap());
        v.extend(self.extra.iter().map(String::as_str));
        v
    }

    pub fn run(&self, args: &[&str]) -> String {
        streamc(&self.state, &self.args(args))
    }

    /// `streamc control` with the trusted key; returns stdout and whether it succeeded.
    pub fn control(&self, statement: &str, flags: &[&str]) -> (String, bool) {
        let mut a = vec!["control", self.program.to_str().unwrap(), statement, "--key", self.key.to_str().unwrap()];
        a.extend_from_slice(flags);
        let out = Command::new(bin()).arg("--state-dir").arg(&self.state).args(self.args(&a)).output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
            out.status.success(),
        )
    }

    /// `streamc control` with the trusted key and `how` in place of the statement (`-f FILE`,
    /// `-`), `stdin` written to its standard input; returns its output and whether it succeeded.
    pub fn control_with(&self, how: &[&str], stdin: Option<&str>) -> (String, bool) {
        let mut a = vec!["control", self.program.to_str().unwrap()];
        a.extend_from_slice(how);
        a.extend(["--key", self.key.to_str().unwrap()]);
        let mut child = Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(self.args(&a))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        let text = stdin.unwrap_or("").to_string();
        let writer = std::thread::spawn(move || std::io::Write::write_all(&mut input, text.as_bytes()));
        let out = child.wait_with_output().unwrap();
        let _ = writer.join();
        (
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
            out.status.success(),
        )
    }

    pub fn produce_trades(&self, file: &Path) {
        self.run(&[
            "produce",
            &self.topic("stocks"),
            file.to_str().unwrap(),
            "--program",
            self.program.to_str().unwrap(),
            "--partitions",
            "2",
        ]);
    }

    /// A topic's records with their `streamc.query.version` header.
    pub fn consume_versions(&self, topic: &str) -> Vec<(serde_json::Value, serde_json::Value, Option<u64>)> {
        let t = self.topic(topic);
        let out = Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(self.args(&["consume", &t, "--exit-at-end", "--from-beginning", "--headers"]))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && err.contains("no topic") {
            // Not created yet: no records.
            return Vec::new();
        }
        assert!(out.status.success(), "{err}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let ver = v["headers"]["streamc.query.version"].as_str().and_then(|s| s.parse().ok());
                (v["key"].clone(), v["value"].clone(), ver)
            })
            .collect()
    }

    /// The status records, by control offset.
    pub fn statuses(&self) -> BTreeMap<u64, serde_json::Value> {
        let t = control::status_topic(&self.app);
        let out = Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(self.args(&["consume", &t, "--exit-at-end", "--from-beginning"]))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                let off = v["value"]["offset"].as_u64()?;
                Some((off, v["value"].clone()))
            })
            .collect()
    }

    /// The sequence of the last statement in the control topic.
    pub fn statuses_or_control_seq(&self) -> u64 {
        let t = control::control_topic(&self.app);
        let out = Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(self.args(&["consume", &t, "--exit-at-end", "--from-beginning", "--headers"]))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                serde_json::from_str::<serde_json::Value>(l).ok()?["headers"]["streamc.seq"].as_str()?.parse().ok()
            })
            .max()
            .unwrap()
    }

    /// How many status records (not counting the `program` ones) the status topic holds.
    pub fn status_records(&self) -> usize {
        let t = control::status_topic(&self.app);
        let out = Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(self.args(&["consume", &t, "--exit-at-end", "--from-beginning"]))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.contains("\"key\":\"program\"")).count()
    }

    /// The last value of every key of a topic (None: deleted).
    pub fn last_by_key(&self, topic: &str) -> BTreeMap<String, Option<serde_json::Value>> {
        let out = Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(self.args(&["consume", topic, "--exit-at-end", "--from-beginning"]))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut m = BTreeMap::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            m.insert(v["key"].to_string(), Some(v["value"].clone()).filter(|x| !x.is_null()));
        }
        m
    }

    pub fn signing_key(&self) -> KeyFile {
        KeyFile::read(&self.key).unwrap()
    }
}

/// Two inputs of `n` trades over `tickers` tickers in `dir`: `a.jsonl` and `b.jsonl`, from
/// the generator's seeds `seeds`.
pub fn two_inputs(dir: &Path, n: u64, tickers: u64, seeds: (u64, u64)) -> (PathBuf, PathBuf) {
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    write_trades(&a, n, tickers, seeds.0, 200);
    write_trades(&b, n, tickers, seeds.1, 200);
    (a, b)
}

/// The trades of a JSON-lines file: (ticker, price, size).
pub fn trades(path: &Path) -> Vec<(String, f64, i64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["ticker"].as_str().unwrap().to_string(), v["price"].as_f64().unwrap(), v["size"].as_i64().unwrap())
        })
        .collect()
}

/// A small deterministic generator (no `rand` in the result path of a test either).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `n` forged control records for `app`, covering every rejection: unsigned, untrusted key, a
/// trusted id with another key's signature, another application's statement, a replayed
/// sequence (`replay_seq`: the sequence of an accepted statement), expired, tenant mismatch,
/// trusted statements that do not compile (syntax, unknown query, incompatible replace,
/// deeply nested text), and random byte mutations of a valid record. Sequences of the trusted
/// key used here start above `first_seq`. Returns the records and the rejection kind of each.
pub fn forged(
    app: &str,
    trusted: &KeyFile,
    replay_seq: u64,
    first_seq: u64,
    n: usize,
    now: i64,
) -> Vec<(Record, &'static str)> {
    let other = KeyFile::generate("mallory").unwrap();
    let impostor = KeyFile::generate("ops").unwrap();
    let mut rng = Lcg(42);
    let mut seq = first_seq;
    let ok_text = "update watch[\"T0000\"] = { note = \"forged\", threshold = 0.0 }";
    let rec = |headers: Vec<(String, Vec<u8>)>, text: &str| Record {
        key: None,
        value: Some(text.as_bytes().to_vec()),
        timestamp: now,
        headers,
    };
    let deep = |depth: usize| {
        format!(
            "update watch[\"T0000\"] = {{ note = \"x\", threshold = {}1.0{} }}",
            "(".repeat(depth),
            ")".repeat(depth)
        )
    };
    let mut out = Vec::new();
    for i in 0..n {
        let kind = i % 12;
        let exp = now + 3_600_000;
        let r = match kind {
            0 => (rec(vec![], ok_text), "unsigned"),
            1 => (rec(other.sign(app, 1 + i as u64, exp, "", ok_text), ok_text), "untrusted key"),
            2 => (rec(impostor.sign(app, seq + 1 + i as u64, exp, "", ok_text), ok_text), "wrong signature"),
            3 => {
                (rec(trusted.sign("another-app", seq + 1 + i as u64, exp, "", ok_text), ok_text), "another application")
            }
            4 => (rec(trusted.sign(app, replay_seq, exp, "", ok_text), ok_text), "replayed sequence"),
            5 => {
                seq += 1;
                (rec(trusted.sign(app, seq, now - 1, "", ok_text), ok_text), "expired")
            }
            6 => {
                seq += 1;
                let t = "for tenant \"acme\" update watch[\"T0000\"] = { note = \"x\", threshold = 1.0 }";
                (rec(trusted.sign(app, seq, exp, "globex", t), t), "tenant mismatch")
            }
            7..=10 => {
                // Trusted, but not compiling: a syntax error, an unknown query, an incompatible
                // replacement, text nested deeper than the parser allows.
                seq += 1;
                let (t, kind) = match kind {
                    7 => ("update watch[\"T0000\"] = { note = ".to_string(), "syntax error"),
                    8 => ("drop query nothing_here".to_string(), "unknown query"),
                    9 => (
                        "replace query totals { from trades group by ticker aggregate { n = count() } to \"x\" }"
                            .to_string(),
                        "incompatible replace",
                    ),
                    _ => (deep(200 + rng.below(20_000) as usize), "deeply nested"),
                };
                (rec(trusted.sign(app, seq, exp, "", &t), &t), kind)
            }
            _ => {
                // A valid record, then one byte of its text or of one header changed.
                seq += 1;
                let mut r = rec(trusted.sign(app, seq, exp, "", ok_text), ok_text);
                let field = rng.below(r.headers.len() as u64 + 1) as usize;
                let flip = 1 + rng.below(255) as u8;
                let bytes = if field == r.headers.len() { r.value.as_mut().unwrap() } else { &mut r.headers[field].1 };
                if bytes.is_empty() {
                    bytes.push(flip);
                } else {
                    let at = rng.below(bytes.len() as u64) as usize;
                    bytes[at] ^= flip;
                }
                (r, "mutated")
            }
        };
        out.push(r);
    }
    out
}

/// The records as `streamc produce --envelope` lines.
pub fn envelope_lines(records: &[(Record, &str)]) -> String {
    let mut s = String::new();
    for (r, _) in records {
        // Headers as text: every forged header value here is written as (lossy) UTF-8; a
        // mutated non-UTF-8 byte turns into U+FFFD, which changes it all the same.
        let headers: serde_json::Map<String, serde_json::Value> = r
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(String::from_utf8_lossy(v).into_owned())))
            .collect();
        let line = serde_json::json!({ "key": null, "value": String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()), "timestamp": r.timestamp, "headers": headers });
        s += &line.to_string();
        s.push('\n');
    }
    s
}

/// Outputs of `big` follow the filter in force when their input was read.
pub fn check_big(env: &Env, a: &Path, b: &Path) {
    let mut expected: Vec<(i64, u64)> = trades(a).into_iter().filter(|t| t.2 > 500).map(|t| (t.2, 0)).collect();
    expected.extend(trades(b).into_iter().filter(|t| t.2 > 800).map(|t| (t.2, 1)));
    let mut got: Vec<(i64, u64)> =
        env.consume_versions("big").iter().map(|(_, v, ver)| (v["size"].as_i64().unwrap(), ver.unwrap())).collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "big: version 0 over the first input, version 1 over the second");
}

/// Count and volume per ticker over some trades.
fn fold(all: &[(String, f64, i64)]) -> BTreeMap<String, (i64, i64)> {
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (t, _, size) in all {
        let e = want.entry(t.clone()).or_default();
        e.0 += 1;
        e.1 += size;
    }
    want
}

fn last_values(env: &Env, topic: &str, fields: &[&str]) -> BTreeMap<String, Vec<i64>> {
    let mut last = BTreeMap::new();
    for (k, v, _) in env.consume_versions(topic) {
        last.insert(k.as_str().unwrap().to_string(), fields.iter().map(|f| v[*f].as_i64().unwrap()).collect());
    }
    last
}

/// Input A, statements, input B, each run drained; then an incompatible replacement accepted
/// `with reprocess`. Checks every output against folds over the inputs.
pub fn scenario(env: &Env, a: &Path, b: &Path, run_flags: &[&str]) {
    let program = env.program.to_str().unwrap().to_string();
    // Faults injected over all runs (with `--chaos`), from each run's summary.
    let faults = std::cell::Cell::new(0u64);
    let run = || {
        let mut args = vec!["run", program.as_str(), "--drain"];
        args.extend_from_slice(run_flags);
        let err = env.run(&args);
        let n = err
            .split("chaos: ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        faults.set(faults.get() + n);
        err
    };
    env.produce_trades(a);
    run();
    let totals = env.topic("totals");
    let statements = [
        format!("replace query big {{ from trades where size > 800 select {{ ticker, size }} to \"{}\" }}", env.topic("big")),
        format!("replace query totals {{ from trades group by ticker aggregate {{ n = count(), vol = sum(size) }} where n > 0 to \"{totals}\" }}"),
        format!("replace query totals {{ from trades group by ticker aggregate {{ n = count() }} to \"{totals}\" }}"),
        "update watch[\"T0001\"] = { note = \"hot\", threshold = 0.0 }".to_string(),
    ];
    for (i, s) in statements.iter().enumerate() {
        // The incompatible one is refused by `control` itself unless --no-check.
        let (out, ok) = env.control(s, if i == 2 { &["--no-check"] } else { &[] });
        assert!(ok, "{out}");
    }
    env.produce_trades(b);
    run();
    let st = env.statuses();
    let accepted: Vec<bool> = (0..4).map(|o| st[&o]["accepted"].as_bool().unwrap()).collect();
    assert_eq!(accepted, [true, true, false, true], "{st:?}");
    assert!(st[&2]["diagnostic"].as_str().unwrap().contains("E0703"), "{}", st[&2]);
    assert!(st[&2]["report"]["incompatible"][0].as_str().unwrap().contains("totals-aggregate"));
    assert_eq!(st[&1]["report"]["kept"], serde_json::json!(["totals-aggregate"]));
    check_big(env, a, b);
    // The compatible replacement kept the counts of the first input.
    let both: Vec<_> = trades(a).into_iter().chain(trades(b)).collect();
    let want: BTreeMap<String, Vec<i64>> = fold(&both).into_iter().map(|(k, (n, v))| (k, vec![n, v])).collect();
    assert_eq!(last_values(env, "totals", &["n", "vol"]), want);
    // The table had its row only for the second input.
    let mut watched: Vec<String> =
        env.consume_versions("watched").iter().map(|(_, v, _)| format!("{} {}", v["ticker"], v["price"])).collect();
    let mut expected: Vec<String> = trades(b)
        .into_iter()
        .filter(|t| t.0 == "T0001")
        .map(|t| format!("\"{}\" {}", t.0, serde_json::json!(t.1)))
        .collect();
    watched.sort();
    expected.sort();
    assert_eq!(watched, expected);
    // Accepted with reprocess: the new aggregate is rebuilt from the start of the input.
    let reprocess = format!(
        "replace query totals {{ from trades group by ticker aggregate {{ n = count() }} to \"{}\" }} with reprocess",
        env.topic("totals_n")
    );
    let (out, ok) = env.control(&reprocess, &[]);
    assert!(ok, "{out}");
    run();
    let st = env.statuses();
    assert_eq!(st[&4]["accepted"], true, "{}", st[&4]);
    assert_eq!(st[&4]["report"]["rebuilt"], serde_json::json!(["totals-aggregate"]));
    let want_n: BTreeMap<String, Vec<i64>> = fold(&both).into_iter().map(|(k, (n, _))| (k, vec![n])).collect();
    assert_eq!(last_values(env, "totals_n", &["n"]), want_n, "rebuilt from the start, each record once");
    // A restart applies nothing twice.
    let before = ["big", "totals", "totals_n", "watched"].map(|t| env.consume_versions(t).len());
    run();
    assert_eq!(["big", "totals", "totals_n", "watched"].map(|t| env.consume_versions(t).len()), before);
    assert_eq!(env.statuses().len(), 5);
    let per_instance = env.status_records();
    assert!(
        per_instance >= 5 && per_instance.is_multiple_of(5),
        "each instance writes each status once: {per_instance}"
    );
    if run_flags.contains(&"--chaos") {
        assert!(faults.get() > 0, "the replay under --chaos injected no fault");
    }
}

/// Post `n` forged statements after one accepted update; run; every forged one is rejected
/// with a reason, and the outputs are those of the accepted update alone.
pub fn forged_rejected(env: &Env, n: usize, run_flags: &[&str]) {
    let a = env.dir.join("a.jsonl");
    write_trades(&a, 300, 3, 3, 200);
    let (out, ok) = env.control("update watch[\"T0002\"] = { note = \"real\", threshold = 0.0 }", &[]);
    assert!(ok, "{out}");
    let st0 = env.statuses_or_control_seq();
    let key = env.signing_key();
    let recs = forged(&env.app, &key, st0, st0, n, streamc::runtime::now_ms());
    let lines = env.dir.join("forged.jsonl");
    std::fs::write(&lines, envelope_lines(&recs)).unwrap();
    env.run(&["produce", &streamc::control::control_topic(&env.app), lines.to_str().unwrap(), "--envelope"]);
    env.produce_trades(&a);
    let mut args = vec!["run", env.program.to_str().unwrap(), "--drain"];
    args.extend_from_slice(run_flags);
    env.run(&args);
    let st = env.statuses();
    assert_eq!(st.len(), n + 1, "a status for every statement");
    assert_eq!(env.status_records(), n + 1, "and only one");
    assert_eq!(st[&0]["accepted"], true);
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (_, kind)) in recs.iter().enumerate() {
        let s = &st[&(i as u64 + 1)];
        assert_eq!(s["accepted"], false, "forged statement {i} ({kind}) was accepted: {s}");
        assert!(s["reason"].as_str().is_some_and(|r| !r.is_empty()), "{s}");
        *kinds.entry(kind).or_default() += 1;
    }
    assert_eq!(kinds.len(), 12, "{kinds:?}");
    // Only the real update reached the table.
    let mut watched: Vec<String> =
        env.consume_versions("watched").iter().map(|(_, v, _)| format!("{} {}", v["ticker"], v["note"])).collect();
    let mut expected: Vec<String> =
        trades(&a).into_iter().filter(|t| t.0 == "T0002").map(|t| format!("\"{}\" \"real\"", t.0)).collect();
    watched.sort();
    expected.sort();
    assert_eq!(watched, expected);
}

/// A program file changed since the application first ran: a compatible change runs (with the
/// report), an incompatible one is refused until `--reset`, which reprocesses the input.
pub fn changed_file_then_reset(env: &Env) {
    let (a, b) = two_inputs(&env.dir, 300, 3, (1, 2));
    env.produce_trades(&a);
    let program = env.program.to_str().unwrap().to_string();
    env.run(&["run", &program, "--drain"]);
    let text = std::fs::read_to_string(&env.program).unwrap();
    std::fs::write(&env.program, text.replace("where size > 500", "where size > 800")).unwrap();
    env.produce_trades(&b);
    let err = env.run(&["run", &program, "--drain"]);
    assert!(
        err.contains("the program file changed")
            && err.contains("query big:\n  no state")
            && err.contains("kept: totals-aggregate"),
        "{err}"
    );
    let big: Vec<i64> = env.consume_versions("big").iter().map(|(_, v, _)| v["size"].as_i64().unwrap()).collect();
    let want = trades(&a).iter().filter(|t| t.2 > 500).count() + trades(&b).iter().filter(|t| t.2 > 800).count();
    assert_eq!(big.len(), want);
    // Incompatible: refused, nothing processed.
    std::fs::write(
        &env.program,
        text.replace("aggregate { n = count(), vol = sum(size) }", "aggregate { n = count() }"),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .arg("--state-dir")
        .arg(&env.state)
        .args(env.args(&["run", &program, "--drain"]))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--reset") && err.contains("incompatible: totals-aggregate"),
        "{err}"
    );
    // --reset: every query starts over from the start of the input.
    assert!(env.consume_versions("totals").iter().all(|(_, v, _)| v.get("vol").is_some()));
    let err = env.run(&["run", &program, "--drain", "--reset"]);
    assert!(err.contains(&format!("reset `{}`", env.app)), "{err}");
    let totals = env.consume_versions("totals");
    let mut last = std::collections::BTreeMap::new();
    // The records of the new form (without `vol`), in offset order per partition.
    for (k, v, _) in totals.iter().filter(|(_, v, _)| v.get("vol").is_none()) {
        last.insert(k.as_str().unwrap().to_string(), v["n"].as_i64().unwrap());
    }
    let mut want = std::collections::BTreeMap::new();
    for t in trades(&a).into_iter().chain(trades(&b)) {
        *want.entry(t.0).or_insert(0) += 1;
    }
    assert_eq!(last, want);
}

/// `with fresh state` empties the replaced aggregate; a replacement that would move a store to
/// another sub-topology is rejected even with a mode; `drop query` deletes the dropped query's
/// state (every key of its changelog ends in a tombstone). Runs with `run_flags` (e.g. threads).
pub fn fresh_state_moves_and_drop(env: &Env, run_flags: &[&str]) {
    let (a, b) = two_inputs(&env.dir, 300, 4, (5, 6));
    let program = env.program.to_str().unwrap().to_string();
    let run = || {
        let mut args = vec!["run", program.as_str(), "--drain"];
        args.extend_from_slice(run_flags);
        env.run(&args)
    };
    env.produce_trades(&a);
    run();
    let totals = env.topic("totals");
    let fresh = format!("replace query totals {{ from trades group by ticker aggregate {{ n = count() }} to \"{totals}\" }} with fresh state");
    let moved = format!("replace query totals {{ from trades group by lower(ticker) as t aggregate {{ n = count() }} to \"{totals}\" }} with fresh state");
    let (out, ok) = env.control(&fresh, &[]);
    assert!(ok, "{out}");
    let (out, ok) = env.control(&moved, &["--no-check"]);
    assert!(ok, "{out}");
    env.produce_trades(&b);
    run();
    let st = env.statuses();
    assert_eq!(st[&0]["accepted"], true, "{}", st[&0]);
    assert_eq!(st[&0]["report"]["emptied"], serde_json::json!(["totals-aggregate"]));
    assert_eq!(st[&1]["accepted"], false);
    assert!(st[&1]["reason"].as_str().unwrap().contains("moves the state of `totals-aggregate`"), "{}", st[&1]);
    // Counts of the second input only.
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for t in trades(&b) {
        *want.entry(t.0).or_default() += 1;
    }
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for (k, v, ver) in env.consume_versions("totals") {
        if ver == Some(1) {
            last.insert(k.as_str().unwrap().to_string(), v["n"].as_i64().unwrap());
        }
    }
    assert_eq!(last, want, "with fresh state: counted from the switch on");
    // Drop: the aggregate's state is deleted, key by key.
    let changelog = format!("{}-totals-aggregate-changelog", env.app);
    assert!(env.last_by_key(&changelog).values().any(Option::is_some));
    let (out, ok) = env.control("drop query totals", &[]);
    assert!(ok, "{out}");
    let before = env.consume_versions("totals").len();
    run();
    let left = env.last_by_key(&changelog);
    assert!(!left.is_empty() && left.values().all(Option::is_none), "every key deleted: {left:?}");
    assert_eq!(env.consume_versions("totals").len(), before, "a dropped query writes nothing");
    assert_eq!(env.statuses()[&2]["accepted"], true);
}

/// A query added while the application is stopped reads its input from the start.
pub fn new_query_while_stopped(env: &Env) {
    let (a, b) = two_inputs(&env.dir, 300, 3, (7, 8));
    let program = env.program.to_str().unwrap().to_string();
    env.produce_trades(&a);
    env.run(&["run", &program, "--drain"]);
    let q = format!(
        "query small {{ from trades where size < 100 select {{ ticker, size }} to \"{}\" }}",
        env.topic("small")
    );
    let (out, ok) = env.control(&q, &[]);
    assert!(ok, "{out}");
    env.produce_trades(&b);
    env.run(&["run", &program, "--drain"]);
    let mut got: Vec<i64> = env
        .consume_versions("small")
        .iter()
        .map(|(_, v, ver)| {
            assert_eq!(*ver, Some(1));
            v["size"].as_i64().unwrap()
        })
        .collect();
    let mut want: Vec<i64> = trades(&a).into_iter().chain(trades(&b)).filter(|t| t.2 < 100).map(|t| t.2).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// A topic's records (key, value) with one header's value (text), from the backend `env` runs on.
pub fn consume_headers(
    env: &Env,
    topic: &str,
    header: &str,
) -> Vec<(serde_json::Value, serde_json::Value, Option<String>)> {
    let out = Command::new(bin())
        .arg("--state-dir")
        .arg(&env.state)
        .args(env.args(&["consume", topic, "--exit-at-end", "--from-beginning", "--headers"]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["key"].clone(), v["value"].clone(), v["headers"][header].as_str().map(str::to_string))
        })
        .collect()
}

/// A statement adding a query that writes into the application's own control topic: `control`
/// refuses to post it; posted anyway (`--no-check`), the application rejects it with the reason
/// and runs on (a following statement is applied).
pub fn reserved_sink_statement_rejected(env: &Env) {
    let (a, _) = two_inputs(&env.dir, 50, 3, (3, 4));
    let program = env.program.to_str().unwrap().to_string();
    env.produce_trades(&a);
    env.run(&["run", &program, "--drain"]);
    let control_topic = control::control_topic(&env.app);
    let q = format!("query feedback {{ from trades select {{ ticker }} to \"{control_topic}\" }}");
    let (out, ok) = env.control(&q, &[]);
    assert!(!ok && out.contains("E0505") && out.contains("nothing was posted"), "{out}");
    let (out, ok) = env.control(&q, &["--no-check"]);
    assert!(ok, "{out}");
    let small = format!(
        "query small {{ from trades where size < 100 select {{ ticker, size }} to \"{}\" }}",
        env.topic("small")
    );
    let (out, ok) = env.control(&small, &[]);
    assert!(ok, "{out}");
    env.run(&["run", &program, "--drain"]);
    let statuses = env.statuses();
    let rejected: Vec<&serde_json::Value> =
        statuses.values().filter(|s| s["statement"].as_str().is_some_and(|t| t.contains("feedback"))).collect();
    assert_eq!(rejected.len(), 1, "{statuses:?}");
    assert_eq!(rejected[0]["accepted"], false, "{:?}", rejected[0]);
    let reason = rejected[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("this application's control topic"), "{reason}");
    let applied = statuses
        .values()
        .any(|s| s["statement"].as_str().is_some_and(|t| t.contains("query small")) && s["accepted"] == true);
    assert!(applied, "{statuses:?}");
    let want = trades(&a).into_iter().filter(|t| t.2 < 100).count();
    assert_eq!(env.consume_versions("small").len(), want);
}
