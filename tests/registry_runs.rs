//! The corpus cases that need a schema registry (`registry: true` in their case.yaml: avro
//! topics), against the registry `./dev/test` starts (dev/registry/registry), on the embedded
//! default and on the broker. `#[ignore]`d: a plain `cargo test` lists them as not run.

mod common;

use common::runs::{run_all, Backend};

fn registry() -> &'static str {
    let url = std::env::var("STREAMC_REGISTRY_URL").unwrap_or_else(|_| {
        panic!("this test needs a schema registry: run ./dev/test, or `eval \"$(dev/registry/registry start)\"`")
    });
    Box::leak(url.into_boxed_str())
}

#[test]
#[ignore = "needs a schema registry (./dev/test starts one)"]
fn registry_corpus_on_the_embedded_default() {
    let url = registry();
    let base = common::embedded::temp_dir("registry-runs");
    run_all("embedded", Some(url), &|case| (Backend::Embedded, base.join(&case.name)));
}

#[test]
#[ignore = "needs a schema registry and a Kafka broker (./dev/test starts both)"]
fn registry_corpus_on_kafka() {
    let url = registry();
    let bootstrap: &'static str = Box::leak(common::kafka::require().into_boxed_str());
    let base = common::embedded::temp_dir("registry-kafka-runs");
    let run = std::process::id();
    run_all("kafka", Some(url), &|case| {
        let prefix: &'static str = Box::leak(format!("reg{run}.{}", case.name).into_boxed_str());
        (Backend::Kafka { bootstrap, prefix }, base.join(&case.name))
    });
}
