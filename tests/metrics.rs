//! `streamc run --metrics-addr`: a live run serves Prometheus metrics that agree with its input.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::embedded::{temp_dir, write_trades};

fn streamc(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_streamc"));
    c.arg("--state-dir").arg(state).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).env("NO_COLOR", "1");
    c
}

/// Kills the child when the test ends, passed or failed.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on: bound by the OS, then released.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET /metrics`: the response head and body, or None if nothing answers yet.
fn scrape(port: u16) -> Option<(String, String)> {
    get(port, "/metrics")
}

/// `GET path`: the response's head and body.
fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

/// One sample line: `name{label="value",...} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parse a sample line of the text format strictly; None if it is not one.
fn parse_sample(line: &str) -> Option<Sample> {
    let valid_name = |n: &str| {
        let mut cs = n.chars();
        cs.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, rest) = series.split_once('{')?;
    let body = rest.strip_suffix('}')?;
    if !valid_name(name) {
        return None;
    }
    let mut labels = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (k, after) = rest.split_once("=\"")?;
        if !valid_name(k) {
            return None;
        }
        // Label values escape `\`, `"` and newlines with a backslash.
        let mut v = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => v.push(chars.next()?.1),
                (i, '"') => break i,
                (_, c) => v.push(c),
            }
        };
        labels.push((k.to_string(), v));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Some(Sample { name: name.to_string(), labels, value })
}

fn samples(body: &str) -> Vec<Sample> {
    body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).filter_map(parse_sample).collect()
}

fn label<'a>(s: &'a Sample, key: &str) -> Option<&'a str> {
    s.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The sum of a metric over all its series.
fn total(samples: &[Sample], name: &str) -> f64 {
    samples.iter().filter(|s| s.name == name).map(|s| s.value).sum()
}

#[test]
fn a_live_run_serves_metrics_that_match_its_input() {
    let dir = temp_dir("metrics-live");
    let state = dir.join("state");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 3_000, 10, 11, 500);
    // Three lines that cannot be decoded: each goes to the dead-letter topic.
    let malformed = [
        "not json at all",
        "{\"ticker\": \"T0001\"}",
        "{\"ticker\": \"T0002\", \"price\": \"high\", \"size\": 1, \"ts\": 1700000000000}",
    ];
    {
        let mut f = std::fs::OpenOptions::new().append(true).open(&input).unwrap();
        for l in malformed {
            writeln!(f, "{l}").unwrap();
        }
    }
    let produced = 3_000 + malformed.len();
    let two = ["--set", "embedded.partitions=2"];
    let o = streamc(&state, &["produce", "stocks", input.to_str().unwrap(), "--program", "examples/stats.stream"])
        .args(two)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("produced {produced} records")));

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = dir.join("run.stderr");
    let child = streamc(&state, &["run", "examples/stats.stream", "--http-addr", &addr, "--set", "commit.records=500"])
        .args(two)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _run = Running(child);

    // Scrape until every produced record has been read (and so committed).
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::from("(no answer)");
    let (head, body) = loop {
        if let Some((head, body)) = scrape(port) {
            if total(&samples(&body), "streamc_records_in_total") == produced as f64 {
                break (head, body);
            }
            last = body;
        }
        if Instant::now() > deadline {
            panic!(
                "streamc_records_in_total never reached {produced}.\nlast scrape:\n{last}\nstderr of the run:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");

    // Every line is a comment (HELP or TYPE) or a well-formed sample.
    for line in body.lines().filter(|l| !l.is_empty()) {
        if let Some(c) = line.strip_prefix("# ") {
            assert!(c.starts_with("HELP streamc_") || c.starts_with("TYPE streamc_"), "unexpected comment: {line}");
        } else {
            assert!(parse_sample(line).is_some(), "not `name{{labels}} value`: {line:?}\n{body}");
        }
    }
    let all = samples(&body);
    assert!(all.iter().all(|s| label(s, "application") == Some("stats")), "{body}");

    // The probes: alive, and ready (its tasks are open and it is not stopping).
    let (head, body_) = get(port, "/healthz").expect("/healthz answers");
    assert!(head.starts_with("HTTP/1.1 200") && body_ == "ok\n", "{head}\n{body_}");
    let (head, body_) = get(port, "/ready").expect("/ready answers");
    assert!(head.starts_with("HTTP/1.1 200") && body_ == "ready\n", "{head}\n{body_}");
    assert_eq!(total(&all, "streamc_ready"), 1.0, "{body}");

    // Two partitions, two tasks, both counted.
    let mut tasks: Vec<&str> =
        all.iter().filter(|s| s.name == "streamc_records_in_total").filter_map(|s| label(s, "task")).collect();
    tasks.sort();
    assert_eq!(tasks, ["0_0", "0_1"], "{body}");

    assert_eq!(total(&all, "streamc_dead_letter_records_total"), malformed.len() as f64, "{body}");
    assert!(total(&all, "streamc_commits_total") > 0.0, "{body}");
    assert!(total(&all, "streamc_commit_latency_seconds_count") > 0.0, "{body}");
    assert!(total(&all, "streamc_records_out_total") > 0.0, "{body}");
    // Every well-formed record reaches the `where` processor; its aggregate sees the cache.
    let where_ = all
        .iter()
        .filter(|s| s.name == "streamc_processor_records_total" && label(s, "processor") == Some("stock_stats-where"));
    assert_eq!(where_.map(|s| s.value).sum::<f64>(), 3_000.0, "{body}");
    let lookups = total(&all, "streamc_cache_hits_total") + total(&all, "streamc_cache_misses_total");
    assert!(lookups >= 3_000.0, "{body}");
    for s in all.iter().filter(|s| s.name == "streamc_cache_hit_ratio") {
        assert!((0.0..=1.0).contains(&s.value), "{body}");
    }
    assert!(all.iter().any(|s| s.name == "streamc_late_records_dropped_total"), "{body}");
}

#[test]
fn a_drained_run_with_metrics_exits_and_prints_its_summary() {
    let dir = temp_dir("metrics-drain");
    let state = dir.join("state");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 1_000, 5, 3, 0);
    let input_arg = format!("stocks={}", input.display());
    let port = free_port().to_string();
    let child = streamc(
        &state,
        &[
            "run",
            "examples/stats.stream",
            "--input",
            &input_arg,
            "--drain",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut run = Running(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = run.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "`run --drain --metrics-addr` did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    run.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "serving metrics on http://127.0.0.1:{port}/metrics, probes on /healthz and /ready, stores on /stores, the console on /\n"
        )),
        "{err}"
    );
    assert!(err.lines().any(|l| l.starts_with("processed 1000 records in ")), "{err}");
    // stderr is not a terminal here: no progress bar output.
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn a_bad_metrics_address_is_a_clear_error() {
    let dir = temp_dir("metrics-bad");
    let o = streamc(&dir.join("state"), &["run", "examples/stats.stream", "--drain", "--metrics-addr", "no-port-here"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: --http-addr no-port-here: cannot listen"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Per-tenant metrics of the multi-tenant example: records in and dead letters of each tenant
/// (a bad record whose tenant can be read counts against it; one with no tenant against none),
/// and the keys each tenant holds, checked against a count of the input.
#[test]
fn tenants_have_their_own_metrics() {
    let dir = temp_dir("metrics-tenants");
    let state = dir.join("state");
    let input = dir.join("events.jsonl");
    let mut text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/events.jsonl")).unwrap();
    let per_tenant = |t: &str| text.lines().filter(|l| l.contains(&format!("\"tenant\": \"{t}\""))).count();
    let (acme, globex) = (per_tenant("acme"), per_tenant("globex"));
    text.push_str(
        "{\"tenant\": \"acme\", \"user\": \"alice\", \"amount\": \"lots\", \"at\": \"2026-01-01T13:50:00Z\"}\n",
    );
    text.push_str("{\"user\": \"mallory\", \"amount\": 1.0, \"at\": \"2026-01-01T13:51:00Z\"}\n");
    std::fs::write(&input, &text).unwrap();
    let input_arg = format!("events={}", input.display());
    let port = free_port();
    let log = dir.join("run.stderr");
    // Not drained: the last hour's windows stay open, so their keys are in the stores.
    let child = streamc(
        &state,
        &[
            "run",
            "examples/tenants.stream",
            "--input",
            &input_arg,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--set",
            "commit.records=10",
            "--set",
            "embedded.partitions=1",
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    let _run = Running(child);
    let of = |all: &[Sample], name: &str, tenant: &str| -> f64 {
        all.iter().filter(|s| s.name == name && label(s, "tenant") == Some(tenant)).map(|s| s.value).sum()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let all = loop {
        if let Some((_, body)) = scrape(port) {
            let all = samples(&body);
            // Every record through both sub-topologies (the bad acme record only through the
            // first): the aggregate has committed them all.
            if of(&all, "streamc_tenant_records_in_total", "acme") >= (2 * acme + 1) as f64
                && of(&all, "streamc_tenant_records_in_total", "globex") >= (2 * globex) as f64
                && total(&all, "streamc_dead_letter_records_total") >= 2.0
            {
                break all;
            }
        }
        assert!(
            Instant::now() < deadline,
            "tenant metrics never showed every record:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The first sub-topology (source, repartition) reads every record; the aggregate reads
    // the repartitioned ones again: each tenant's count is its records, once per sub-topology.
    let in_task = |t: &str, task: &str| {
        all.iter()
            .filter(|s| {
                s.name == "streamc_tenant_records_in_total"
                    && label(s, "tenant") == Some(t)
                    && label(s, "task").is_some_and(|x| x.starts_with(task))
            })
            .map(|s| s.value)
            .sum::<f64>()
    };
    assert_eq!(in_task("acme", "0_"), (acme + 1) as f64);
    assert_eq!(in_task("globex", "0_"), globex as f64);
    assert_eq!(in_task("acme", "1_"), acme as f64);
    assert_eq!(in_task("globex", "1_"), globex as f64);
    assert_eq!(of(&all, "streamc_tenant_dead_letter_records_total", "acme"), 1.0);
    assert_eq!(of(&all, "streamc_tenant_dead_letter_records_total", "globex"), 0.0);
    assert_eq!(
        total(&all, "streamc_dead_letter_records_total"),
        2.0,
        "the record with no tenant is a dead letter of no tenant"
    );
    // The windows still open (one partition: stream time is the latest event time) are those
    // of the latest event's hour: each tenant holds one key per user it has in that hour.
    let events: Vec<(String, String, i64)> =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/events.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["tenant"].as_str().unwrap().to_string(),
                    v["user"].as_str().unwrap().to_string(),
                    streamc::value::parse_rfc3339(v["at"].as_str().unwrap()).unwrap(),
                )
            })
            .collect();
    let latest = events.iter().map(|e| e.2).max().unwrap();
    let hour = latest - latest.rem_euclid(3_600_000);
    for t in ["acme", "globex"] {
        let users: std::collections::BTreeSet<&str> =
            events.iter().filter(|e| e.0 == t && e.2 >= hour).map(|e| e.1.as_str()).collect();
        assert_eq!(of(&all, "streamc_tenant_state_keys", t), users.len() as f64, "{t}");
    }
    assert!(of(&all, "streamc_tenant_state_keys", "acme") + of(&all, "streamc_tenant_state_keys", "globex") > 0.0);
}
