//! Multi-tenancy on a real broker (started by ./dev/test): the property test of tests/tenants.rs
//! — adversarial tenant ids, a restore from the changelogs, a purge — on Kafka.

mod common;

use common::control::Env;
use common::embedded::temp_dir;
use common::kafka::require;
use common::tenants::{property, PROGRAM};

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn no_tenant_sees_another_tenants_state_on_kafka() {
    let dir = temp_dir("ktenants-property");
    let app = format!("ktprop-{}", std::process::id());
    let env = Env::with_program(
        &dir,
        &app,
        vec!["--bootstrap-servers".into(), require(), "--set".into(), "commit.interval_ms=200".into()],
        PROGRAM,
    );
    property(&env, 100_000, &[]);
}

#[test]
#[ignore = "needs a Kafka broker: run ./dev/test"]
fn each_tenant_gets_the_results_it_would_get_alone_on_kafka() {
    let dir = temp_dir("ktenants-alone");
    let b = require();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tenants.stream")).unwrap();
    common::tenants::example_alone(&dir, |d, app| {
        Env::with_program(
            d,
            &format!("{app}-{}", std::process::id()),
            vec!["--bootstrap-servers".into(), b.clone(), "--set".into(), "commit.interval_ms=200".into()],
            &text,
        )
    });
}
