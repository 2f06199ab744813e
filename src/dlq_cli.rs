//! `streamc dlq list` and `streamc dlq replay`: an application's dead letters by reason, and
//! their records appended again to where they were read (see [`streamc::dlq`]).

use std::path::Path;
use std::process::ExitCode;

use streamc::dlq::{self, Filter};
use streamc::{config, topics};

/// `streamc dlq list PROGRAM`: one line per reason, most frequent first.
pub fn list(state_dir: &Path, cfg: &config::Config, file: &Path) -> Result<ExitCode, String> {
    let app = config::application_id(cfg, file)?;
    let t = topics::open(state_dir, cfg)?;
    let topic = dlq::dlq_topic(&app);
    let Some((by, ledger)) = dlq::list(&*t, &app)? else {
        println!("`{topic}` does not exist: application {app} has written no dead letter");
        return Ok(ExitCode::SUCCESS);
    };
    let total: u64 = by.values().map(|r| r.count).sum();
    let replayed: u64 = by.values().map(|r| r.replayed).sum();
    println!("{topic}: {total} dead letter{}, {replayed} replayed", plural(total));
    if ledger.interrupted() {
        println!("(a replay was cut off: `streamc dlq replay` finishes it before anything else)");
    }
    if by.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by(|(a, x), (b, y)| y.count.cmp(&x.count).then(x.first.cmp(&y.first)).then(a.cmp(b)));
    let offsets =
        |r: &dlq::Reason| if r.first == r.last { r.first.to_string() } else { format!("{}-{}", r.first, r.last) };
    let w = rows.iter().map(|(_, r)| offsets(r).len()).max().unwrap_or(0).max("offsets".len());
    let sw = rows.iter().map(|(_, r)| sources(r).len()).max().unwrap_or(0).max("source".len());
    println!("{:>8} {:>8}  {:<w$}  {:<sw$}  reason", "count", "replayed", "offsets", "source");
    for (reason, r) in &rows {
        println!("{:>8} {:>8}  {:<w$}  {:<sw$}  {reason}", r.count, r.replayed, offsets(r), sources(r));
    }
    Ok(ExitCode::SUCCESS)
}

fn sources(r: &dlq::Reason) -> String {
    if r.sources.is_empty() {
        "-".into()
    } else {
        r.sources.iter().cloned().collect::<Vec<_>>().join(",")
    }
}

/// `streamc dlq replay PROGRAM [--reason TEXT] [--from O] [--to O]`.
pub fn replay(state_dir: &Path, cfg: &config::Config, file: &Path, filter: &Filter) -> Result<ExitCode, String> {
    if let (Some(from), Some(to)) = (filter.from, filter.to) {
        if from > to {
            return Err(format!("--from {from} is past --to {to}"));
        }
    }
    let app = config::application_id(cfg, file)?;
    let t = topics::open(state_dir, cfg)?;
    let topic = dlq::dlq_topic(&app);
    if t.partitions(&topic)?.is_none() {
        println!("`{topic}` does not exist: application {app} has written no dead letter");
        return Ok(ExitCode::SUCCESS);
    }
    let r = dlq::replay(&*t, &app, filter)?;
    if r.recovered > 0 {
        println!(
            "finished a replay that was cut off: {} dead letter{} it had appended",
            r.recovered,
            plural(r.recovered)
        );
    }
    let n: u64 = r.appended.values().sum();
    match r.span {
        Some((first, last)) => {
            let to: Vec<String> = r.appended.iter().map(|(t, n)| format!("{n} to `{t}`")).collect();
            let at =
                if first == last { format!("offset {first}") } else { format!("first offset {first}, last {last}") };
            println!("replayed {n} dead letter{} of `{topic}` ({at}): {}", plural(n), to.join(", "));
        }
        None => {
            let held = t.ends(&[(topic.clone(), 0)])?.first().copied().unwrap_or(0);
            let range = match (filter.from, filter.to) {
                (None, None) => String::new(),
                (from, to) => format!(
                    " in offsets {} to {} (it holds offsets before {held})",
                    from.unwrap_or(0),
                    to.map_or("its end".to_string(), |t| t.to_string())
                ),
            };
            println!("replayed nothing: no dead letter of `{topic}` to replay{range}")
        }
    }
    let mut not = Vec::new();
    if r.already > 0 {
        not.push(format!("{} replayed before", r.already));
    }
    for (why, k) in &r.skipped {
        not.push(format!("{k} {why}"));
    }
    if r.passed_over > 0 {
        not.push(format!("{} not taken by the filter", r.passed_over));
    }
    if !not.is_empty() {
        println!("not replayed: {}", not.join("; "));
    }
    Ok(ExitCode::SUCCESS)
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
