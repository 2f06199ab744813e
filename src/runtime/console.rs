//! The web console at `/` of `run --http-addr`: one page (`console.html`, compiled into the
//! binary: no CDN, it works offline) that polls `/console/state` every two seconds and draws
//! `/console/topology.svg` with each processor's records on it.
//!
//! `/console/state` is this instance's view, as JSON: its tasks' counters and input lag (read
//! back from the Prometheus registry, so the page and `/metrics` never disagree), readiness, restores and
//! standby replicas in progress, the running program's version and query versions, the last
//! control statements with their verdicts, and the last dead letters with their reasons — the
//! last three kept here by the drivers as they happen.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::control::{Stage, Status};

/// The page.
pub const PAGE: &str = include_str!("console.html");

/// Control statements and dead letters kept for the page.
const KEPT: usize = 20;

/// What the page shows besides the metrics, as the drivers report it.
#[derive(Default)]
pub struct Console {
    board: Mutex<Board>,
}

#[derive(Default)]
struct Board {
    backend: String,
    /// The running program's picture (`explain --format svg`).
    svg: String,
    version: u64,
    queries: Vec<(String, u64)>,
    /// The last control statements' verdicts, newest last.
    control: VecDeque<Value>,
    /// The last dead letters, newest last.
    dead: VecDeque<Value>,
}

impl Console {
    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backend the run is on (`embedded` or `kafka`).
    pub fn set_backend(&self, backend: &str) {
        self.board().backend = backend.to_string();
    }

    /// The running program, as of a stage: its picture, version and query versions.
    pub fn stage(&self, stage: &Stage) {
        let mut b = self.board();
        // (Drawn again only for a new program version: a table update or a purge changes the
        // stage, not the picture.)
        if b.version != stage.version || b.svg.is_empty() {
            b.svg = crate::explain::render(&stage.topo, None, crate::explain::ExplainFormat::Svg);
        }
        b.version = stage.version;
        b.queries = stage.queries.iter().map(|(n, q)| (n.clone(), q.version)).collect();
    }

    /// A control statement's verdict.
    pub fn control(&self, st: &Status) {
        let mut b = self.board();
        b.control.push_back(serde_json::to_value(st).unwrap_or(Value::Null));
        while b.control.len() > KEPT {
            b.control.pop_front();
        }
    }

    /// A record sent to the dead-letter topic: why, and where it was read.
    pub fn dead_letter(&self, reason: &str, topic: &str, partition: u32, offset: u64, timestamp: i64) {
        let mut b = self.board();
        b.dead.push_back(json!({
            "reason": reason, "topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp,
        }));
        while b.dead.len() > KEPT {
            b.dead.pop_front();
        }
    }

    /// The program's picture.
    pub fn svg(&self) -> String {
        self.board().svg.clone()
    }

    /// `/console/state`: the board with the counters of `prometheus` (the registry's text).
    /// `live`: the tasks the instance runs now (series of others stay in the registry after a
    /// task has moved); a store's restore or standby replica shows whoever runs its task.
    pub fn state(&self, app: &str, ready: Result<(), String>, prometheus: &str, live: &BTreeSet<String>) -> String {
        format!("{}\n", self.state_value(app, ready, prometheus, live))
    }

    fn state_value(&self, app: &str, ready: Result<(), String>, prometheus: &str, live: &BTreeSet<String>) -> Value {
        let b = self.board();
        let mut tasks: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
        let mut processors: BTreeMap<(String, String), serde_json::Map<String, Value>> = BTreeMap::new();
        let mut stores: BTreeMap<(String, String), serde_json::Map<String, Value>> = BTreeMap::new();
        let mut inputs: BTreeMap<(String, String), serde_json::Map<String, Value>> = BTreeMap::new();
        for (name, labels, v) in samples(prometheus) {
            let (Some(task), field) = (labels.get("task"), name.strip_prefix("streamc_")) else { continue };
            let Some(field) = field else { continue };
            let standby_or_restore = labels.contains_key("store")
                && (field.starts_with("standby_") || (field == "restore_remaining_records" && v > 0.0));
            if !live.contains(task) && !standby_or_restore {
                continue;
            }
            let field = field.strip_suffix("_total").unwrap_or(field).to_string();
            let v = json!(v);
            match (labels.get("processor"), labels.get("store"), labels.get("input"), labels.get("tenant")) {
                (_, _, _, Some(_)) => {}
                (Some(p), _, _, _) => {
                    processors.entry((task.clone(), p.clone())).or_default().insert(field, v);
                }
                (_, Some(s), _, _) => {
                    stores.entry((task.clone(), s.clone())).or_default().insert(field, v);
                }
                (_, _, Some(i), _) => {
                    inputs.entry((task.clone(), i.clone())).or_default().insert(field, v);
                }
                _ if field.starts_with("commit_latency") => {}
                _ => {
                    tasks.entry(task.clone()).or_default().insert(field, v);
                }
            }
        }
        let keyed = |m: BTreeMap<(String, String), serde_json::Map<String, Value>>, what: &str| -> Vec<Value> {
            m.into_iter()
                .map(|((task, name), mut fields)| {
                    fields.insert("task".into(), json!(task));
                    fields.insert(what.into(), json!(name));
                    Value::Object(fields)
                })
                .collect()
        };
        let state = json!({
            "application": app,
            "backend": b.backend,
            "ready": ready.is_ok(),
            "not_ready": ready.err(),
            "program_version": b.version,
            "queries": b.queries.iter().map(|(n, v)| json!({"name": n, "version": v})).collect::<Vec<_>>(),
            "tasks": tasks.into_iter().map(|(task, mut f)| { f.insert("task".into(), json!(task)); Value::Object(f) }).collect::<Vec<_>>(),
            "processors": keyed(processors, "processor"),
            "stores": keyed(stores, "store"),
            "inputs": keyed(inputs, "input"),
            "control": b.control.iter().collect::<Vec<_>>(),
            "dead_letters": b.dead.iter().collect::<Vec<_>>(),
        });
        state
    }
}

/// `/console/state` (without `?local`): this instance's state, and under `instances` each
/// instance of the application (on Kafka: every member of the group that serves HTTP, asked for
/// its `/console/state?local` as interactive queries ask for stores) with its state or why it
/// did not answer. On the embedded log, one instance.
/// (`app`, `ready`, `prometheus`, `live`: the instance's as [`Console::state`] takes them; `queries`:
/// who the other instances are.)
pub fn application_state(
    url: &str,
    console: &Console,
    queries: &crate::runtime::query::Queries,
    (app, ready, prometheus, live): (&str, Result<(), String>, &str, &BTreeSet<String>),
) -> String {
    let local = url.split_once('?').is_some_and(|(_, q)| q.split('&').any(|p| p == "local"));
    let mut me = console.state_value(app, ready, prometheus, live);
    if local {
        return format!("{me}\n");
    }
    let mut instances = Vec::new();
    match queries.others() {
        Ok((name, others)) => {
            instances.push(json!({"instance": name, "address": queries.server(), "state": me.clone()}));
            for (name, address) in others {
                let asked = crate::runtime::query::get_json(
                    &address,
                    "/console/state?local",
                    std::time::Duration::from_secs(5),
                );
                instances.push(match asked {
                    Ok((_, 200, state)) => json!({"instance": name, "address": address, "state": state}),
                    Ok((base, status, body)) => json!({"instance": name, "address": address, "error": format!("{base} answered {status}: {body}")}),
                    Err(e) => json!({"instance": name, "address": address, "error": e}),
                });
            }
        }
        Err(e) => instances.push(json!({"error": format!("the group's members are not known: {e}")})),
    }
    me["instances"] = Value::Array(instances);
    format!("{me}\n")
}

/// The samples of Prometheus text: (name, labels, value), comments skipped.
fn samples(text: &str) -> impl Iterator<Item = (&str, BTreeMap<String, String>, f64)> {
    text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let value: f64 = value.parse().ok()?;
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, labels_of(rest.strip_suffix('}')?)),
            None => (series, BTreeMap::new()),
        };
        Some((name, labels, value))
    })
}

/// `a="x",b="y"` as a map (a value's `\"` and `\\` unescaped).
fn labels_of(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(name.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state reads the counters back from the registry's text by task, processor and store,
    /// of the tasks the instance runs (and standby replicas of others), and keeps the last dead
    /// letters and control verdicts, newest last.
    #[test]
    fn the_state_groups_the_counters_and_keeps_the_last_events() {
        let text = "# HELP x\nstreamc_records_in_total{application=\"a\",task=\"0_1\"} 25\n\
                    streamc_processor_records_total{application=\"a\",task=\"0_1\",processor=\"q-where\"} 7\n\
                    streamc_restore_remaining_records{application=\"a\",task=\"0_1\",store=\"q-agg\"} 3\n\
                    streamc_input_lag_records{application=\"a\",task=\"0_1\",input=\"in/1\"} 4\n\
                    streamc_tenant_records_in_total{application=\"a\",task=\"0_1\",tenant=\"t\\\"1\"} 2\n\
                    streamc_records_in_total{application=\"a\",task=\"0_2\"} 9\n\
                    streamc_standby_lag_records{application=\"a\",task=\"0_2\",store=\"q-agg\"} 6\n\
                    streamc_ready{application=\"a\"} 1\n";
        let c = Console::default();
        for i in 0..25 {
            c.dead_letter(&format!("r{i}"), "in", 0, i, 0);
        }
        let live = BTreeSet::from(["0_1".to_string()]);
        let v: Value = serde_json::from_str(&c.state("a", Err("restoring".into()), text, &live)).unwrap();
        assert_eq!(v["tasks"], json!([{"task": "0_1", "records_in": 25.0}]), "0_2 runs elsewhere");
        assert_eq!(v["processors"], json!([{"task": "0_1", "processor": "q-where", "processor_records": 7.0}]));
        assert_eq!(
            v["stores"],
            json!([
                {"task": "0_1", "store": "q-agg", "restore_remaining_records": 3.0},
                {"task": "0_2", "store": "q-agg", "standby_lag_records": 6.0},
            ]),
            "a standby replica of a task that runs elsewhere"
        );
        assert_eq!(v["inputs"], json!([{"task": "0_1", "input": "in/1", "input_lag_records": 4.0}]));
        assert_eq!((v["ready"].clone(), v["not_ready"].clone()), (json!(false), json!("restoring")));
        let dead = v["dead_letters"].as_array().unwrap();
        assert_eq!((dead.len(), dead[0]["reason"].clone(), dead[19]["offset"].clone()), (20, json!("r5"), json!(24)));
        assert_eq!(labels_of("a=\"x\\\"y\",b=\"z\"")["a"], "x\"y");
    }
}
