//! Tests against a real Kafka broker. Each is `#[ignore]`d so that a plain `cargo test` lists it
//! as not run; `./dev/test` starts a broker and runs this binary with `--ignored`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// ApiVersions v0 by hand over a plain TCP connection: proves a real broker answers at
/// `STREAMC_KAFKA_BOOTSTRAP` without any Kafka client library.
#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn broker_answers_api_versions() {
    let addr = common::kafka::require();
    let mut conn = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    conn.set_write_timeout(Some(Duration::from_secs(10))).unwrap();

    // Request header v1: api_key, api_version, correlation_id, client_id; ApiVersions v0 has
    // an empty body.
    const API_VERSIONS: i16 = 18;
    let correlation_id: i32 = 0x5eed;
    let client_id = b"streamc-test";
    let mut request = Vec::new();
    request.extend_from_slice(&API_VERSIONS.to_be_bytes());
    request.extend_from_slice(&0i16.to_be_bytes());
    request.extend_from_slice(&correlation_id.to_be_bytes());
    request.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    request.extend_from_slice(client_id);
    let mut frame = (request.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&request);
    conn.write_all(&frame).unwrap();

    let mut size = [0u8; 4];
    conn.read_exact(&mut size).unwrap();
    let size = i32::from_be_bytes(size);
    assert!((10..1 << 20).contains(&size), "implausible response size {size}");
    let mut body = vec![0u8; size as usize];
    conn.read_exact(&mut body).unwrap();

    // Response header v0: correlation_id. Body v0: error_code, then an array of
    // (api_key, min_version, max_version).
    let mut r = Reader(&body);
    assert_eq!(r.i32(), correlation_id, "correlation id");
    assert_eq!(r.i16(), 0, "ApiVersions error code");
    let count = r.i32();
    assert!(count > 0, "no API versions in the response");
    let mut apis = Vec::new();
    for _ in 0..count {
        let (key, min, max) = (r.i16(), r.i16(), r.i16());
        assert!((0..=max).contains(&min), "api {key}: versions {min}..={max}");
        apis.push((key, min, max));
    }
    assert!(r.0.is_empty(), "{} trailing bytes in the response", r.0.len());
    for (key, name) in
        [(0, "Produce"), (1, "Fetch"), (3, "Metadata"), (19, "CreateTopics"), (API_VERSIONS, "ApiVersions")]
    {
        assert!(apis.iter().any(|&(k, _, _)| k == key), "the broker does not offer {name} (api key {key})");
    }
    let (_, min, max) = *apis.iter().find(|&&(k, _, _)| k == API_VERSIONS).unwrap();
    assert!(min == 0 && max >= 3, "ApiVersions versions {min}..={max}");
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        assert!(self.0.len() >= N, "response truncated");
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().unwrap()
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }
}

/// Run the streamc binary; panics with its stderr on failure.
fn streamc(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_streamc")).args(args).output().unwrap();
    assert!(out.status.success(), "streamc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `produce` and `consume` against the broker give exactly what they give on the embedded log:
/// the same partitions (murmur2 of the key), offsets, keys, values and timestamps.
#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn produce_and_consume_match_the_embedded_log() {
    let addr = common::kafka::require();
    let dir = common::embedded::temp_dir("kafka-produce");
    let input = dir.join("trades.jsonl");
    common::embedded::write_trades(&input, 3_000, 37, 4, 200);
    // A topic name of its own, so that reruns against one broker do not mix.
    let topic = format!("stocks-{}", std::process::id());
    let program = dir.join("stats.stream");
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/stats.stream")).unwrap();
    std::fs::write(&program, src.replace("\"stocks\"", &format!("\"{topic}\""))).unwrap();
    let (input, program, state) = (input.to_str().unwrap(), program.to_str().unwrap(), dir.join("state"));
    let state = state.to_str().unwrap();

    streamc(&["--state-dir", state, "produce", &topic, input, "--program", program, "--partitions", "3"]);
    streamc(&["produce", &topic, input, "--program", program, "--partitions", "3", "--bootstrap-servers", &addr]);
    let embedded =
        streamc(&["--state-dir", state, "consume", &topic, "--exit-at-end", "--from-beginning", "--headers"]);
    let kafka =
        streamc(&["consume", &topic, "--exit-at-end", "--from-beginning", "--headers", "--bootstrap-servers", &addr]);
    assert_eq!(embedded.lines().count(), 3_000);
    let partitions: std::collections::BTreeSet<u64> = kafka
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["partition"].as_u64().unwrap())
        .collect();
    assert_eq!(partitions.len(), 3, "keys spread over the 3 partitions");
    assert!(embedded == kafka, "the broker's records differ from the embedded log's");

    // Without --from-beginning, consume starts at the end: nothing new, nothing printed.
    assert_eq!(streamc(&["consume", &topic, "--exit-at-end", "--bootstrap-servers", &addr]), "");
}

/// A record the broker refuses (here: a timestamp further ahead than the topic allows) makes
/// `streamc produce` fail with the broker's reason and how many were refused, instead of
/// reporting them produced.
#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn produce_reports_records_the_broker_refuses() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    let addr = common::kafka::require();
    let topic = format!("refuse{}.t", std::process::id());
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &addr).create().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(1)).set("message.timestamp.after.max.ms", "60000");
    for r in rt.block_on(admin.create_topics(&[new], &AdminOptions::new())).unwrap() {
        r.unwrap();
    }
    let dir = common::embedded::temp_dir("refuse");
    let input = dir.join("in.jsonl");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let ahead = now + 365 * 24 * 3600 * 1000;
    std::fs::write(
        &input,
        format!(
            "{{\"key\":\"a\",\"value\":{{\"x\":1}},\"timestamp\":{now}}}\n{{\"key\":\"b\",\"value\":{{\"x\":2}},\"timestamp\":{ahead}}}\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::cli::bin())
        .args(["produce", &topic, input.to_str().unwrap(), "--envelope", "--bootstrap-servers", &addr])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "produce reported success: {err}");
    // The broker refuses a whole batch: the good record may be refused with the bad one.
    assert!(err.contains("of 2 records of this batch were refused") && err.contains("InvalidTimestamp"), "{err}");
}
