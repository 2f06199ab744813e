//! Driving the `streamc` binary from tests: isolated copies of the examples (topic names
//! prefixed, so tests sharing one broker never meet), runs, produce and consume.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_streamc")
}

/// A copy of an example in `dir` whose topics are all prefixed with `pfx.`.
pub fn isolate(example: &str, pfx: &str, dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(root.join(example)).unwrap();
    write_isolated(&src, pfx, &dir.join(Path::new(example).file_name().unwrap()))
}

/// Program text `src` written to `path` with every topic prefixed with `pfx.`.
pub fn write_isolated(src: &str, pfx: &str, path: &Path) -> PathBuf {
    let text = src.replace("from \"", &format!("from \"{pfx}.")).replace(" to \"", &format!(" to \"{pfx}."));
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// `streamc --state-dir STATE ARGS…`; panics with its stderr unless it succeeds.
pub fn streamc(state: &Path, args: &[&str]) -> String {
    let out = Command::new(bin()).arg("--state-dir").arg(state).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "streamc {args:?} failed:\n{err}");
    err
}

/// `streamc --state-dir STATE ARGS…`, whatever its outcome.
pub fn streamc_output(state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin()).arg("--state-dir").arg(state).args(args).output().unwrap()
}

/// `streamc --state-dir STATE ARGS…`, which must fail: its stderr.
pub fn streamc_fails(state: &Path, args: &[&str]) -> String {
    let out = streamc_output(state, args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "streamc {args:?} succeeded:\n{err}");
    err
}

/// `streamc --state-dir STATE ARGS…` in the background, stderr appended to `log`.
pub fn spawn(state: &Path, args: &[&str], log: &Path) -> Background {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    Background(
        Command::new(bin()).arg("--state-dir").arg(state).args(args).stdout(Stdio::null()).stderr(f).spawn().unwrap(),
    )
}

/// A background process, killed (SIGKILL) when dropped, so a failing test leaves none behind.
pub struct Background(Child);

impl Background {
    /// A child process, killed when this is dropped.
    pub fn of(child: Child) -> Background {
        Background(child)
    }

    /// SIGTERM, and wait for the exit; true if it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        self.0.wait().map(|s| s.success()).unwrap_or(false)
    }

    /// How the process ended, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One record as `streamc consume` prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct Consumed {
    pub partition: u64,
    pub offset: u64,
    pub timestamp: i64,
    pub key: serde_json::Value,
    pub value: serde_json::Value,
}

/// Every committed record of a topic (`extra`: e.g. `--bootstrap-servers`).
pub fn consume(state: &Path, topic: &str, extra: &[&str]) -> Vec<Consumed> {
    consume_topic(state, topic, extra, false)
}

/// Like [`consume`], but a topic that does not exist yet (the instances that create it are
/// still starting) reads as empty: for waits that begin as the instances start.
pub fn consume_if_created(state: &Path, topic: &str, extra: &[&str]) -> Vec<Consumed> {
    consume_topic(state, topic, extra, true)
}

fn consume_topic(state: &Path, topic: &str, extra: &[&str], missing_is_empty: bool) -> Vec<Consumed> {
    let mut args = vec!["consume", topic, "--from-beginning", "--exit-at-end"];
    args.extend_from_slice(extra);
    let out = Command::new(bin()).arg("--state-dir").arg(state).args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if missing_is_empty && !out.status.success() && err.contains(&format!("no topic `{topic}`")) {
        return Vec::new();
    }
    assert!(out.status.success(), "consume {topic}: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Consumed {
                partition: v["partition"].as_u64().unwrap(),
                offset: v["offset"].as_u64().unwrap(),
                timestamp: v["timestamp"].as_i64().unwrap(),
                key: v["key"].clone(),
                value: v["value"].clone(),
            }
        })
        .collect()
}

/// What a topic's records come to: for windowed results (values with `window_start`), the last
/// value of each (key, window); for other records, how often each (key, value, timestamp)
/// occurs. Independent of how the records were batched into commits.
pub fn results(recs: &[Consumed]) -> BTreeMap<String, i64> {
    let mut windows: BTreeMap<String, String> = BTreeMap::new();
    let mut rows: BTreeMap<String, i64> = BTreeMap::new();
    for r in recs {
        match r.value.get("window_start") {
            Some(ws) => {
                windows.insert(format!("{} {ws}", r.key), r.value.to_string());
            }
            None => *rows.entry(format!("{} {} @{}", r.key, r.value, r.timestamp)).or_default() += 1,
        }
    }
    windows.into_iter().map(|(k, v)| (format!("{k} = {v}"), 1)).chain(rows).collect()
}
