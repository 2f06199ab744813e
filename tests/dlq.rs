//! `streamc dlq list` and `streamc dlq replay` on the embedded log (the scenario is in
//! tests/common/dlq.rs; tests/kafka_dlq.rs runs it on the broker).

mod common;

use common::embedded::temp_dir;

#[test]
fn dead_letters_are_replayed_once_after_a_cut_off_replay_and_counted_once() {
    let dir = temp_dir("dlq-replay");
    common::dlq::replay_scenario(&dir, &[], "d", "shop");
}
