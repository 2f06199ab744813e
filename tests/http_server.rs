//! `run --http-addr` from outside: a server that idle connections, oversized heads and requests
//! that do not parse cannot knock over; a bearer token on every path but the probes; HTTPS.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::embedded::{temp_dir, write_trades};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_streamc")
}

/// Kills the child when the test ends, passed or failed.
struct Running(Child, PathBuf);

impl Running {
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Trades produced, then `run examples/stats.stream` serving on a free port (`ulimit -n` set
/// first when given), with `sets`.
fn start(dir: &Path, nofile: Option<u32>, sets: &[String]) -> (Running, u16) {
    let state = dir.join("state");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 2_000, 10, 5, 100);
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&state)
        .args(["produce", "stocks", input.to_str().unwrap(), "--program", "examples/stats.stream"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let port = free_port();
    let mut run = format!(
        "exec '{}' --state-dir '{}' run examples/stats.stream --http-addr 127.0.0.1:{port}",
        bin(),
        state.display()
    );
    for s in sets {
        run.push_str(&format!(" --set '{s}'"));
    }
    if let Some(n) = nofile {
        run = format!("ulimit -n {n} && {run}");
    }
    let log = dir.join("run.stderr");
    let child = Command::new("sh")
        .args(["-c", &run])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (Running(child, log), port)
}

/// Send `request` (bytes as they are) and read the answer until the server closes or 10 s
/// pass; None if the connection fails.
fn exchange(port: u16, request: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    // (The server may answer and close before it has read all of a large request.)
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn get(port: u16, path: &str, headers: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\r\n");
    exchange(port, req.as_bytes()).unwrap_or_default()
}

fn wait_for(secs: u64, what: &str, run: &mut Running, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(run.alive(), "the run ended while waiting for {what}:\n{}", run.log());
        assert!(Instant::now() < deadline, "{what}: not within {secs} s\n{}", run.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// With the open-file limit at 256, 300 idle connections (more than the process can hold) do
/// not stop the server: the run goes on, and once they are gone `/healthz` answers again. A
/// request head over 64 KiB gets 431, a request line that is not UTF-8 gets 400, and an idle
/// connection is closed by the server.
#[test]
fn idle_connections_and_bad_requests_do_not_knock_the_server_over() {
    let dir = temp_dir("http-limits");
    let (mut run, port) = start(&dir, Some(256), &[]);
    wait_for(60, "/healthz", &mut run, || get(port, "/healthz", "").starts_with("HTTP/1.1 200"));

    let idle: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    assert!(idle.len() > 200, "only {} connections opened", idle.len());
    std::thread::sleep(Duration::from_secs(1));
    assert!(run.alive(), "{}", run.log());
    drop(idle);
    wait_for(30, "/healthz after the idle connections", &mut run, || {
        get(port, "/healthz", "").starts_with("HTTP/1.1 200")
    });
    let metrics = get(port, "/metrics", "");
    assert!(metrics.starts_with("HTTP/1.1 200") && metrics.contains("streamc_records_in_total"), "{metrics}");

    let big = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(200_000));
    let answer = exchange(port, big.as_bytes()).unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    let answer = exchange(port, b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");

    // A connection that sends nothing is closed by the server (an EOF, not our read timeout).
    let mut quiet = TcpStream::connect(("127.0.0.1", port)).unwrap();
    quiet.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = quiet.read(&mut buf);
    assert!(matches!(n, Ok(0)) || n.is_err() && started.elapsed() < Duration::from_secs(39), "{n:?}");
    assert!(started.elapsed() < Duration::from_secs(39), "an idle connection stayed open");
    assert!(get(port, "/healthz", "").starts_with("HTTP/1.1 200"));
    assert!(run.alive(), "{}", run.log());
}

/// With `http.auth.token` (here from a file, as a mounted Secret gives it) every path but the
/// probes wants the token; `streamc query` sends it from the same configuration.
#[test]
fn a_token_guards_every_path_but_the_probes() {
    let dir = temp_dir("http-token");
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let set = format!("http.auth.token_file={}", token_file.display());
    let (mut run, port) = start(&dir, None, std::slice::from_ref(&set));
    wait_for(60, "/healthz", &mut run, || get(port, "/healthz", "").starts_with("HTTP/1.1 200"));
    let bearer = format!("Authorization: Bearer {token}\r\n");
    wait_for(60, "/ready", &mut run, || get(port, "/ready", "").starts_with("HTTP/1.1 200"));
    for path in ["/metrics", "/stores", "/stores/stock_stats-aggregate", "/metadata", "/nowhere"] {
        let none = get(port, path, "");
        assert!(none.starts_with("HTTP/1.1 401"), "{path}: {none}");
        assert!(none.to_ascii_lowercase().contains("www-authenticate: bearer"), "{none}");
        let wrong = get(port, path, "Authorization: Bearer 0123456789abcdef0123456789abcdee\r\n");
        assert!(wrong.starts_with("HTTP/1.1 401"), "{path}: {wrong}");
        assert!(!get(port, path, &bearer).starts_with("HTTP/1.1 401"), "{path}");
    }
    assert!(get(port, "/metrics", &bearer).starts_with("HTTP/1.1 200"));

    let state = dir.join("state");
    let query = |sets: &[&str]| {
        let mut c = Command::new(bin());
        c.arg("--state-dir").arg(&state).args(["query", "examples/stats.stream", "stock_stats-aggregate"]);
        for s in sets {
            c.args(["--set", s]);
        }
        c.current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
    };
    let denied = query(&[]);
    assert!(!denied.status.success(), "a query without the token was answered");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("unauthorized"), "{:?}", denied);
    let answered = query(&[&set]);
    assert!(answered.status.success(), "{}", String::from_utf8_lossy(&answered.stderr));
    assert!(String::from_utf8_lossy(&answered.stdout).lines().count() > 0);
}

/// With `http.tls.cert` and `http.tls.key` the server speaks HTTPS only; a client that trusts
/// the CA (`http.tls.ca`) is answered, plain HTTP is not.
#[test]
fn tls_serves_https_only() {
    let dir = temp_dir("http-tls");
    let ok = |c: &mut Command| {
        let o = c.current_dir(&dir).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    ok(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=streamc test CA",
    ]));
    ok(Command::new("openssl").args([
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]));
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    ok(Command::new("openssl").args([
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]));
    let sets = [
        format!("http.tls.cert={}", dir.join("server.pem").display()),
        format!("http.tls.key={}", dir.join("server.key").display()),
    ];
    let (mut run, port) = start(&dir, None, &sets);
    let log = run.1.clone();
    wait_for(60, "the server", &mut run, || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("serving metrics on https://")
    });

    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&ca)
        .filter_map(|i| match i.unwrap() {
            ureq::tls::PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&roots)).build();
    let agent: ureq::Agent = ureq::Agent::config_builder().tls_config(tls).build().into();
    let mut healthy = None;
    wait_for(60, "/healthz over HTTPS", &mut run, || {
        healthy = agent.get(&format!("https://127.0.0.1:{port}/healthz")).call().ok();
        healthy.is_some()
    });
    let mut r = healthy.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.body_mut().read_to_string().unwrap(), "ok\n");
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let plain = get(port, "/healthz", "");
    assert!(!plain.starts_with("HTTP/1.1 200"), "{plain}");
    // A client that does not trust the CA is refused by its own TLS.
    assert!(ureq::get(&format!("https://127.0.0.1:{port}/healthz")).call().is_err());

    let state = dir.join("state");
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&state)
        .args(["query", "examples/stats.stream", "stock_stats-aggregate", "--set"])
        .arg(format!("http.tls.ca={}", dir.join("ca.pem").display()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
