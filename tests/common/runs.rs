//! The runtime corpus: every `tests/runs/<case>/` folder holds a program, its input records (in
//! envelope form: key, value, timestamp, headers), the expected output of each compared topic and
//! the independent fold (`fold.py`) that computed it. One helper runs a case on either backend
//! through the `streamc` binary, exactly as a user would: `produce --envelope`, `run --drain`,
//! `consume --headers`. Adding a case is adding a folder.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::cli::bin;

/// How an output topic is compared with its expected records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The multiset of records (key, value, and the expected headers) must be equal.
    All,
    /// Records folded as a compacted table by (key, window start): the live rows must be equal.
    Final,
    /// Records folded by key alone, as a compacted topic holds them (for keys that carry their
    /// window, `to … windowed`): the live rows must be equal.
    Table,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    pub about: String,
    #[serde(default)]
    pub inputs_order: Vec<String>,
    #[serde(default)]
    pub set: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    pub close_windows_at_end: bool,
    pub outputs: BTreeMap<String, Mode>,
    #[serde(default)]
    pub backends: Option<Vec<String>>,
    #[serde(default)]
    pub known_failure: Option<String>,
    /// `--chaos` for the run on the embedded default (seeded redeliveries and failed commits):
    /// the outputs must still equal the expected ones. (Chaos is embedded-only.)
    #[serde(default)]
    pub chaos: Option<String>,
    /// Needs a schema registry (avro topics): run by `tests/registry_runs.rs` with the
    /// registry `./dev/test` starts, not by the other corpus runners.
    #[serde(default)]
    pub registry: bool,
}

pub struct Case {
    pub name: String,
    pub dir: PathBuf,
    pub file: CaseFile,
}

impl Case {
    pub fn runs_on(&self, backend: &str) -> bool {
        self.file.backends.as_ref().is_none_or(|b| b.iter().any(|x| x == backend))
    }

    /// Input topics in the order they are produced.
    fn inputs(&self) -> Vec<String> {
        let mut all: Vec<String> = std::fs::read_dir(self.dir.join("in"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str()?.strip_suffix(".jsonl").map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        all.sort();
        let mut order: Vec<String> = self.file.inputs_order.clone();
        order.extend(all.into_iter().filter(|t| !self.file.inputs_order.contains(t)));
        order
    }

    fn sets(&self) -> Vec<String> {
        self.file
            .set
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_yaml::Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap().trim().to_string(),
                };
                format!("{k}={v}")
            })
            .collect()
    }
}

/// Every case folder, by name.
pub fn cases() -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/runs");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&root).unwrap() {
        let dir = e.unwrap().path();
        let yaml = dir.join("case.yaml");
        if !yaml.exists() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&yaml).unwrap();
        let file: CaseFile = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name}/case.yaml: {e}"));
        out.push(Case { name, dir, file });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Where a case runs: the embedded default, or a broker (topics and application id prefixed
/// with `prefix`, so cases sharing one broker never meet).
pub enum Backend<'a> {
    Embedded,
    Kafka { bootstrap: &'a str, prefix: &'a str },
}

/// Why a case did not pass.
#[derive(Debug)]
pub enum Failure {
    /// A command failed, or a file of the case is missing or malformed.
    Broken(String),
    /// The outputs differ from the expected ones.
    Differs(String),
}

/// Run a case and compare its outputs.
pub fn run_case(case: &Case, backend: &Backend, work: &Path, registry: Option<&str>) -> Result<(), Failure> {
    run_and_compare(case, backend, work, registry).map_err(Failure::Broken)?.map_err(Failure::Differs)
}

fn run_and_compare(
    case: &Case,
    backend: &Backend,
    work: &Path,
    registry: Option<&str>,
) -> Result<Result<(), String>, String> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).unwrap();
    let state = work.join("state");
    let src = std::fs::read_to_string(case.dir.join("program.stream")).unwrap();
    let (program, app, prefix, mut extra) = match backend {
        Backend::Embedded => {
            let p = work.join("program.stream");
            std::fs::write(&p, &src).unwrap();
            (p, case.name.clone(), None, vec![])
        }
        Backend::Kafka { bootstrap, prefix } => {
            let p = super::cli::write_isolated(&src, prefix, &work.join("program.stream"));
            let extra = vec!["--bootstrap-servers".to_string(), bootstrap.to_string()];
            (p, format!("{prefix}-{}", case.name), Some(*prefix), extra)
        }
    };
    if let Some(url) = registry {
        // Every command talks to the registry: produce and run write Avro, consume reads it.
        extra.extend(["--set".to_string(), format!("schema.registry.url={url}")]);
    }
    // On a broker, the case's own topics get the prefix, and its internal topics (`<case>-dlq`,
    // `<case>-late`) follow the application id.
    let own = format!("{}-", case.name);
    let topic = |t: &str| match (prefix, t.strip_prefix(&own)) {
        (None, _) => t.to_string(),
        (Some(_), Some(rest)) => format!("{app}-{rest}"),
        (Some(p), None) => format!("{p}.{t}"),
    };
    let mut common: Vec<String> = vec!["--set".into(), format!("application.id={app}")];
    for s in case.sets() {
        common.push("--set".into());
        common.push(s);
    }
    common.extend(extra.iter().cloned());
    let prog = program.to_str().unwrap().to_string();
    for input in case.inputs() {
        let file = case.dir.join("in").join(format!("{input}.jsonl"));
        let mut args = vec!["produce".to_string(), topic(&input), file.to_str().unwrap().to_string()];
        args.extend(["--envelope".to_string(), "--program".to_string(), prog.clone()]);
        args.extend(common.iter().cloned());
        streamc(&state, &args)?;
    }
    let mut args = vec!["run".to_string(), prog.clone(), "--drain".to_string()];
    if case.file.close_windows_at_end {
        args.push("--close-windows-at-end".into());
    }
    if let (Some(chaos), Backend::Embedded) = (&case.file.chaos, backend) {
        args.extend(["--chaos".to_string(), chaos.clone()]);
    }
    args.extend(common.iter().cloned());
    streamc(&state, &args)?;
    let mut diffs = Vec::new();
    for (out, mode) in &case.file.outputs {
        let mut args = vec![
            "consume".to_string(),
            topic(out),
            "--from-beginning".into(),
            "--exit-at-end".into(),
            "--headers".into(),
        ];
        args.extend(extra.iter().cloned());
        let mut got: Vec<serde_json::Value> = streamc_stdout(&state, &args)?
            .lines()
            .map(|l| serde_json::from_str(l).map_err(|e| format!("consume {out}: {e}: {l}")))
            .collect::<Result<_, _>>()?;
        if let Some(p) = prefix {
            // Headers that name a source topic name it with the prefix (an internal topic, such
            // as a repartition topic, with the application id).
            let (pfx, internal) = (format!("{p}."), format!("{app}-"));
            for r in &mut got {
                if let Some(h) = r.get_mut("headers").and_then(|h| h.as_object_mut()) {
                    for v in h.values_mut() {
                        let Some(s) = v.as_str() else { continue };
                        if let Some(rest) = s.strip_prefix(&internal) {
                            *v = serde_json::Value::String(format!("{own}{rest}"));
                        } else if let Some(rest) = s.strip_prefix(&pfx) {
                            *v = serde_json::Value::String(rest.to_string());
                        }
                    }
                }
            }
        }
        let want = expected(&case.dir.join("expected").join(format!("{out}.jsonl")))?;
        if let Some(d) = compare(out, *mode, &got, &want) {
            diffs.push(d);
        }
    }
    if diffs.is_empty() {
        Ok(Ok(()))
    } else {
        Ok(Err(diffs.join("\n")))
    }
}

pub fn streamc(state: &Path, args: &[String]) -> Result<String, String> {
    let out = Command::new(bin()).arg("--state-dir").arg(state).args(args).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("streamc {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

pub fn streamc_stdout(state: &Path, args: &[String]) -> Result<String, String> {
    let out = Command::new(bin()).arg("--state-dir").arg(state).args(args).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("streamc {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn expected(path: &Path) -> Result<Vec<serde_json::Value>, String> {
    // An output expected to stay empty has an empty file: a missing one is a mistake.
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}: {l}", path.display())))
        .collect()
}

/// A JSON value as a canonical string: object keys sorted, numbers compared by value (an
/// integral number prints as an integer; other floats to 12 significant digits, so results
/// computed in another order by the fold still match).
pub fn canonical(v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::Null | J::Bool(_) | J::String(_) => v.to_string(),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => (f as i64).to_string(),
            (None, Some(f)) => format!("{f:.11e}"),
            _ => n.to_string(),
        },
        J::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        J::Object(o) => {
            let mut kv: Vec<(&String, &J)> = o.iter().collect();
            kv.sort_by(|a, b| a.0.cmp(b.0));
            format!("{{{}}}", kv.iter().map(|(k, v)| format!("{k:?}:{}", canonical(v))).collect::<Vec<_>>().join(","))
        }
    }
}

/// One record as compared: key and value, plus the headers the expected record names.
fn row(rec: &serde_json::Value, header_names: Option<&serde_json::Map<String, serde_json::Value>>) -> String {
    let mut s = format!("key={} value={}", canonical(&rec["key"]), canonical(&rec["value"]));
    if let Some(names) = header_names {
        let got = rec.get("headers").and_then(|h| h.as_object());
        for name in names.keys() {
            let v = got.and_then(|h| h.get(name)).cloned().unwrap_or(serde_json::Value::Null);
            s.push_str(&format!(" {name}={}", canonical(&v)));
        }
    }
    s
}

/// How `got` differs from `want` (`None`: equal), as lines naming the records missing and unexpected.
pub fn compare(topic: &str, mode: Mode, got: &[serde_json::Value], want: &[serde_json::Value]) -> Option<String> {
    let (g, w): (BTreeMap<String, i64>, BTreeMap<String, i64>) = match mode {
        Mode::All => {
            let mut w = BTreeMap::new();
            let mut g = BTreeMap::new();
            // Headers compared are the ones the expected records name (all records of a topic
            // name the same ones, or none).
            let names = want.iter().find_map(|r| r.get("headers").and_then(|h| h.as_object()));
            for r in want {
                *w.entry(row(r, names)).or_insert(0) += 1;
            }
            for r in got {
                *g.entry(row(r, names)).or_insert(0) += 1;
            }
            (g, w)
        }
        Mode::Final | Mode::Table => {
            let fold = |recs: &[serde_json::Value]| {
                let mut table: BTreeMap<(String, Option<String>), String> = BTreeMap::new();
                for r in recs {
                    let window = r["value"]
                        .get("window_start")
                        .map(canonical)
                        .or_else(|| r.pointer("/headers/streamc.window.start").map(canonical_number));
                    let k = (canonical(&r["key"]), if mode == Mode::Table { None } else { window });
                    if r["value"].is_null() {
                        table.remove(&k);
                    } else {
                        table.insert(k, row(r, None));
                    }
                }
                table.into_values().map(|v| (v, 1)).collect::<BTreeMap<String, i64>>()
            };
            (fold(got), fold(want))
        }
    };
    if g == w {
        return None;
    }
    let mut lines = vec![format!("topic {topic} ({mode:?}): {} records expected, {} got", w.len(), g.len())];
    for (k, n) in &w {
        let m = g.get(k).copied().unwrap_or(0);
        if m < *n {
            lines.push(format!("  missing ×{}: {k}", n - m));
        }
    }
    for (k, n) in &g {
        let m = w.get(k).copied().unwrap_or(0);
        if m < *n {
            lines.push(format!("  unexpected ×{}: {k}", n - m));
        }
    }
    Some(lines.join("\n"))
}

/// A header value (text) holding a number, canonical like a JSON number.
fn canonical_number(v: &serde_json::Value) -> String {
    match v.as_str().and_then(|s| s.parse::<i64>().ok()) {
        Some(i) => i.to_string(),
        None => canonical(v),
    }
}

/// Run every case for `backend_name` and fail with every case that went wrong: a case must pass,
/// or, if it is marked `known_failure`, must still fail (so a fix is noticed and the mark removed).
/// With `registry`, only the cases that need one (`registry: true`), against it; without, the
/// others.
pub fn run_all(backend_name: &str, registry: Option<&str>, make: &dyn Fn(&Case) -> (Backend<'static>, PathBuf)) {
    let mut cases = cases();
    assert!(cases.len() >= 20, "the corpus has only {} cases", cases.len());
    cases.retain(|c| c.file.registry == registry.is_some());
    // A developer's focus on one case (`STREAMC_CASE=name cargo test --test runs`): said loudly,
    // and a name that matches no case fails.
    if let Ok(only) = std::env::var("STREAMC_CASE") {
        cases.retain(|c| c.name == only);
        if cases.is_empty() && self::cases().iter().any(|c| c.name == only) {
            eprintln!("runtime corpus: case {only} is not one of this runner's (a registry case, or not)");
            return;
        }
        assert!(!cases.is_empty(), "STREAMC_CASE={only} names no case");
        eprintln!("runtime corpus: only case {only} (STREAMC_CASE)");
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases.iter().filter(|c| c.runs_on(backend_name)) {
        let (backend, work) = make(case);
        ran += 1;
        let result = run_case(case, &backend, &work, registry);
        match (&case.file.known_failure, result) {
            (None, Ok(())) => {}
            (None, Err(Failure::Differs(e) | Failure::Broken(e))) => {
                failures.push(format!("{}: {}\n{e}", case.name, case.file.about))
            }
            // A known difference must still be a difference, not a crash or a failed command.
            (Some(_), Err(Failure::Differs(_))) => {}
            (Some(why), Err(Failure::Broken(e))) => {
                failures.push(format!("{}: marked known_failure ({why}) but broke instead:\n{e}", case.name))
            }
            (Some(why), Ok(())) => failures.push(format!(
                "{}: marked known_failure ({why}) but now passes: remove the mark and its KNOWN_DIFFERENCES entry",
                case.name
            )),
        }
    }
    eprintln!("runtime corpus on {backend_name}: {ran} cases, {} failed", failures.len());
    assert!(ran > 0 || std::env::var("STREAMC_CASE").is_ok(), "no case ran on {backend_name}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
