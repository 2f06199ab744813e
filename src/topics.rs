//! Topics as the commands see them, whichever backend holds them: one interface ([`Topics`])
//! over the embedded log and over Kafka, chosen once, by the configuration ([`open`]).
//! `produce`, `consume`, `control`, `deploy`, `status`, `streamc test` and `run`'s program
//! checks read and append through it, never through a `match` on the backend. (The runtime's
//! two drivers use the same types through their own typed calls: their errors decide what a
//! run retries.)

use std::path::Path;

use crate::config::Config;
use crate::kafka::Kafka;
use crate::log::EmbeddedLog;
use crate::record::{Append, Pos, Record, Start, Stored};

/// What [`Topics::stream`] passes each record to (see there).
pub type Visit<'a> = dyn FnMut(Option<(u32, Stored)>) -> bool + 'a;

/// Topics, partitions and offsets on one backend. Errors are messages for the user.
pub trait Topics {
    /// Whether these are Kafka's (several instances may share an application there).
    fn is_kafka(&self) -> bool;

    /// The partition count of `topic`; None if it does not exist.
    fn partitions(&self, topic: &str) -> Result<Option<u32>, String>;

    /// Create `topic` with `partitions` partitions unless it exists (on Kafka with the topic
    /// configs given; `cleanup.policy=compact` makes an embedded topic compacted too); its
    /// partition count.
    fn ensure_topic(&self, topic: &str, partitions: u32, configs: &[(&str, &str)]) -> Result<u32, String>;

    /// Append records, each to its partition, at once: one commit on the embedded log, one
    /// flushed batch on Kafka.
    fn append(&self, topic: &str, records: Vec<(u32, Record)>) -> Result<(), String>;

    /// [`Topics::append`] of records a repetition of which changes nothing (a retry after a lost
    /// acknowledgement may write one twice): on Kafka without an idempotent producer, which
    /// sends nothing until it has its producer id (half a second from a new producer).
    fn append_repeatable(&self, topic: &str, records: Vec<(u32, Record)>) -> Result<(), String> {
        self.append(topic, records)
    }

    /// Every committed record of `topic` from where `start` says to its end as of now, each
    /// handed to `f` as it is read (`Some((partition, record))`), partition by partition; then,
    /// with `follow`, every record committed after, as it comes. `f(None)` says that the records
    /// so far are all there is for now (before a wait, and at the end). `f` returns false to
    /// stop. An error if the topic does not exist, or (not following) if a partition's end
    /// cannot be reached (on Kafka, an open transaction holding it).
    fn stream(&self, topic: &str, start: &Start, follow: bool, f: &mut Visit) -> Result<(), String>;

    /// The end offset of each partition asked for, as of now.
    fn ends(&self, parts: &[(String, u32)]) -> Result<Vec<u64>, String>;

    /// The records each partition asked for holds (None where that cannot be read): counted on
    /// the embedded log; on Kafka, end minus start offset (compaction may have removed some in
    /// between). A topic that does not exist holds none.
    fn record_counts(&self, parts: &[(String, u32)]) -> Result<Vec<Option<u64>>, String>;

    /// Every topic's name.
    fn topic_names(&self) -> Result<Vec<String>, String>;

    /// Delete `topics`, and the committed positions of application `app`: on Kafka its
    /// consumer group; on the embedded log its groups (`<app>#…`) but those `keep` names.
    fn delete(&self, topics: &[String], app: &str, keep: &dyn Fn(&str) -> bool) -> Result<(), String>;

    /// The metadata each task of application `app` committed last, by task name
    /// (`<sub-topology>#<partition>`): on the embedded log its group `<app>#<task>`; on Kafka
    /// the metadata of the group `app`'s committed offsets of the partitions of `main_topics`.
    fn committed_tasks(&self, app: &str, main_topics: &[String]) -> Result<Vec<(String, serde_json::Value)>, String>;

    /// The members of consumer group `group` now (the embedded log has none: one run of an
    /// application at a time holds its run lock).
    fn group_members(&self, group: &str) -> Result<usize, String>;

    /// A lock named `name` that one process holds at a time, for as long as the returned guard
    /// lives; None if another holds it. The embedded log locks a file in its directory; Kafka
    /// has no such lock, and always grants it.
    fn lock_exclusive(&self, _name: &str) -> Result<Option<Box<dyn std::any::Any>>, String> {
        Ok(Some(Box::new(())))
    }

    /// Every committed record of partition 0 of a one-partition topic (none if it does not
    /// exist): the control, status and metrics topics.
    fn read_all(&self, topic: &str) -> Result<Vec<Stored>, String> {
        if self.partitions(topic)?.is_none() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        self.stream(topic, &Start::At(vec![(0, 0)]), false, &mut |rec| {
            if let Some((0, s)) = rec {
                out.push(s);
            }
            true
        })?;
        Ok(out)
    }
}

/// The topics of the configured backend: Kafka when `kafka.bootstrap.servers` is set, else the
/// embedded log in `state_dir`.
pub fn open(state_dir: &Path, cfg: &Config) -> Result<Box<dyn Topics>, String> {
    if cfg.on_kafka() {
        Ok(Box::new(Kafka::connect(&cfg.kafka)?))
    } else {
        Ok(Box::new(EmbeddedLog::open(state_dir, cfg.embedded.fsync)?))
    }
}

impl Topics for EmbeddedLog {
    fn is_kafka(&self) -> bool {
        false
    }

    fn lock_exclusive(&self, name: &str) -> Result<Option<Box<dyn std::any::Any>>, String> {
        Ok(self.try_lock_named(name)?.map(|f| Box::new(f) as Box<dyn std::any::Any>))
    }

    fn partitions(&self, topic: &str) -> Result<Option<u32>, String> {
        Ok(self.topic(topic)?.map(|m| m.partitions))
    }

    fn ensure_topic(&self, topic: &str, partitions: u32, configs: &[(&str, &str)]) -> Result<u32, String> {
        if let Some(meta) = self.topic(topic)? {
            return Ok(meta.partitions);
        }
        let compacted = configs.iter().any(|(k, v)| *k == "cleanup.policy" && v.contains("compact"));
        Ok(self.create_topic(topic, partitions, compacted)?.partitions)
    }

    fn append(&self, topic: &str, records: Vec<(u32, Record)>) -> Result<(), String> {
        let mut appends: Vec<Append> = Vec::new();
        for (p, r) in &records {
            match appends.iter_mut().find(|a| a.partition == *p) {
                Some(a) => a.push(r),
                None => appends.push(Append::of(topic, *p, [r])),
            }
        }
        self.commit(appends, vec![]).map(|_| ()).map_err(String::from)
    }

    fn stream(&self, topic: &str, start: &Start, follow: bool, f: &mut Visit) -> Result<(), String> {
        let meta = self.topic(topic)?.ok_or_else(|| format!("no topic `{topic}` in {}", self.state_dir().display()))?;
        let mut committed = self.committed()?;
        // (A reader starts at a record's byte position, which only reading finds: from an offset
        // it reads from the start and skips the records before it.)
        // An offset at or past the end starts at the end, as on Kafka.
        let mut readers: Vec<_> = (0..meta.partitions)
            .filter_map(|p| {
                let end = committed.end(topic, p);
                let (pos, from) = match start.offset(p)? {
                    Some(o) if o < end.offset => (Pos::default(), o),
                    _ => (end, end.offset),
                };
                Some((p, from, self.reader(topic, p, pos)))
            })
            .collect();
        loop {
            for (p, from, r) in readers.iter_mut() {
                let end = committed.end(topic, *p);
                loop {
                    // (In batches: a large topic is never held whole.)
                    let batch = r.read(end, 10_000)?;
                    if batch.is_empty() {
                        break;
                    }
                    for s in batch {
                        if s.offset >= *from && !f(Some((*p, s))) {
                            return Ok(());
                        }
                    }
                }
            }
            if !f(None) || !follow {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            committed = self.committed()?;
        }
    }

    fn ends(&self, parts: &[(String, u32)]) -> Result<Vec<u64>, String> {
        let c = self.committed()?;
        Ok(parts.iter().map(|(topic, p)| c.end(topic, *p).offset).collect())
    }

    fn record_counts(&self, parts: &[(String, u32)]) -> Result<Vec<Option<u64>>, String> {
        parts
            .iter()
            .map(|(topic, p)| match self.topic(topic)? {
                Some(_) => self.records(topic, *p).map(Some).map_err(|e| e.to_string()),
                None => Ok(Some(0)),
            })
            .collect()
    }

    fn topic_names(&self) -> Result<Vec<String>, String> {
        Ok(self.topics()?)
    }

    fn delete(&self, topics: &[String], app: &str, keep: &dyn Fn(&str) -> bool) -> Result<(), String> {
        let prefix = format!("{app}#");
        Ok(EmbeddedLog::delete(self, topics, |g| g.starts_with(&prefix) && !keep(g))?)
    }

    fn committed_tasks(&self, app: &str, _main_topics: &[String]) -> Result<Vec<(String, serde_json::Value)>, String> {
        let prefix = format!("{app}#");
        Ok(self
            .committed()?
            .groups
            .into_iter()
            .filter_map(|(g, m)| Some((g.strip_prefix(&prefix)?.to_string(), m)))
            .collect())
    }

    fn group_members(&self, _group: &str) -> Result<usize, String> {
        Ok(0)
    }
}

impl Topics for Kafka {
    fn is_kafka(&self) -> bool {
        true
    }

    fn partitions(&self, topic: &str) -> Result<Option<u32>, String> {
        Ok(Kafka::partitions(self, topic)?)
    }

    fn ensure_topic(&self, topic: &str, partitions: u32, configs: &[(&str, &str)]) -> Result<u32, String> {
        Ok(self.ensure_topic_with(topic, partitions, configs)?)
    }

    fn append(&self, topic: &str, records: Vec<(u32, Record)>) -> Result<(), String> {
        Ok(self.produce(topic, &records)?)
    }

    fn append_repeatable(&self, topic: &str, records: Vec<(u32, Record)>) -> Result<(), String> {
        Ok(self.produce_plain(topic, &records)?)
    }

    fn stream(&self, topic: &str, start: &Start, follow: bool, f: &mut Visit) -> Result<(), String> {
        // (Read to the ends or an error; following, what could be read, and on from there.
        // Record by record, a partition at a time: a large topic is never held whole.)
        let (ends, stopped) = Kafka::read_each(self, topic, start, follow, &mut |p, s| f(Some((p, s))))?;
        if stopped || !f(None) || !follow {
            return Ok(());
        }
        // (librdkafka's poll does not say when it waits: each record is all there is for now.)
        Ok(Kafka::follow(self, topic, &ends, |r| match r {
            Some(r) => f(Some(r)) && f(None),
            None => f(None),
        })?)
    }

    fn ends(&self, parts: &[(String, u32)]) -> Result<Vec<u64>, String> {
        Ok(Kafka::ends(self, parts)?.into_iter().map(|e| e.max(0) as u64).collect())
    }

    fn record_counts(&self, parts: &[(String, u32)]) -> Result<Vec<Option<u64>>, String> {
        // (A topic not created yet holds nothing; asking the broker for its offsets would wait.)
        let mut exists = std::collections::BTreeMap::new();
        for (topic, _) in parts {
            if !exists.contains_key(topic) {
                exists.insert(topic.clone(), Kafka::partitions(self, topic)?.unwrap_or(0));
            }
        }
        let there: Vec<bool> = parts.iter().map(|(t, p)| exists.get(t).is_some_and(|n| p < n)).collect();
        let asked: Vec<(String, u32)> = parts.iter().zip(&there).filter(|(_, t)| **t).map(|(p, _)| p.clone()).collect();
        let mut extents = self.extents(&asked)?.into_iter();
        Ok(there
            .into_iter()
            .map(|t| match t {
                true => extents.next().flatten().map(|(low, high)| (high - low).max(0) as u64),
                false => Some(0),
            })
            .collect())
    }

    fn topic_names(&self) -> Result<Vec<String>, String> {
        Ok(Kafka::topic_names(self)?)
    }

    fn delete(&self, topics: &[String], app: &str, _keep: &dyn Fn(&str) -> bool) -> Result<(), String> {
        Ok(Kafka::delete(self, topics, app)?)
    }

    fn committed_tasks(&self, app: &str, main_topics: &[String]) -> Result<Vec<(String, serde_json::Value)>, String> {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let mut c = self.config();
        c.set("group.id", app).set("enable.auto.commit", "false");
        let consumer: BaseConsumer =
            c.create().map_err(|e| format!("Kafka consumer: {}", crate::kafka::describe(&e)))?;
        let consumer = crate::kafka::Reader(consumer);
        let mut tpl = rdkafka::TopicPartitionList::new();
        for topic in main_topics {
            for p in 0..Kafka::partitions(self, topic)?.unwrap_or(0) {
                tpl.add_partition(topic, p as i32);
            }
        }
        let committed = consumer
            .committed_offsets(tpl, std::time::Duration::from_secs(10))
            .map_err(|e| format!("cannot read the offsets of group `{app}`: {e}"))?;
        let mut out = Vec::new();
        for el in committed.elements() {
            let Ok(serde_json::Value::Object(meta)) = serde_json::from_str::<serde_json::Value>(el.metadata()) else {
                continue;
            };
            for (name, m) in meta {
                out.push((format!("{name}#{}", el.partition()), m));
            }
        }
        Ok(out)
    }

    fn group_members(&self, group: &str) -> Result<usize, String> {
        Ok(Kafka::group_members(self, group)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: &str) -> Record {
        Record { key: Some(v.as_bytes().to_vec()), value: Some(v.as_bytes().to_vec()), timestamp: 1, headers: vec![] }
    }

    /// The embedded log through the interface: records appended to partitions at once are read
    /// back partition by partition in order, to the end or from it, and followed until told to
    /// stop; counts, ends and names agree with what was appended.
    #[test]
    fn the_embedded_log_reads_back_what_was_appended_through_the_interface() {
        let dir = std::env::temp_dir().join(format!("streamc-topics-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        let t: &dyn Topics = &log;
        assert!(!t.is_kafka());
        assert_eq!(t.partitions("t").unwrap(), None);
        assert!(t.read_all("t").unwrap().is_empty(), "a topic that does not exist holds nothing");
        let e = t.stream("t", &Start::Beginning, false, &mut |_| true).unwrap_err();
        assert_eq!(e, format!("no topic `t` in {}", dir.display()));
        assert_eq!(t.ensure_topic("t", 2, &[]).unwrap(), 2);
        assert_eq!(t.ensure_topic("t", 5, &[]).unwrap(), 2, "an existing topic keeps its partitions");
        t.append("t", vec![(1, rec("a")), (0, rec("b")), (1, rec("c"))]).unwrap();
        let mut seen = Vec::new();
        let mut ends = 0;
        t.stream("t", &Start::Beginning, false, &mut |r| {
            match r {
                Some((p, s)) => {
                    seen.push((p, s.offset, String::from_utf8_lossy(s.record.value.as_deref().unwrap()).into_owned()))
                }
                None => ends += 1,
            }
            true
        })
        .unwrap();
        assert_eq!(seen, [(0, 0, "b".to_string()), (1, 0, "a".to_string()), (1, 1, "c".to_string())]);
        assert_eq!(ends, 1, "the end is said once when not following");
        let mut from_end = 0;
        t.stream("t", &Start::End, false, &mut |r| {
            from_end += r.is_some() as usize;
            true
        })
        .unwrap();
        assert_eq!(from_end, 0, "from the end: nothing yet");
        // Following: stops when told to, after the records appended while it waits.
        let mut got = 0;
        t.stream("t", &Start::Beginning, true, &mut |r| {
            got += r.is_some() as usize;
            got < 3
        })
        .unwrap();
        assert_eq!(got, 3);
        let parts = [("t".to_string(), 0), ("t".to_string(), 1), ("u".to_string(), 0)];
        assert_eq!(t.ends(&parts[..2]).unwrap(), [1, 2]);
        assert_eq!(t.record_counts(&parts).unwrap(), [Some(1), Some(2), Some(0)]);
        assert_eq!(t.topic_names().unwrap(), ["t"]);
        assert_eq!(t.group_members("app").unwrap(), 0);
        // An application's committed task metadata, and its deletion but for what it keeps.
        let meta = |n: u64| serde_json::json!({ "inputs": {}, "control": n });
        log.commit(
            vec![],
            vec![("app#q#0".into(), meta(1)), ("app#keep".into(), meta(2)), ("other#q#0".into(), meta(3))],
        )
        .unwrap();
        assert_eq!(
            t.committed_tasks("app", &[]).unwrap(),
            [("keep".to_string(), meta(2)), ("q#0".to_string(), meta(1))]
        );
        t.delete(&["t".to_string()], "app", &|g| g == "app#keep").unwrap();
        assert_eq!(t.partitions("t").unwrap(), None);
        assert_eq!(t.committed_tasks("app", &[]).unwrap(), [("keep".to_string(), meta(2))]);
        assert_eq!(t.committed_tasks("other", &[]).unwrap(), [("q#0".to_string(), meta(3))]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
