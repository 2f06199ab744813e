//! Topic set-up, written once for both backends: the topics an application needs, with their
//! partition counts and kinds, planned from the stage (program, topology, task specs) and the
//! partition counts of the topics that already exist. Each backend only applies the plan:
//! creates what is missing and refuses an internal topic whose count differs.
//!
//! The rules (docs/conventions.md, "Keys and partitioning"): a sub-topology has as many tasks as its inputs
//! have partitions, and co-partitioned inputs must agree; a repartition topic and a changelog
//! have as many partitions as the sub-topology that writes them (a repartition before a join:
//! as many as the joined topic); dead letters, late records and metrics have one; a missing sink
//! gets as many as the widest sub-topology, like ksqlDB.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hir;
use crate::plan::physical::TaskSpec;
use crate::plan::{Partitions, TopicRole, Topology};

/// What a planned topic is for; it decides how a backend creates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicKind {
    /// A declared stream's or table's topic.
    Source,
    /// Compacted; one partition per task of its sub-topology.
    Changelog,
    /// Keeps its records whatever their (event-time) timestamps.
    Repartition,
    Sink,
    /// Dead letters, late records, metrics.
    Side,
}

impl TopicKind {
    /// An internal topic must have exactly the planned partition count.
    pub fn internal(self) -> bool {
        matches!(self, TopicKind::Changelog | TopicKind::Repartition | TopicKind::Side)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTopic {
    pub name: String,
    pub partitions: u32,
    pub kind: TopicKind,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicPlan {
    /// Tasks per sub-topology (its inputs' partition count), indexed by sub-topology id.
    pub counts: Vec<u32>,
    /// Every topic to ensure, sources first.
    pub topics: Vec<PlannedTopic>,
}

/// Why a plan cannot be made or applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    #[error("source topic `{topic}` (of `{source_name}`) does not exist")]
    MissingSource { topic: String, source_name: String },
    #[error("topic `{0}` does not exist")]
    Missing(String),
    #[error("co-partitioned inputs differ: `{first}` has {first_count} partitions, `{second}` has {second_count}")]
    CoPartitioning { first: String, first_count: u32, second: String, second_count: u32 },
    #[error(
        "internal topic `{topic}` has {has} partitions, but the application needs {needs}; delete it (or reset the application) to have it re-created"
    )]
    WrongCount { topic: String, has: u32, needs: u32 },
    #[error(
        "changelog `{topic}` has cleanup.policy={policy}: the broker may delete the state it holds; set cleanup.policy=compact on it (kafka-configs.sh --alter --add-config cleanup.policy=compact), or delete it to have it re-created"
    )]
    NotCompacted { topic: String, policy: String },
    #[error("{0}")]
    Backend(String),
}

/// Plan the topics of a stage. `existing` gives a topic's partition count if it exists;
/// `missing_sources`: the partition count a missing source topic is created with (the embedded
/// default), or None if a missing source is an error (Kafka: the producers own those topics).
pub fn plan(
    program: &hir::Program,
    topo: &Topology,
    specs: &[Arc<TaskSpec>],
    existing: &mut dyn FnMut(&str) -> Result<Option<u32>, String>,
    missing_sources: Option<u32>,
) -> Result<TopicPlan, TopicError> {
    let mut known: BTreeMap<String, u32> = BTreeMap::new();
    let mut topics = Vec::new();
    for s in &program.sources {
        let Some(t) = &s.topic else { continue };
        if known.contains_key(t) {
            continue;
        }
        let n = match (existing(t).map_err(TopicError::Backend)?, missing_sources) {
            (Some(n), _) => n,
            (None, Some(n)) => n.max(1),
            (None, None) => return Err(TopicError::MissingSource { topic: t.clone(), source_name: s.name.clone() }),
        };
        known.insert(t.clone(), n);
        topics.push(PlannedTopic { name: t.clone(), partitions: n, kind: TopicKind::Source });
    }
    let mut internal: BTreeMap<String, (u32, TopicKind)> = BTreeMap::new();
    // A repartition topic before a join is partitioned like the joined topic.
    for t in &topo.topics {
        if let (TopicRole::Repartition, Partitions::Like(other)) = (t.role, &t.partitions) {
            let n = *known.get(other).ok_or_else(|| TopicError::Missing(other.clone()))?;
            internal.insert(t.name.clone(), (n, TopicKind::Repartition));
            known.insert(t.name.clone(), n);
        }
    }
    let mut counts = vec![1u32; topo.subtopologies.len()];
    // Sub-topologies in order: a repartition topic's writer comes before its reader.
    for spec in specs {
        let mut inputs = vec![spec.main.topic.clone()];
        inputs.extend(spec.side_topics());
        let mut n: Option<(u32, &String)> = None;
        for t in &inputs {
            let c = *known.get(t).ok_or_else(|| TopicError::Missing(t.clone()))?;
            match n {
                Some((m, other)) if m != c => {
                    return Err(TopicError::CoPartitioning {
                        first: other.clone(),
                        first_count: m,
                        second: t.clone(),
                        second_count: c,
                    });
                }
                _ => n = Some((c, t)),
            }
        }
        let count = n.map_or(1, |(c, _)| c);
        if let Some(slot) = counts.get_mut(spec.sub) {
            *slot = count;
        }
        for t in &topo.topics {
            if t.role == TopicRole::Repartition
                && matches!(&t.partitions, Partitions::OfSubtopology(s) if *s == spec.sub)
            {
                internal.insert(t.name.clone(), (count, TopicKind::Repartition));
                known.insert(t.name.clone(), count);
            }
        }
        for st in &spec.stores {
            internal.insert(st.changelog.clone(), (count, TopicKind::Changelog));
        }
    }
    let widest = counts.iter().copied().max().unwrap_or(1);
    for t in &topo.topics {
        match t.role {
            TopicRole::DeadLetter | TopicRole::Late | TopicRole::Metrics => {
                internal.entry(t.name.clone()).or_insert((1, TopicKind::Side));
            }
            TopicRole::Sink if !known.contains_key(&t.name) && !internal.contains_key(&t.name) => {
                let n = existing(&t.name).map_err(TopicError::Backend)?.unwrap_or(widest);
                known.insert(t.name.clone(), n);
                topics.push(PlannedTopic { name: t.name.clone(), partitions: n, kind: TopicKind::Sink });
            }
            _ => {}
        }
    }
    topics.extend(internal.into_iter().map(|(name, (partitions, kind))| PlannedTopic { name, partitions, kind }));
    Ok(TopicPlan { counts, topics })
}

/// Apply a plan: `ensure(topic)` creates a topic if it is missing and returns its partition
/// count; an internal topic with another count than planned is an error.
pub fn apply(plan: &TopicPlan, ensure: &mut dyn FnMut(&PlannedTopic) -> Result<u32, String>) -> Result<(), TopicError> {
    for t in &plan.topics {
        let has = ensure(t).map_err(TopicError::Backend)?;
        if t.kind.internal() && has != t.partitions {
            return Err(TopicError::WrongCount { topic: t.name.clone(), has, needs: t.partitions });
        }
    }
    Ok(())
}

/// Topic → its configuration (name → value), as a broker reports it.
pub type TopicConfigs = BTreeMap<String, BTreeMap<String, String>>;

/// How far from a broker's clock the timestamps of records it takes may be, as the topics a
/// task writes to are configured (`message.timestamp.after.max.ms`, `…before.max.ms`, or the
/// older `…difference.max.ms`; none for a topic stamped at append, `LogAppendTime`). A record
/// whose event time lies beyond either bound leads to results no broker would take, so it is a
/// dead letter at once instead of a commit that fails for ever (docs/conventions.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimestampLimits {
    /// The tightest bound ahead of the clock, in ms, and the topic that sets it.
    pub ahead: Option<(i64, String)>,
    /// The tightest bound behind the clock, in ms, and the topic that sets it.
    pub behind: Option<(i64, String)>,
}

/// Bounds this large are no bound (the brokers' default is `Long.MAX_VALUE`).
const UNBOUNDED_MS: i64 = i64::MAX / 4;

impl TimestampLimits {
    /// The limits of `configs` (topic → its configuration), None if no topic sets one.
    pub fn of(configs: &TopicConfigs) -> Option<TimestampLimits> {
        let mut l = TimestampLimits::default();
        let tighter = |slot: &mut Option<(i64, String)>, ms: Option<i64>, topic: &str| {
            if let Some(ms) = ms.filter(|ms| (0..UNBOUNDED_MS).contains(ms)) {
                if slot.as_ref().is_none_or(|(m, _)| ms < *m) {
                    *slot = Some((ms, topic.to_string()));
                }
            }
        };
        for (topic, c) in configs {
            if c.get("message.timestamp.type").is_some_and(|t| t == "LogAppendTime") {
                continue;
            }
            let ms = |k: &str| c.get(k).and_then(|v| v.trim().parse::<i64>().ok());
            let difference = ms("message.timestamp.difference.max.ms");
            tighter(&mut l.ahead, ms("message.timestamp.after.max.ms"), topic);
            tighter(&mut l.ahead, difference, topic);
            tighter(&mut l.behind, ms("message.timestamp.before.max.ms"), topic);
            tighter(&mut l.behind, difference, topic);
        }
        (l != TimestampLimits::default()).then_some(l)
    }

    /// Whether a record of event time `ts`, read when the clock says `now`, leads to results
    /// the topics take. A margin (a tenth of the bound, at most a minute ahead and five minutes
    /// behind) leaves room for clocks that differ and for the time until the commit.
    pub fn check(&self, ts: i64, now: i64) -> Result<(), String> {
        if let Some((ms, topic)) = &self.ahead {
            let limit = now.saturating_add(ms - (ms / 10).min(60_000));
            if ts > limit {
                return Err(format!(
                    "the event time {ts} is {} ms ahead of this machine's clock ({now}): topic `{topic}` takes no record more than {ms} ms ahead of the broker's clock (message.timestamp.after.max.ms), so its results could never be written",
                    ts - now
                ));
            }
        }
        if let Some((ms, topic)) = &self.behind {
            let limit = now.saturating_sub(ms - (ms / 10).min(300_000));
            if ts < limit {
                return Err(format!(
                    "the event time {ts} is {} ms behind this machine's clock ({now}): topic `{topic}` takes no record more than {ms} ms behind the broker's clock (message.timestamp.before.max.ms), so its results could never be written",
                    now.saturating_sub(ts)
                ));
            }
        }
        Ok(())
    }
}

/// The largest record each topic a task writes takes (Kafka: the topic's `max.message.bytes`
/// and the producer's `message.max.bytes`; the embedded log: `embedded.max_message_bytes`). A
/// result over it would fail every commit, so the input record that made it is a dead letter
/// instead (docs/conventions.md, "Records too large to write").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeLimits {
    /// Topics that bound their records more tightly than `all`: their bound.
    topics: BTreeMap<String, usize>,
    /// The bound of every record, and the setting that gives it.
    all: (usize, &'static str),
    /// The tightest of them (a record this small fits every topic: no lookup).
    tightest: usize,
}

/// What a record takes besides its key, value and headers' bytes, at most: a record batch of one
/// record (61 bytes of batch header, about 20 of the record's lengths and offsets) with room to
/// spare; and per header, its lengths.
pub const RECORD_OVERHEAD: usize = 128;
pub const HEADER_OVERHEAD: usize = 10;

/// Kafka's producer default for `message.max.bytes`, and the embedded log's default bound.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = crate::config::DEFAULT_MAX_MESSAGE_BYTES as usize;

impl SizeLimits {
    /// One bound for every topic, given by `setting`.
    pub fn uniform(max: usize, setting: &'static str) -> SizeLimits {
        SizeLimits { topics: BTreeMap::new(), all: (max, setting), tightest: max }
    }

    /// On Kafka: the producer's bound (`message.max.bytes`) and each topic's
    /// `max.message.bytes` in `configs`, where it is tighter.
    pub fn kafka(configs: &TopicConfigs, producer_max: usize) -> SizeLimits {
        let topics = configs
            .iter()
            .filter_map(|(t, c)| Some((t.clone(), c.get("max.message.bytes")?.trim().parse::<usize>().ok()?)))
            .filter(|(_, max)| *max < producer_max)
            .collect::<BTreeMap<String, usize>>();
        let tightest = topics.values().copied().fold(producer_max, usize::min);
        SizeLimits { topics, all: (producer_max, "message.max.bytes"), tightest }
    }

    /// The tightest bound of any topic.
    pub fn tightest(&self) -> usize {
        self.tightest
    }

    /// Whether a record of about `bytes` bytes (key, value and headers, with
    /// [`RECORD_OVERHEAD`]) fits topic `topic`; if not, why, for the dead letter.
    pub fn check(&self, topic: &str, bytes: usize) -> Result<(), String> {
        if bytes <= self.tightest {
            return Ok(());
        }
        let (max, setting, whose) = match self.topics.get(topic) {
            Some(max) => (*max, "max.message.bytes", format!("topic `{topic}`")),
            None => (self.all.0, self.all.1, "the producer".to_string()),
        };
        if bytes <= max {
            return Ok(());
        }
        let whose = if setting == "embedded.max_message_bytes" { "the embedded log".to_string() } else { whose };
        Err(format!(
            "a result for topic `{topic}` would be about {bytes} bytes: {whose} takes at most {max} ({setting}), so it could never be written"
        ))
    }
}

/// A changelog whose cleanup policy is not `compact` alone (`delete`, or `compact,delete`: the
/// broker may delete state by time or size, and event times may be old) is refused, naming the
/// topic and the setting.
pub fn check_changelogs(changelogs: &[String], configs: &TopicConfigs) -> Result<(), TopicError> {
    for t in changelogs {
        let Some(policy) = configs.get(t).and_then(|c| c.get("cleanup.policy")) else { continue };
        if !policy.split(',').all(|p| p.trim() == "compact") {
            return Err(TopicError::NotCompacted { topic: t.clone(), policy: policy.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: &str = r#"
stream clicks from "clicks" {
  key user
  value json { user: string, page: string, ts: timestamp }
  time ts
}
table users from "users" {
  key id
  value json { id: string, region: string }
}
query views {
  from clicks
  join users on user
  group by users.region
  aggregate { n = count() }
  to "views-by-region"
}
"#;

    fn plan_with(existing: &[(&str, u32)], missing: Option<u32>) -> Result<TopicPlan, TopicError> {
        let program = crate::compile(PROGRAM).unwrap();
        let topo = crate::plan::lower(&program, "app");
        let specs: Vec<Arc<TaskSpec>> =
            crate::plan::physical::specs(&program, &topo).unwrap().into_iter().map(Arc::new).collect();
        let map: BTreeMap<String, u32> = existing.iter().map(|(t, n)| (t.to_string(), *n)).collect();
        plan(&program, &topo, &specs, &mut |t| Ok(map.get(t).copied()), missing)
    }

    #[test]
    fn counts_follow_the_inputs_and_a_missing_sink_gets_the_widest() {
        let p = plan_with(&[("clicks", 3), ("users", 3)], None).unwrap();
        assert_eq!(p.counts, vec![3, 3]);
        let by_name: BTreeMap<&str, (u32, TopicKind)> =
            p.topics.iter().map(|t| (t.name.as_str(), (t.partitions, t.kind))).collect();
        assert_eq!(by_name["views-by-region"], (3, TopicKind::Sink));
        assert_eq!(by_name["app-views-aggregate-changelog"], (3, TopicKind::Changelog));
        assert_eq!(by_name["app-dlq"], (1, TopicKind::Side));
        assert!(by_name.keys().any(|n| n.ends_with("-repartition")));
    }

    #[test]
    fn missing_sources_are_created_or_refused() {
        let p = plan_with(&[], Some(2)).unwrap();
        assert!(p.topics.iter().any(|t| t.name == "clicks" && t.partitions == 2 && t.kind == TopicKind::Source));
        let e = plan_with(&[("users", 1)], None).unwrap_err();
        assert!(matches!(e, TopicError::MissingSource { ref topic, .. } if topic == "clicks"), "{e}");
    }

    #[test]
    fn co_partitioned_inputs_must_agree() {
        let e = plan_with(&[("clicks", 3), ("users", 2)], None).unwrap_err();
        assert!(matches!(e, TopicError::CoPartitioning { .. }), "{e}");
    }

    fn configs(entries: &[(&str, &[(&str, &str)])]) -> TopicConfigs {
        entries
            .iter()
            .map(|(t, c)| (t.to_string(), c.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
            .collect()
    }

    #[test]
    fn timestamp_limits_are_the_tightest_of_the_written_topics() {
        let max = i64::MAX.to_string();
        let c = configs(&[
            ("a", &[("message.timestamp.after.max.ms", "3600000"), ("message.timestamp.before.max.ms", &max)]),
            (
                "b",
                &[("message.timestamp.after.max.ms", "7200000"), ("message.timestamp.difference.max.ms", "86400000")],
            ),
            ("c", &[("message.timestamp.after.max.ms", "1000"), ("message.timestamp.type", "LogAppendTime")]),
        ]);
        let l = TimestampLimits::of(&c).unwrap();
        assert_eq!(l.ahead, Some((3_600_000, "a".to_string())));
        assert_eq!(l.behind, Some((86_400_000, "b".to_string())));
        let now = 1_700_000_000_000;
        assert!(l.check(now + 3_500_000, now).is_ok());
        let e = l.check(now + 3_590_000, now).unwrap_err();
        assert!(e.contains("topic `a`") && e.contains("message.timestamp.after.max.ms"), "{e}");
        assert!(l.check(now - 86_000_000, now).is_ok());
        assert!(l.check(now - 86_300_000, now).unwrap_err().contains("before.max.ms"));
        let unbounded = configs(&[("a", &[("message.timestamp.after.max.ms", &max)])]);
        assert_eq!(TimestampLimits::of(&unbounded), None);
    }

    #[test]
    fn a_changelog_that_is_not_compacted_is_refused() {
        let names = vec!["cl".to_string()];
        assert!(check_changelogs(&names, &configs(&[("cl", &[("cleanup.policy", "compact")])])).is_ok());
        assert!(check_changelogs(&names, &configs(&[("cl", &[("cleanup.policy", "compact,delete")])])).is_err());
        let e = check_changelogs(&names, &configs(&[("cl", &[("cleanup.policy", "delete")])])).unwrap_err();
        assert!(e.to_string().contains("changelog `cl` has cleanup.policy=delete"), "{e}");
    }

    #[test]
    fn an_internal_topic_with_another_count_is_refused() {
        let p = plan_with(&[("clicks", 2), ("users", 2)], None).unwrap();
        let e = apply(&p, &mut |t| Ok(if t.kind == TopicKind::Changelog { 5 } else { t.partitions })).unwrap_err();
        assert!(matches!(e, TopicError::WrongCount { has: 5, needs: 2, .. }), "{e}");
    }
}
