//! `streamc dlq`: an application's dead letters (`<app>-dlq`) counted by reason, and replayed:
//! each original record appended again to the topic and partition it was read from, as it came
//! (key, value, timestamp and headers, its own `streamc.*` headers named back from
//! `original.streamc.*`), plus a `streamc.replay.of` header naming the dead letter. Once.
//!
//! A replay records how far it got in `<app>-dlq-replays` (one partition): before each batch
//! an intent (the dead letters' offsets, and the end offsets of the partitions the batch goes
//! to), after it the offsets replayed. A replay cut off between the two is finished by the next
//! one: it reads those partitions from the intent's ends and takes the records whose
//! `streamc.replay.of` names one of the intent's dead letters as replayed. So a dead letter is
//! appended once, however often a replay is interrupted and started again. One replay of an
//! application at a time: the embedded log refuses a second one; on Kafka two at once could
//! both append a dead letter.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::record::{Record, Start, Stored};
use crate::topics::Topics;

/// The header of a dead letter naming its reason.
pub const H_ERROR: &str = "streamc.error";
/// The headers of a dead letter naming where its record was read.
pub const H_TOPIC: &str = "streamc.source.topic";
pub const H_PARTITION: &str = "streamc.source.partition";
pub const H_OFFSET: &str = "streamc.source.offset";
/// The header of a replayed record: the offset of the dead letter it is (decimal).
pub const H_REPLAY_OF: &str = "streamc.replay.of";

/// Dead letters appended per batch (one intent and one record of what was replayed each).
const BATCH: usize = 1000;

/// The dead-letter topic of application `app`.
pub fn dlq_topic(app: &str) -> String {
    format!("{app}-dlq")
}

/// Where replays of `app`'s dead letters record how far they got.
pub fn replays_topic(app: &str) -> String {
    format!("{app}-dlq-replays")
}

/// Which dead letters a replay takes.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only those whose reason contains this text.
    pub reason: Option<String>,
    /// Only those at or after this offset of the dead-letter topic.
    pub from: Option<u64>,
    /// Only those at or before this offset.
    pub to: Option<u64>,
}

impl Filter {
    /// Whether the reason is one the filter takes (the offsets bound where the reading starts
    /// and stops).
    fn takes_reason(&self, reason: &str) -> bool {
        self.reason.as_deref().is_none_or(|r| reason.contains(r))
    }
}

/// (topic, partition, end offset) of a partition a batch goes to.
type End = (String, u32, u64);

/// The dead letters of an application by reason.
pub type ByReason = BTreeMap<String, Reason>;

/// A record of the replays topic.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Entry {
    /// A batch about to be appended: the dead letters' offsets, and (topic, partition, end
    /// offset before the batch) of each partition it goes to.
    Intent { offsets: Vec<u64>, ends: Vec<End> },
    /// The dead letters appended (those of the intent before it, or of an interrupted one).
    Replayed { offsets: Vec<u64> },
}

/// What the replays topic says so far.
#[derive(Default)]
pub struct Ledger {
    /// The dead letters replayed.
    pub replayed: BTreeSet<u64>,
    /// The last intent, if no record of what it replayed followed it (the replay was cut off).
    open: Option<(Vec<u64>, Vec<End>)>,
}

impl Ledger {
    /// Read the replays topic of `app` (empty if it does not exist).
    pub fn read(t: &dyn Topics, app: &str) -> Result<Ledger, String> {
        let topic = replays_topic(app);
        let mut l = Ledger::default();
        for s in t.read_all(&topic)? {
            let entry: Entry = serde_json::from_slice(s.record.value.as_deref().unwrap_or_default())
                .map_err(|e| format!("record {} of `{topic}` is not a replay's: {e}", s.offset))?;
            match entry {
                Entry::Intent { offsets, ends } => l.open = Some((offsets, ends)),
                Entry::Replayed { offsets } => {
                    l.replayed.extend(offsets);
                    l.open = None;
                }
            }
        }
        Ok(l)
    }

    /// Whether a replay was cut off before it recorded what it appended.
    pub fn interrupted(&self) -> bool {
        self.open.is_some()
    }
}

/// Why a dead letter cannot be replayed as it came, if it cannot.
fn not_replayable(r: &Record) -> Option<&'static str> {
    let has = |h: &str| r.header(h).is_some();
    if !has(H_TOPIC) || !has(H_PARTITION) {
        return Some("not written by streamc (no source headers)");
    }
    if has("streamc.value.size") || has("streamc.key.size") {
        return Some("cut when dead-lettered (over the copy's size limit)");
    }
    if has("streamc.headers.dropped") {
        return Some("some of its headers were dropped when dead-lettered");
    }
    None
}

/// The reason a dead letter gives (one line).
pub fn reason(r: &Record) -> String {
    let why = r.header(H_ERROR).map(String::from_utf8_lossy).unwrap_or_else(|| "(no reason)".into());
    why.replace(['\n', '\r'], " ")
}

/// Where a dead letter's record was read: (topic, partition).
fn source(r: &Record) -> Option<(String, u32)> {
    let topic = std::str::from_utf8(r.header(H_TOPIC)?).ok()?.to_string();
    let p = std::str::from_utf8(r.header(H_PARTITION)?).ok()?.parse().ok()?;
    Some((topic, p))
}

/// The original record of dead letter `offset`, as it came, marked as its replay.
fn original(dead: &Record, offset: u64) -> Record {
    let streamc_own = [H_ERROR, H_TOPIC, H_PARTITION, H_OFFSET];
    let mut headers: Vec<(String, Vec<u8>)> = dead
        .headers
        .iter()
        .filter(|(k, _)| !streamc_own.contains(&k.as_str()))
        .map(|(k, v)| match k.strip_prefix("original.") {
            Some(own) if own.starts_with("streamc.") => (own.to_string(), v.clone()),
            _ => (k.clone(), v.clone()),
        })
        .filter(|(k, _)| k != H_REPLAY_OF)
        .collect();
    headers.push((H_REPLAY_OF.to_string(), offset.to_string().into_bytes()));
    Record { key: dead.key.clone(), value: dead.value.clone(), timestamp: dead.timestamp, headers }
}

/// The dead letters of one reason.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reason {
    pub count: u64,
    pub replayed: u64,
    pub first: u64,
    pub last: u64,
    /// The topics their records were read from.
    pub sources: BTreeSet<String>,
}

/// The dead letters of `app` by reason, and the ledger of its replays; None if it has no
/// dead-letter topic.
pub fn list(t: &dyn Topics, app: &str) -> Result<Option<(ByReason, Ledger)>, String> {
    let topic = dlq_topic(app);
    if t.partitions(&topic)?.is_none() {
        return Ok(None);
    }
    let ledger = Ledger::read(t, app)?;
    let mut by: BTreeMap<String, Reason> = BTreeMap::new();
    t.stream(&topic, &Start::At(vec![(0, 0)]), false, &mut |rec| {
        if let Some((_, s)) = rec {
            let r = by.entry(reason(&s.record)).or_insert_with(|| Reason { first: s.offset, ..Reason::default() });
            r.count += 1;
            r.replayed += ledger.replayed.contains(&s.offset) as u64;
            r.last = s.offset;
            if let Some((src, _)) = source(&s.record) {
                r.sources.insert(src);
            }
        }
        true
    })?;
    Ok(Some((by, ledger)))
}

/// What a replay did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Dead letters of an interrupted replay found appended (and so recorded as replayed).
    pub recovered: u64,
    /// Dead letters appended, per topic.
    pub appended: BTreeMap<String, u64>,
    /// The first and last offset of those appended.
    pub span: Option<(u64, u64)>,
    /// Dead letters the filter took that were replayed before.
    pub already: u64,
    /// Dead letters the filter took that cannot be replayed, by why.
    pub skipped: BTreeMap<String, u64>,
    /// Dead letters the filter did not take.
    pub passed_over: u64,
}

/// For tests: a replay stops abruptly (`std::process::abort`) after appending this many
/// batches, before it records them: as if killed there.
const FAIL_AFTER_ENV: &str = "STREAMC_TEST_DLQ_REPLAY_ABORT_AFTER";
/// For tests: dead letters per batch.
const BATCH_ENV: &str = "STREAMC_TEST_DLQ_REPLAY_BATCH";

/// Replay the dead letters of `app` that `filter` takes and that were not replayed yet (first
/// finishing a replay that was cut off).
pub fn replay(t: &dyn Topics, app: &str, filter: &Filter) -> Result<Replay, String> {
    let topic = dlq_topic(app);
    let mut done = Replay::default();
    if t.partitions(&topic)?.is_none() {
        return Ok(done);
    }
    // (One replay at a time: the embedded log refuses a second; on Kafka it is the user's to see.)
    let Some(_alone) = t.lock_exclusive(&format!("DLQ-REPLAY-{app}"))? else {
        return Err(format!("another `streamc dlq replay` of application {app} is running: one at a time"));
    };
    let ledger_topic = replays_topic(app);
    // (Kept as long as the dead letters may be: no retention on Kafka.)
    t.ensure_topic(&ledger_topic, 1, &[("retention.ms", "-1")])?;
    let mut ledger = Ledger::read(t, app)?;
    if let Some((offsets, ends)) = ledger.open.take() {
        let found = appended_of(t, &offsets, &ends)?;
        done.recovered = found.len() as u64;
        record(t, &ledger_topic, &Entry::Replayed { offsets: found.iter().copied().collect() })?;
        ledger.replayed.extend(found);
    }
    let batch_size = std::env::var(BATCH_ENV).ok().and_then(|b| b.parse().ok()).unwrap_or(BATCH).max(1);
    let abort_after: Option<usize> = std::env::var(FAIL_AFTER_ENV).ok().and_then(|b| b.parse().ok());
    let mut batch: Vec<Stored> = Vec::new();
    let mut batches = 0usize;
    let mut failed = None;
    let mut send = |batch: &mut Vec<Stored>, done: &mut Replay| -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut by_topic: BTreeMap<String, Vec<(u32, Record)>> = BTreeMap::new();
        let mut offsets = Vec::new();
        let mut counts: BTreeMap<String, Option<u32>> = BTreeMap::new();
        for s in batch.drain(..) {
            let Some((src, p)) = source(&s.record) else { continue };
            if !counts.contains_key(&src) {
                counts.insert(src.clone(), t.partitions(&src)?);
            }
            match counts[&src] {
                Some(n) if p < n => {}
                Some(_) => {
                    *done.skipped.entry(format!("partition {p} of `{src}` does not exist")).or_default() += 1;
                    continue;
                }
                None => {
                    *done.skipped.entry(format!("its topic `{src}` does not exist")).or_default() += 1;
                    continue;
                }
            }
            offsets.push(s.offset);
            by_topic.entry(src).or_default().push((p, original(&s.record, s.offset)));
        }
        if offsets.is_empty() {
            return Ok(());
        }
        let parts: Vec<(String, u32)> = by_topic
            .iter()
            .flat_map(|(topic, recs)| recs.iter().map(|(p, _)| (topic.clone(), *p)).collect::<BTreeSet<_>>())
            .collect();
        let ends = t.ends(&parts)?;
        let ends = parts.into_iter().zip(ends).map(|((topic, p), e)| (topic, p, e)).collect();
        record(t, &ledger_topic, &Entry::Intent { offsets: offsets.clone(), ends })?;
        for (topic, recs) in by_topic {
            *done.appended.entry(topic.clone()).or_default() += recs.len() as u64;
            t.append(&topic, recs)?;
        }
        batches += 1;
        if abort_after == Some(batches) {
            std::process::abort();
        }
        record(t, &ledger_topic, &Entry::Replayed { offsets: offsets.clone() })?;
        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
        done.span = Some(done.span.map_or((first, last), |(f, _)| (f, last)));
        Ok(())
    };
    let start = Start::At(vec![(0, filter.from.unwrap_or(0))]);
    t.stream(&topic, &start, false, &mut |rec| {
        let Some((_, s)) = rec else {
            return true;
        };
        if filter.to.is_some_and(|to| s.offset > to) {
            return false;
        }
        if !filter.takes_reason(&reason(&s.record)) {
            done.passed_over += 1;
            return true;
        }
        if ledger.replayed.contains(&s.offset) {
            done.already += 1;
            return true;
        }
        if let Some(why) = not_replayable(&s.record) {
            *done.skipped.entry(why.to_string()).or_default() += 1;
            return true;
        }
        batch.push(s);
        if batch.len() >= batch_size {
            if let Err(e) = send(&mut batch, &mut done) {
                failed = Some(e);
                return false;
            }
        }
        true
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    send(&mut batch, &mut done)?;
    Ok(done)
}

/// The dead letters among `offsets` whose records an interrupted replay appended: those named
/// by the `streamc.replay.of` header of a record after the intent's end offsets.
fn appended_of(t: &dyn Topics, offsets: &[u64], ends: &[End]) -> Result<BTreeSet<u64>, String> {
    let wanted: BTreeSet<u64> = offsets.iter().copied().collect();
    let mut found = BTreeSet::new();
    let mut by_topic: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
    for (topic, p, end) in ends {
        by_topic.entry(topic).or_default().push((*p, *end));
    }
    for (topic, parts) in by_topic {
        // (A topic deleted since holds none of them.)
        let Some(n) = t.partitions(topic)? else { continue };
        let parts: Vec<(u32, u64)> = parts.into_iter().filter(|(p, _)| *p < n).collect();
        t.stream(topic, &Start::At(parts), false, &mut |rec| {
            if let Some((_, s)) = rec {
                let of = s.record.header(H_REPLAY_OF).and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok());
                if let Some(o) = of.filter(|o| wanted.contains(o)) {
                    found.insert(o);
                }
            }
            true
        })?;
    }
    Ok(found)
}

/// Append one entry to the replays topic.
fn record(t: &dyn Topics, topic: &str, e: &Entry) -> Result<(), String> {
    let value = serde_json::to_vec(e).map_err(|e| e.to_string())?;
    t.append(topic, vec![(0, Record { key: None, value: Some(value), timestamp: 0, headers: vec![] })])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::EmbeddedLog;

    fn dead(offset_in_source: u64, reason: &str, value: &str) -> Record {
        Record {
            key: Some(format!("k{offset_in_source}").into_bytes()),
            value: Some(value.as_bytes().to_vec()),
            timestamp: 1_000 + offset_in_source as i64,
            headers: vec![
                ("trace".into(), b"t".to_vec()),
                ("original.streamc.retract".into(), b"x".to_vec()),
                (H_ERROR.into(), reason.as_bytes().to_vec()),
                (H_TOPIC.into(), b"in".to_vec()),
                (H_PARTITION.into(), (offset_in_source % 2).to_string().into_bytes()),
                (H_OFFSET.into(), offset_in_source.to_string().into_bytes()),
            ],
        }
    }

    /// A fresh embedded log in a directory of its own, deleted when dropped.
    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn log(name: &str) -> (Dir, EmbeddedLog) {
        let dir = std::env::temp_dir().join(format!("streamc-dlq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        (Dir(dir), log)
    }

    /// Dead letters are counted by reason; a replay appends each original once, to its source
    /// partition, as it came plus `streamc.replay.of`; a second replay appends nothing; a
    /// filter takes only what it names.
    #[test]
    fn dead_letters_are_listed_by_reason_and_replayed_once() {
        let (_dir, log) = log("once");
        let t: &dyn Topics = &log;
        assert!(list(t, "app").unwrap().is_none(), "no dead-letter topic");
        t.ensure_topic("in", 2, &[]).unwrap();
        t.ensure_topic("app-dlq", 1, &[]).unwrap();
        let letters: Vec<(u32, Record)> = (0..5)
            .map(|i| (0, dead(i, if i == 3 { "n: expected int, found a string" } else { "too large" }, "{}")))
            .collect();
        t.append("app-dlq", letters).unwrap();
        let (by, ledger) = list(t, "app").unwrap().unwrap();
        assert_eq!(by["too large"].count, 4);
        assert_eq!((by["too large"].first, by["too large"].last), (0, 4));
        assert_eq!(by["n: expected int, found a string"].count, 1);
        assert!(ledger.replayed.is_empty() && !ledger.interrupted());

        let only = Filter { reason: Some("expected int".into()), ..Filter::default() };
        let r = replay(t, "app", &only).unwrap();
        assert_eq!(r.appended, BTreeMap::from([("in".to_string(), 1)]));
        assert_eq!((r.span, r.passed_over), (Some((3, 3)), 4));
        let r = replay(t, "app", &Filter::default()).unwrap();
        assert_eq!(r.appended, BTreeMap::from([("in".to_string(), 4)]));
        assert_eq!((r.already, r.span), (1, Some((0, 4))));
        let again = replay(t, "app", &Filter::default()).unwrap();
        assert!(again.appended.is_empty() && again.already == 5, "{again:?}");

        let mut got = Vec::new();
        t.stream("in", &Start::Beginning, false, &mut |r| {
            if let Some((p, s)) = r {
                got.push((p, s.record));
            }
            true
        })
        .unwrap();
        assert_eq!(got.len(), 5);
        let (p, r) = got.iter().find(|(_, r)| r.key.as_deref() == Some(b"k3")).unwrap();
        assert_eq!(*p, 1, "to the partition it was read from");
        assert_eq!(r.timestamp, 1_003);
        let names: Vec<&str> = r.headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["trace", "streamc.retract", H_REPLAY_OF]);
        assert_eq!(r.header(H_REPLAY_OF), Some(&b"3"[..]));
        assert_eq!(list(t, "app").unwrap().unwrap().0["too large"].replayed, 4);
    }

    /// A replay while another holds the embedded log's replay lock is refused.
    #[test]
    fn a_second_replay_at_once_is_refused_on_the_embedded_log() {
        let (_dir, log) = log("alone");
        let t: &dyn Topics = &log;
        t.ensure_topic("app-dlq", 1, &[]).unwrap();
        let held = t.lock_exclusive("DLQ-REPLAY-app").unwrap();
        assert!(held.is_some());
        let e = replay(t, "app", &Filter::default()).unwrap_err();
        assert_eq!(e, "another `streamc dlq replay` of application app is running: one at a time");
        drop(held);
        assert!(replay(t, "app", &Filter::default()).is_ok());
    }

    /// Dead letters cut when they were written, or not streamc's, are not replayed, and said so.
    #[test]
    fn cut_or_foreign_dead_letters_are_skipped_with_the_reason() {
        let (_dir, log) = log("skipped");
        let t: &dyn Topics = &log;
        t.ensure_topic("in", 2, &[]).unwrap();
        let mut cut = dead(0, "too large", "{");
        cut.headers.insert(2, ("streamc.value.size".into(), b"300000".to_vec()));
        let foreign = Record { key: None, value: Some(b"x".to_vec()), timestamp: 0, headers: vec![] };
        let gone = {
            let mut d = dead(2, "r", "{}");
            d.headers.retain(|(k, _)| k != H_TOPIC);
            d.headers.push((H_TOPIC.into(), b"deleted".to_vec()));
            d
        };
        t.ensure_topic("app-dlq", 1, &[]).unwrap();
        t.append("app-dlq", vec![(0, cut), (0, foreign), (0, gone)]).unwrap();
        let r = replay(t, "app", &Filter::default()).unwrap();
        assert!(r.appended.is_empty(), "{r:?}");
        assert_eq!(
            r.skipped,
            BTreeMap::from([
                ("cut when dead-lettered (over the copy's size limit)".to_string(), 1),
                ("its topic `deleted` does not exist".to_string(), 1),
                ("not written by streamc (no source headers)".to_string(), 1),
            ])
        );
    }

    /// A replay cut off after appending a batch and before recording it: the next replay finds
    /// the batch's records by their `streamc.replay.of`, records them, and appends only the rest.
    #[test]
    fn an_interrupted_replay_is_finished_without_appending_twice() {
        let (_dir, log) = log("interrupted");
        let t: &dyn Topics = &log;
        t.ensure_topic("in", 2, &[]).unwrap();
        t.append("in", vec![(0, Record { key: None, value: Some(b"before".to_vec()), timestamp: 0, headers: vec![] })])
            .unwrap();
        t.ensure_topic("app-dlq", 1, &[]).unwrap();
        t.append("app-dlq", (0..6).map(|i| (0, dead(i, "r", "{}"))).collect()).unwrap();
        // As the aborted process left it: an intent for 0..3, and their records appended.
        t.ensure_topic("app-dlq-replays", 1, &[]).unwrap();
        let ends = vec![("in".to_string(), 0, 1), ("in".to_string(), 1, 0)];
        record(t, "app-dlq-replays", &Entry::Intent { offsets: vec![0, 1, 2], ends }).unwrap();
        let dlq = t.read_all("app-dlq").unwrap();
        // (Dead letter 2's record was not appended: the batch was cut inside.)
        let appended: Vec<(u32, Record)> =
            dlq[..2].iter().map(|s| (source(&s.record).unwrap().1, original(&s.record, s.offset))).collect();
        t.append("in", appended).unwrap();
        assert!(Ledger::read(t, "app").unwrap().interrupted());

        let r = replay(t, "app", &Filter::default()).unwrap();
        assert_eq!(r.recovered, 2);
        assert_eq!(r.appended, BTreeMap::from([("in".to_string(), 4)]), "2 to 5");
        let mut of = Vec::new();
        t.stream("in", &Start::Beginning, false, &mut |r| {
            if let Some((_, s)) = r {
                of.extend(s.record.header(H_REPLAY_OF).map(|v| String::from_utf8_lossy(v).into_owned()));
            }
            true
        })
        .unwrap();
        of.sort();
        assert_eq!(of, ["0", "1", "2", "3", "4", "5"], "each dead letter once");
        assert!(!Ledger::read(t, "app").unwrap().interrupted());
    }
}
