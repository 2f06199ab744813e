//! The control topic on Kafka: reading it (to its end at start-up, then as it grows) and
//! writing the statuses of its statements.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::control::{self, ControlRecord};
use crate::hir;
use crate::kafka::{client, is_fatal, stored, Kafka, Reader, TIMEOUT};
use crate::record::{Record, Start};
use crate::runtime::error::RunError;
use crate::runtime::hub::{ControlLog, Hub};
use crate::runtime::kafka::feed::reader;
use crate::runtime::options::RunOptions;

type Result<T> = std::result::Result<T, RunError>;

/// The control topic on Kafka: its reader (a consumer assigned to its one partition), and the
/// status topic written with a plain produce.
struct KafkaControl<'a> {
    kafka: &'a Kafka,
    reader: &'a BaseConsumer,
    app: &'a str,
}

impl ControlLog for KafkaControl<'_> {
    fn read(&mut self, next: u64, to_end: bool) -> Result<Vec<ControlRecord>> {
        self.read_records(next, to_end)
    }

    fn write_statuses(&mut self, records: Vec<Record>, _next: u64) -> Result<()> {
        let records: Vec<(u32, Record)> = records.into_iter().map(|r| (0, r)).collect();
        // (A status written twice reads as once: statuses are keyed by their control offset.)
        self.kafka.produce_plain(&control::status_topic(self.app), &records)?;
        Ok(())
    }
}

impl KafkaControl<'_> {
    /// [`ControlLog::read`], with the Kafka backend's errors as text.
    fn read_records(&mut self, next: u64, to_end: bool) -> Result<Vec<ControlRecord>> {
        let mut records = Vec::new();
        let started = Instant::now();
        let topic = control::control_topic(self.app);
        let reader = self.reader;
        // With `to_end`: up to the end offset as of now (past any transaction marker).
        let end = if to_end { self.kafka.watermarks(&topic, 0)?.1.max(0) as u64 } else { 0 };
        let position = |r: &BaseConsumer| {
            r.position()
                .ok()
                .and_then(|tpl| tpl.find_partition(&topic, 0).map(|e| e.offset()))
                .and_then(|o| if let Offset::Offset(o) = o { Some(o.max(0) as u64) } else { None })
                .unwrap_or(0)
        };
        loop {
            if to_end {
                let got = records.last().map_or(next, |r: &ControlRecord| r.offset + 1);
                if got >= end || position(reader) >= end {
                    break;
                }
            }
            match reader.poll(if to_end { Duration::from_millis(100) } else { Duration::ZERO }) {
                Some(Ok(m)) => {
                    let s = stored(&m);
                    records.push(ControlRecord {
                        offset: s.offset,
                        timestamp: s.record.timestamp,
                        headers: s.record.headers,
                        value: s.record.value,
                    });
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) if is_fatal(&e) => return Err(client("cannot read the control topic")(e).into()),
                Some(Err(e)) => {
                    // Transient (a broker connection dropped): librdkafka reconnects by itself.
                    eprintln!("reading `{topic}`: {e}");
                    if !to_end {
                        break;
                    }
                }
                None if !to_end => break,
                None if started.elapsed() > TIMEOUT => {
                    // An open transaction holds the rest: what is readable is evaluated.
                    eprintln!("`{topic}` could not be read to its end offset {end} within {TIMEOUT:?}; going on with what is readable");
                    break;
                }
                None => {}
            }
        }
        Ok(records)
    }
}

/// Read the control records that arrived into the hub (with `to_end`, until the end of the
/// topic) and write their statuses. True if the program or a table changed.
pub(super) fn poll_control(
    kafka: &Kafka,
    reader: &BaseConsumer,
    hub: &mut Hub,
    app: &str,
    to_end: bool,
) -> Result<bool> {
    hub.poll(&mut KafkaControl { kafka, reader, app }, to_end)
}

/// The application's control log read in full (its control and status topics made if missing),
/// and the reader that follows it: tasks start with the program as of its end.
pub(super) fn read_control(kafka: &Kafka, program: &hir::Program, opts: &RunOptions) -> Result<(Hub, Reader)> {
    let mut hub = Hub::new(program, opts)?;
    let control_topic = control::control_topic(&opts.app);
    let status_topic = control::status_topic(&opts.app);
    for t in [&control_topic, &status_topic] {
        kafka.ensure_topic_with(t, 1, &control::topic_configs(t))?;
    }
    hub.written = kafka
        .read_to_ends(&status_topic, &Start::Beginning)?
        .0
        .iter()
        .filter_map(|(_, s)| std::str::from_utf8(s.record.key.as_deref()?).ok()?.parse::<u64>().ok())
        .map(|o| o + 1)
        .max()
        .unwrap_or(0);
    let control_reader = reader(kafka, opts)?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&control_topic, 0, Offset::Beginning)?;
    control_reader.assign(&tpl).map_err(client(format!("cannot read `{control_topic}`")))?;
    poll_control(kafka, &control_reader, &mut hub, &opts.app, true)?;
    hub.verbose = true;
    Ok((hub, control_reader))
}
