//! A task's inputs on Kafka: one reader per input partition, its prefetch bounded, and the
//! core's `Feed` over them.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::{client, is_fatal, stored, Batches, Fetched, Kafka, Reader};
use crate::plan::physical::TaskSpec;
use crate::record::{Pos, Stored};
use crate::runtime::error::RunError;
use crate::runtime::options::RunOptions;
use crate::runtime::run::{Feed, Next};

type Result<T> = std::result::Result<T, RunError>;

/// The readers of a task's inputs from its positions: one consumer per input, so that an
/// end-of-partition event names its input.
pub(super) fn feed_for(
    kafka: &Kafka,
    opts: &RunOptions,
    startup: &BTreeMap<(String, u32), u64>,
    spec: &TaskSpec,
    p: u32,
    positions: &BTreeMap<String, Pos>,
) -> Result<KafkaFeed> {
    let mut topics = vec![spec.main.topic.clone()];
    topics.extend(spec.side_topics());
    let mut readers = Vec::new();
    let mut next = Vec::new();
    let mut stop_at = Vec::new();
    for t in &topics {
        let pos = positions.get(&format!("{t}/{p}")).map_or(0, |x| x.offset);
        let reader = reader(kafka, opts)?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(t, p as i32, Offset::Offset(pos as i64))?;
        reader.assign(&tpl).map_err(client(format!("cannot read `{t}` partition {p}")))?;
        readers.push(reader);
        next.push(pos);
        stop_at.push(if opts.drain { startup.get(&(t.clone(), p)).copied() } else { None });
    }
    let n = topics.len();
    Ok(KafkaFeed {
        topics,
        partition: p as i32,
        readers,
        bufs: (0..n).map(|_| VecDeque::new()).collect(),
        eof: vec![false; n],
        next,
        stop_at,
    })
}

/// A reader of a task's input or of the control topic: its prefetch bounded (see
/// [`FEED_PREFETCH`]).
pub(super) fn reader(k: &Kafka, opts: &RunOptions) -> Result<Reader> {
    let mut c = reader_config(k, opts);
    for (key, value) in FEED_PREFETCH {
        if c.get(key).is_none() {
            c.set(*key, *value);
        }
    }
    Ok(Reader(c.create().map_err(client("Kafka consumer"))?))
}

/// How much a task's input reader fetches ahead, unless a `kafka.<property>` setting says
/// otherwise. librdkafka's defaults (100,000 messages or 64 MB per partition) held the whole
/// input of a 300,000-trade stats run in its queue, about 35 MB of a 123 MB peak; with these,
/// 88 MB at the same speed. (Changelog reads for a restore keep the defaults: they read ahead as
/// fast as they can.)
const FEED_PREFETCH: &[(&str, &str)] = &[("queued.min.messages", "10000"), ("queued.max.messages.kbytes", "4096")];

pub(super) fn reader_config(k: &Kafka, opts: &RunOptions) -> ClientConfig {
    let mut c = k.config();
    c.set("group.id", format!("{}.reader", opts.app))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed");
    // librdkafka stops fetching a partition once its local queue holds `queued.min.messages`
    // (100,000) and then waits `fetch.queue.backoff.ms`, a second by default, before it fetches
    // again: a reader that drains its queue fast (a restore, a task catching up) waited a second
    // per 100,000 records. (A setting of the user's own wins.)
    if c.get("fetch.queue.backoff.ms").is_none() {
        c.set("fetch.queue.backoff.ms", "10");
    }
    c
}

/// A task's inputs on Kafka: one reader (a consumer assigned to the one partition) per input,
/// with the records fetched so far. An input with no record fetched is at its end only once its
/// reader said so.
pub(super) struct KafkaFeed {
    pub(super) topics: Vec<String>,
    partition: i32,
    pub(super) readers: Vec<Reader>,
    bufs: Vec<VecDeque<Stored>>,
    eof: Vec<bool>,
    /// The offset after the last record fetched.
    pub(super) next: Vec<u64>,
    /// `--drain`: external inputs end at their start-up end.
    stop_at: Vec<Option<u64>>,
}

impl KafkaFeed {
    /// What input `i`'s reader has queued: one poll, and when it brings a record, up to
    /// [`FILL`] more in one batch call ([`Batches`]: a poll per record read the clock and locked
    /// the queue each time, 7 % of the processing thread's time in a stats run). (The poll
    /// first: an input at its end is asked again at every record of the others, a join's table
    /// while its stream flows, and a poll that finds nothing costs less than a batch's set-up.)
    fn fill(&mut self, i: usize) -> Result<()> {
        let first = match self.readers[i].poll(Duration::ZERO) {
            None => return Ok(()),
            Some(Ok(m)) => Got::Record(stored(&m)),
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // The position after the end: past any transaction markers.
                let pos = self.readers[i].position().ok();
                let at = pos.and_then(|p| p.find_partition(&self.topics[i], self.partition).map(|e| e.offset()));
                Got::End(match at {
                    Some(Offset::Offset(o)) => o.max(0) as u64,
                    _ => self.next[i],
                })
            }
            Some(Err(e)) => Got::Error(e),
        };
        let more = matches!(first, Got::Record(_));
        let KafkaFeed { readers, bufs, eof, next, stop_at, topics, .. } = self;
        let (buf, eof, next, stop_at, topic) = (&mut bufs[i], &mut eof[i], &mut next[i], stop_at[i], &topics[i]);
        let mut take = |got: Got| -> Result<()> {
            match got {
                Got::Record(s) => {
                    *eof = false;
                    // After the start-up end (`--drain`): left for the next run.
                    if stop_at.is_none_or(|stop| s.offset < stop) {
                        *next = s.offset + 1;
                        buf.push_back(s);
                    }
                }
                // The next offset, past any transaction markers after the last record. (What
                // follows in a batch is read on: records that came since the end said so.)
                Got::End(o) => {
                    *eof = true;
                    *next = (*next).max(stop_at.map_or(o, |stop| stop.min(o)));
                }
                Got::Error(e) if is_fatal(&e) => return Err(client(format!("cannot read `{topic}`"))(e).into()),
                // Transient (a broker connection dropped): librdkafka goes on fetching.
                Got::Error(e) => eprintln!("reading `{topic}`: {e}"),
            }
            Ok(())
        };
        take(first)?;
        if let (true, Some(mut batch)) = (more, Batches::new(&readers[i], FILL)) {
            batch.fetch(Duration::ZERO);
            for m in batch.stored() {
                take(match m {
                    Ok(s) => Got::Record(s),
                    Err(Fetched::End(o)) => Got::End(o),
                    Err(Fetched::Error(e)) => Got::Error(e),
                    Err(Fetched::Record(_)) => continue,
                })?;
            }
        }
        Ok(())
    }
}

/// One thing a reader's queue gave.
enum Got {
    Record(Stored),
    /// The partition's end: the next offset.
    End(u64),
    Error(KafkaError),
}

/// Records a feed takes from a reader's queue at once.
const FILL: usize = 1_000;

impl Feed for KafkaFeed {
    fn peek(&mut self, i: usize) -> Result<Next> {
        if self.bufs[i].is_empty() {
            self.fill(i)?;
        }
        if let Some(s) = self.bufs[i].front() {
            return Ok(Next::Record(s.record.timestamp));
        }
        if self.eof[i] || self.stop_at[i].is_some_and(|s| self.next[i] >= s) {
            Ok(Next::End)
        } else {
            Ok(Next::Unknown)
        }
    }

    fn take(&mut self, i: usize) -> Option<Stored> {
        self.bufs[i].pop_front()
    }
    fn peeked(&self, i: usize) -> Option<&Stored> {
        self.bufs[i].front()
    }
    fn lags(&self) -> Vec<(String, u64)> {
        // (The end offsets librdkafka last fetched with records: no request to the broker.)
        (0..self.topics.len())
            .map(|i| {
                let at = self.bufs[i].front().map_or(self.next[i], |s| s.offset);
                let high = crate::kafka::cached_high_watermark(&self.readers[i], &self.topics[i], self.partition);
                (format!("{}/{}", self.topics[i], self.partition), (high.unwrap_or(0).max(0) as u64).saturating_sub(at))
            })
            .collect()
    }
}
