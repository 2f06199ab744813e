//! The one place runtime tests touch the embedded runtime's API.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use streamc::config::Config;
use streamc::log::EmbeddedLog;
use streamc::record::Pos;
use streamc::runtime::options::RunOptions;
use streamc::runtime::{embedded, Summary};

pub struct Run<'a> {
    pub program: &'a str,
    pub state_dir: &'a Path,
    pub inputs: Vec<(String, PathBuf)>,
    pub sets: Vec<String>,
    pub threads: usize,
    pub drain: bool,
    pub close: bool,
    pub chaos: Option<streamc::runtime::chaos::ChaosSpec>,
}

impl<'a> Run<'a> {
    pub fn new(program: &'a str, state_dir: &'a Path) -> Self {
        Run { program, state_dir, inputs: vec![], sets: vec![], threads: 1, drain: true, close: true, chaos: None }
    }
    pub fn input(mut self, topic: &str, file: &Path) -> Self {
        self.inputs.push((topic.to_string(), file.to_path_buf()));
        self
    }
    pub fn set(mut self, kv: &str) -> Self {
        self.sets.push(kv.to_string());
        self
    }
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    pub fn chaos(mut self, spec: &str) -> Self {
        self.chaos = Some(spec.parse().unwrap());
        self
    }
    pub fn close(mut self, c: bool) -> Self {
        self.close = c;
        self
    }
    pub fn go(self) -> Result<Summary, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = root.join(self.program);
        let src = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let program = streamc::compile(&src).map_err(|d| format!("{d:?}"))?;
        let cfg: Config = streamc::config::load(None, &self.sets)?;
        let app = streamc::config::application_id(&cfg, &path)?;
        let topo = streamc::plan::lower(&program, &app);
        let opts = RunOptions {
            state_dir: self.state_dir.to_path_buf(),
            app,
            threads: self.threads,
            drain: self.drain,
            close_windows_at_end: self.close,
            inputs: self.inputs,
            config: cfg,
            metrics: None,
            progress: false,
            chaos: self.chaos,
            restores: Default::default(),
            program_text: src.clone(),
        };
        embedded::run(&program, &topo, &opts)
    }
}

/// A fresh, empty directory under the system temp dir (see [`TempDir`]).
pub fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("streamc-test-{name}-"))
}

/// A test's directory under the system temp dir, named `<prefix><pid>`: deleted when it is
/// dropped at the end of a test that passed; a failed test's (dropped while panicking) stays
/// for inspection until a later test process makes one of the same prefix, which deletes those
/// of processes that are gone. So a run leaves nothing behind but its failures.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let file = e.file_name().to_string_lossy().into_owned();
                let Some(pid) = file.strip_prefix(prefix).and_then(|p| p.parse::<u32>().ok()) else { continue };
                if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let d = std::env::temp_dir().join(format!("{prefix}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A record read back: partition, offset, timestamp, key text, value JSON, headers.
#[derive(Clone, Debug, PartialEq)]
pub struct Out {
    pub partition: u32,
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<String>,
    pub value: serde_json::Value,
    pub headers: BTreeMap<String, String>,
}

/// Every committed record of a topic, partition by partition.
pub fn read_topic(state_dir: &Path, topic: &str) -> Vec<Out> {
    let log = EmbeddedLog::open(state_dir, false).unwrap();
    let Some(meta) = log.topic(topic).unwrap() else { return vec![] };
    let c = log.committed().unwrap();
    let mut out = Vec::new();
    for p in 0..meta.partitions {
        let mut r = log.reader(topic, p, Pos::default());
        for s in r.read(c.end(topic, p), usize::MAX).unwrap() {
            out.push(Out {
                partition: p,
                offset: s.offset,
                timestamp: s.record.timestamp,
                key: s.record.key.map(|k| String::from_utf8_lossy(&k).into_owned()),
                value: s
                    .record
                    .value
                    .map(|v| serde_json::from_slice(&v).unwrap_or(serde_json::Value::Null))
                    .unwrap_or(serde_json::Value::Null),
                headers: s
                    .record
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect(),
            });
        }
    }
    out
}

/// The raw bytes of every partition file of a topic.
pub fn topic_bytes(state_dir: &Path, topic: &str) -> Vec<Vec<u8>> {
    let dir = state_dir.join("log").join("topics").join(topic);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// The trades of a file written by [`write_trades`]: (ticker, size, ts).
pub fn trades_of(path: &Path) -> Vec<(String, i64, i64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["ticker"].as_str().unwrap().to_string(), v["size"].as_i64().unwrap(), v["ts"].as_i64().unwrap())
        })
        .collect()
}

/// Deterministic trades as JSON lines, written to `path`.
pub fn write_trades(path: &Path, count: u64, tickers: u64, seed: u64, disorder_ms: u64) {
    let o = streamc::gen::TradesOptions { count, tickers, seed, rate: 1000, disorder_ms };
    let mut f = std::fs::File::create(path).unwrap();
    streamc::gen::trades(&o, &mut f).unwrap();
}
