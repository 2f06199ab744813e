//! `streamc trace PROGRAM --topic T (--partition P --offset O | --key K [--window-start W])`:
//! the input records that made one output record, as JSON lines.
//!
//! Built on replay, never on extra work in the normal run: the topics the queries leading to
//! the topic read are copied, as the application's backend still holds them, into an embedded
//! log in a scratch directory, and the program runs over them there with tracing on
//! ([`streamc::runtime::lineage`]), one record per commit, so that every result an aggregate
//! goes through is made. Those the program writes itself (repartition topics, a chained query's
//! input) are copied too, so that they are read in the order the application read them (which
//! depends on how its tasks' commits interleaved); the replay does not write them, and each of
//! their records takes the lineage of the replay's record with the same content. The record
//! asked about is found among the replay's records of its key and window as they are made: the
//! application's records of that key and window up to it, in order, are matched to the replay's
//! (a result `emit changes` coalesced at a commit is the replay's result after the same
//! records), and its match's lineage printed. Nothing of the application changes: no state, no
//! topic.
//!
//! What it does not follow yet (it says so and exits 1): foreign-key joins, joins of
//! control-managed tables, and results of a query a control statement changed (the replay
//! runs the program file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;

use streamc::config::Config;
use streamc::plan::physical::{Op, TaskSpec};
use streamc::record::{Start, Stored};
use streamc::runtime::lineage::{self, Shape, Wanted};
use streamc::topics::Topics;

use serde_json::Value as J;

/// Which output record to trace.
pub(crate) struct Target {
    pub(crate) topic: String,
    pub(crate) partition: Option<u32>,
    pub(crate) offset: Option<u64>,
    pub(crate) key: Option<String>,
    pub(crate) window_start: Option<i64>,
}

const H_VERSION: &str = "streamc.query.version";

/// Why a record is not traced: what the trace cannot do (exit 1), or an error (exit 2).
enum Failure {
    Refused(String),
    Error(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Error(e)
    }
}

fn refused<T>(why: String) -> Result<T, Failure> {
    Err(Failure::Refused(why))
}

pub(crate) fn trace(g: &crate::Global, cfg: Config, file: &Path, target: &Target) -> Result<ExitCode, String> {
    match traced(g, cfg, file, target) {
        Ok(code) => Ok(code),
        Err(Failure::Refused(why)) => {
            eprintln!("error: {why}");
            Ok(ExitCode::from(1))
        }
        Err(Failure::Error(e)) => Err(e),
    }
}

fn traced(g: &crate::Global, cfg: Config, file: &Path, target: &Target) -> Result<ExitCode, Failure> {
    let Some(text) = crate::read_program(file, &cfg)? else { return Ok(ExitCode::from(1)) };
    let Some(p) = crate::compile_file(file, &text) else { return Ok(ExitCode::from(1)) };
    let app = streamc::config::application_id(&cfg, file).map_err(|e| Failure::Error(e.to_string()))?;
    let topo = streamc::plan::lower(&p, &app);
    let specs = streamc::plan::physical::specs(&p, &topo).map_err(|e| e.to_string())?;
    let (query, leading) = leading_to(&specs, &target.topic)?;
    unsupported(&leading)?;
    let written: BTreeSet<String> = specs.iter().flat_map(|s| s.written_topics()).collect();
    let (reread, sources): (BTreeSet<String>, BTreeSet<String>) =
        leading.iter().flat_map(|s| inputs_of(s)).partition(|t| written.contains(t));

    let real = streamc::topics::open(&g.state_dir, &cfg)?;
    let (part, wanted, history) = find_record(&*real, &cfg, target)?;
    let version = version_of(&wanted);
    // (Avro or Protobuf results: their writer schema, to read their window.)
    crate::prefetch_registered(&cfg, &target.topic, &[&wanted])?;
    if version != 0 {
        return refused(format!(
            "the record at offset {} of `{}` partition {part} was made by version {version} of query `{query}`, which a control statement made; `streamc trace` replays the queries of the program file (version 0) only",
            wanted.offset, target.topic
        ));
    }

    // The sources as the application's backend holds them, into a scratch embedded log.
    let dir = std::env::temp_dir().join(format!("streamc-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A windowed result: only its window's records (a commit sends a key's windows in the
    // order they first changed, not in the order of the records).
    let window = window_of(wanted.record.value.as_deref(), &wanted.record.headers);
    let history: Vec<&Stored> =
        history.iter().filter(|s| window_of(s.record.value.as_deref(), &s.record.headers) == window).collect();
    let looked_for = Wanted {
        topic: target.topic.clone(),
        key: wanted.record.key.clone(),
        history: history.into_iter().map(shape).collect(),
        same_entry: Some(Box::new(move |value, headers| window_of(value, headers) == window)),
    };
    let result = replay(g, file, &*real, (sources, reread), looked_for, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let (copied, tracer) = result?;

    if tracer.unmatched > 0 {
        return refused(format!(
            "the replay did not make {} of the records the application wrote to the topics between its queries (the program or its inputs differ from those that made them)",
            tracer.unmatched
        ));
    }
    let Some(found) = &tracer.found else {
        return refused(format!(
            "the replay of the retained input does not make the record at offset {} of `{}` partition {part}: the topic holds results the program file does not make from its inputs as they are now (an earlier program, another application writing it, a run reset and made again, inputs written since with earlier timestamps)",
            wanted.offset, target.topic
        ));
    };
    if tracer.alike > 1 {
        eprintln!(
            "note: the replay made {} records the same as this one (its value did not change with every record); the inputs listed are those of the first after the record of its key before it",
            tracer.alike
        );
    }
    let mut inputs = Vec::new();
    for &(t, p, offset) in found {
        let topic = &tracer.topics[t as usize];
        if let Some(s) = copied.get(&(topic.clone(), p)).and_then(|v| v.get(offset as usize)) {
            inputs.push((topic.clone(), p, s));
        }
    }
    inputs.sort_by(|a, b| (a.0.as_str(), a.1, a.2.offset).cmp(&(b.0.as_str(), b.1, b.2.offset)));
    let head = serde_json::json!({
        "result": crate::consumed_json(&target.topic, part, &wanted, false),
        "query": query,
        "version": version,
        "statements": [],
        "inputs": inputs.len(),
        "alike": tracer.alike,
    });
    println!("{head}");
    for (topic, p, s) in inputs {
        let mut line = crate::consumed_json(&topic, p, s, false);
        if let Some(o) = line.as_object_mut() {
            o.remove("error");
        }
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The tasks that lead to `topic` (those writing it, and those writing what they read), and the
/// query writing it.
fn leading_to<'a>(specs: &'a [TaskSpec], topic: &str) -> Result<(String, Vec<&'a TaskSpec>), Failure> {
    let writers: Vec<&TaskSpec> = specs.iter().filter(|s| sinks_of(s).iter().any(|t| t == topic)).collect();
    let Some(first) = writers.first() else {
        return refused(format!("no query of the program writes topic `{topic}`"));
    };
    let query = first.query.clone();
    let mut leading: Vec<&TaskSpec> = Vec::new();
    let mut todo = writers;
    while let Some(s) = todo.pop() {
        if leading.iter().any(|l| l.name == s.name) {
            continue;
        }
        let reads = inputs_of(s);
        todo.extend(specs.iter().filter(|w| w.written_topics().iter().any(|t| reads.contains(t))));
        leading.push(s);
    }
    Ok((query, leading))
}

/// The topics a task writes records to (sinks and repartitions, not changelogs).
fn sinks_of(s: &TaskSpec) -> Vec<String> {
    s.ops
        .iter()
        .chain(&s.post)
        .filter_map(|op| match op {
            Op::Sink(k) => Some(k.topic.to_string()),
            Op::Repartition(r) => Some(r.topic.to_string()),
            _ => None,
        })
        .collect()
}

fn inputs_of(s: &TaskSpec) -> Vec<String> {
    let mut v = vec![s.main.topic.clone()];
    v.extend(s.side_topics());
    v
}

/// What the lineage does not follow yet: refused by name.
fn unsupported(leading: &[&TaskSpec]) -> Result<(), Failure> {
    for s in leading {
        let q = &s.query;
        let what = if s.foreign.is_some()
            || s.foreign_gate.is_some()
            || s.ops.iter().any(|op| matches!(op, Op::GroupTable { nulls: true, .. }))
        {
            Some("a foreign-key join".to_string())
        } else if s.ops.iter().any(|op| matches!(op, Op::JoinTable(j) if j.table.is_none())) {
            Some("a join of a control-managed table".to_string())
        } else {
            None
        };
        if let Some(what) = what {
            return refused(format!("`streamc trace` does not follow {what} yet (query `{q}`)"));
        }
    }
    Ok(())
}

/// The record asked about: its partition, the record, and the records of its key in that
/// partition up to it (it last), in order.
fn find_record(real: &dyn Topics, cfg: &Config, t: &Target) -> Result<(u32, Stored, Vec<Stored>), Failure> {
    if real.partitions(&t.topic)?.is_none() {
        return refused(format!("topic `{}` does not exist", t.topic));
    }
    let mut by_part: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    real.stream(&t.topic, &Start::Beginning, false, &mut |rec| {
        if let Some((p, s)) = rec {
            by_part.entry(p).or_default().push(s);
        }
        true
    })?;
    let (part, at) = match (t.partition, t.offset, &t.key) {
        (Some(p), Some(o), None) => {
            let records = by_part.get(&p).map(Vec::as_slice).unwrap_or_default();
            let Some(i) = records.iter().position(|s| s.offset == o) else {
                let range = match (records.first(), records.last()) {
                    (Some(a), Some(b)) => format!("it holds offsets {} to {}", a.offset, b.offset),
                    _ => "it holds no record".to_string(),
                };
                return refused(format!("topic `{}` partition {p} has no record at offset {o} ({range})", t.topic));
            };
            (p, i)
        }
        (None, None, Some(k)) => {
            let want: J = serde_json::from_str(k).unwrap_or_else(|_| J::String(k.clone()));
            // The last of the key in each partition; of those, the latest.
            let mut best: Option<(u32, usize)> = None;
            for (p, records) in &by_part {
                if let Some(i) = records.iter().rposition(|s| {
                    crate::prefetch_registered(cfg, &t.topic, &[s]).is_ok()
                        && key_matches(&crate::consumed_json(&t.topic, *p, s, false), &want, t.window_start)
                }) {
                    let later =
                        |(bp, bi): (u32, usize)| records[i].record.timestamp > by_part[&bp][bi].record.timestamp;
                    if best.is_none_or(later) {
                        best = Some((*p, i));
                    }
                }
            }
            match best {
                Some(b) => b,
                None => {
                    let w = t.window_start.map(|w| format!(" and window start {w}")).unwrap_or_default();
                    return refused(format!("topic `{}` has no record of key {k}{w}", t.topic));
                }
            }
        }
        _ => return Err(Failure::Error("name the record by `--partition` and `--offset`, or by `--key`".into())),
    };
    let records = by_part.remove(&part).unwrap_or_default();
    let wanted = records[at].clone();
    let history = records.into_iter().take(at + 1).filter(|s| s.record.key == wanted.record.key).collect();
    Ok((part, wanted, history))
}

/// A consumed record's key is `want` (and its window starts at `start`, if given: a windowed
/// result's `window_start` field).
fn key_matches(r: &J, want: &J, start: Option<i64>) -> bool {
    if &r["key"] != want && r["key"].as_str().map(str::to_string) != Some(want.to_string()) {
        return false;
    }
    match start {
        None => true,
        Some(w) => r["value"].get("window_start").and_then(J::as_i64) == Some(w),
    }
}

fn version_of(s: &Stored) -> u64 {
    s.record.header(H_VERSION).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

/// Every record of the sources by (topic, partition), in offset order.
type Copied = BTreeMap<(String, u32), Vec<Stored>>;

/// Copy `sources` from `real` into an embedded log in `dir`, run the program there with tracing
/// on; the records copied, and what the tracer found.
fn replay(
    g: &crate::Global,
    file: &Path,
    real: &dyn Topics,
    (sources, reread): (BTreeSet<String>, BTreeSet<String>),
    wanted: Wanted,
    dir: &Path,
) -> Result<(Copied, lineage::Tracer), Failure> {
    let mut sets = g.sets.clone();
    // One record per commit: every result an aggregate goes through is made.
    sets.push("commit.records=1".into());
    let g2 = crate::Global { config: g.config.clone(), sets, bootstrap_servers: None, state_dir: dir.to_path_buf() };
    let mut cfg2 = crate::load_config(&g2)?;
    cfg2.kafka.clear();
    let log = streamc::topics::open(dir, &cfg2)?;
    let mut copied = Copied::new();
    let mut n = 0;
    // The topics the replay writes and reads again hold the application's records, read in
    // the order it read them (the replay's own are not written, see `lineage::ready`).
    for topic in sources.iter().chain(&reread) {
        let Some(parts) = real.partitions(topic)? else { continue };
        log.ensure_topic(topic, parts, &[])?;
        real.stream(topic, &Start::Beginning, false, &mut |rec| {
            if let Some((p, s)) = rec {
                copied.entry((topic.clone(), p)).or_default().push(s);
            }
            true
        })?;
        for p in 0..parts {
            let Some(records) = copied.get(&(topic.clone(), p)) else { continue };
            if let Some(first) = records.first().filter(|s| s.offset > 0) {
                return refused(format!(
                    "the records of `{topic}` partition {p} before offset {} are gone (retention, or deleted): its results cannot be worked out again",
                    first.offset
                ));
            }
            n += records.len();
            log.append(topic, records.iter().map(|s| (p, s.record.clone())).collect())?;
        }
    }
    drop(log);
    eprintln!(
        "replaying {n} record{} of {} in a scratch directory, one record per commit",
        crate::s(n),
        sources.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
    );
    lineage::start(sources, reread, wanted);
    let ran = run_to_the_end(&g2, &cfg2, file);
    let tracer = lineage::finish();
    ran?;
    Ok((copied, tracer))
}

/// Run the program over what the scratch log holds, closing every window at the end (as
/// `--close-windows-at-end`).
fn run_to_the_end(g: &crate::Global, cfg: &Config, file: &Path) -> Result<(), String> {
    let flags = crate::RunFlags {
        inputs: vec![],
        drain: true,
        close: true,
        threads: 1,
        http_addr: None,
        chaos: None,
        reset: false,
    };
    match crate::run_program(g, cfg.clone(), file, flags)? {
        ExitCode::SUCCESS => Ok(()),
        _ => Err("the replay failed".into()),
    }
}

/// What a record of the traced topic is compared by.
fn shape(s: &Stored) -> Shape {
    (s.record.value.clone(), s.record.timestamp, s.record.headers.clone())
}

/// The window a result is of: its value's `window_start`, or (a tombstone) its
/// `streamc.window.start` header.
fn window_of(value: Option<&[u8]>, headers: &[(String, Vec<u8>)]) -> Option<i64> {
    let s = Stored {
        offset: 0,
        next: Default::default(),
        record: streamc::record::Record {
            key: None,
            value: value.map(<[u8]>::to_vec),
            timestamp: 0,
            headers: headers.to_vec(),
        },
    };
    let j = crate::consumed_json("", 0, &s, false);
    j["value"]["window_start"].as_i64().or_else(|| {
        let h = headers.iter().find(|(k, _)| k == "streamc.window.start")?;
        std::str::from_utf8(&h.1).ok()?.parse().ok()
    })
}
