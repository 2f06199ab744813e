//! Kafka's commit step (`TxnCommit`, the core's `Commit`): a commit's records produced and,
//! once acknowledged, each main partition's offset committed with its tasks' commit records;
//! one transaction under `exactly_once`.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;
use rdkafka::{Offset, TopicPartitionList};
use rustc_hash::FxHashMap;

use crate::kafka::{client, BrokerError, Kafka, TIMEOUT};
use crate::plan::physical::TaskSpec;
use crate::record::{Pos, Record};
use crate::runtime::error::RunError;
use crate::runtime::kafka::producer::Producer;
use crate::runtime::run::commit::{self, Share};

type Result<T> = std::result::Result<T, RunError>;

/// The partition count of a topic written to, read once.
fn partition_count(kafka: &Kafka, partitions: &mut BTreeMap<String, u32>, topic: &str) -> Result<u32> {
    if let Some(n) = partitions.get(topic) {
        return Ok(*n);
    }
    let n = kafka.partitions(topic)?.ok_or_else(|| {
        RunError::from(BrokerError::State(format!("output topic `{topic}` does not exist on {}", kafka.servers())))
    })?;
    partitions.insert(topic.to_string(), n);
    Ok(n)
}

/// A main partition's offset metadata: its tasks' commit records by task name.
type CommitRecords = serde_json::Map<String, serde_json::Value>;

/// Kafka's commit step: the changelog records and outputs produced, and once the broker has
/// acknowledged them, each main partition's offset committed with its tasks' commit records
/// (and the changelog ends they reach) as the offset's metadata. Under `exactly_once` all of
/// it is one transaction.
pub(super) struct TxnCommit<'a, C: ConsumerContext> {
    pub(super) producer: &'a Producer,
    pub(super) kafka: &'a Kafka,
    pub(super) partitions: &'a mut BTreeMap<String, u32>,
    pub(super) consumer: &'a BaseConsumer<C>,
    pub(super) eos: bool,
    /// Records of the instance's own (metrics), produced with the commit: (topic, record) to
    /// partition 0.
    pub(super) extra: Vec<(String, Record)>,
    /// `at_least_once`: the offsets of a commit whose records were produced and acknowledged
    /// were refused because the group is rebalancing; the next commit carries them (as Kafka
    /// Streams does, rather than sending the tasks back to their last commit, which would
    /// process and emit everything since once more). Read back by the caller after a commit.
    pub(super) offsets_owed: bool,
}

impl<C: ConsumerContext> commit::Commit for TxnCommit<'_, C> {
    fn commit(&mut self, shares: Vec<Share<'_>>) -> Result<Vec<Vec<Pos>>> {
        self.commit_all(shares)
    }

    fn ends_now(&self, _spec: &TaskSpec, _p: u32, known: &[Pos]) -> Result<Vec<Pos>> {
        Ok(known.to_vec())
    }
}

impl<C: ConsumerContext> TxnCommit<'_, C> {
    fn commit_all(&mut self, shares: Vec<Share<'_>>) -> Result<Vec<Vec<Pos>>> {
        let producer = self.producer;
        if self.eos {
            producer.inner.begin_transaction().map_err(client("cannot begin a transaction"))?;
        }
        for s in &shares {
            for (changelog, ch) in s.changelog() {
                producer.send_parts(
                    changelog,
                    s.partition,
                    Some(&ch.key),
                    ch.value.as_deref(),
                    ch.timestamp,
                    std::iter::empty(),
                )?;
            }
        }
        for s in &shares {
            for o in s.outputs.iter() {
                let n = partition_count(self.kafka, self.partitions, o.topic())?;
                producer.send_parts(o.topic(), o.partition_in(n), o.key(), o.value(), o.timestamp(), o.headers())?;
            }
        }
        for (topic, r) in std::mem::take(&mut self.extra) {
            producer.send(&topic, 0, &r)?;
        }
        producer.flush()?;
        // Where each changelog ends once this commit is in.
        let mut delivered: BTreeMap<&str, FxHashMap<i32, i64>> = BTreeMap::new();
        let ends: Vec<Vec<Pos>> = shares
            .iter()
            .map(|s| {
                s.spec
                    .stores
                    .iter()
                    .zip(s.ends)
                    .map(|(st, end)| {
                        let d = delivered
                            .entry(st.changelog.as_str())
                            .or_insert_with(|| producer.take_delivered(&st.changelog));
                        let offset = d.get(&(s.partition as i32)).map_or(end.offset, |o| end.offset.max(*o as u64 + 1));
                        Pos::at(offset)
                    })
                    .collect()
            })
            .collect();
        // Per main partition: the lowest position of its tasks, with their commit records.
        let mut units: BTreeMap<(&str, u32), (Option<u64>, CommitRecords)> = BTreeMap::new();
        for (s, ends) in shares.into_iter().zip(&ends) {
            let key = format!("{}/{}", s.spec.main.topic, s.partition);
            let unit = units.entry((s.spec.main.topic.as_str(), s.partition)).or_default();
            if let Some(pos) = s.positions.get(&key) {
                unit.0 = Some(unit.0.map_or(pos.offset, |o| o.min(pos.offset)));
            }
            let mut meta = s.meta;
            let changelogs: serde_json::Map<String, serde_json::Value> =
                s.spec.stores.iter().zip(ends).map(|(st, e)| (st.name.clone(), serde_json::json!(e.offset))).collect();
            meta["changelogs"] = serde_json::Value::Object(changelogs);
            unit.1.insert(s.spec.name.clone(), meta);
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, p), (offset, meta)) in units {
            tpl.add_partition_offset(topic, p as i32, Offset::Offset(offset.unwrap_or(0) as i64))?;
            if let Some(mut el) = tpl.find_partition(topic, p as i32) {
                el.set_metadata(serde_json::Value::Object(meta).to_string());
            }
        }
        if self.eos {
            if tpl.count() > 0 {
                let gm = self.consumer.group_metadata().ok_or_else(|| {
                    RunError::from(BrokerError::State("the consumer has no group metadata".to_string()))
                })?;
                producer
                    .inner
                    .send_offsets_to_transaction(&tpl, &gm, TIMEOUT)
                    .map_err(client("cannot add the offsets to the transaction"))?;
            }
            producer.inner.commit_transaction(TIMEOUT).map_err(client("cannot commit the transaction"))?;
        } else if tpl.count() > 0 {
            let mut tries = 0;
            loop {
                match self.consumer.commit(&tpl, CommitMode::Sync) {
                    Ok(()) => break,
                    Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::RebalanceInProgress)) => {
                        // The records are in; the group takes no offsets until it has settled.
                        self.offsets_owed = true;
                        return Ok(ends);
                    }
                    Err(e) => {
                        tries += 1;
                        let retriable = matches!(&e, KafkaError::ConsumerCommit(c) if matches!(c, RDKafkaErrorCode::RequestTimedOut | RDKafkaErrorCode::CoordinatorLoadInProgress | RDKafkaErrorCode::NotCoordinator | RDKafkaErrorCode::CoordinatorNotAvailable));
                        if !retriable || tries >= 5 {
                            return Err(client("cannot commit offsets")(e).into());
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        }
        self.offsets_owed = false;
        Ok(ends)
    }
}
