//! The Kafka broker the tests run against: `./dev/test` starts one (`dev/kafka/broker start`)
//! and exports its address as `STREAMC_KAFKA_BOOTSTRAP`, with `STREAMC_REQUIRE_KAFKA=1`.
//!
//! Convention: a test that needs a broker lives in a `tests/kafka*.rs` binary and is marked
//! `#[ignore = "needs a Kafka broker (./dev/test starts one)"]`, so a plain `cargo test` lists
//! it as ignored, never as passed. `./dev/test` runs those binaries again with `--ignored`
//! against its broker.
#![allow(dead_code)]

pub const BOOTSTRAP_VAR: &str = "STREAMC_KAFKA_BOOTSTRAP";
pub const REQUIRE_VAR: &str = "STREAMC_REQUIRE_KAFKA";

/// The broker's `host:port` if one was started for the tests. `None` without one, unless
/// `STREAMC_REQUIRE_KAFKA=1`, where a missing broker is a failure rather than a reason to skip.
pub fn bootstrap() -> Option<String> {
    match std::env::var(BOOTSTRAP_VAR) {
        Ok(addr) if !addr.trim().is_empty() => Some(addr.trim().to_string()),
        _ if std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "1") => {
            panic!("{REQUIRE_VAR}=1 but {BOOTSTRAP_VAR} is not set: start a broker with dev/kafka/broker start")
        }
        _ => None,
    }
}

/// The broker's `host:port`, for the `#[ignore]`d Kafka tests: they only run when asked for
/// (`--ignored`), and then a missing broker fails them instead of passing them unrun.
pub fn require() -> String {
    bootstrap().unwrap_or_else(|| {
        panic!(
            "this test needs a Kafka broker: run ./dev/test, or `eval \"$(dev/kafka/broker start)\"` \
             and then cargo test with {BOOTSTRAP_VAR} set"
        )
    })
}

/// A topic's partition count and `cleanup.policy`, from the broker's metadata and the admin
/// API's DescribeConfigs.
pub fn describe(bootstrap: &str, topic: &str) -> (i32, String) {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap);
    let admin: AdminClient<DefaultClientContext> = cfg.create().unwrap();
    let md = admin.inner().fetch_metadata(Some(topic), std::time::Duration::from_secs(10)).unwrap();
    let t = md.topics().iter().find(|t| t.name() == topic).unwrap_or_else(|| panic!("no topic {topic}"));
    assert!(t.error().is_none(), "topic {topic}: {:?}", t.error());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let res = rt.block_on(admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())).unwrap();
    let cfg = res.into_iter().next().unwrap().unwrap_or_else(|e| panic!("describe {topic}: {e:?}"));
    let policy = cfg.get("cleanup.policy").and_then(|e| e.value.clone()).unwrap_or_default();
    (t.partitions().len() as i32, policy)
}

/// Delete the records of `topic` partition `p` before `offset` (the admin API's DeleteRecords,
/// as retention does).
pub fn delete_records(bootstrap: &str, topic: &str, p: i32, offset: i64) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::{Offset, TopicPartitionList};
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap);
    let admin: AdminClient<DefaultClientContext> = cfg.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(offset)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let res = rt.block_on(admin.delete_records(&tpl, &AdminOptions::new())).unwrap();
    for e in res.elements() {
        assert!(e.error().is_ok(), "delete records of {topic}/{p}: {:?}", e.error());
    }
}
