//! A task's inputs on Kafka: one reader per input partition, its prefetch bounded, and the
//! core's `Feed` over them.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::{client, is_fatal, Batches, Fetched, Kafka, Reader};
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
    /// What input `i`'s reader has queued, up to [`FILL`] records, in one batch call
    /// ([`Batches`]: a poll per record read the clock and locked the queue each time, a tenth
    /// of the processing thread's time in a stats run).
    fn fill(&mut self, i: usize) -> Result<()> {
        let Some(mut batch) = Batches::new(&self.readers[i], FILL) else { return Ok(()) };
        batch.fetch(Duration::ZERO);
        for m in batch.stored() {
            match m {
                Ok(s) => {
                    self.eof[i] = false;
                    if self.stop_at[i].is_some_and(|stop| s.offset >= stop) {
                        // After the start-up end (`--drain`): left for the next run.
                        continue;
                    }
                    self.next[i] = s.offset + 1;
                    self.bufs[i].push_back(s);
                }
                // The next offset, past any transaction markers after the last record. (The
                // rest of the batch is read on: records that came since the end said so are
                // released with the batch.)
                Err(Fetched::End(o)) => {
                    self.eof[i] = true;
                    let o = self.stop_at[i].map_or(o, |stop| stop.min(o));
                    self.next[i] = self.next[i].max(o);
                }
                Err(Fetched::Error(e)) if is_fatal(&e) => {
                    return Err(client(format!("cannot read `{}`", self.topics[i]))(e).into())
                }
                // Transient (a broker connection dropped): librdkafka goes on fetching.
                Err(Fetched::Error(e)) => eprintln!("reading `{}`: {e}", self.topics[i]),
                Err(Fetched::Record(_)) => {}
            }
        }
        Ok(())
    }
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
