//! Control statements on the embedded backend: a filter hot-reloaded between two inputs, a
//! compatible aggregate replaced with its state kept, an incompatible replacement rejected
//! (then accepted `with reprocess`), a control-managed table updated, the same outputs on a
//! replay with injected faults, and a thousand forged statements all rejected.

mod common;

use common::control::{forged_rejected, scenario, Env};
use common::embedded::{temp_dir, write_trades};

#[test]
fn hot_reload_update_state_and_replay() {
    let dir = temp_dir("control-embedded");
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    write_trades(&a, 400, 3, 1, 200);
    write_trades(&b, 400, 3, 2, 200);
    let mut outputs = Vec::new();
    for (i, flags) in [vec![], vec!["--chaos", "seed=7,redeliver=0.005,fail=0.05"]].into_iter().enumerate() {
        let d = dir.join(format!("r{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let env = Env::new(&d, "ctl", vec![]);
        scenario(&env, &a, &b, &flags);
        outputs.push(["big", "totals", "watched", "totals_n"].map(|t| env.consume_versions(t)));
    }
    assert_eq!(outputs[0], outputs[1], "a replay with injected faults switches at the same input positions");
}

#[test]
fn a_thousand_forged_statements_are_all_rejected() {
    let dir = temp_dir("control-forged");
    let env = Env::new(&dir, "forge", vec![]);
    forged_rejected(&env, 1200, &[]);
}
