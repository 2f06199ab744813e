//! streamc against a secured Kafka listener, as managed clusters have: TLS with a private CA and
//! SASL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN). `dev/kafka/broker` starts the tests' broker with
//! a SASL_SSL listener beside the plaintext one, with a CA and a password made for the run, and
//! exports them (`STREAMC_KAFKA_SASL_SSL_BOOTSTRAP`, `STREAMC_KAFKA_CA`, `STREAMC_KAFKA_USER`,
//! `STREAMC_KAFKA_PASSWORD`).
//!
//! Every client setting goes through `--set kafka.<librdkafka property>`, as a user's would.

mod common;

use std::collections::BTreeMap;

use common::cli::{consume, streamc, streamc_fails, write_isolated};
use common::embedded::{temp_dir, trades_of, write_trades};
use common::kafka::require;

/// The secured listener's address and what a client needs for it: the CA file, the user and
/// its password.
struct Secured {
    bootstrap: String,
    ca: String,
    user: String,
    password: String,
}

fn secured() -> Secured {
    require();
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: the broker of dev/kafka/broker start exports it with its SASL_SSL listener")
        })
    };
    Secured {
        bootstrap: var("STREAMC_KAFKA_SASL_SSL_BOOTSTRAP"),
        ca: var("STREAMC_KAFKA_CA"),
        user: var("STREAMC_KAFKA_USER"),
        password: var("STREAMC_KAFKA_PASSWORD"),
    }
}

impl Secured {
    /// `--set` arguments for a client of the secured listener with `mechanism` and `password`.
    fn sets(&self, mechanism: &str, password: &str) -> Vec<String> {
        [
            format!("kafka.bootstrap.servers={}", self.bootstrap),
            "kafka.security.protocol=SASL_SSL".into(),
            format!("kafka.ssl.ca.location={}", self.ca),
            format!("kafka.sasl.mechanism={mechanism}"),
            format!("kafka.sasl.username={}", self.user),
            format!("kafka.sasl.password={password}"),
        ]
        .into_iter()
        .flat_map(|s| ["--set".to_string(), s])
        .collect()
    }
}

fn args<'a>(head: &[&'a str], sets: &'a [String]) -> Vec<&'a str> {
    let mut a = head.to_vec();
    a.extend(sets.iter().map(String::as_str));
    a
}

const PROGRAM: &str = r#"
stream trades from "trades" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}

query totals {
  from trades
  group by ticker
  aggregate {
    trades = count()
    volume = sum(size)
  }
  to "totals" json
}
"#;

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn a_program_runs_exactly_once_through_sasl_ssl() {
    let s = secured();
    let dir = temp_dir("kafka-sasl-ssl");
    let pfx = format!("sasl{}", std::process::id());
    let program = write_isolated(PROGRAM, &pfx, &dir.join("totals.stream"));
    let prog = program.to_str().unwrap();
    let input = dir.join("trades.jsonl");
    write_trades(&input, 3_000, 25, 7, 0);
    let sets = s.sets("SCRAM-SHA-512", &s.password);
    let state = dir.join("state");
    let topic = format!("{pfx}.trades");
    let app = format!("application.id={pfx}-app");

    streamc(
        &state,
        &args(&["produce", &topic, input.to_str().unwrap(), "--program", prog, "--partitions", "3"], &sets),
    );
    streamc(
        &state,
        &args(&["run", prog, "--drain", "--set", &app, "--set", "processing.guarantee=exactly_once"], &sets),
    );

    // The fold: per ticker, the trades and their volume.
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (ticker, size, _) in trades_of(&input) {
        let e = expected.entry(format!("\"{ticker}\"")).or_default();
        e.0 += 1;
        e.1 += size;
    }
    let out = format!("{pfx}.totals");
    let consume_args = args(&[], &sets);
    let records = consume(&state, &out, &consume_args);
    let mut last: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in &records {
        let v = (r.value["trades"].as_i64().unwrap(), r.value["volume"].as_i64().unwrap());
        last.insert(r.key.to_string(), v);
    }
    assert_eq!(last, expected, "{} records read through SASL_SSL", records.len());
    // The same committed records through the plaintext listener: the run wrote to this broker.
    let plain = consume(&state, &out, &["--bootstrap-servers", &require()]);
    assert_eq!(plain.len(), records.len());
}

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn every_sasl_mechanism_of_the_listener_produces_and_consumes() {
    let s = secured();
    let dir = temp_dir("kafka-sasl-mechanisms");
    let input = dir.join("lines.txt");
    std::fs::write(&input, "a\nb\nc\n").unwrap();
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
        let topic = format!("mech{}-{}", std::process::id(), mechanism.to_lowercase());
        let sets = s.sets(mechanism, &s.password);
        let state = dir.join(mechanism);
        streamc(&state, &args(&["produce", &topic, input.to_str().unwrap()], &sets));
        let got: Vec<String> = consume(&state, &topic, &args(&[], &sets))
            .into_iter()
            .map(|r| r.value.as_str().map(str::to_string).unwrap_or_else(|| r.value.to_string()))
            .collect();
        assert_eq!(got, ["a", "b", "c"], "{mechanism}");
    }
}

/// A refused login or handshake ends the command with the reason and what to check, instead of
/// librdkafka's endless retries (or a generic "cannot reach" after a timeout).
#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn a_wrong_password_or_an_untrusted_certificate_is_a_clear_error_at_start() {
    let s = secured();
    let dir = temp_dir("kafka-sasl-refused");
    let pfx = format!("refused{}", std::process::id());
    let program = write_isolated(PROGRAM, &pfx, &dir.join("totals.stream"));
    let prog = program.to_str().unwrap();
    let app = format!("application.id={pfx}-app");
    let state = dir.join("state");

    let wrong = s.sets("SCRAM-SHA-512", "not-the-password");
    let err = streamc_fails(&state, &args(&["run", prog, "--drain", "--set", &app], &wrong));
    assert!(err.contains("refused the SASL login"), "{err}");
    assert!(err.contains("kafka.sasl.password"), "{err}");
    assert!(!err.contains("not-the-password"), "the password must not be printed: {err}");

    // A CA that did not sign the broker's certificate.
    let other_ca = dir.join("other-ca.pem");
    let key = dir.join("other-ca.key");
    let ok = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=another CA"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&other_ca)
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let untrusted: Vec<String> = s
        .sets("SCRAM-SHA-512", &s.password)
        .into_iter()
        .map(|a| {
            if a.starts_with("kafka.ssl.ca.location=") {
                format!("kafka.ssl.ca.location={}", other_ca.display())
            } else {
                a
            }
        })
        .collect();
    let err = streamc_fails(&state, &args(&["run", prog, "--drain", "--set", &app], &untrusted));
    assert!(err.contains("failed the TLS handshake"), "{err}");
    assert!(err.contains("kafka.ssl.ca.location"), "{err}");
}
