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
    let o = streamc_output(&state, &["consume", &topic, "--from-beginning"]);
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
    let o = streamc_output(&state, &["consume", &format!("{topic}-totals"), "--from-beginning"]);
    assert!(String::from_utf8_lossy(&o.stdout).trim().is_empty(), "nothing was written");
    let o = streamc_output(&state, &["consume", "app-dlq", "--from-beginning", "--headers"]);
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
    let o = streamc_output(&state, &["consume", "app-dlq", "--from-beginning"]);
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
