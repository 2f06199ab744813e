//! `streamc test PROGRAM FIXTURE…`: a program run on fixtures, as Kafka Streams' TopologyTestDriver
//! or ksqlDB's test runner does. A fixture (YAML) gives input records per topic and the outputs
//! expected per topic; each fixture runs on a fresh embedded log in a temporary directory, through
//! the same path as `produce` and `run --drain`, and its outputs are compared with the expected
//! ones: every record in order (`expect`), or the final value per key and window
//! (`expect_final`). A mismatch prints what differs and makes the exit code 1.
//!
//! A program with avro or protobuf topics runs against an in-process schema registry
//! (`mock://…`, whatever `schema.registry.url` says: a test adds no versions to real subjects):
//! inputs are written in the wire format from the fixture's JSON, outputs read back as JSON, as
//! `produce` and `consume` do. (Fields taken from the registry are looked up in the configured
//! one, when the program is read.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use streamc::topics::Topics;

use serde_json::Value as J;

/// One fixture file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    /// What the fixture shows (printed with its result).
    #[serde(default)]
    about: Option<String>,
    /// Configuration keys for the run, as `--set` (`embedded.partitions`, `late.to_topic`, …).
    #[serde(default)]
    set: BTreeMap<String, serde_yaml::Value>,
    /// Advance stream time past every window at the end (`run --close-windows-at-end`).
    #[serde(default)]
    close_windows_at_end: bool,
    /// Input records per topic, appended in order (topics in the order written).
    inputs: serde_yaml::Mapping,
    /// Every record expected on a topic, in order (a topic listed with `[]` must stay empty).
    #[serde(default)]
    expect: BTreeMap<String, Vec<Expected>>,
    /// The final value expected per key (and window) of a topic: its records folded as a
    /// compacted topic would hold them (a record with no value deletes).
    #[serde(default)]
    expect_final: BTreeMap<String, Vec<Expected>>,
}

/// An input record. `key`: absent to take it from the program's declaration of the topic (its
/// `key` field), like `streamc produce`; `timestamp`: epoch ms or RFC 3339, absent for the
/// declared `time` field, else 0.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[serde(default)]
    key: Option<J>,
    value: J,
    #[serde(default)]
    timestamp: Option<J>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// An expected output record: its key and value, and the headers named (others are ignored).
#[derive(serde::Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Expected {
    #[serde(default)]
    key: J,
    value: J,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

pub(crate) fn test(g: &crate::Global, program: &Path, fixtures: &[PathBuf]) -> Result<ExitCode, String> {
    // (Fields from the registry are looked up in the registry configured, if any.)
    let cfg = crate::load_config(g)?;
    let Some(text) = crate::read_program(program, &cfg)? else { return Ok(ExitCode::from(1)) };
    let Some(p) = crate::compile_file(program, &text) else { return Ok(ExitCode::from(1)) };
    let mut failed = 0;
    for (i, f) in fixtures.iter().enumerate() {
        let fixture: Fixture = serde_yaml::from_str(&crate::read(f)?).map_err(|e| format!("{}: {e}", f.display()))?;
        let dir = std::env::temp_dir().join(format!("streamc-test-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let result = run_fixture(g, program, &p, &fixture, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let about = fixture.about.as_deref().map(|a| format!(" ({a})")).unwrap_or_default();
        match result.map_err(|e| format!("{}: {e}", f.display()))? {
            None => eprintln!("{}: ok{about}", f.display()),
            Some(diff) => {
                failed += 1;
                eprintln!("{}: FAILED{about}\n{diff}", f.display());
            }
        }
    }
    eprintln!("{} fixture{}, {failed} failed", fixtures.len(), crate::s(fixtures.len()));
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Run one fixture in `dir`: `None` if every expected output matched, else what differs.
fn run_fixture(
    g: &crate::Global,
    program: &Path,
    p: &streamc::hir::Program,
    fixture: &Fixture,
    dir: &Path,
) -> Result<Option<String>, String> {
    let mut sets = g.sets.clone();
    // Avro or protobuf topics: an in-process registry, never a configured one (a test must not
    // add versions to real subjects). One for all the fixtures of the process: the decoders keep
    // schemas by id for the process, and this registry gives a schema the same id everywhere.
    let registry_formats = p.sources.iter().any(|s| s.format.uses_registry() || s.key_format.is_some())
        || p.queries.iter().flat_map(|q| &q.sinks).any(|s| s.format.uses_registry() || s.key_format.is_some());
    if registry_formats {
        sets.push(format!("schema.registry.url={}streamc-test-{}", streamc::registry::MOCK, std::process::id()));
    }
    for (k, v) in &fixture.set {
        let v = match v {
            serde_yaml::Value::String(s) => s.clone(),
            other => serde_yaml::to_string(other).map_err(|e| e.to_string())?.trim().to_string(),
        };
        sets.push(format!("{k}={v}"));
    }
    let g2 = crate::Global { config: g.config.clone(), sets, bootstrap_servers: None, state_dir: dir.to_path_buf() };
    let mut cfg = crate::load_config(&g2)?;
    // Always the embedded log, whatever the configuration file says.
    cfg.kafka.clear();
    let log = crate::log_of(&g2, &cfg)?;
    for (topic, records) in &fixture.inputs {
        let topic = topic.as_str().ok_or("`inputs`: topic names are strings")?;
        let records: Vec<Input> =
            serde_yaml::from_value(records.clone()).map_err(|e| format!("inputs of `{topic}`: {e}"))?;
        let source = p.sources.iter().find(|s| s.topic.as_deref() == Some(topic));
        if source.is_none() {
            return Err(format!("`inputs`: the program reads no topic `{topic}`"));
        }
        let partitions = Topics::ensure_topic(&log, topic, cfg.embedded.partitions, &[])?;
        let mut recs: Vec<(u32, streamc::record::Record)> = Vec::new();
        let mut rr = 0u32;
        // An avro or protobuf source (value or key): its schemas registered, as `produce` does.
        let placer = streamc::runtime::LinePlacer::new(source);
        if let Some(src) = source {
            let registry = streamc::registry::Registry::of(&cfg);
            if let (Some(r), true) = (&registry, src.format.uses_registry()) {
                streamc::runtime::schemas::register(r, topic, &src.wire, src.format).map_err(|e| e.to_string())?;
            }
            if let (Some(r), Some(f)) = (&registry, src.key_format) {
                let field = src.key_name().unwrap_or("key");
                streamc::runtime::schemas::register_key(r, topic, &src.key_type(), field, f)
                    .map_err(|e| e.to_string())?;
            }
        }
        for (n, r) in records.iter().enumerate() {
            let rec = input_record(r, &placer).map_err(|e| format!("inputs of `{topic}`, record {}: {e}", n + 1))?;
            let part = match &rec.key {
                Some(k) => streamc::record::partition_for(k, partitions),
                None => {
                    rr = (rr + 1) % partitions;
                    rr
                }
            };
            recs.push((part, rec));
        }
        Topics::append(&log, topic, recs)?;
    }
    drop(log);
    let flags = crate::RunFlags {
        inputs: vec![],
        drain: true,
        close: fixture.close_windows_at_end,
        threads: 1,
        http_addr: None,
        chaos: None,
        reset: false,
    };
    if crate::run_program(&g2, cfg.clone(), program, flags)? != ExitCode::SUCCESS {
        return Err("the run failed".into());
    }
    let log = crate::log_of(&g2, &cfg)?;
    let mut diffs = Vec::new();
    for (topic, final_) in
        fixture.expect.keys().map(|t| (t, false)).chain(fixture.expect_final.keys().map(|t| (t, true)))
    {
        let got = read_topic(&log, topic, &cfg)?;
        let d = if final_ {
            compare_final(topic, &got, &fixture.expect_final[topic])
        } else {
            compare_in_order(topic, &got, &fixture.expect[topic])
        };
        diffs.extend(d);
    }
    Ok((!diffs.is_empty()).then(|| diffs.join("\n")))
}

/// The log record of an input: as `produce --envelope` writes it, with the key (if absent) and
/// the timestamp (if absent) from the program's declaration, as plain `produce` takes them.
fn input_record(r: &Input, placer: &streamc::runtime::LinePlacer) -> Result<streamc::record::Record, String> {
    let bytes = |x: &J| match x {
        J::Null => None,
        J::String(s) => Some(s.as_bytes().to_vec()),
        other => Some(other.to_string().into_bytes()),
    };
    // (An object value of an avro or protobuf source is written in its format, and so is its
    // key when the source's keys are: `placer`, as `produce` writes them.)
    let declared = bytes(&r.value).map(|v| placer.record(&v, 0));
    let value = declared.as_ref().and_then(|d| d.value.clone());
    let key = match &r.key {
        Some(k) => bytes(k).map(|k| placer.registered_key(&k).unwrap_or(k)),
        None => declared.as_ref().and_then(|d| d.key.clone()),
    };
    let timestamp = match &r.timestamp {
        None => declared.as_ref().map_or(0, |d| d.timestamp),
        Some(J::Number(n)) => n.as_i64().ok_or("timestamp must be an integer")?,
        Some(J::String(s)) => streamc::value::parse_rfc3339(s).ok_or("timestamp must be epoch ms or RFC 3339")?,
        Some(_) => return Err("timestamp must be epoch ms or RFC 3339".into()),
    };
    let headers = r.headers.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
    Ok(streamc::record::Record { key, value, timestamp, headers })
}

/// Every committed record of a topic (partition by partition), as `consume --headers` prints
/// them; a topic that was never written is empty.
fn read_topic(topics: &dyn Topics, topic: &str, cfg: &streamc::config::Config) -> Result<Vec<J>, String> {
    if topics.partitions(topic)?.is_none() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut failed = None;
    topics.stream(topic, &streamc::record::Start::Beginning, false, &mut |rec| {
        if let Some((p, s)) = rec {
            if let Err(e) = crate::prefetch_registered(cfg, topic, &[&s]) {
                failed = Some(e);
                return false;
            }
            out.push(crate::consumed_json(topic, p, &s, true));
        }
        true
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Values compared by value: numbers equal if they are within 1e-9 of each other relatively (so
/// `0.3` matches a computed `0.30000000000000004`), objects whatever their key order.
fn same(a: &J, b: &J) -> bool {
    match (a, b) {
        (J::Number(x), J::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (J::Array(x), J::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Whether an output record is the expected one: key, value and the headers it names.
fn matches(got: &J, want: &Expected) -> bool {
    same(&got["key"], &want.key)
        && same(&got["value"], &want.value)
        && want.headers.iter().all(|(k, v)| got["headers"].get(k).and_then(|h| h.as_str()) == Some(v.as_str()))
}

fn show_got(r: &J, names: &BTreeMap<String, String>) -> String {
    let mut s = format!("key: {}, value: {}", r["key"], r["value"]);
    for k in names.keys() {
        s.push_str(&format!(", {k}: {}", r["headers"].get(k).unwrap_or(&J::Null)));
    }
    s
}

fn show_want(w: &Expected) -> String {
    let mut s = format!("key: {}, value: {}", w.key, w.value);
    for (k, v) in &w.headers {
        s.push_str(&format!(", {k}: {v:?}"));
    }
    s
}

fn compare_in_order(topic: &str, got: &[J], want: &[Expected]) -> Option<String> {
    let n = got.len().max(want.len());
    if got.len() == want.len() && got.iter().zip(want).all(|(g, w)| matches(g, w)) {
        return None;
    }
    let mut lines = vec![format!("  topic {topic}: {} records expected, {} written", want.len(), got.len())];
    for i in 0..n {
        match (want.get(i), got.get(i)) {
            (Some(w), Some(g)) if matches(g, w) => lines.push(format!("      {}: {}", i + 1, show_want(w))),
            (w, g) => {
                if let Some(w) = w {
                    lines.push(format!("    - {}: {}", i + 1, show_want(w)));
                }
                if let Some(g) = g {
                    let names = w.map(|w| w.headers.clone()).unwrap_or_default();
                    lines.push(format!("    + {}: {}", i + 1, show_got(g, &names)));
                }
            }
        }
    }
    Some(lines.join("\n"))
}

/// The key of a record in a final table: its key, and the window it is for if it has one (its
/// value's `window_start`, or a tombstone's `streamc.window.start` header).
fn table_key(key: &J, value: &J, headers: Option<&J>) -> (String, Option<String>) {
    let window = value
        .get("window_start")
        .map(|w| w.to_string())
        .or_else(|| headers.and_then(|h| h.get("streamc.window.start")).and_then(|w| w.as_str()).map(str::to_string));
    (key.to_string(), window)
}

fn compare_final(topic: &str, got: &[J], want: &[Expected]) -> Option<String> {
    let mut table: BTreeMap<(String, Option<String>), &J> = BTreeMap::new();
    for r in got {
        let k = table_key(&r["key"], &r["value"], r.get("headers"));
        if r["value"].is_null() {
            match k.1 {
                Some(_) => {
                    table.remove(&k);
                }
                None => table.retain(|(key, _), _| *key != k.0),
            }
        } else {
            table.insert(k, r);
        }
    }
    let mut missing = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for w in want {
        let k = table_key(&w.key, &w.value, None);
        match table.get(&k) {
            Some(g) if matches(g, w) => {
                seen.insert(k);
            }
            Some(g) => {
                missing.push(format!("    - {}\n    + {}", show_want(w), show_got(g, &w.headers)));
                seen.insert(k);
            }
            None => missing.push(format!("    - {}", show_want(w))),
        }
    }
    for (k, g) in &table {
        if !seen.contains(k) {
            missing.push(format!("    + {}", show_got(g, &BTreeMap::new())));
        }
    }
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "  topic {topic} (final values): {} rows expected, {} held\n{}",
        want.len(),
        table.len(),
        missing.join("\n")
    ))
}
