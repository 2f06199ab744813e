//! `streamc trace` on the broker (the scenarios are in tests/common/trace.rs; tests/trace.rs
//! runs them on the embedded log): the inputs are read back from the broker's topics.

mod common;

use common::embedded::temp_dir;
use common::kafka::require;

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn a_hopping_windows_result_is_traced_on_the_broker() {
    let bootstrap = require();
    let dir = temp_dir("kafka-trace-hopping");
    let pfx = format!("trh{}", std::process::id());
    common::trace::hopping(dir.path(), &["--bootstrap-servers", &bootstrap], &pfx, &format!("{pfx}-stats"));
}

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn a_chained_querys_result_is_traced_on_the_broker() {
    let bootstrap = require();
    let dir = temp_dir("kafka-trace-chain");
    let pfx = format!("trc{}", std::process::id());
    common::trace::chain(dir.path(), &["--bootstrap-servers", &bootstrap], &pfx, &format!("{pfx}-chain"));
}

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn a_result_whose_inputs_are_gone_is_not_traced_and_the_trace_says_which() {
    let bootstrap = require();
    let dir = temp_dir("kafka-trace-gone");
    let pfx = format!("trg{}", std::process::id());
    common::trace::gone(dir.path(), &bootstrap, &pfx, &format!("{pfx}-gone"));
}

#[test]
#[ignore = "needs a Kafka broker (./dev/test starts one)"]
fn a_result_after_a_repartition_is_traced_on_the_broker() {
    let bootstrap = require();
    let dir = temp_dir("kafka-trace-regrouped");
    let pfx = format!("trr{}", std::process::id());
    common::trace::regrouped(dir.path(), &["--bootstrap-servers", &bootstrap], &pfx, &format!("{pfx}-buckets"));
}
