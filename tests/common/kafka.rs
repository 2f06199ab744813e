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
        _ if std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "1") => panic!(
            "{REQUIRE_VAR}=1 but {BOOTSTRAP_VAR} is not set: start a broker with dev/kafka/broker start"
        ),
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
