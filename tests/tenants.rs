//! Multi-tenancy on the embedded backend: the property test over adversarial tenant ids (with a
//! restore from the changelogs and a purge), and the multi-tenant example giving each tenant
//! exactly the results it gets running alone.

mod common;

use common::control::Env;
use common::embedded::temp_dir;
use common::tenants::{property, PROGRAM};

/// 100,000 random events over 56 adversarial tenants: no tenant ever sees another's state;
/// the purge runs with failures injected at commit steps (each failed commit reopens the task,
/// which purges again).
#[test]
fn no_tenant_sees_another_tenants_state() {
    let dir = temp_dir("tenants-property");
    let env = Env::with_program(&dir, "tprop", vec![], PROGRAM);
    property(&env, 100_000, &["--chaos", "seed=11,fail=0.5"]);
}

/// Each tenant of the multi-tenant example gets exactly the results of a run of its own events.
#[test]
fn each_tenant_gets_the_results_it_would_get_alone() {
    let dir = temp_dir("tenants-alone");
    common::tenants::example_alone(&dir, |d, app| {
        Env::with_program(
            d,
            app,
            vec![],
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tenants.stream")).unwrap(),
        )
    });
}

const CONTROLLED: &str = r#"
stream orders from "orders" {
  key    sku
  value  json { tenant: string, sku: string, qty: int }
  tenant tenant
}
table limits {
  key   sku: string
  value { max: int }
}
query over {
  from orders
  join limits on sku
  where qty > limits.max
  select { sku, qty, max = limits.max }
  to "over"
}
"#;

/// `for tenant "t" update/delete` changes only that tenant's rows of a control-managed table;
/// rows of no tenant are not seen by tenant-scoped queries; a key limited to some tenants can
/// sign only for them; other statements cannot be for a tenant.
#[test]
fn control_statements_for_a_tenant_touch_only_that_tenant() {
    let dir = temp_dir("tenants-control");
    let env = Env::with_program(&dir, "tctl", vec![], CONTROLLED);
    // A second key, trusted for tenant globex only.
    let gkey = dir.join("globex.key");
    let out = std::process::Command::new(common::cli::bin())
        .args(["keygen", gkey.to_str().unwrap(), "--id", "globex-ops"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let entry = stdout.lines().skip_while(|l| !l.contains("- id:")).collect::<Vec<_>>().join("\n");
    let mut cfg = std::fs::read_to_string(&env.config).unwrap();
    cfg.push_str(&format!("{entry}\n      tenants: [globex]\n"));
    std::fs::write(&env.config, cfg).unwrap();
    let program = env.program.to_str().unwrap().to_string();
    let orders = |name: &str, lines: &[(&str, &str, i64)]| {
        let f = dir.join(name);
        let text: String = lines
            .iter()
            .map(|(t, s, q)| format!("{{\"tenant\": \"{t}\", \"sku\": \"{s}\", \"qty\": {q}}}\n"))
            .collect();
        std::fs::write(&f, text).unwrap();
        env.run(&["produce", &env.topic("orders"), f.to_str().unwrap(), "--program", &program]);
        env.run(&["run", &program, "--drain"]);
    };
    let over = || -> Vec<(String, String, i64)> {
        env.consume_versions("over")
            .into_iter()
            .map(|(k, v, _)| {
                (k[0].as_str().unwrap().to_string(), v["sku"].as_str().unwrap().to_string(), v["max"].as_i64().unwrap())
            })
            .collect()
    };
    let post = |stmt: &str, key: Option<&std::path::Path>| -> (String, bool) {
        match key {
            None => env.control(stmt, &[]),
            Some(k) => {
                let out = std::process::Command::new(common::cli::bin())
                    .arg("--state-dir")
                    .arg(&env.state)
                    .args(env.args(&["control", &program, stmt, "--key", k.to_str().unwrap()]))
                    .output()
                    .unwrap();
                (String::from_utf8_lossy(&out.stderr).into_owned(), out.status.success())
            }
        }
    };
    orders("o0.jsonl", &[]);
    assert!(post("for tenant \"acme\" update limits[\"x\"] = { max = 5 }", None).1);
    assert!(post("update limits[\"x\"] = { max = 1 }", None).1);
    orders("o1.jsonl", &[("acme", "x", 10), ("globex", "x", 10), ("acme", "y", 10)]);
    assert_eq!(
        over(),
        vec![("acme".into(), "x".into(), 5)],
        "acme sees its own row; globex neither acme's nor the row of no tenant"
    );
    // globex-ops may sign for globex only.
    assert!(post("for tenant \"globex\" update limits[\"x\"] = { max = 7 }", Some(&gkey)).1);
    assert!(
        post("for tenant \"acme\" update limits[\"x\"] = { max = 0 }", Some(&gkey)).1,
        "posted: the application rejects it"
    );
    assert!(post("for tenant \"acme\" delete limits[\"y\"]", None).1);
    orders("o2.jsonl", &[("acme", "x", 10), ("globex", "x", 10)]);
    assert_eq!(
        over(),
        vec![("acme".into(), "x".into(), 5), ("acme".into(), "x".into(), 5), ("globex".into(), "x".into(), 7)]
    );
    assert!(post("for tenant \"acme\" delete limits[\"x\"]", None).1);
    orders("o3.jsonl", &[("acme", "x", 10), ("globex", "x", 10)]);
    assert_eq!(over().len(), 4, "acme's row is gone, globex's is not");
    assert_eq!(over()[3], ("globex".into(), "x".into(), 7));
    // A query cannot be for a tenant: `control` refuses to post it, and the application
    // rejects it when posted anyway.
    let (out, ok) = post("for tenant \"acme\" drop query over", None);
    assert!(!ok && out.contains("queries are shared by every tenant"), "{out}");
    let (out, ok) = env.control("for tenant \"acme\" drop query over", &["--no-check"]);
    assert!(ok, "{out}");
    env.run(&["run", &program, "--drain"]);
    let st = env.statuses();
    let rejected: Vec<&serde_json::Value> = st.values().filter(|s| s["accepted"] == false).collect();
    assert_eq!(rejected.len(), 2, "{st:?}");
    assert!(rejected[0]["reason"].as_str().unwrap().contains("may only sign for tenants globex"), "{rejected:?}");
    assert!(rejected[1]["diagnostic"].as_str().unwrap().contains("queries are shared by every tenant"), "{rejected:?}");
    assert_eq!(over().len(), 4, "the query still runs");
}
