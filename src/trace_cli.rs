//! `streamc trace PROGRAM --topic T (--partition P --offset O | --key K [--window-start W])`:
//! the input records that made one output record, as JSON lines.
//!
//! Built on replay, never on extra work in the normal run: the inputs of the queries that lead
//! to the topic are copied, as the application's backend still holds them, into an embedded log
//! in a scratch directory, and the program runs over them there with tracing on
//! ([`streamc::runtime::lineage`]), one record per commit, so that every result an aggregate
//! goes through is made. The record asked about is then found among the replay's records of
//! its key: the application's records of that key up to it, in order, are matched to the
//! replay's (a result `emit changes` coalesced at a commit is the replay's result after the
//! same records), and its match's lineage printed. Nothing of the application changes: no state,
//! no topic.
//!
//! What it does not follow yet (it says so and exits 1): stream–stream, table–table and
//! foreign-key joins, grouped tables and table aggregates, sliding windows, joins of
//! control-managed tables, and results of a query a control statement changed (the replay runs
//! the program file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;

use streamc::config::Config;
use streamc::plan::physical::{Op, TaskSpec};
use streamc::record::{Start, Stored};
use streamc::runtime::lineage::{self, Traced};
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
    let sources: BTreeSet<String> =
        leading.iter().flat_map(|s| inputs_of(s)).filter(|t| !written.contains(t)).collect();

    let real = streamc::topics::open(&g.state_dir, &cfg)?;
    let (part, wanted, history) = find_record(&*real, &cfg, target)?;
    let version = version_of(&wanted);
    if version != 0 {
        return refused(format!(
            "the record at offset {} of `{}` partition {part} was made by version {version} of query `{query}`, which a control statement made; `streamc trace` replays the queries of the program file (version 0) only",
            wanted.offset, target.topic
        ));
    }

    // The sources as the application's backend holds them, into a scratch embedded log.
    let dir = std::env::temp_dir().join(format!("streamc-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = replay(g, file, &*real, &sources, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let (copied, tracer) = result?;

    let made: Vec<&Traced> =
        tracer.outputs.iter().filter(|o| o.topic == target.topic && o.key == wanted.record.key).collect();
    let Some(found) = align(&history, &made) else {
        return refused(format!(
            "the replay of the retained input does not make the record at offset {} of `{}` partition {part}: the topic holds results the program file does not make from its inputs as they are now (an earlier program, another application writing it, inputs written since with earlier timestamps)",
            wanted.offset, target.topic
        ));
    };
    let mut inputs = Vec::new();
    for &(t, p, offset) in &found.lineage {
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
        let what = if s.read_streams().next().is_some() || !s.streams.is_empty() {
            Some("a stream–stream join")
        } else if s.mutual.is_some() || s.left.is_some() {
            Some("a table–table join")
        } else if s.foreign.is_some() || s.foreign_gate.is_some() {
            Some("a foreign-key join")
        } else if s.table_group.is_some() || s.agg.as_ref().is_some_and(|a| a.table) {
            Some("an aggregate of a table")
        } else if s
            .agg
            .as_ref()
            .and_then(|a| a.window)
            .is_some_and(|w| matches!(w.kind, streamc::ast::WindowKind::Sliding { .. }))
        {
            Some("sliding windows")
        } else if s.ops.iter().any(|op| matches!(op, Op::JoinTable(j) if j.table.is_none())) {
            Some("a join of a control-managed table")
        } else if s.ops.iter().any(|op| matches!(op, Op::GroupTable { .. })) {
            Some("a grouped table")
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
            let mut best: Option<(u32, usize)> = None;
            for (p, records) in &by_part {
                if let Some(i) = records.iter().rposition(|s| {
                    crate::prefetch_registered(cfg, &t.topic, &[s]).is_ok()
                        && key_matches(&crate::consumed_json(&t.topic, *p, s, false), &want, t.window_start)
                }) {
                    best = Some((*p, i));
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
/// result's `window_start` field, or a tombstone's header).
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
    sources: &BTreeSet<String>,
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
    for topic in sources {
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
    lineage::start(sources.clone());
    let ran = run_to_the_end(&g2, &cfg2, file);
    let tracer = lineage::finish();
    ran?;
    Ok((copied, tracer))
}

/// Run the program until a run finds nothing to process (a chained query's input is written by
/// the run before; `--drain` stops at the ends its inputs had when it started), then once more
/// closing every window (as `--close-windows-at-end`).
fn run_to_the_end(g: &crate::Global, cfg: &Config, file: &Path) -> Result<(), String> {
    let mut runs = 0;
    loop {
        let seen = lineage::seen();
        let last = runs == MAX_RUNS;
        let flags = crate::RunFlags {
            inputs: vec![],
            drain: true,
            close: last,
            threads: 1,
            http_addr: None,
            chaos: None,
            reset: false,
        };
        if crate::run_program(g, cfg.clone(), file, flags)? != ExitCode::SUCCESS {
            return Err("the replay failed".into());
        }
        if last {
            return Ok(());
        }
        runs = if lineage::seen() == seen { MAX_RUNS } else { runs + 1 };
    }
}

/// Runs of a replay at most before its last (a chain of queries longer than this is followed
/// that far).
const MAX_RUNS: usize = 16;

/// The replay's record matching the last of `history` (the application's records of a key up
/// to the one traced), each matched in order to the first of `made` after the one before it
/// with the same value, timestamp and headers. (A history that repeats itself, a run over the
/// same input made again, starts over from the first.)
fn align<'a>(history: &[Stored], made: &[&'a Traced]) -> Option<&'a Traced> {
    let same = |s: &Stored, o: &Traced| {
        s.record.value == o.value && s.record.timestamp == o.timestamp && s.record.headers == o.headers
    };
    let mut from = 0;
    let mut last = None;
    for s in history {
        let i = match made[from..].iter().position(|o| same(s, o)) {
            Some(i) => from + i,
            None => made.iter().position(|o| same(s, o))?,
        };
        last = Some(made[i]);
        from = i + 1;
    }
    last
}
