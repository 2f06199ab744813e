//! `streamc dlq list` and `streamc dlq replay` on the broker (the scenario is in
//! tests/common/dlq.rs; tests/dlq.rs runs it on the embedded log).

mod common;

use common::embedded::temp_dir;
use common::kafka::require;

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn dead_letters_are_replayed_once_on_the_broker() {
    let bootstrap = require();
    let dir = temp_dir("kafka-dlq-replay");
    let pfx = format!("dlq{}", std::process::id());
    common::dlq::replay_scenario(&dir, &["--bootstrap-servers", &bootstrap], &pfx, &format!("{pfx}-shop"));
}
