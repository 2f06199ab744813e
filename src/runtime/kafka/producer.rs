//! The producer of a Kafka instance: idempotent (transactional under `exactly_once`), its
//! defaults, and what its delivery reports said.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use rustc_hash::FxHashMap;

use crate::kafka::{client, BrokerError, Deliveries, Kafka, TIMEOUT};
use crate::record::Record;
use crate::runtime::error::RunError;
use crate::runtime::options::RunOptions;

type Result<T> = std::result::Result<T, RunError>;

/// The producer of an instance and what its delivery reports said.
pub(super) struct Producer {
    pub(super) inner: BaseProducer<Deliveries>,
    eos: bool,
    config: ClientConfig,
}

/// The producer's defaults, each overridden by a `kafka.<property>` setting: a short linger
/// (100 ms, Kafka Streams' default, cost as much CPU here and added latency), and room for a
/// commit interval's records.
const PRODUCER_DEFAULTS: &[(&str, &str)] = &[("linger.ms", "5"), ("queue.buffering.max.messages", "1000000")];

impl Producer {
    pub(super) fn create(k: &Kafka, opts: &RunOptions, instance: &str, eos: bool) -> Result<Producer> {
        let mut config = k.config();
        config.set("enable.idempotence", "true");
        // Defaults that a `kafka.<property>` setting overrides.
        for (key, value) in PRODUCER_DEFAULTS {
            if !opts.config.kafka.contains_key(*key) {
                config.set(*key, *value);
            }
        }
        if eos {
            config.set("transactional.id", format!("{}-{instance}", opts.app));
            if !opts.config.kafka.contains_key("transaction.timeout.ms") {
                config.set("transaction.timeout.ms", "60000");
            }
        }
        let mut p = Producer {
            inner: config.create_with_context(Deliveries::default()).map_err(client("Kafka producer"))?,
            eos,
            config,
        };
        p.init()?;
        Ok(p)
    }

    fn init(&mut self) -> Result<()> {
        if self.eos {
            // Fences any earlier producer with this transactional.id (a killed predecessor).
            self.inner.init_transactions(TIMEOUT).map_err(client("cannot initialize transactions"))?;
        }
        Ok(())
    }

    /// After a fatal error (fenced, …): a new producer with the same transactional.id.
    pub(super) fn recreate(&mut self) -> Result<()> {
        self.inner = self.config.create_with_context(Deliveries::default()).map_err(client("Kafka producer"))?;
        self.init()
    }

    pub(super) fn send(&self, topic: &str, partition: u32, r: &Record) -> Result<()> {
        let headers = r.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        self.send_parts(topic, partition, r.key.as_deref(), r.value.as_deref(), r.timestamp, headers)
    }

    /// Send one record made of borrowed parts (no copy of a changelog key or value).
    pub(super) fn send_parts<'h>(
        &self,
        topic: &str,
        partition: u32,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: i64,
        headers: impl ExactSizeIterator<Item = (&'h str, &'h [u8])>,
    ) -> Result<()> {
        let mut rec: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(topic).partition(partition as i32).timestamp(timestamp);
        if headers.len() > 0 {
            let mut h = OwnedHeaders::new_with_capacity(headers.len());
            for (k, v) in headers {
                h = h.insert(Header { key: k, value: Some(v) });
            }
            rec = rec.headers(h);
        }
        if let Some(k) = key {
            rec = rec.key(k);
        }
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        loop {
            match self.inner.send(rec) {
                Ok(()) => return Ok(()),
                // The queue is full: serve delivery reports, then send the record it gave back.
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    self.inner.poll(Duration::from_millis(10));
                    rec = back;
                }
                Err((e, _)) => return Err(client(format!("cannot produce to `{topic}`"))(e).into()),
            }
        }
    }

    /// Wait until every record sent is acknowledged; the first delivery failure is an error.
    pub(super) fn flush(&self) -> Result<()> {
        crate::kafka::flush(&self.inner, TIMEOUT).map_err(client("cannot deliver the commit's records"))?;
        match self.inner.context().first.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(BrokerError::State(e).into()),
            None => Ok(()),
        }
    }

    /// The offset after the last record delivered to each partition of `topic` since the last call.
    pub(super) fn take_delivered(&self, topic: &str) -> FxHashMap<i32, i64> {
        self.inner.context().last.lock().unwrap_or_else(|p| p.into_inner()).remove(topic).unwrap_or_default()
    }
}
