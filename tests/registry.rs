//! Avro through a real schema registry (the one `./dev/test` starts: dev/registry/registry), on
//! the embedded default: schema evolution on read, a sink schema the subject's rules refuse (at
//! `check`, and at `run` before anything is written), and a registry that is down (the run
//! stops; run again once it is back, nothing is lost). `#[ignore]`d: a plain `cargo test` lists
//! them as not run.

mod common;

use std::path::Path;

use common::cli::{consume, streamc, streamc_output};
use common::embedded::temp_dir;

fn registry() -> String {
    std::env::var("STREAMC_REGISTRY_URL").unwrap_or_else(|_| {
        panic!("this test needs a schema registry: run ./dev/test, or `eval \"$(dev/registry/registry start)\"`")
    })
}

/// `curl` against the registry: (HTTP status, body).
fn curl(method: &str, url: &str, body: Option<&str>) -> (u16, String) {
    let mut c = std::process::Command::new("curl");
    c.args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", method, url]);
    c.args(["-H", "Content-Type: application/vnd.schemaregistry.v1+json"]);
    if let Some(b) = body {
        c.args(["--data", b]);
    }
    let o = c.output().expect("curl runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// A unique topic name per test run (the registry's subjects outlive a state directory).
fn unique(name: &str) -> String {
    format!("{name}{}", std::process::id())
}

#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn records_of_older_and_newer_writer_schemas_are_read_into_the_declared_fields() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-evolution");
    let state = dir.join("state");
    let topic = unique("payments");
    // v1 wrote `amount` as an int and had no `note`; v2 (the program's) reads a float and an
    // optional note; v3 writes an extra field the program does not declare.
    let v1 = write(
        &dir,
        "v1.stream",
        &format!("stream p from \"{topic}\" {{\n  key id\n  value avro {{ id: string, amount: int }}\n}}\n"),
    );
    let v3 = write(
        &dir,
        "v3.stream",
        &format!("stream p from \"{topic}\" {{\n  key id\n  value avro {{ id: string, amount: float, note: string?, extra: int }}\n}}\n"),
    );
    let app = write(
        &dir,
        "app.stream",
        &format!(
            "stream p from \"{topic}\" {{\n  key id\n  value avro {{ id: string, amount: float, note: string? }}\n}}\n\
             query out {{\n  from p\n  select {{ id, amount, note }}\n  to \"{topic}-out\"\n}}\n"
        ),
    );
    let lines = |recs: &[&str]| recs.iter().map(|r| format!("{r}\n")).collect::<String>();
    let f1 = write(&dir, "v1.jsonl", &lines(&[r#"{"id": "a", "amount": 3}"#, r#"{"id": "b", "amount": -7}"#]));
    let f2 = write(
        &dir,
        "v2.jsonl",
        &lines(&[r#"{"id": "c", "amount": 2.5, "note": "hi"}"#, r#"{"id": "d", "amount": 1}"#]),
    );
    let f3 = write(&dir, "v3.jsonl", &lines(&[r#"{"id": "e", "amount": 9.25, "note": null, "extra": 1}"#]));
    streamc(&state, &["produce", &topic, &f1, "--program", &v1, "--set", &reg]);
    streamc(&state, &["produce", &topic, &f2, "--program", &app, "--set", &reg]);
    streamc(&state, &["produce", &topic, &f3, "--program", &v3, "--set", &reg]);
    // Three writer schemas under one subject.
    let (code, versions) = curl("GET", &format!("{url}/subjects/{topic}-value/versions"), None);
    assert_eq!(code, 200, "{versions}");
    assert_eq!(serde_json::from_str::<Vec<i64>>(&versions).unwrap().len(), 3, "{versions}");
    streamc(&state, &["run", &app, "--drain", "--set", &reg]);
    let got: Vec<(String, serde_json::Value)> =
        consume(&state, &format!("{topic}-out"), &[]).into_iter().map(|r| (r.key.to_string(), r.value)).collect();
    let want: Vec<(String, serde_json::Value)> = [
        ("a", serde_json::json!({"id": "a", "amount": 3.0, "note": null})),
        ("b", serde_json::json!({"id": "b", "amount": -7.0, "note": null})),
        ("c", serde_json::json!({"id": "c", "amount": 2.5, "note": "hi"})),
        ("d", serde_json::json!({"id": "d", "amount": 1.0, "note": null})),
        ("e", serde_json::json!({"id": "e", "amount": 9.25, "note": null})),
    ]
    .into_iter()
    .map(|(k, v)| (format!("\"{k}\""), v))
    .collect();
    assert_eq!(got, want);
}

#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn a_sink_schema_its_subject_refuses_is_reported_by_check_and_stops_run_before_any_output() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-refused");
    let state = dir.join("state");
    let topic = unique("totals");
    // The subject holds a schema whose `n` is a string, and requires backward compatibility.
    // (Named as streamc names the record of a topic: the topic's letters and digits.)
    let old = format!(
        r#"{{"type":"record","name":"{topic}","fields":[{{"name":"k","type":"string"}},{{"name":"n","type":"string"}}]}}"#
    );
    let body = serde_json::json!({ "schema": old }).to_string();
    let (code, text) = curl("POST", &format!("{url}/subjects/{topic}-value/versions"), Some(&body));
    assert_eq!(code, 200, "{text}");
    let (code, text) = curl("PUT", &format!("{url}/config/{topic}-value"), Some(r#"{"compatibility":"BACKWARD"}"#));
    assert_eq!(code, 200, "{text}");
    let src = unique("events");
    let prog = write(
        &dir,
        "app.stream",
        &format!(
            "stream e from \"{src}\" {{\n  key k\n  value json {{ k: string }}\n}}\n\
             query q {{\n  from e\n  group by k\n  aggregate {{ n = count() }}\n  to \"{topic}\" avro\n}}\n"
        ),
    );
    let o = streamc_output(&state, &["check", &prog, "--set", &reg]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains(&format!("avro sink `{topic}`: its schema is not compatible with `{topic}-value` version 1")),
        "{err}"
    );
    // A compatible program (n as a string again) checks.
    let ok = write(
        &dir,
        "ok.stream",
        &std::fs::read_to_string(&prog)
            .unwrap()
            .replace("aggregate { n = count() }", "aggregate { c = count() }\n  select { k, n = to_string(c) }"),
    );
    let o = streamc_output(&state, &["check", &ok, "--set", &reg]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("compatible with `{topic}-value` version 1")));

    let input = write(&dir, "in.jsonl", "{\"k\": \"x\"}\n");
    streamc(&state, &["produce", &src, &input, "--program", &prog]);
    let o = streamc_output(&state, &["run", &prog, "--drain", "--set", &reg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&format!("cannot register the schema of `{topic}` under `{topic}-value`")), "{err}");
    assert!(err.contains("409"), "the registry's answer: {err}");
    let o = streamc_output(&state, &["consume", &topic, "--exit-at-end", "--from-beginning"]);
    assert!(String::from_utf8_lossy(&o.stdout).trim().is_empty(), "nothing was written");
}

#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn a_registry_that_is_down_stops_the_run_and_the_next_run_loses_nothing() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-down");
    let state = dir.join("state");
    let topic = unique("clicks");
    let prog = write(
        &dir,
        "app.stream",
        &format!(
            "stream c from \"{topic}\" {{\n  key user\n  value avro {{ user: string, n: int }}\n}}\n\
             query per_user {{\n  from c\n  group by user\n  aggregate {{ total = sum(n) }}\n  to \"{topic}-totals\"\n}}\n"
        ),
    );
    let lines: String = (0..200).map(|i| format!("{{\"user\": \"u{}\", \"n\": {i}}}\n", i % 7)).collect();
    let input = write(&dir, "in.jsonl", &lines);
    streamc(&state, &["produce", &topic, &input, "--program", &prog, "--set", &reg]);
    // No registry where the configuration says: the writer schema cannot be read.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = streamc_output(
        &state,
        &["run", &prog, "--drain", "--set", &format!("schema.registry.url=http://127.0.0.1:{dead}")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("cannot read schema id") && err.contains("cannot be reached"), "{err}");
    let o = streamc_output(&state, &["consume", &format!("{topic}-totals"), "--exit-at-end", "--from-beginning"]);
    assert!(String::from_utf8_lossy(&o.stdout).trim().is_empty(), "nothing was written");
    let o = streamc_output(&state, &["consume", "app-dlq", "--exit-at-end", "--from-beginning", "--headers"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).trim().is_empty(),
        "no record was dead-lettered for the registry's absence"
    );
    // Back: every record counts, once.
    streamc(&state, &["run", &prog, "--drain", "--set", &reg]);
    let mut want = std::collections::BTreeMap::new();
    for i in 0..200i64 {
        *want.entry(format!("u{}", i % 7)).or_insert(0i64) += i;
    }
    let mut got = std::collections::BTreeMap::new();
    for r in consume(&state, &format!("{topic}-totals"), &[]) {
        got.insert(r.key.as_str().unwrap().to_string(), r.value["total"].as_i64().unwrap());
    }
    assert_eq!(got, want);
}

/// A table of avro values, joined by a stream: its rows are kept in the task's store as they came
/// (Avro bytes), so a later run, restoring them, reads their writer schemas too.
#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn avro_rows_restored_into_a_join_store_are_read_by_the_next_run() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-restored");
    let state = dir.join("state");
    let (prices, sales) = (unique("prices"), unique("sales"));
    let prog = write(
        &dir,
        "app.stream",
        &format!(
            "table prices from \"{prices}\" {{\n  key sku\n  value avro {{ sku: string, price: float }}\n}}\n\
             stream sales from \"{sales}\" {{\n  key sku\n  value json {{ sku: string, n: int }}\n}}\n\
             query q {{\n  from sales\n  join prices on sku\n  select {{ sku, total = prices.price * to_float(n) }}\n  to \"{sales}-out\"\n}}\n"
        ),
    );
    let p = write(&dir, "prices.jsonl", "{\"sku\": \"a\", \"price\": 1.5}\n{\"sku\": \"b\", \"price\": 4.0}\n");
    let s1 = write(&dir, "s1.jsonl", "{\"sku\": \"a\", \"n\": 2}\n");
    let s2 = write(&dir, "s2.jsonl", "{\"sku\": \"b\", \"n\": 3}\n{\"sku\": \"a\", \"n\": 10}\n");
    streamc(&state, &["produce", &prices, &p, "--program", &prog, "--set", &reg]);
    streamc(&state, &["produce", &sales, &s1, "--program", &prog]);
    streamc(&state, &["run", &prog, "--drain", "--set", &reg]);
    // A new process: the table's rows come from its store, not from the topic.
    streamc(&state, &["produce", &sales, &s2, "--program", &prog]);
    streamc(&state, &["run", &prog, "--drain", "--set", &reg]);
    let got: Vec<(String, f64)> = consume(&state, &format!("{sales}-out"), &[])
        .into_iter()
        .map(|r| (r.value["sku"].as_str().unwrap().to_string(), r.value["total"].as_f64().unwrap()))
        .collect();
    assert_eq!(got, vec![("a".to_string(), 3.0), ("b".to_string(), 12.0), ("a".to_string(), 15.0)]);
    let o = streamc_output(&state, &["consume", "app-dlq", "--exit-at-end", "--from-beginning"]);
    assert!(String::from_utf8_lossy(&o.stdout).trim().is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `value avro` without fields (ksqlDB's inferred columns): `check`, `explain` and `run` take
/// them from the registry's latest schema of `<topic>-value`; the program is checked against
/// them (a field the schema lacks is a spanned error), and the run reads the records.
#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn a_value_schema_is_taken_from_the_registry_when_the_program_declares_none() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-inferred");
    let state = dir.join("state");
    let topic = unique("orders");
    // A producer's schema, registered by producing with a program that declares it.
    let writer = write(
        &dir,
        "writer.stream",
        &format!(
            "stream o from \"{topic}\" {{\n  key id\n  value avro {{ id: string, amount: float, note: string?, tags: list<string>, at: timestamp }}\n  time at\n}}\n"
        ),
    );
    let input = write(
        &dir,
        "in.jsonl",
        "{\"id\": \"a\", \"amount\": 2.5, \"note\": \"x\", \"tags\": [\"t\"], \"at\": 1000}\n\
         {\"id\": \"b\", \"amount\": 4, \"note\": null, \"tags\": [], \"at\": 2000}\n",
    );
    streamc(&state, &["produce", &topic, &input, "--program", &writer, "--set", &reg]);
    let app = write(
        &dir,
        "app.stream",
        &format!(
            "stream o from \"{topic}\" {{\n  key id\n  value avro\n  time at\n}}\n\
             query big {{\n  from o\n  where amount > 3\n  select {{ id, amount, tags }}\n  to \"{topic}-big\"\n}}\n"
        ),
    );
    let o = streamc_output(&state, &["check", &app, "--set", &reg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&format!("the fields of subject `{topic}-value` version 1")), "{err}");
    let o = streamc_output(&state, &["explain", &app, "--set", &reg]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    streamc(&state, &["run", &app, "--drain", "--set", &reg]);
    let got: Vec<serde_json::Value> =
        consume(&state, &format!("{topic}-big"), &[]).into_iter().map(|r| r.value).collect();
    assert_eq!(got, vec![serde_json::json!({"id": "b", "amount": 4.0, "tags": []})]);
    // `produce --program` refuses to write the topic with a schema derived from those fields.
    let o = streamc_output(&state, &["produce", &topic, &input, "--program", &app, "--set", &reg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("takes its fields from the schema registry"), "{err}");
    // The producers' subject gains a version (an optional field more): a restart of the same
    // file runs with the fields it recorded, and reads the new records.
    let writer2 = write(
        &dir,
        "writer2.stream",
        &std::fs::read_to_string(&writer).unwrap().replace("at: timestamp }", "at: timestamp, region: string? }"),
    );
    let input2 = write(
        &dir,
        "in2.jsonl",
        "{\"id\": \"c\", \"amount\": 9, \"note\": null, \"tags\": [\"u\"], \"at\": 3000, \"region\": \"eu\"}\n",
    );
    streamc(&state, &["produce", &topic, &input2, "--program", &writer2, "--set", &reg]);
    let err = streamc(&state, &["run", &app, "--drain", "--set", &reg]);
    assert!(err.contains("the fields `app` took from the registry when it first ran this file"), "{err}");
    let got: Vec<serde_json::Value> =
        consume(&state, &format!("{topic}-big"), &[]).into_iter().map(|r| r.value).collect();
    assert_eq!(
        got,
        vec![
            serde_json::json!({"id": "b", "amount": 4.0, "tags": []}),
            serde_json::json!({"id": "c", "amount": 9.0, "tags": ["u"]})
        ]
    );
    // A field the registry's schema does not have: an error at its use.
    let bad = write(
        &dir,
        "bad.stream",
        &std::fs::read_to_string(&app).unwrap().replace("select { id, amount, tags }", "select { id, price }"),
    );
    let o = streamc_output(&state, &["check", &bad, "--set", &reg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("`price`"), "{err}");
    // A topic whose subject the registry does not have, and no registry at all.
    let none = write(
        &dir,
        "none.stream",
        &std::fs::read_to_string(&app).unwrap().replace(&format!("\"{topic}\""), "\"nosuchtopic\""),
    );
    let o = streamc_output(&state, &["check", &none, "--set", &reg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("has no subject `nosuchtopic-value`") && err.contains("value avro"), "{err}");
    let o = streamc_output(&state, &["check", &app]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no registry is configured"), "{err}");
}

/// The test's own Protobuf writer (not the crate's): a field key, a varint, a length-delimited
/// field.
mod pb {
    pub fn uvarint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    pub fn varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
        uvarint(out, field << 3);
        uvarint(out, v);
    }
    pub fn bytes_field(out: &mut Vec<u8>, field: u64, body: &[u8]) {
        uvarint(out, field << 3 | 2);
        uvarint(out, body.len() as u64);
        out.extend_from_slice(body);
    }
    /// Confluent's framing: magic 0, the schema id, the message indexes (`[0]`: one byte 0).
    pub fn framed(id: u32, indexes: &[u8], body: &[u8]) -> Vec<u8> {
        let mut b = vec![0];
        b.extend_from_slice(&id.to_be_bytes());
        b.extend_from_slice(indexes);
        b.extend_from_slice(body);
        b
    }
}

/// Register a `.proto` text under `subject`: its id.
fn register_proto(url: &str, subject: &str, text: &str) -> u32 {
    let body = serde_json::json!({ "schema": text, "schemaType": "PROTOBUF" }).to_string();
    let (code, answer) = curl("POST", &format!("{url}/subjects/{subject}/versions"), Some(&body));
    assert_eq!(code, 200, "{answer}");
    serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"].as_u64().unwrap() as u32
}

/// Append records as a producer wrote them (raw bytes) to the embedded log of `state`.
fn append_raw(state: &Path, topic: &str, records: Vec<(&str, Vec<u8>)>) {
    append_keyed(state, topic, 1_000, records.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect());
}

/// Append records of raw keys and values, with timestamps from `t0` on, to the embedded log.
fn append_keyed(state: &Path, topic: &str, t0: i64, records: Vec<(Vec<u8>, Vec<u8>)>) {
    use streamc::log::EmbeddedLog;
    use streamc::record::{Append, Record};
    let log = EmbeddedLog::open(state, false).unwrap();
    log.ensure_topic(topic, 1).unwrap();
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| Record { key: Some(k), value: Some(v), timestamp: t0 + i as i64, headers: vec![] })
        .collect();
    log.commit(vec![Append::of(topic, 0, &records)], vec![]).unwrap();
}

/// Register an Avro schema (its JSON text) under `subject`: its id.
fn register_avro(url: &str, subject: &str, text: &str) -> u32 {
    let body = serde_json::json!({ "schema": text }).to_string();
    let (code, answer) = curl("POST", &format!("{url}/subjects/{subject}/versions"), Some(&body));
    assert_eq!(code, 200, "{answer}");
    serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"].as_u64().unwrap() as u32
}

/// The raw keys of a topic of the embedded log.
fn raw_keys(state: &Path, topic: &str) -> Vec<Vec<u8>> {
    use streamc::log::EmbeddedLog;
    use streamc::record::Pos;
    let log = EmbeddedLog::open(state, false).unwrap();
    let end = log.committed().unwrap().end(topic, 0);
    let mut r = log.reader(topic, 0, Pos::default());
    r.read(end, usize::MAX).unwrap().into_iter().filter_map(|s| s.record.key).collect()
}

/// The latest schema id of `subject`, and its schema text.
fn latest(url: &str, subject: &str) -> (u32, String) {
    let (code, answer) = curl("GET", &format!("{url}/subjects/{subject}/versions/latest"), None);
    assert_eq!(code, 200, "{answer}");
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    (v["id"].as_u64().unwrap() as u32, v["schema"].as_str().unwrap().to_string())
}

/// The raw values of a topic of the embedded log.
fn raw_values(state: &Path, topic: &str) -> Vec<Vec<u8>> {
    use streamc::log::EmbeddedLog;
    use streamc::record::Pos;
    let log = EmbeddedLog::open(state, false).unwrap();
    let end = log.committed().unwrap().end(topic, 0);
    let mut r = log.reader(topic, 0, Pos::default());
    r.read(end, usize::MAX).unwrap().into_iter().filter_map(|s| s.record.value).collect()
}

/// Protobuf as producers write it: a `.proto` of their own (a package, an enum, sint32, a
/// Timestamp, a wrapper, an int-keyed map, a oneof, a nested message) registered under
/// `<topic>-value`, and messages encoded here byte by byte. `value protobuf` without fields takes
/// the subject's latest version (v2 added a field); records of v1 read that field as its
/// default; a record with message indexes its schema lacks and a truncated message are dead
/// letters; a protobuf sink's bytes are Protobuf's encoding of the derived proto3 schema.
#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn protobuf_records_of_a_producer_schema_are_read_into_the_fields_the_registry_gives() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-protobuf");
    let state = dir.join("state");
    let topic = unique("pborders");
    let v1 = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
enum Side { BUY = 0; SELL = 1; }
message Order {
  string id = 1;
  sint32 qty = 2;
  Side side = 3;
  google.protobuf.Timestamp at = 4;
  google.protobuf.StringValue note = 5;
  map<int32, string> tags = 6;
  oneof choice { string a = 7; int64 b = 8; }
  Inner inner = 9;
  message Inner { float f = 1; }
}
"#;
    let id1 = register_proto(&url, &format!("{topic}-value"), v1);
    let v2 = v1.replace("  Inner inner = 9;\n", "  Inner inner = 9;\n  uint32 extra = 10;\n");
    // o1: every field set; o2: defaults, the oneof's string, no note or inner.
    let mut o1 = Vec::new();
    pb::bytes_field(&mut o1, 1, b"o1");
    pb::varint_field(&mut o1, 2, 5); // zig-zag of -3
    pb::varint_field(&mut o1, 3, 1);
    let mut at = Vec::new();
    pb::varint_field(&mut at, 1, 1_700_000_000);
    pb::varint_field(&mut at, 2, 123_000_000);
    pb::bytes_field(&mut o1, 4, &at);
    let mut note = Vec::new();
    pb::bytes_field(&mut note, 1, b"hi");
    pb::bytes_field(&mut o1, 5, &note);
    let mut entry = Vec::new();
    pb::varint_field(&mut entry, 1, 7);
    pb::bytes_field(&mut entry, 2, b"x");
    pb::bytes_field(&mut o1, 6, &entry);
    pb::varint_field(&mut o1, 8, 5);
    let mut inner = vec![0x0d];
    inner.extend_from_slice(&0.5f32.to_le_bytes());
    pb::bytes_field(&mut o1, 9, &inner);
    let mut o2 = Vec::new();
    pb::bytes_field(&mut o2, 1, b"o2");
    pb::varint_field(&mut o2, 2, 8); // 4
    let mut at2 = Vec::new();
    pb::varint_field(&mut at2, 1, 1_700_000_001);
    pb::bytes_field(&mut o2, 4, &at2);
    pb::bytes_field(&mut o2, 7, b"z");
    let truncated = pb::framed(id1, &[0], &o1[..o1.len() - 3]);
    append_raw(
        &state,
        &topic,
        vec![
            ("o1", pb::framed(id1, &[0], &o1)),
            ("o2", pb::framed(id1, &[0], &o2)),
            ("bad-index", pb::framed(id1, &[2, 6], &o2)),
            ("truncated", truncated),
        ],
    );
    let id2 = register_proto(&url, &format!("{topic}-value"), &v2);
    let mut o3 = Vec::new();
    pb::bytes_field(&mut o3, 1, b"o3");
    pb::varint_field(&mut o3, 2, 2); // 1
    let mut at3 = Vec::new();
    pb::varint_field(&mut at3, 1, 1_700_000_002);
    pb::bytes_field(&mut o3, 4, &at3);
    pb::varint_field(&mut o3, 10, 9);
    append_raw(&state, &topic, vec![("o3", pb::framed(id2, &[0], &o3))]);

    let app = write(
        &dir,
        "app.stream",
        &format!(
            "stream o from \"{topic}\" {{\n  key id\n  value protobuf\n  time at\n}}\n\
             query flat {{\n  from o\n  select {{ id, side, qty, at, note, tags, a, b, f = inner.f, extra }}\n  to \"{topic}-flat\"\n}}\n\
             query slim {{\n  from o\n  select {{ id, side, qty }}\n  to \"{topic}-slim\" protobuf\n}}\n"
        ),
    );
    let o = streamc_output(&state, &["check", &app, "--set", &reg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("the fields of subject `{topic}-value` version 2: {{ id: string, qty: int, side: string, at: timestamp, note: string?, tags: map<int, string>, a: string?, b: int?, inner: {{ f: float }}?, extra: int }}")),
        "{err}"
    );
    let err = streamc(&state, &["run", &app, "--drain", "--set", &reg]);
    assert!(err.contains("4 dead letters"), "{err}");
    let got: Vec<(String, serde_json::Value)> =
        consume(&state, &format!("{topic}-flat"), &[]).into_iter().map(|r| (r.key.to_string(), r.value)).collect();
    let row = |id: &str,
               side: &str,
               qty: i64,
               at: i64,
               note: serde_json::Value,
               tags: serde_json::Value,
               a,
               b,
               f,
               extra: i64| {
        (
            format!("\"{id}\""),
            serde_json::json!({"id": id, "side": side, "qty": qty, "at": at, "note": note, "tags": tags,
                               "a": a, "b": b, "f": f, "extra": extra}),
        )
    };
    use serde_json::{json, Value::Null};
    assert_eq!(
        got,
        vec![
            row("o1", "SELL", -3, 1_700_000_000_123, json!("hi"), json!({"7": "x"}), Null, json!(5), json!(0.5), 0),
            row("o2", "BUY", 4, 1_700_000_001_000, Null, json!({}), json!("z"), Null, Null, 0),
            row("o3", "BUY", 1, 1_700_000_002_000, Null, json!({}), Null, Null, Null, 9),
        ]
    );
    // The dead letters name their reasons.
    let o = streamc_output(&state, &["consume", "app-dlq", "--exit-at-end", "--from-beginning", "--headers"]);
    let reasons: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("bad-index") && r.contains("no message at indexes [3]")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("truncated") && r.contains("not a Protobuf message")), "{reasons:?}");
    // The sink's schema is the derived proto3 file; its records are that schema's encoding.
    let (code, latest) = curl("GET", &format!("{url}/subjects/{topic}-slim-value/versions/latest"), None);
    assert_eq!(code, 200, "{latest}");
    let latest: serde_json::Value = serde_json::from_str(&latest).unwrap();
    assert_eq!(latest["schemaType"], "PROTOBUF", "{latest}");
    assert_eq!(
        latest["schema"],
        format!(
            "syntax = \"proto3\";\n\nmessage {}_slim {{\n  string id = 1;\n  string side = 2;\n  int64 qty = 3;\n}}\n",
            topic
        )
    );
    let out_id = latest["id"].as_u64().unwrap() as u32;
    let slim = |id: &str, side: &str, qty: i64| {
        let mut m = Vec::new();
        pb::bytes_field(&mut m, 1, id.as_bytes());
        if !side.is_empty() {
            pb::bytes_field(&mut m, 2, side.as_bytes());
        }
        pb::varint_field(&mut m, 3, qty as u64);
        pb::framed(out_id, &[0], &m)
    };
    assert_eq!(
        raw_values(&state, &format!("{topic}-slim")),
        vec![slim("o1", "SELL", -3), slim("o2", "BUY", 4), slim("o3", "BUY", 1)]
    );
}

/// An Avro string or bytes datum: its zig-zag length, then the bytes.
fn avro_str(out: &mut Vec<u8>, s: &str) {
    pb::uvarint(out, (s.len() as u64) << 1);
    out.extend_from_slice(s.as_bytes());
}

/// Keys in the Confluent wire format (`key … avro`, `key … protobuf`), as producers write them
/// (encoded here by hand): Avro string keys of a stream joined by key to a text-keyed table
/// (repartitioned by the key's text first), a table whose Avro keys are records of one field,
/// Protobuf key messages of a stream aggregated by its key. A text key on an Avro-keyed source
/// and a key that differs from its field are dead letters; a join with a wire-keyed table is
/// refused. `produce
/// --program` writes a source's keys in its format, with the schema registered under
/// `<topic>-key`, and a run reads them back.
#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn keys_in_the_wire_format_are_read_as_the_declared_keys() {
    let url = registry();
    let reg = format!("schema.registry.url={url}");
    let dir = temp_dir("registry-keys");
    let state = dir.join("state");
    let (orders, customers, clicks) = (unique("korders"), unique("kcustomers"), unique("kclicks"));
    let accounts = unique("kaccounts");
    let string_key = register_avro(&url, &format!("{orders}-key"), r#""string""#);
    let order_value = register_avro(
        &url,
        &format!("{orders}-value"),
        r#"{"type": "record", "name": "Order", "fields": [{"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}]}"#,
    );
    let account_key = register_avro(
        &url,
        &format!("{accounts}-key"),
        r#"{"type": "record", "name": "CustomerKey", "fields": [{"name": "id", "type": "string"}]}"#,
    );
    let click_key =
        register_proto(&url, &format!("{clicks}-key"), "syntax = \"proto3\";\nmessage ClickKey { string user = 1; }\n");
    let avro_key = |id: u32, s: &str| {
        let mut b = Vec::new();
        avro_str(&mut b, s);
        pb::framed(id, &[], &b)
    };
    let order = |customer: &str, amount: f64| {
        let mut b = Vec::new();
        avro_str(&mut b, customer);
        b.extend_from_slice(&amount.to_le_bytes());
        pb::framed(order_value, &[], &b)
    };
    let click_key_of = |user: &str| {
        let mut m = Vec::new();
        pb::bytes_field(&mut m, 1, user.as_bytes());
        pb::framed(click_key, &[0], &m)
    };
    append_keyed(
        &state,
        &customers,
        1,
        vec![(b"ann".to_vec(), br#"{"tier": "gold"}"#.to_vec()), (b"bob".to_vec(), br#"{"tier": "silver"}"#.to_vec())],
    );
    append_keyed(
        &state,
        &accounts,
        1,
        vec![
            (avro_key(account_key, "ann"), br#"{"region": "eu"}"#.to_vec()),
            (avro_key(account_key, "bob"), br#"{"region": "us"}"#.to_vec()),
        ],
    );
    append_keyed(
        &state,
        &orders,
        10,
        vec![
            (avro_key(string_key, "ann"), order("ann", 10.0)),
            (avro_key(string_key, "bob"), order("bob", 5.5)),
            (b"ann".to_vec(), order("ann", 1.0)),
            (avro_key(string_key, "bob"), order("ann", 3.0)),
            (avro_key(string_key, "ann"), order("ann", 2.5)),
        ],
    );
    append_keyed(
        &state,
        &clicks,
        10,
        vec![
            (click_key_of("u1"), br#"{"user": "u1", "n": 2}"#.to_vec()),
            (click_key_of("u2"), br#"{"user": "u2", "n": 1}"#.to_vec()),
            (click_key_of("u1"), br#"{"user": "u1", "n": 3}"#.to_vec()),
        ],
    );
    let app = write(
        &dir,
        "app.stream",
        &format!(
            "stream orders from \"{orders}\" {{\n  key customer avro\n  value avro {{ customer: string, amount: float }}\n}}\n\
             table customers from \"{customers}\" {{\n  key id: string\n  value json {{ tier: string }}\n}}\n\
             table accounts from \"{accounts}\" {{\n  key id: string avro\n  value json {{ region: string }}\n}}\n\
             query regions {{\n  from accounts\n  select {{ id, region }}\n  to \"{accounts}-regions\"\n}}\n\
             stream clicks from \"{clicks}\" {{\n  key user protobuf\n  value json {{ user: string, n: int }}\n}}\n\
             query enriched {{\n  from orders\n  join customers on customer\n  select {{ customer, amount, tier = customers.tier }}\n  to \"{orders}-enriched\"\n}}\n\
             query per_user {{\n  from clicks\n  group by user\n  aggregate {{ clicks = sum(n) }}\n  to \"{clicks}-per-user\"\n}}\n\
             query counts {{\n  from orders\n  group by customer\n  aggregate {{ n = count() }}\n  to \"{orders}-counts\" key avro\n}}\n\
             query users {{\n  from clicks\n  select {{ user, n }}\n  to \"{clicks}-users\" protobuf key protobuf\n}}\n"
        ),
    );
    let err = streamc(&state, &["run", &app, "--drain", "--set", &reg]);
    // (Two bad records, once per query that reads them.)
    assert!(err.contains("4 dead letters"), "{err}");
    let got = |topic: &str| -> Vec<(String, serde_json::Value)> {
        consume(&state, topic, &["--set", &reg]).into_iter().map(|r| (r.key.to_string(), r.value)).collect()
    };
    use serde_json::json;
    assert_eq!(
        got(&format!("{accounts}-regions")),
        vec![
            ("\"ann\"".into(), json!({"id": "ann", "region": "eu"})),
            ("\"bob\"".into(), json!({"id": "bob", "region": "us"})),
        ]
    );
    assert_eq!(
        got(&format!("{orders}-enriched")),
        vec![
            ("\"ann\"".into(), json!({"customer": "ann", "amount": 10.0, "tier": "gold"})),
            ("\"bob\"".into(), json!({"customer": "bob", "amount": 5.5, "tier": "silver"})),
            ("\"ann\"".into(), json!({"customer": "ann", "amount": 2.5, "tier": "gold"})),
        ]
    );
    // The last total per user (updates may be coalesced between commits): 2 + 3, and 1.
    let per_user: std::collections::BTreeMap<String, i64> =
        got(&format!("{clicks}-per-user")).into_iter().map(|(k, v)| (k, v["clicks"].as_i64().unwrap())).collect();
    assert_eq!(per_user, [("\"u1\"".to_string(), 5), ("\"u2\"".to_string(), 1)].into());
    let o = streamc_output(&state, &["consume", "app-dlq", "--exit-at-end", "--from-beginning", "--headers"]);
    let reasons = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(reasons.contains("bad key: not in the Avro wire format"), "{reasons}");
    assert!(reasons.contains("the record key `bob` differs from its `customer` field `ann`"), "{reasons}");
    // Sinks whose keys are in the wire format: a primitive Avro string under `<topic>-key`, and
    // a Protobuf message of one field `key`; consume prints them decoded.
    let (id, schema) = latest(&url, &format!("{orders}-counts-key"));
    assert_eq!(schema, "\"string\"");
    let keys = raw_keys(&state, &format!("{orders}-counts"));
    assert!(
        !keys.is_empty() && keys.iter().all(|k| *k == avro_key(id, "ann") || *k == avro_key(id, "bob")),
        "{keys:?}"
    );
    let counts: std::collections::BTreeMap<String, i64> =
        got(&format!("{orders}-counts")).into_iter().map(|(k, v)| (k, v["n"].as_i64().unwrap())).collect();
    assert_eq!(counts, [("\"ann\"".to_string(), 2), ("\"bob\"".to_string(), 1)].into());
    let (id, schema) = latest(&url, &format!("{clicks}-users-key"));
    assert!(schema.contains("string key = 1;"), "{schema}");
    let proto_key = |user: &str| {
        let mut m = Vec::new();
        pb::bytes_field(&mut m, 1, user.as_bytes());
        pb::framed(id, &[0], &m)
    };
    assert_eq!(raw_keys(&state, &format!("{clicks}-users")), vec![proto_key("u1"), proto_key("u2"), proto_key("u1")]);
    let users: Vec<serde_json::Value> =
        consume(&state, &format!("{clicks}-users"), &["--set", &reg]).into_iter().map(|r| r.key).collect();
    assert_eq!(users, vec![json!({"key": "u1"}), json!({"key": "u2"}), json!({"key": "u1"})]);

    // `produce --program` writes the keys in the source's format.
    let (porders, pclicks) = (unique("kporders"), unique("kpclicks"));
    let writer = write(
        &dir,
        "writer.stream",
        &format!(
            "stream orders from \"{porders}\" {{\n  key customer avro\n  value avro {{ customer: string, amount: float }}\n}}\n\
             stream clicks from \"{pclicks}\" {{\n  key user protobuf\n  value json {{ user: string, n: int }}\n}}\n"
        ),
    );
    let input = write(&dir, "orders.jsonl", "{\"customer\": \"ann\", \"amount\": 4}\n");
    streamc(&state, &["produce", &porders, &input, "--program", &writer, "--set", &reg]);
    let input = write(&dir, "clicks.jsonl", "{\"key\": \"u9\", \"value\": {\"user\": \"u9\", \"n\": 1}}\n");
    streamc(&state, &["produce", &pclicks, &input, "--envelope", "--program", &writer, "--set", &reg]);
    let (id, schema) = latest(&url, &format!("{porders}-key"));
    assert_eq!(schema, "\"string\"");
    assert_eq!(raw_keys(&state, &porders), vec![avro_key(id, "ann")]);
    let (id, schema) = latest(&url, &format!("{pclicks}-key"));
    assert!(schema.contains("string user = 1;"), "{schema}");
    let mut m = Vec::new();
    pb::bytes_field(&mut m, 1, b"u9");
    assert_eq!(raw_keys(&state, &pclicks), vec![pb::framed(id, &[0], &m)]);
}
