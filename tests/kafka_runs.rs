//! The runtime corpus (`tests/runs/<case>/`, see `tests/common/runs.rs`) on a real broker.

mod common;

use common::runs::{run_all, Backend};

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn runtime_corpus_on_kafka() {
    let bootstrap: &'static str = Box::leak(common::kafka::require().into_boxed_str());
    let base = common::embedded::temp_dir("kafka-runs");
    let run = std::process::id();
    run_all("kafka", None, &|case| {
        let prefix: &'static str = Box::leak(format!("runs{run}.{}", case.name).into_boxed_str());
        (Backend::Kafka { bootstrap, prefix }, base.join(&case.name))
    });
}
