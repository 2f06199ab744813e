//! `streamc keygen`, `control`, `deploy` and `status`: the commands that sign and post control
//! statements and show what the application made of them. They work on either backend, while
//! `run` is running.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use streamc::control::{self, ControlRecord, Evaluator, KeyFile, Status, PROGRAM_KEY};
use streamc::record::Record;
use streamc::topics::{self, Topics};
use streamc::{config, diag, hir, syntax};

/// Append records to partition 0 of a one-partition topic (the control and status topics),
/// creating it (infinite retention on Kafka).
fn append_to(t: &dyn Topics, topic: &str, records: Vec<Record>) -> Result<(), String> {
    t.ensure_topic(topic, 1, &control::topic_configs(topic))?;
    t.append(topic, records.into_iter().map(|r| (0, r)).collect())
}

/// Record `text` as the application's program (version 0) on its status topic. The program is
/// the last such record; each carries a nonce, and a repetition of one (a retry after a lost
/// acknowledgement, landing after another process's record) is read as nothing
/// ([`program_records`]), so the record needs no idempotent producer: on Kafka, one waited half a
/// second for its producer id, most of a new application's first start.
fn record_program(t: &dyn Topics, app: &str, text: &str, source: &str) -> Result<(), String> {
    let topic = control::status_topic(app);
    t.ensure_topic(&topic, 1, &control::topic_configs(&topic))?;
    t.append_repeatable(&topic, vec![(0, program_record(text, source)?)])
}

pub fn control_records(t: &dyn Topics, app: &str) -> Result<Vec<ControlRecord>, String> {
    Ok(t.read_all(&control::control_topic(app))?
        .into_iter()
        .map(|s| ControlRecord {
            offset: s.offset,
            timestamp: s.record.timestamp,
            headers: s.record.headers,
            value: s.record.value,
        })
        .collect())
}

/// The program text the application runs as version 0 (recorded by `run` in the status topic).
pub fn stored_program(t: &dyn Topics, app: &str) -> Result<Option<String>, String> {
    Ok(stored_programs(t, app)?.pop())
}

/// The status record that makes `text` the application's program file (version 0). `source`:
/// the file's own text, recorded when it differs (its `value avro` fields were taken from the
/// registry, see [`recorded_expansion`]).
fn program_record(text: &str, source: &str) -> Result<Record, String> {
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| format!("no randomness for the program record's nonce: {e}"))?;
    let nonce = hex::encode(nonce);
    let value = match text == source {
        true => serde_json::json!({ "text": text, "nonce": nonce }),
        false => serde_json::json!({ "text": text, "source": source, "nonce": nonce }),
    };
    Ok(Record {
        key: Some(PROGRAM_KEY.as_bytes().to_vec()),
        value: Some(value.to_string().into_bytes()),
        timestamp: streamc::runtime::now_ms(),
        headers: vec![],
    })
}

/// The program the application last recorded, when it was recorded from a file whose text is
/// `source` with fields taken from the registry: that expansion.
pub fn recorded_expansion(t: &dyn Topics, app: &str, source: &str) -> Result<Option<String>, String> {
    Ok(program_records(t, app)?
        .pop()
        .filter(|v| v.get("source").and_then(|s| s.as_str()) == Some(source))
        .and_then(|v| v.get("text")?.as_str().map(str::to_string)))
}

/// Every program file the application has run, oldest first.
fn stored_programs(t: &dyn Topics, app: &str) -> Result<Vec<String>, String> {
    Ok(program_records(t, app)?.iter().filter_map(|v| v.get("text")?.as_str().map(str::to_string)).collect())
}

/// The values of the status topic's program records (see [`program_record`]), oldest first; a
/// record whose nonce came before is a repetition, left out.
fn program_records(t: &dyn Topics, app: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut seen = std::collections::BTreeSet::new();
    Ok(t.read_all(&control::status_topic(app))?
        .iter()
        .filter(|s| s.record.key.as_deref() == Some(PROGRAM_KEY.as_bytes()))
        .filter_map(|s| serde_json::from_slice::<serde_json::Value>(s.record.value.as_deref()?).ok())
        .filter(|v| v.get("nonce").and_then(|n| n.as_str()).is_none_or(|n| seen.insert(n.to_string())))
        .collect())
}

/// The running program: version 0 plus the control log, evaluated as every instance does.
pub fn running(
    t: &dyn Topics,
    app: &str,
    cfg: &config::Config,
    file: &Path,
) -> Result<(Evaluator, Vec<Status>), String> {
    let text = match stored_program(t, app)? {
        Some(t) => t,
        None => crate::read_program(file, cfg)?.ok_or_else(|| format!("{} has errors", file.display()))?,
    };
    let program = streamc::compile(&text).map_err(|d| {
        format!(
            "the application's program does not compile: {}",
            d.first().map(|d| d.message.clone()).unwrap_or_default()
        )
    })?;
    let mut ev = Evaluator::new(
        app,
        program,
        &text,
        control::trusted_keys(&cfg.control.trusted_keys).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?
    .allow_sinks(&cfg.topics.allow_internal_sinks);
    let statuses = control::evaluate_all(&mut ev, &control_records(t, app)?);
    Ok((ev, statuses))
}

pub fn keygen(path: &Path, id: Option<&str>) -> Result<ExitCode, String> {
    let id = id
        .map(str::to_string)
        .unwrap_or_else(|| path.file_stem().and_then(|s| s.to_str()).unwrap_or("key").to_string());
    let k = KeyFile::generate(&id).map_err(|e| e.to_string())?;
    k.write(path).map_err(|e| e.to_string())?;
    eprintln!("wrote the private key `{id}` to {} (keep it secret); trust its public key with:", path.display());
    println!("control:\n  trusted_keys:\n    - id: {id}\n      public_key: {}", k.public_hex());
    Ok(ExitCode::SUCCESS)
}

/// The options of `control` and `deploy` that say how to sign and post.
#[derive(Clone, Copy)]
pub struct Post<'a> {
    pub key: &'a Path,
    pub tenant: &'a str,
    pub expires_in_ms: i64,
    pub wait_secs: u64,
}

/// Sign and post statements; with `wait_secs`, wait for their statuses. Exit code 1 if one was
/// rejected.
fn post(t: &dyn Topics, app: &str, statements: &[String], o: &Post, cfg: &config::Config) -> Result<ExitCode, String> {
    let key = KeyFile::read(o.key).map_err(|e| e.to_string())?;
    if !cfg.control.trusted_keys.iter().any(|k| k.id == key.id) {
        eprintln!("warning: key `{}` is not in this command's control.trusted_keys: the check here does not know the statements it signed; the application verifies with its own configuration", key.id);
    }
    let existing = control_records(t, app)?;
    // The last sequence this key signed: only records its signature verifies count, so a
    // forged record cannot push the sequence out of reach.
    let last = existing.iter().filter_map(|r| key.signed_seq(app, &r.headers, r.value.as_deref())).max().unwrap_or(0);
    let now = streamc::runtime::now_ms();
    let mut seqs = Vec::new();
    let mut records = Vec::new();
    for (i, s) in statements.iter().enumerate() {
        let seq = last
            .max(now.max(0) as u64 * 1000)
            .checked_add(1 + i as u64)
            .ok_or("the key's sequence numbers are exhausted")?;
        seqs.push(seq);
        records.push(Record {
            key: None,
            value: Some(s.clone().into_bytes()),
            timestamp: now,
            headers: key.sign(app, seq, now.saturating_add(o.expires_in_ms), o.tenant, s),
        });
    }
    let topic = control::control_topic(app);
    append_to(t, &topic, records)?;
    // Where they landed: found by key id and sequence.
    let after = control_records(t, app)?;
    let mut offsets = Vec::new();
    for seq in &seqs {
        let off = after
            .iter()
            .find(|r| {
                header(r, control::H_KEY_ID).as_deref() == Some(key.id.as_str())
                    && header(r, control::H_SEQ) == Some(seq.to_string())
            })
            .map(|r| r.offset);
        offsets.push(off);
        eprintln!(
            "posted to {topic} at offset {} (key {}, seq {seq})",
            off.map_or("?".into(), |o| o.to_string()),
            key.id
        );
    }
    if o.wait_secs == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(o.wait_secs);
    let mut code = ExitCode::SUCCESS;
    for off in offsets.into_iter().flatten() {
        loop {
            if let Some(st) = statuses(t, app)?.into_iter().rev().find(|s| s.offset == off) {
                print_status(&st);
                if !st.accepted {
                    code = ExitCode::from(1);
                }
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "no status for control offset {off} after {}s: is `streamc run` of `{app}` running?",
                    o.wait_secs
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    Ok(code)
}

fn header(r: &ControlRecord, name: &str) -> Option<String> {
    r.headers.iter().rev().find(|(k, _)| k == name).and_then(|(_, v)| String::from_utf8(v.clone()).ok())
}

/// The status records written so far, in offset order.
pub fn statuses(t: &dyn Topics, app: &str) -> Result<Vec<Status>, String> {
    let mut by_offset = std::collections::BTreeMap::new();
    for s in t.read_all(&control::status_topic(app))? {
        if s.record.key.as_deref() == Some(PROGRAM_KEY.as_bytes()) {
            continue;
        }
        if let Some(st) = s.record.value.as_deref().and_then(|v| serde_json::from_slice::<Status>(v).ok()) {
            by_offset.insert(st.offset, st);
        }
    }
    Ok(by_offset.into_values().collect())
}

fn print_status(st: &Status) {
    println!("{}", st.describe());
    if let Some(r) = &st.report {
        print!("{}", r.render());
    }
    if let Some(d) = &st.diagnostic {
        print!("{d}");
    }
}

/// `streamc control FILE --key K 'statement'`: check the statement against the running program,
/// then sign and post it.
pub fn control_cmd(
    state_dir: &Path,
    cfg: &config::Config,
    file: &Path,
    statement: &str,
    check: bool,
    o: &Post,
) -> Result<ExitCode, String> {
    let app = config::application_id(cfg, file)?;
    let t = topics::open(state_dir, cfg)?;
    if check {
        let (ev, _) = running(&*t, &app, cfg, file)?;
        let program = &ev.latest().program;
        let allowed = &cfg.topics.allow_internal_sinks;
        if let Err(d) = streamc::plan::check_statement_text(program, statement, &app, allowed) {
            eprint!("{}", diag::render(&d, "<statement>", statement, crate::render_options()));
            eprintln!(
                "error: the statement does not compile against the running program of `{app}`; nothing was posted"
            );
            return Ok(ExitCode::from(1));
        }
    }
    // `for tenant "t" …` is signed for that tenant unless --tenant says otherwise (then the
    // application rejects the mismatch, as it must).
    let from_text = syntax::parse_statement(statement).ok().and_then(|s| s.tenant.map(|t| t.node));
    match (o.tenant.is_empty(), from_text) {
        (true, Some(tenant)) => post(&*t, &app, &[statement.to_string()], &Post { tenant: &tenant, ..*o }, cfg),
        _ => post(&*t, &app, &[statement.to_string()], o, cfg),
    }
}

/// `streamc deploy FILE --key K [--dry-run]`: make the running queries those of FILE.
pub fn deploy(
    state_dir: &Path,
    cfg: &config::Config,
    file: &Path,
    dry_run: bool,
    mode: Option<&str>,
    o: &Post,
) -> Result<ExitCode, String> {
    let app = config::application_id(cfg, file)?;
    let t = topics::open(state_dir, cfg)?;
    if stored_program(&*t, &app)?.is_none() {
        return Err(format!("application `{app}` has not run yet: start it with `streamc run {}`", file.display()));
    }
    let Some(text) = crate::read_program(file, cfg)? else { return Ok(ExitCode::from(1)) };
    let Some(new) = crate::compile_file(file, &text) else { return Ok(ExitCode::from(1)) };
    let (ev, _) = running(&*t, &app, cfg, file)?;
    let stage = ev.latest().clone();
    let mut statements = Vec::new();
    // Queries whose change needs `--reprocess` or `--fresh-state` that was not given.
    let mut blocked = Vec::new();
    let suffix = mode.map(|m| format!(" with {m}")).unwrap_or_default();
    let new_topo = streamc::plan::lower(&new, &app);
    for q in &new.queries {
        let body = text.get(q.span.start..q.span.end).unwrap_or_default().to_string();
        match stage.queries.get(&q.name) {
            None => {
                println!("query {}: new, reads its input from the start", q.name);
                statements.push(body);
            }
            Some(running) if running.text.trim() == body.trim() => println!("query {}: unchanged", q.name),
            Some(_) => {
                let r = control::compare(&stage.topo, &new_topo, &q.name);
                let incompatible = !r.incompatible.is_empty();
                print!("{}", r.render());
                if incompatible && mode.is_none() {
                    println!("  => needs `--reprocess` or `--fresh-state`");
                    blocked.push(q.name.clone());
                }
                statements.push(format!(
                    "replace {body}{}",
                    if incompatible || mode == Some("reprocess") { suffix.clone() } else { String::new() }
                ));
            }
        }
    }
    for name in stage.queries.keys() {
        if new.query(name).is_none() {
            println!("query {name}: dropped");
            statements.push(format!("drop query {name}"));
        }
    }
    if statements.is_empty() {
        println!("nothing to deploy: the running queries are those of {}", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    if dry_run {
        for s in &statements {
            println!("---\n{s}");
        }
    }
    // A deploy is all or nothing: refused before anything is posted if a change needs a mode
    // that was not given, or if the application would reject one of the statements.
    if !blocked.is_empty() {
        eprintln!(
            "error: {} cannot keep {} state: deploy again with `--reprocess` or `--fresh-state`; nothing was posted",
            blocked.join(", "),
            if blocked.len() == 1 { "its" } else { "their" },
        );
        return Ok(ExitCode::from(1));
    }
    if let Some(reason) = rejected(&ev, &app, &statements, o, cfg)? {
        eprintln!("error: {reason}; nothing was posted");
        return Ok(ExitCode::from(1));
    }
    // The new output schemas against their subjects, before anything is deployed.
    if !crate::registry_sinks_compatible(cfg, &new, &app)? {
        eprintln!("error: an avro or protobuf sink's schema is not compatible with its subject; nothing was posted");
        return Ok(ExitCode::from(1));
    }
    if dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    post(&*t, &app, &statements, o, cfg)
}

/// Evaluate `statements`, in order and signed with the posting key, against a copy of the
/// running application's control state: the first the application would reject, with its
/// reason. Not checked (None) when the key is not in this command's `control.trusted_keys`.
fn rejected(
    ev: &Evaluator,
    app: &str,
    statements: &[String],
    o: &Post,
    cfg: &config::Config,
) -> Result<Option<String>, String> {
    let key = KeyFile::read(o.key).map_err(|e| e.to_string())?;
    if !cfg.control.trusted_keys.iter().any(|k| k.id == key.id) {
        return Ok(None);
    }
    let mut sim = ev.clone();
    let now = streamc::runtime::now_ms();
    for (i, text) in statements.iter().enumerate() {
        // A sequence above any the key can have signed, and a timestamp before expiry.
        let seq = u64::MAX - statements.len() as u64 + i as u64;
        let rec = ControlRecord {
            offset: sim.next,
            timestamp: now,
            headers: key.sign(app, seq, now.saturating_add(o.expires_in_ms), o.tenant, text),
            value: Some(text.clone().into_bytes()),
        };
        if let Some(st) = sim.apply(&rec).filter(|st| !st.accepted) {
            let first = text.lines().next().unwrap_or_default();
            let mut reason = format!("the application would reject `{first}`: {}", st.reason.unwrap_or_default());
            if let Some(d) = st.diagnostic {
                reason = format!("{d}{reason}");
            }
            return Ok(Some(reason));
        }
    }
    Ok(None)
}

/// `streamc status FILE`: query versions, control offsets applied, recent rejections.
pub fn status(state_dir: &Path, cfg: &config::Config, file: &Path) -> Result<ExitCode, String> {
    let app = config::application_id(cfg, file)?;
    let t = topics::open(state_dir, cfg)?;
    let (ev, evaluated) = running(&*t, &app, cfg, file)?;
    let stage = ev.latest();
    println!(
        "application {app}: program version {}, {} control statement{} ({} accepted)",
        stage.version,
        evaluated.len(),
        if evaluated.len() == 1 { "" } else { "s" },
        evaluated.iter().filter(|s| s.accepted).count()
    );
    println!("queries:");
    for (name, q) in stage.queries.iter() {
        let at = evaluated
            .iter()
            .rev()
            .find(|s| s.accepted && s.target.as_deref() == Some(name) && s.version == q.version && q.version > 0)
            .map(|s| format!(", from control offset {}", s.offset))
            .unwrap_or_else(|| if q.version == 0 { ", from the program file".into() } else { String::new() });
        println!("  {name}: version {}{at}", q.version);
    }
    let tables: Vec<_> = stage.tables.iter().map(|(n, t)| format!("{n} ({} rows)", t.len())).collect();
    if !tables.is_empty() {
        println!("control-managed tables: {}", tables.join(", "));
    }
    println!("tasks (control offset applied, query version; input lag: end offset minus committed position, per input partition; state: records in the task's changelogs{}):",
        if t.is_kafka() { ", end minus start offset, what a restore from scratch reads at most" } else { "" });
    let tasks = applied(&*t, &app, stage)?;
    let ends = input_ends(&*t, &tasks)?;
    let state = changelog_records(&*t, stage, &tasks)?;
    let owners = owners(&*t, &app, cfg.metrics.interval_ms)?;
    let mut behind = 0;
    for task in &tasks {
        // A task applies statements at its commit points: until then it runs the older form.
        let lag = match task.control {
            Some(c) if c < stage.next => {
                behind += 1;
                format!(
                    " — not yet at the latest program: {} control record{} to apply at its next commit",
                    stage.next - c,
                    if stage.next - c == 1 { "" } else { "s" }
                )
            }
            _ => String::new(),
        };
        let per_input: Vec<(String, i64)> = task
            .inputs
            .iter()
            .filter_map(|(k, committed)| ends.get(k).map(|end| (k.clone(), (end - *committed as i64).max(0))))
            .collect();
        let total: i64 = per_input.iter().map(|(_, l)| l).sum();
        let detail: Vec<String> = per_input.iter().map(|(k, l)| format!("{k} {l}")).collect();
        let standbys = task
            .id
            .as_ref()
            .and_then(|id| owners.standbys.get(id))
            .map(|s| {
                let each: Vec<String> = s.iter().map(|(i, (lag, _))| format!("{i} (lag {lag})")).collect();
                format!("; standby {}", each.join(", "))
            })
            .unwrap_or_default();
        let owner = task
            .id
            .as_ref()
            .and_then(|id| owners.owners.get(id))
            .map(|(instance, ts)| {
                let at = jiff::Timestamp::from_millisecond(*ts)
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| format!("{ts} ms"));
                format!("; owner {instance} (its last metrics record: {at})")
            })
            .unwrap_or_default();
        let state = state.get(&task.name).map(|n| format!("; state {n} changelog records")).unwrap_or_default();
        let restoring = task
            .id
            .as_ref()
            .and_then(|id| owners.restoring.get(id))
            .map(|(instance, (done, total))| format!("; restoring on {instance}: {done} of {total} records"))
            .unwrap_or_default();
        println!(
            "  {}: {}, version {}; input lag {total} ({}){state}{owner}{restoring}{standbys}{lag}",
            task.name,
            task.control.map_or("-".into(), |c| c.to_string()),
            task.version.map_or("-".into(), |v| v.to_string()),
            detail.join(", ")
        );
    }
    if behind > 0 {
        println!(
            "{behind} of {} tasks have not yet applied the latest statements (a running application applies them within a commit interval; a stopped one when it next runs)",
            tasks.len()
        );
    }
    let written = statuses(&*t, &app)?;
    let rejected: Vec<&Status> = written.iter().filter(|s| !s.accepted).collect();
    println!("rejected statements: {}", rejected.len());
    for st in rejected.iter().rev().take(5).rev() {
        println!("  {}", st.describe());
    }
    Ok(ExitCode::SUCCESS)
}

/// A task as its last commit left it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Applied {
    /// `<sub-topology name>#<partition>`.
    name: String,
    control: Option<u64>,
    version: Option<u64>,
    /// Committed position per input (`topic/partition` → offset).
    inputs: BTreeMap<String, u64>,
    /// The task's id in metrics (`<sub-topology>_<partition>`), when its sub-topology is in
    /// the running program.
    id: Option<String>,
}

/// Per task: its last commit's control offset, query version and input positions.
fn applied(t: &dyn Topics, app: &str, stage: &control::Stage) -> Result<Vec<Applied>, String> {
    let mut out = Vec::new();
    let field = |m: &serde_json::Value, f: &str| m.get(f).and_then(|v| v.as_u64());
    let task = |name: String, m: &serde_json::Value| {
        let inputs = m
            .get("inputs")
            .and_then(|i| i.as_object())
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| {
                        Some((k.clone(), serde_json::from_value::<streamc::record::Pos>(v.clone()).ok()?.offset))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let id = name
            .rsplit_once('#')
            .and_then(|(sub, p)| stage.specs.iter().find(|s| s.name == sub).map(|s| format!("{}_{p}", s.sub)));
        Applied { control: field(m, "control"), version: field(m, "version"), inputs, id, name }
    };
    let mains: std::collections::BTreeSet<String> = stage.specs.iter().map(|s| s.main.topic.clone()).collect();
    for (name, m) in t.committed_tasks(app, &mains.into_iter().collect::<Vec<_>>())? {
        // (The embedded log's status reader's position is no task's.)
        if name != "control-status" && m.get("inputs").is_some() {
            out.push(task(name, &m));
        }
    }
    out.sort();
    Ok(out)
}

/// The end offset of every input partition the tasks have a position in.
fn input_ends(t: &dyn Topics, tasks: &[Applied]) -> Result<BTreeMap<String, i64>, String> {
    let keys: std::collections::BTreeSet<&String> = tasks.iter().flat_map(|a| a.inputs.keys()).collect();
    let parts: Vec<(String, u32)> = keys
        .iter()
        .filter_map(|k| k.rsplit_once('/').and_then(|(t, p)| Some((t.to_string(), p.parse().ok()?))))
        .collect();
    let ends: Vec<i64> = t.ends(&parts)?.into_iter().map(|e| e as i64).collect();
    Ok(parts.into_iter().zip(ends).map(|((topic, p), e)| (format!("{topic}/{p}"), e)).collect())
}

/// Per task (by name): the records its stores' changelog partitions hold. On Kafka, end minus
/// start offset (compaction may have removed some in between); on the embedded log, counted.
fn changelog_records(
    t: &dyn Topics,
    stage: &control::Stage,
    tasks: &[Applied],
) -> Result<BTreeMap<String, u64>, String> {
    let mut parts: Vec<(String, (String, u32))> = Vec::new();
    for task in tasks {
        let Some((sub, p)) = task.name.rsplit_once('#') else { continue };
        let (Some(spec), Ok(p)) = (stage.specs.iter().find(|s| s.name == sub), p.parse::<u32>()) else { continue };
        parts.extend(spec.stores.iter().map(|st| (task.name.clone(), (st.changelog.clone(), p))));
    }
    let list: Vec<(String, u32)> = parts.iter().map(|(_, tp)| tp.clone()).collect();
    let counts = t.record_counts(&list)?;
    // (A task one of whose changelog partitions could not be read shows no state.)
    let mut out: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for ((task, _), n) in parts.into_iter().zip(counts) {
        let e = out.entry(task).or_insert(Some(0));
        *e = e.zip(n).map(|(a, b)| a + b);
    }
    Ok(out.into_iter().filter_map(|(t, n)| Some((t, n?))).collect())
}

/// `streamc query FILE STORE …`: ask the instance at `url`; else, embedded, the running instance
/// (the address its run serves, recorded in the state directory) or, with none running, the
/// local state itself.
pub fn query(
    state_dir: &Path,
    cfg: &config::Config,
    file: &Path,
    fetch: &streamc::runtime::query::Fetch,
    url: Option<&str>,
) -> Result<ExitCode, String> {
    let app = config::application_id(cfg, file)?;
    let mut stage = None;
    let rows = match url {
        Some(u) => ask_instance(u, fetch)?,
        None if cfg.on_kafka() => return Err("on Kafka, pass --url with the --http-addr of a running instance".into()),
        None => {
            let stage = stage.insert({
                let t = topics::open(state_dir, cfg)?;
                running(&*t, &app, cfg, file)?.0.latest().clone()
            });
            match streamc::runtime::embedded::query_stopped(state_dir, cfg, &app, stage, fetch)? {
                Some(rows) => rows,
                None => {
                    let at = streamc::runtime::query::served_at(state_dir, &app).ok_or_else(|| {
                        format!(
                            "`{app}` is running without --http-addr: its state can be read only through the instance (start it with --http-addr), or once it stops"
                        )
                    })?;
                    ask_instance(&at, fetch)?
                }
            }
        }
    };
    if rows.is_empty() {
        // Nothing printed: say so on stderr, and why a windowed store may hold nothing.
        let windowed = stage.as_ref().is_some_and(|st| {
            st.topo
                .stores
                .iter()
                .any(|s| s.name == fetch.store && matches!(s.kind, streamc::plan::StoreKind::Window { .. }))
        });
        eprintln!("no rows: `{}` holds none for this query", fetch.store);
        if windowed {
            eprintln!(
                "(a windowed store holds a window until it closes, at its end plus grace by stream time: once the input's time has passed every window, or a run ended with --close-windows-at-end, it holds none)"
            );
        }
    }
    for r in rows {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    }
    Ok(ExitCode::SUCCESS)
}

fn ask_instance(
    url: &str,
    fetch: &streamc::runtime::query::Fetch,
) -> Result<Vec<streamc::runtime::query::Answer>, String> {
    Ok(streamc::runtime::query::ask_server(url, fetch, std::time::Duration::from_secs(30))?.rows)
}

/// On Kafka: the instance that last reported each task to `<app>-metrics`, and when (the
/// record's `timestamp`, ms). The embedded log has one instance: none.
fn owners(t: &dyn Topics, app: &str, interval_ms: u64) -> Result<Owners, String> {
    let mut out: BTreeMap<String, (String, i64)> = BTreeMap::new();
    let mut standbys: BTreeMap<String, BTreeMap<String, (u64, i64)>> = BTreeMap::new();
    // Per task, per instance: (stores restoring, (records restored, expected), reported at).
    type Reports = BTreeMap<String, (usize, (u64, u64), i64)>;
    let mut restoring: BTreeMap<String, Reports> = BTreeMap::new();
    if t.is_kafka() {
        for s in t.read_all(&format!("{app}-metrics"))? {
            let Some(v) = s.record.value.as_deref().and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
            else {
                continue;
            };
            if let Some(stores) = v["restoring"].as_object() {
                // A restore report: the stores the instance is restoring for the task (none:
                // the restore ended).
                if let (Some(task), Some(instance), Some(ts)) =
                    (v["task"].as_str(), v["instance"].as_str(), v["timestamp"].as_i64())
                {
                    let progress = stores
                        .values()
                        .map(|p| (p["restored"].as_u64().unwrap_or(0), p["total"].as_u64().unwrap_or(0)))
                        .fold((0, 0), |(r, t), (pr, pt)| (r + pr, t + pt));
                    let e = restoring.entry(task.to_string()).or_default();
                    if e.get(instance).is_none_or(|(_, _, at)| ts >= *at) {
                        e.insert(instance.to_string(), (stores.len(), progress, ts));
                    }
                }
                continue;
            }
            if v["standby"].as_bool() == Some(true) {
                // A standby replica's report: its total lag over the task's stores.
                if let (Some(task), Some(instance), Some(ts)) =
                    (v["task"].as_str(), v["instance"].as_str(), v["timestamp"].as_i64())
                {
                    let lag = v["lag"].as_object().map_or(0, |o| o.values().filter_map(|l| l.as_u64()).sum());
                    let e = standbys.entry(task.to_string()).or_default();
                    if e.get(instance).is_none_or(|(_, at)| ts >= *at) {
                        e.insert(instance.to_string(), (lag, ts));
                    }
                }
                continue;
            }
            let (Some(task), Some(instance), Some(ts)) =
                (v["task"].as_str(), v["instance"].as_str(), v["timestamp"].as_i64())
            else {
                continue;
            };
            if out.get(task).is_none_or(|(_, at)| ts >= *at) {
                out.insert(task.to_string(), (instance.to_string(), ts));
            }
        }
    }
    // An instance keeps reporting its standbys with its tasks: a standby report well older
    // than the newest report is one it stopped keeping (or an instance that is gone). And an
    // instance that owns the task keeps no standby of it.
    let newest = out.values().map(|(_, ts)| *ts).max().unwrap_or(i64::MIN);
    let horizon = newest.saturating_sub(3 * interval_ms as i64);
    for (task, s) in standbys.iter_mut() {
        s.retain(|i, (_, ts)| *ts >= horizon && out.get(task).is_none_or(|(owner, _)| owner != i));
    }
    // A restore in progress: the newest report of the task's restore names stores, no instance
    // has reported the task as its own since (a task reports once it has opened), and it is
    // recent.
    let restoring = restoring
        .into_iter()
        .filter_map(|(task, by)| {
            let (instance, (stores, progress, ts)) = by.into_iter().max_by_key(|(_, (_, _, ts))| *ts)?;
            let reported_since = out.get(&task).is_some_and(|(_, at)| *at > ts);
            (stores > 0 && !reported_since && ts >= restore_horizon(interval_ms))
                .then_some((task, (instance, progress)))
        })
        .collect();
    Ok(Owners { owners: out, standbys, restoring })
}

/// Restore reports come every few seconds while a restore lasts (the metrics interval, at most
/// 5 s): one older than this (ms since the epoch, now) is of an instance that stopped reporting.
fn restore_horizon(interval_ms: u64) -> i64 {
    let every = interval_ms.min(5_000) as i64;
    (jiff::Timestamp::now().as_millisecond()).saturating_sub(3 * every + 10_000)
}

/// What `<app>-metrics` says of each task: its owner and when it last reported; the
/// instances keeping a standby replica of it, with their lag and when they last reported.
struct Owners {
    owners: BTreeMap<String, (String, i64)>,
    standbys: BTreeMap<String, BTreeMap<String, (u64, i64)>>,
    /// Tasks being restored: the instance restoring, and the records restored of those expected.
    restoring: BTreeMap<String, (String, (u64, u64))>,
}

/// `run`: record the program file as version 0 the first time; if it changed since, compare
/// the two programs (with the control log applied to each) like a `replace` of every query.
/// Ok(false): an incompatible change (the report was printed).
pub fn check_program_file(
    t: &dyn Topics,
    app: &str,
    cfg: &config::Config,
    text: &str,
    source: &str,
    program: &hir::Program,
) -> Result<bool, String> {
    let Some(old_text) = stored_program(t, app)? else {
        record_program(t, app, text, source)?;
        return Ok(true);
    };
    if old_text == text {
        return Ok(true);
    }
    let trusted = control::trusted_keys(&cfg.control.trusted_keys).map_err(|e| e.to_string())?;
    let records = control_records(t, app)?;
    let Ok(old_program) = streamc::compile(&old_text) else {
        eprintln!("the program the application ran before no longer compiles: treating {app}'s program as new");
        record_program(t, app, text, source)?;
        return Ok(true);
    };
    let allowed = &cfg.topics.allow_internal_sinks;
    let mut old =
        Evaluator::new(app, old_program, &old_text, trusted.clone()).map_err(|e| e.to_string())?.allow_sinks(allowed);
    control::evaluate_all(&mut old, &records);
    let mut new = Evaluator::new(app, program.clone(), text, trusted).map_err(|e| e.to_string())?.allow_sinks(allowed);
    control::evaluate_all(&mut new, &records);
    let (a, b) = (old.latest(), new.latest());
    // Instances of one application run one program: a file whose queries (with the control log
    // applied) differ from the application's is taken only when no instance runs (on the
    // embedded log the run lock guarantees it). A file that a `deploy` made current runs as is.
    let same = a.queries.len() == b.queries.len()
        && a.queries.iter().all(|(n, q)| b.queries.get(n).is_some_and(|q2| q2.text.trim() == q.text.trim()));
    if !same {
        let members = t.group_members(app)?;
        if members > 0 {
            return Err(format!(
                "this program file's queries differ from those the {members} running instance{} of `{app}` run{}: instances of one application run the same program; change a running application with `streamc deploy`, or stop every instance first (a killed one leaves the group after `session.timeout.ms`)",
                if members == 1 { "" } else { "s" },
                if members == 1 { "s" } else { "" }
            ));
        }
    }
    eprintln!("the program file changed since `{app}` first ran; state compatibility:");
    let mut ok = true;
    for name in b.queries.keys() {
        if a.queries.contains_key(name) {
            let r = control::compare(&a.topo, &b.topo, name);
            ok &= r.incompatible.is_empty();
            eprint!("{}", r.render());
            if let Some(why) = control::moved(&a.specs, &b.specs, name) {
                eprintln!("  incompatible: the new form {why}");
                ok = false;
            }
        } else {
            eprintln!("query {name}: new, reads its input from the start");
        }
    }
    for name in a.queries.keys().filter(|n| !b.queries.contains_key(*n)) {
        eprintln!("query {name}: no longer in the file, its tasks stop");
    }
    if ok {
        record_program(t, app, text, source)?;
    }
    Ok(ok)
}

/// `run --reset`: delete the application's changelog and repartition topics, its committed
/// positions and its local state; record FILE as the program (version 0). Ingested `--input`
/// positions, the control log and the statuses written stay.
pub fn reset(
    t: &dyn Topics,
    app: &str,
    state_dir: &Path,
    text: &str,
    source: &str,
    cfg: &config::Config,
) -> Result<(), String> {
    // The application's internal topics: those of every program it ran (each file, with the
    // control log applied statement by statement), never a name pattern that another
    // application's topics could match.
    let mut names = std::collections::BTreeSet::new();
    let trusted = control::trusted_keys(&cfg.control.trusted_keys).map_err(|e| e.to_string())?;
    let records = control_records(t, app)?;
    let mut texts = stored_programs(t, app)?;
    texts.push(text.to_string());
    for tx in &texts {
        let Ok(program) = streamc::compile(tx) else { continue };
        let Ok(ev) = Evaluator::new(app, program, tx, trusted.clone()) else { continue };
        let mut ev = ev.allow_sinks(&cfg.topics.allow_internal_sinks);
        let mut add = |stage: &control::Stage| {
            for topic in &stage.topo.topics {
                if matches!(topic.role, streamc::plan::TopicRole::Changelog | streamc::plan::TopicRole::Repartition) {
                    names.insert(topic.name.clone());
                }
            }
        };
        add(ev.latest());
        for r in &records {
            ev.apply(r);
            add(ev.latest());
        }
    }
    let internal = |name: &str| names.contains(name);
    let deleted: Vec<String> = t.topic_names()?.into_iter().filter(|n| internal(n)).collect();
    // (The embedded log's control status reader and `--input` positions stay.)
    let keep = [format!("{app}#control-status"), format!("{app}#input#")];
    t.delete(&deleted, app, &|g| keep.iter().any(|k| g.starts_with(k.as_str())))?;
    let local = streamc::runtime::local_state_path(state_dir, app);
    if local.exists() {
        std::fs::remove_dir_all(&local).map_err(|e| format!("cannot delete local state {}: {e}", local.display()))?;
    }
    record_program(t, app, text, source)?;
    eprintln!("reset `{app}`: deleted {} internal topic{}, its committed positions and local state; the input is processed from the start", deleted.len(), if deleted.len() == 1 { "" } else { "s" });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program record repeated after another process's (a retry of a write whose
    /// acknowledgement was lost) is read as nothing: the later program stays the program.
    #[test]
    fn a_repeated_program_record_does_not_make_its_program_current_again() {
        let dir = std::env::temp_dir().join(format!("streamc-program-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = topics::open(&dir, &config::Config::default()).unwrap();
        record_program(&*t, "app", "first", "first").unwrap();
        let first = t.read_all(&control::status_topic("app")).unwrap().pop().unwrap().record;
        record_program(&*t, "app", "second", "second").unwrap();
        assert_eq!(stored_program(&*t, "app").unwrap().as_deref(), Some("second"));
        t.append(&control::status_topic("app"), vec![(0, first)]).unwrap();
        assert_eq!(stored_program(&*t, "app").unwrap().as_deref(), Some("second"), "the repetition is left out");
        record_program(&*t, "app", "first", "first").unwrap();
        assert_eq!(stored_program(&*t, "app").unwrap().as_deref(), Some("first"), "a new record of it is not");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
