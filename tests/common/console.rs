//! A live run serving the web console, for tests/console.rs and tests/browser.rs.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cli::{bin, Background};

/// `run examples/stats.stream` live on the embedded log in `state`, over `input` (trade lines,
/// a malformed one among them), serving HTTP on a free port with `extra` arguments.
pub struct Live {
    pub port: u16,
    pub run: Background,
    pub log: std::path::PathBuf,
}

pub fn start(dir: &Path, input: &Path, extra: &[&str]) -> Live {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = dir.join("run.stderr");
    let child = Command::new(bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["run", "examples/stats.stream", "--input"])
        .arg(format!("stocks={}", input.display()))
        .args(["--http-addr", &format!("127.0.0.1:{port}"), "--set", "commit.interval_ms=200"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Live { port, run: Background::of(child), log }
}

impl Live {
    /// `GET path` (with a bearer token if given): the status code and body; None if nothing
    /// answers.
    pub fn get(&self, path: &str, token: Option<&str>) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split(' ').nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    }

    /// `/console/state` once the run's tasks have processed `n` records in all.
    pub fn state_at(&self, n: u64, token: Option<&str>) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut last = String::new();
        loop {
            if let Some((200, body)) = self.get("/console/state", token) {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                let done: f64 = v["tasks"].as_array().unwrap().iter().filter_map(|t| t["records_in"].as_f64()).sum();
                if done as u64 == n {
                    return v;
                }
                last = body;
            }
            assert!(
                Instant::now() < deadline,
                "the console never showed {n} records processed; last state: {last}\nstderr: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `count` trades as `streamc gen trades` writes them (seed `seed`), one malformed line after.
pub fn trades(path: &Path, count: u64, seed: u64) {
    let out = Command::new(bin())
        .args(["gen", "trades", "--count", &count.to_string(), "--seed", &seed.to_string()])
        .output()
        .unwrap();
    let mut text = String::from_utf8(out.stdout).unwrap();
    text.push_str("{\"ticker\": \"BAD\", \"price\": \"oops\", \"size\": 1, \"ts\": 1700000000000}\n");
    std::fs::write(path, text).unwrap();
}
