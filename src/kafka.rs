//! Apache Kafka as a log, through rdkafka: topic set-up with the admin API, producing with the
//! same murmur2 partitioning as the embedded log, and reading a topic's records up to its end.
//! Used by `streamc produce` and `streamc consume` when `kafka.bootstrap.servers` is set, and
//! by the Kafka driver (`runtime::kafka`) for topic set-up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use rustc_hash::FxHashMap;

use crate::record::{Entry, Pos, Record, Start, Stored};

/// A producer's delivery reports: the last offset written to each partition (the runtime's
/// changelog checkpoints come from here), how many records the broker refused, and the first
/// refusal's reason.
#[derive(Default)]
pub(crate) struct Deliveries {
    pub(crate) last: Mutex<FxHashMap<String, FxHashMap<i32, i64>>>,
    pub(crate) failed: AtomicU64,
    pub(crate) first: Mutex<Option<String>>,
}

impl rdkafka::client::ClientContext for Deliveries {}

impl rdkafka::producer::ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => {
                let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
                let per = match last.get_mut(m.topic()) {
                    Some(per) => per,
                    None => last.entry(m.topic().to_string()).or_default(),
                };
                let o = per.entry(m.partition()).or_insert(-1);
                *o = (*o).max(m.offset());
            }
            Err((e, m)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| {
                    let hint = if matches!(e, KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTimestamp)) {
                        " (brokers refuse timestamps further ahead of their clock than \
                         `message.timestamp.after.max.ms`, one hour by default since Kafka 4.0)"
                    } else {
                        ""
                    };
                    format!("`{}` partition {} refused a record: {e}{hint}", m.topic(), m.partition())
                });
            }
        }
    }
}

/// What a client trying to reach the cluster heard: its error events (code and reason) and
/// librdkafka's last log line of level error or worse (a failed connection in words; these
/// lines otherwise go nowhere).
#[derive(Default)]
struct Reach {
    events: Mutex<Vec<(RDKafkaErrorCode, String)>>,
    last: Mutex<Option<String>>,
}

impl rdkafka::client::ClientContext for Reach {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, _fac: &str, message: &str) {
        if (level as i32) <= rdkafka::config::RDKafkaLogLevel::Error as i32 {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.to_string());
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(code) = error.rdkafka_error_code() {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            // The last ones only: the client lives as long as its `Kafka` (the metadata client),
            // through any number of dropped connections.
            if events.len() >= 64 {
                events.remove(0);
            }
            events.push((code, reason.to_string()));
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Reach {}

impl Reach {
    /// Forget what was heard (a client taken up again: a refusal is judged afresh).
    fn forget(&self) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clear();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// How often a refusal must be heard before it is taken as final: a broker that drops a
    /// connection during its SASL handshake (a rolling restart) is reported as an
    /// authentication failure once; a wrong password or an untrusted certificate is heard at
    /// every one of librdkafka's reconnections (100 ms, then longer).
    const REFUSALS: usize = 2;

    /// Why the cluster could not be reached, in librdkafka's words: its last failed connection,
    /// else its last error event.
    fn last(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        last.or_else(|| self.events.lock().unwrap_or_else(|p| p.into_inner()).last().map(|(_, r)| r.clone()))
    }

    /// The error to stop with when the cluster refused the TLS handshake or the login: these
    /// do not heal by retrying.
    fn refused(&self, k: &Kafka) -> Option<String> {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let (what, check) = [
            (
                RDKafkaErrorCode::Authentication,
                "refused the SASL login",
                "check kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password (or the OAUTHBEARER settings)",
            ),
            (
                RDKafkaErrorCode::SSL,
                "failed the TLS handshake",
                "check kafka.ssl.ca.location (the CA that signed the brokers' certificates) and, for client \
                 certificates, kafka.ssl.certificate.location and kafka.ssl.key.location",
            ),
        ]
        .into_iter()
        .find_map(|(code, what, check)| {
            // (A handshake that failed locally is a dropped connection, not a refusal.)
            let heard: Vec<&String> = events
                .iter()
                .filter(|(c, r)| *c == code && !r.contains("handshake failed: Local:"))
                .map(|(_, r)| r)
                .collect();
            let reason = heard.last().filter(|_| heard.len() >= Self::REFUSALS)?;
            Some((format!("{what}: {reason}"), check))
        })?;
        Some(format!("Kafka at {} {what}; {check}", k.servers()))
    }
}

/// An error of the Kafka client layer, with what was being done. The messages are the ones
/// users see.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A call of the Kafka client (librdkafka) failed.
    #[error("{doing}: {source}")]
    Client {
        doing: String,
        #[source]
        source: KafkaError,
    },
    /// The broker answered one item of a request (a topic, a group) with an error code.
    #[error("{doing}: {code:?}")]
    Refused { doing: String, code: RDKafkaErrorCode },
    /// A client call failed, with nothing to add to its error.
    #[error(transparent)]
    Bare(#[from] KafkaError),
    /// The process itself (a runtime, a file): `doing` says what could not be done.
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// The cluster is not as streamc needs it (a missing topic, refused records, an open
    /// transaction holding a partition): the message says how.
    #[error("{0}")]
    State(String),
}

/// A client error while doing `doing`. A setting librdkafka refuses is named without its value
/// (rdkafka's message carries the value, which may be a password).
pub(crate) fn client(doing: impl Into<String>) -> impl FnOnce(KafkaError) -> BrokerError {
    let doing = doing.into();
    move |source| match source {
        KafkaError::ClientConfig(..) => BrokerError::State(format!("{doing}: {}", describe(&source))),
        source => BrokerError::Client { doing, source },
    }
}

/// A client error in words, a refused setting named without its value.
pub fn describe(e: &KafkaError) -> String {
    match e {
        KafkaError::ClientConfig(_, desc, key, _) => {
            format!("librdkafka refuses the setting `kafka.{key}` (its value is not shown): {desc}")
        }
        e => e.to_string(),
    }
}

/// An I/O error while doing `doing`.
pub(crate) fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let doing = doing.into();
    move |source| BrokerError::Io { doing, source }
}

/// The CLI prints errors as text.
impl From<BrokerError> for String {
    fn from(e: BrokerError) -> String {
        e.to_string()
    }
}

type Result<T> = std::result::Result<T, BrokerError>;

/// Records read (partition, record) and the end offset of each partition they were read to.
/// Records read (partition, record), and the end offset each partition read was read to.
pub type Read = (Vec<(u32, Stored)>, Vec<(u32, i64)>);

/// How long a call to the cluster may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a command waits for a cluster to answer at all.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// A topic to create: its name, partition count and topic configs.
pub type TopicToCreate<'a> = (String, u32, Vec<(&'a str, &'a str)>);

/// A connection to a Kafka cluster, configured by the `kafka.*` properties.
pub struct Kafka {
    props: BTreeMap<String, String>,
    /// The client that answers metadata questions (partition counts, watermarks, groups), made
    /// at the first one or kept from [`Kafka::connect`]'s check: a client of its own for each
    /// question cost a connection each (about 50 ms on a local broker), half a second of a
    /// run's start-up on a program of a few topics.
    metadata: OnceLock<BaseConsumer<Reach>>,
    /// The admin client (topic creation and configurations), made at its first use.
    admin: OnceLock<AdminClient<DefaultClientContext>>,
    /// The producer of [`Kafka::produce`], made at its first use and kept: an idempotent
    /// producer waits about half a second for its producer id before its first records go out,
    /// which `streamc produce` paid for every 10,000 records (200,000 records took 11 s).
    producer: Mutex<Option<BaseProducer<Deliveries>>>,
    /// The producer of [`Kafka::produce_plain`], kept likewise.
    plain: Mutex<Option<BaseProducer<Deliveries>>>,
}

/// Clients of dropped `Kafka`s, kept for the next `Kafka` with the same settings to take up (a
/// run's program check, then the run): a new client connects again (about 50 ms on a local
/// broker), and destroying one waits for its threads (90 ms for an admin client, between a run's
/// program check and its start). One a key, the latest; the one it replaces is destroyed after
/// the lock is let go of.
struct Idle<K, C>(Mutex<Vec<(K, C)>>);

impl<K: PartialEq, C> Idle<K, C> {
    const fn new() -> Self {
        Idle(Mutex::new(Vec::new()))
    }

    fn take(&self, key: &K) -> Option<C> {
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let at = idle.iter().position(|(k, _)| k == key)?;
        Some(idle.swap_remove(at).1)
    }

    fn keep(&self, key: K, client: C) {
        let replaced = {
            let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let replaced = idle.iter().position(|(k, _)| *k == key).map(|at| idle.swap_remove(at));
            idle.push((key, client));
            replaced
        };
        drop(replaced);
    }
}

type Props = BTreeMap<String, String>;

static IDLE_METADATA: Idle<Props, BaseConsumer<Reach>> = Idle::new();
static IDLE_ADMINS: Idle<Props, AdminClient<DefaultClientContext>> = Idle::new();
/// Keyed by the settings and whether it is the idempotent producer.
static IDLE_PRODUCERS: Idle<(Props, bool), BaseProducer<Deliveries>> = Idle::new();

impl Drop for Kafka {
    fn drop(&mut self) {
        for (idempotent, kept) in [(true, &self.producer), (false, &self.plain)] {
            if let Some(p) = kept.lock().unwrap_or_else(|p| p.into_inner()).take() {
                IDLE_PRODUCERS.keep((self.props.clone(), idempotent), p);
            }
        }
        if let Some(a) = self.admin.take() {
            IDLE_ADMINS.keep(self.props.clone(), a);
        }
        if let Some(c) = self.metadata.take() {
            IDLE_METADATA.keep(std::mem::take(&mut self.props), c);
        }
    }
}

impl Kafka {
    pub fn new(props: &BTreeMap<String, String>) -> Kafka {
        Kafka {
            props: props.clone(),
            metadata: OnceLock::new(),
            admin: OnceLock::new(),
            producer: Mutex::new(None),
            plain: Mutex::new(None),
        }
    }

    /// The metadata client (see [`Kafka::metadata`]).
    fn metadata_client(&self) -> Result<&BaseConsumer<Reach>> {
        if let Some(c) = self.metadata.get() {
            return Ok(c);
        }
        let c: BaseConsumer<Reach> =
            self.metadata_config().create_with_context(Reach::default()).map_err(client("Kafka client"))?;
        Ok(self.metadata.get_or_init(|| c))
    }

    /// The metadata client's configuration: the end offsets it reads are the last stable ones
    /// (`read_committed`, whatever `kafka.isolation.level` says), as every reader's are.
    fn metadata_config(&self) -> ClientConfig {
        let mut c = self.config();
        c.set("isolation.level", "read_committed");
        c
    }

    /// The admin client (see [`Kafka::admin`]).
    fn admin_client(&self) -> Result<&AdminClient<DefaultClientContext>> {
        if let Some(c) = self.admin.get() {
            return Ok(c);
        }
        let c = match IDLE_ADMINS.take(&self.props) {
            Some(c) => c,
            None => self.config().create().map_err(client("Kafka admin client"))?,
        };
        Ok(self.admin.get_or_init(|| c))
    }

    /// A connection to the cluster `kafka.bootstrap.servers` names, checked: a cluster that
    /// does not answer within [`REACH_TIMEOUT`] is an error naming the address and librdkafka's
    /// last reason, and one that refuses the TLS handshake or the SASL credentials is an error
    /// as soon as it says so (librdkafka would retry them forever).
    pub fn connect(props: &BTreeMap<String, String>) -> Result<Kafka> {
        let k = Kafka::new(props);
        // A client this process connected with the same settings and let go of (a run checks
        // its program through one `Kafka` and then runs through another): asked again, it
        // answers in a round trip instead of the 50 ms of a new connection.
        let consumer: BaseConsumer<Reach> = match IDLE_METADATA.take(props) {
            Some(c) => {
                c.context().forget();
                c
            }
            None => k.metadata_config().create_with_context(Reach::default()).map_err(client("Kafka client"))?,
        };
        let deadline = std::time::Instant::now() + REACH_TIMEOUT;
        loop {
            let Err(e) = consumer.fetch_metadata(None, Duration::from_millis(500)) else {
                // (Kept to answer the metadata questions that follow.)
                let _ = k.metadata.set(consumer);
                return Ok(k);
            };
            // The client's log lines and error events (a refused handshake or login among them)
            // come through its main queue, which a consumer without a group serves in `poll`,
            // handing them to the context; `poll` says None for each, so serve a bounded number.
            for _ in 0..256 {
                let _ = consumer.poll(Duration::ZERO);
            }
            if let Some(refused) = consumer.context().refused(&k) {
                return Err(BrokerError::State(refused));
            }
            if std::time::Instant::now() >= deadline {
                let reason = consumer.context().last().unwrap_or_else(|| e.to_string());
                return Err(BrokerError::State(format!(
                    "cannot reach Kafka at {} within {} s ({reason}); check kafka.bootstrap.servers, that the brokers \
                     are up, and kafka.security.protocol",
                    k.servers(),
                    REACH_TIMEOUT.as_secs()
                )));
            }
        }
    }

    /// A client configuration with every `kafka.*` property.
    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        // Every client connects to the brokers as soon as it learns of them (a setting of the
        // user's wins). With librdkafka's sparse connections, a new client's first request to
        // a broker it learnt of from the bootstrap metadata waited for librdkafka's next timer
        // tick to connect: 40 to 50 ms on a local broker, at each of the clients a run makes
        // (its start, the group's join, the control reader's first read): 0.1 s of the
        // 0.55 s a 1 M-key restore took from the process's start to its end.
        c.set("enable.sparse.connections", "false");
        for (k, v) in &self.props {
            c.set(k, v);
        }
        c
    }

    pub fn servers(&self) -> &str {
        self.props.get("bootstrap.servers").map(String::as_str).unwrap_or("?")
    }

    /// The partition count of a topic, or None if it does not exist.
    pub fn partitions(&self, topic: &str) -> Result<Option<u32>> {
        let c = self.metadata_client()?;
        // (Its events served, so that they do not pile up over a long run: it lives as long
        // as the `Kafka`.)
        let _ = c.poll(Duration::ZERO);
        let md = c
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(client(format!("cannot read metadata of `{topic}` from {}", self.servers())))?;
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else { return Ok(None) };
        match t.error() {
            None => Ok(Some(t.partitions().len() as u32)),
            Some(e) if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition => Ok(None),
            Some(e) => Err(BrokerError::Refused { doing: format!("topic `{topic}`"), code: RDKafkaErrorCode::from(e) }),
        }
    }

    /// Create a topic with the admin API unless it exists; returns its partition count.
    /// `compacted`: `cleanup.policy=compact` (changelogs).
    pub fn ensure_topic(&self, topic: &str, partitions: u32, compacted: bool) -> Result<u32> {
        self.ensure_topic_with(topic, partitions, if compacted { &[("cleanup.policy", "compact")] } else { &[] })
    }

    /// Create those of `topics` (name, partitions, topic configs) that do not exist, in one
    /// request, and wait until the metadata shows them: a request a topic cost a broker's
    /// creation time each (about 30 ms locally), four or five of them a new application's start.
    /// (The partition count of each is checked by the caller, through `ensure_topic_with`.)
    pub fn create_missing(&self, topics: &[TopicToCreate<'_>]) -> Result<()> {
        let mut missing: Vec<&TopicToCreate<'_>> = Vec::new();
        for t in topics {
            if self.partitions(&t.0)?.is_none() && !missing.iter().any(|m| m.0 == t.0) {
                missing.push(t);
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        self.create(&missing)?;
        for (name, _, _) in missing {
            self.await_topic(name)?;
        }
        Ok(())
    }

    /// Ask the cluster to create `missing`, in one request (one that exists already is no error).
    fn create(&self, missing: &[&TopicToCreate<'_>]) -> Result<()> {
        let admin = self.admin_client()?;
        let new: Vec<NewTopic<'_>> = missing
            .iter()
            .map(|(name, partitions, configs)| {
                let mut t = NewTopic::new(name, *partitions as i32, TopicReplication::Fixed(1));
                for (k, v) in configs {
                    t = t.set(k, v);
                }
                t
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(io("cannot start a runtime"))?;
        let results = rt
            .block_on(admin.create_topics(&new, &AdminOptions::new().operation_timeout(Some(TIMEOUT))))
            .map_err(client(format!(
                "cannot create topic{} {} on {}",
                if missing.len() == 1 { "" } else { "s" },
                missing.iter().map(|t| format!("`{}`", t.0)).collect::<Vec<_>>().join(", "),
                self.servers()
            )))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(BrokerError::Refused { doing: format!("cannot create topic `{name}`"), code })
                }
            }
        }
        Ok(())
    }

    /// Wait until the metadata shows `topic`, just created; its partition count.
    fn await_topic(&self, topic: &str) -> Result<u32> {
        // Metadata catches up with the creation shortly after.
        for _ in 0..100 {
            if let Some(n) = self.partitions(topic)? {
                return Ok(n);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(BrokerError::State(format!(
            "topic `{topic}` was created but does not show in the metadata of {}",
            self.servers()
        )))
    }

    /// [`Kafka::ensure_topic`] with topic configs for a topic it creates.
    pub fn ensure_topic_with(&self, topic: &str, partitions: u32, configs: &[(&str, &str)]) -> Result<u32> {
        if let Some(n) = self.partitions(topic)? {
            return Ok(n);
        }
        self.create(&[&(topic.to_string(), partitions, configs.to_vec())])?;
        self.await_topic(topic)
    }

    /// The configuration of each of `topics` as the broker reports it (set on the topic, or the
    /// broker's default): name → value, for the topics that exist.
    pub fn topic_configs(&self, topics: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
        let mut out = BTreeMap::new();
        if topics.is_empty() {
            return Ok(out);
        }
        let admin = self.admin_client()?;
        let specs: Vec<ResourceSpecifier<'_>> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(io("cannot start a runtime"))?;
        let results = rt
            .block_on(admin.describe_configs(&specs, &AdminOptions::new().request_timeout(Some(TIMEOUT))))
            .map_err(client(format!("cannot read topic configurations from {}", self.servers())))?;
        for (topic, r) in topics.iter().zip(results) {
            match r {
                Ok(c) => {
                    let entries =
                        c.entries.into_iter().filter_map(|e| Some((e.name, e.value?))).collect::<BTreeMap<_, _>>();
                    out.insert(topic.clone(), entries);
                }
                Err(RDKafkaErrorCode::UnknownTopicOrPartition) => {}
                Err(code) => {
                    return Err(BrokerError::Refused {
                        doing: format!("cannot read the configuration of `{topic}`"),
                        code,
                    })
                }
            }
        }
        Ok(out)
    }

    /// How many members consumer group `group` has now (0 if it is empty or unknown).
    pub fn group_members(&self, group: &str) -> Result<usize> {
        let groups = self
            .metadata_client()?
            .fetch_group_list(Some(group), TIMEOUT)
            .map_err(client(format!("cannot describe consumer group `{group}` on {}", self.servers())))?;
        Ok(groups.groups().iter().filter(|g| g.name() == group).map(|g| g.members().len()).sum())
    }

    /// Every topic's name.
    pub fn topic_names(&self) -> Result<Vec<String>> {
        let md = self
            .metadata_client()?
            .fetch_metadata(None, TIMEOUT)
            .map_err(client(format!("cannot read metadata from {}", self.servers())))?;
        Ok(md.topics().iter().map(|t| t.name().to_string()).collect())
    }

    /// Delete topics and a consumer group (`run --reset`); waits until the topics are gone.
    pub fn delete(&self, topics: &[String], group: &str) -> Result<()> {
        let admin = self.admin_client()?;
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(io("cannot start a runtime"))?;
        let opts = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        if !names.is_empty() {
            for r in rt
                .block_on(admin.delete_topics(&names, &opts))
                .map_err(client(format!("cannot delete topics on {}", self.servers())))?
            {
                match r {
                    Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                    Err((name, code)) => {
                        return Err(BrokerError::Refused { doing: format!("cannot delete topic `{name}`"), code })
                    }
                }
            }
        }
        for r in rt
            .block_on(admin.delete_groups(&[group], &opts))
            .map_err(client(format!("cannot delete group `{group}` on {}", self.servers())))?
        {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::GroupIdNotFound)) => {}
                Err((_, RDKafkaErrorCode::NonEmptyGroup)) => {
                    return Err(BrokerError::State(format!(
                        "group `{group}` still has members: stop every instance of the application before `--reset`"
                    )))
                }
                Err((g, code)) => {
                    return Err(BrokerError::Refused { doing: format!("cannot delete group `{g}`"), code })
                }
            }
        }
        for _ in 0..300 {
            let left = self.topic_names()?;
            if !topics.iter().any(|t| left.contains(t)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(BrokerError::State(format!("the deleted topics still show in the metadata of {}", self.servers())))
    }

    /// Write records to their partitions and wait until the broker has them all. A record the
    /// broker refuses (e.g. a timestamp beyond its `message.timestamp.after.max.ms`) is an error
    /// naming the first refusal and how many were refused, never a silent loss.
    pub fn produce(&self, topic: &str, records: &[(u32, Record)]) -> Result<()> {
        // (A retry after a lost acknowledgement must not write a record twice: `dlq replay`
        // counts on each record once. Kafka's Java producer's default since 3.0.)
        self.produce_with(topic, records, true)
    }

    /// [`Kafka::produce`] without idempotence (unless `kafka.enable.idempotence` asks for it),
    /// for records whose repetition after a lost acknowledgement changes nothing (a status keyed
    /// by its control offset, where an instance serves): an idempotent producer sends nothing
    /// until it has its producer id, and librdkafka, finding no broker connection up when it
    /// asks at the producer's creation, asks again only 500 ms later. A run with `--http-addr`
    /// waited that long before it joined its group, and a run applying control statements for
    /// its first batch of statuses.
    pub fn produce_plain(&self, topic: &str, records: &[(u32, Record)]) -> Result<()> {
        self.produce_with(topic, records, false)
    }

    fn produce_with(&self, topic: &str, records: &[(u32, Record)], idempotent: bool) -> Result<()> {
        // (One call at a time: a flush waits for every record the producer holds, and the
        // refusals it counts are this call's.)
        let mut kept = if idempotent { &self.producer } else { &self.plain }.lock().unwrap_or_else(|p| p.into_inner());
        let producer = match kept.take().or_else(|| IDLE_PRODUCERS.take(&(self.props.clone(), idempotent))) {
            Some(p) => p,
            None => {
                let mut config = self.config();
                if idempotent && !self.props.contains_key("enable.idempotence") {
                    config.set("enable.idempotence", "true");
                }
                config.create_with_context(Deliveries::default()).map_err(client("Kafka producer"))?
            }
        };
        for (p, r) in records {
            let mut headers = OwnedHeaders::new();
            for (k, v) in &r.headers {
                headers = headers.insert(Header { key: k, value: Some(v.as_slice()) });
            }
            loop {
                let mut rec: BaseRecord<'_, [u8], [u8]> =
                    BaseRecord::to(topic).partition(*p as i32).timestamp(r.timestamp).headers(headers.clone());
                if let Some(k) = &r.key {
                    rec = rec.key(k.as_slice());
                }
                if let Some(v) = &r.value {
                    rec = rec.payload(v.as_slice());
                }
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        producer.poll(Duration::from_millis(50));
                    }
                    Err((e, _)) => return Err(client(format!("cannot produce to `{topic}`"))(e)),
                }
            }
            producer.poll(Duration::ZERO);
        }
        // (A producer that could not deliver is dropped, with what it still holds.)
        flush(&producer, TIMEOUT).map_err(client(format!("cannot deliver to `{topic}` on {}", self.servers())))?;
        let failed = producer.context().failed.swap(0, Ordering::Relaxed);
        let first = producer.context().first.lock().unwrap_or_else(|p| p.into_inner()).take();
        producer.context().last.lock().unwrap_or_else(|p| p.into_inner()).clear();
        // (One that hit a fatal error, or whose records were refused, is not kept.)
        if failed == 0 && producer.client().fatal_error().is_none() {
            *kept = Some(producer);
        }
        match first {
            Some(e) => {
                Err(BrokerError::State(format!(
                    "{failed} of {} records of this batch were refused by {} (records before them may have been written); the first: {e}",
                    records.len(),
                    self.servers()
                )))
            }
            None => Ok(()),
        }
    }

    /// The start and end offsets (low and high watermarks) of each partition asked for (None
    /// where they cannot be read).
    pub fn extents(&self, parts: &[(String, u32)]) -> Result<Vec<Option<(i64, i64)>>> {
        self.metadata_client()?;
        Ok(parts.iter().map(|(topic, p)| self.watermarks(topic, *p).ok()).collect())
    }

    /// The start and end offsets (low and high watermarks) of a partition, as of now, from the
    /// metadata client: it fetches nothing, so its request is answered at once. (A consumer
    /// waiting at the end of a partition has a fetch parked at the broker for up to
    /// `fetch.wait.max.ms`, 500 ms by default, and the broker answers a connection's requests in
    /// order: a watermark asked through it waited that long.)
    pub fn watermarks(&self, topic: &str, p: u32) -> Result<(i64, i64)> {
        self.watermarks_within(topic, p, TIMEOUT)
    }

    /// [`Kafka::watermarks`], waiting at most `timeout` for the answer. A partition whose
    /// leader is not known yet (a topic just made: `NotLeaderForPartition` until its election
    /// is done) is asked again every 100 ms meanwhile.
    pub fn watermarks_within(&self, topic: &str, p: u32, timeout: Duration) -> Result<(i64, i64)> {
        let consumer = self.metadata_client()?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match consumer.fetch_watermarks(topic, p as i32, left) {
                Err(KafkaError::MetadataFetch(
                    RDKafkaErrorCode::NotLeaderForPartition | RDKafkaErrorCode::LeaderNotAvailable,
                )) if left > Duration::from_millis(100) => std::thread::sleep(Duration::from_millis(100)),
                r => return r.map_err(client(format!("cannot read the offsets of `{topic}` partition {p}"))),
            }
        }
    }

    /// The metadata of one topic, from the metadata client (see [`Kafka::watermarks`]).
    pub(crate) fn topic_metadata(&self, topic: &str) -> Result<rdkafka::metadata::Metadata> {
        self.metadata_client()?
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(client(format!("cannot read metadata of `{topic}` from {}", self.servers())))
    }

    /// The end offset (high watermark) of each partition asked for, as of now.
    pub fn ends(&self, parts: &[(String, u32)]) -> Result<Vec<i64>> {
        parts.iter().map(|(topic, p)| self.watermarks(topic, *p).map(|(_, high)| high)).collect()
    }

    /// Every record of a topic from where `start` says (see [`Start`]), up to the end offsets as
    /// of now, partition by partition in offset order. Reads committed records only. Also
    /// returns the end offset of each partition it read to.
    pub fn read_to_ends(&self, topic: &str, start: &Start) -> Result<Read> {
        let mut out = Vec::new();
        let (next, _) = self.read_each(topic, start, true, &mut |p, s| {
            out.push((p, s));
            true
        })?;
        Ok((out, next))
    }

    /// Every committed record of `topic` from where `start` says up to the end offsets as of
    /// now, partition by partition in offset order, each handed to `f` as it is read (every
    /// partition assigned at once, all but the one being read paused: nothing is held but the
    /// fetch queue and what arrives for a paused one); `f` returns false to stop. Returns where each partition read goes on from (past its last record read:
    /// its end, unless the reading stopped short with `partial_ok`), and whether `f` stopped
    /// it. After 30 s without a record below a partition's end, an open transaction holds the
    /// rest, or the broker is gone: an error, or with `partial_ok` (and no transport error)
    /// what was read so far.
    pub fn read_each(
        &self,
        topic: &str,
        start: &Start,
        partial_ok: bool,
        f: &mut dyn FnMut(u32, Stored) -> bool,
    ) -> Result<(Vec<(u32, i64)>, bool)> {
        let n = self
            .partitions(topic)?
            .ok_or_else(|| BrokerError::State(format!("no topic `{topic}` on {}", self.servers())))?;
        let mut config = self.config();
        config
            .set("group.id", "streamc-consume")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            // (A partition resumed is fetched at once, not after a fetch for the paused ones
            // waits out the broker's 500 ms.)
            .set("fetch.wait.max.ms", "10");
        let consumer = Reader(config.create().map_err(client("Kafka consumer"))?);
        // Every partition read is assigned at once (an assignment per partition cost a fetch
        // round trip each), all but the one being read paused: records of the others that
        // arrive all the same wait in `early` until their turn.
        let mut parts = Vec::new();
        let mut tpl = TopicPartitionList::new();
        for p in 0..n {
            let Some(at) = start.offset(p) else { continue };
            let (low, high) = self.watermarks(topic, p)?;
            let from = at.map_or(high, |o| (o.min(i64::MAX as u64) as i64).clamp(low, high));
            tpl.add_partition_offset(topic, p as i32, Offset::Offset(from))?;
            parts.push((p, from, high));
        }
        consumer.assign(&tpl).map_err(client(format!("cannot read `{topic}`")))?;
        let only = |q: u32| -> Result<()> {
            let mut others = TopicPartitionList::new();
            let mut this = TopicPartitionList::new();
            for (p, _, _) in &parts {
                if *p == q {
                    this.add_partition(topic, *p as i32)
                } else {
                    others.add_partition(topic, *p as i32)
                };
            }
            consumer.pause(&others).map_err(client(format!("cannot read `{topic}`")))?;
            consumer.resume(&this).map_err(client(format!("cannot read `{topic}`")))?;
            Ok(())
        };
        let mut early: BTreeMap<u32, VecDeque<Stored>> = BTreeMap::new();
        let mut reached = Vec::new();
        for &(p, from, high) in &parts {
            if from < high {
                only(p)?;
            }
            let mut next = from;
            for s in early.remove(&p).unwrap_or_default() {
                if (s.offset as i64) >= next && (s.offset as i64) < high {
                    next = s.offset as i64 + 1;
                    if !f(p, s) {
                        return Ok((reached, true));
                    }
                }
            }
            let mut quiet = std::time::Instant::now();
            let mut transport = None;
            while next < high {
                if quiet.elapsed() > Duration::from_secs(30) {
                    if !partial_ok || transport.is_some() {
                        return Err(BrokerError::State(match transport.take() {
                            Some(e) => format!("cannot read `{topic}` partition {p} to its end: {e}"),
                            None => {
                                format!("cannot read `{topic}` partition {p} to its end: an open transaction holds it")
                            }
                        }));
                    }
                    break;
                }
                match consumer.poll(Duration::from_millis(200)) {
                    None => {
                        // Under read_committed the last offsets may be transaction markers, which
                        // are never delivered but do move the consumer's position past them.
                        let pos = consumer.position().map_err(client(format!("cannot read `{topic}`")))?;
                        if let Some(Offset::Offset(o)) = pos.find_partition(topic, p as i32).map(|e| e.offset()) {
                            next = next.max(o);
                        }
                    }
                    Some(Err(e)) if is_fatal(&e) => return Err(client(format!("cannot read `{topic}`"))(e)),
                    // (A dropped connection: librdkafka reconnects; the reading waits for it.)
                    Some(Err(e)) => {
                        transport = Some(e.to_string());
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Some(Ok(m)) if m.partition() == p as i32 => {
                        if m.offset() >= next && m.offset() < high {
                            quiet = std::time::Instant::now();
                            transport = None;
                            next = m.offset() + 1;
                            if !f(p, stored(&m)) {
                                return Ok((reached, true));
                            }
                        }
                    }
                    Some(Ok(m)) => early.entry(m.partition() as u32).or_default().push_back(stored(&m)),
                }
            }
            reached.push((p, next.min(high)));
        }
        Ok((reached, false))
    }

    /// After [`Kafka::read_to_ends`], keep printing: every committed record of `topic` from
    /// `next` (the partitions to follow, each with the offset to go on from) as it arrives,
    /// handed to `f`, and None after half a second without one; `f` returns false to stop.
    pub fn follow(
        &self,
        topic: &str,
        next: &[(u32, i64)],
        mut f: impl FnMut(Option<(u32, Stored)>) -> bool,
    ) -> Result<()> {
        let mut config = self.config();
        config
            .set("group.id", "streamc-consume")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        let consumer = Reader(config.create().map_err(client("Kafka consumer"))?);
        let mut tpl = TopicPartitionList::new();
        for (p, o) in next {
            tpl.add_partition_offset(topic, *p as i32, Offset::Offset(*o))?;
        }
        consumer.assign(&tpl).map_err(client(format!("cannot read `{topic}`")))?;
        loop {
            match consumer.poll(Duration::from_millis(500)) {
                None if !f(None) => return Ok(()),
                None => {}
                Some(Err(e)) if is_fatal(&e) => return Err(client(format!("cannot read `{topic}`"))(e)),
                Some(Err(_)) => {}
                Some(Ok(m)) if !f(Some((m.partition() as u32, stored(&m)))) => return Ok(()),
                Some(Ok(_)) => {}
            }
        }
    }
}

/// A consumer assigned its partitions (never subscribed) that closes at once when dropped:
/// rdkafka's drop of a consumer with a group id waits for the close in polls of 100 ms, a tenth
/// of a second for each task's readers, each restore, each probe and each read of a topic.
pub(crate) struct Reader(pub(crate) BaseConsumer);

impl std::ops::Deref for Reader {
    type Target = BaseConsumer;
    fn deref(&self) -> &BaseConsumer {
        &self.0
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        close_quickly(&self.0);
    }
}

/// Close a consumer, serving its queue in short polls until it is closed (at most 5 s), so
/// that its drop finds it closed.
pub(crate) fn close_quickly<C: ConsumerContext>(c: &BaseConsumer<C>) {
    if c.close_queue().is_ok() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !c.closed() && Instant::now() < deadline {
            c.poll(Duration::from_millis(1));
        }
    }
}

/// Wait until every record `producer` was handed is acknowledged (or refused), serving its
/// delivery reports as they come. (rdkafka's own `flush`, once anything is in flight, polls
/// in turns of 100 ms that each last the whole 100 ms: every commit on Kafka waited a tenth of
/// a second for acknowledgements that took a millisecond. Its poll with a shorter wait spins:
/// it rounds what is left of a millisecond down to no wait at all.)
pub(crate) fn flush<C: rdkafka::producer::ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
) -> std::result::Result<(), KafkaError> {
    let deadline = Instant::now() + timeout;
    // (Also tells librdkafka to send what waits out `linger.ms` now; again every 100 ms.)
    let mut flushed = producer.flush(Duration::ZERO);
    let mut told = Instant::now();
    while matches!(flushed, Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))) && Instant::now() < deadline {
        // (A poll serves one event, which may report many records.)
        let before = producer.in_flight_count();
        producer.poll(Duration::ZERO);
        let left = producer.in_flight_count();
        if left == 0 || told.elapsed() >= Duration::from_millis(100) {
            flushed = producer.flush(Duration::ZERO);
            told = Instant::now();
        } else if left == before {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    flushed
}

/// Whether a consumer error is the end of a reading. librdkafka reports transport problems (a
/// dropped connection, every broker briefly unreachable) as errors too, and recovers from them
/// itself: those are not.
pub fn is_fatal(e: &KafkaError) -> bool {
    !matches!(
        e,
        KafkaError::MessageConsumption(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::OperationTimedOut
        )
    )
}

/// The end offset (high watermark) of a partition `consumer` reads, as librdkafka last saw it
/// in a fetch response: no request to the broker (rdkafka has no safe call for it). None until
/// a fetch has told it.
pub fn cached_high_watermark<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; the topic is a NUL-terminated
    // string that outlives the call; librdkafka only writes the two offsets.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

/// A reader's messages a batch at a time (librdkafka's `rd_kafka_consume_batch_queue`), for
/// reading a partition through as fast as it comes: rdkafka's `poll` hands one message per call,
/// and its clock reads and queue locking per call were half of a restore's reading thread.
/// Only records and consumer errors (the partition's end among them) come out of the queue this
/// way; librdkafka itself serves any other event on it (a client error is logged, statistics
/// are dropped: no callback is set for them) and skips transaction markers.
///
/// The reader's `position()` is not to be trusted after a batch that held the partition's end:
/// librdkafka 2.12's batch call moves it one past the end's offset (librdkafka issue 4844).
/// Callers keep the position themselves, from [`Fetched::End`]'s offset.
pub(crate) struct Batches<'c> {
    queue: *mut rdkafka::bindings::rd_kafka_queue_t,
    /// The batch last fetched, released at the next fetch (or the drop).
    messages: Vec<*mut rdkafka::bindings::rd_kafka_message_t>,
    size: usize,
    _reader: std::marker::PhantomData<&'c Reader>,
}

/// One message of a batch.
pub(crate) enum Fetched<'a> {
    Record(Entry<'a>),
    /// The partition's end, as librdkafka knew it when it said so: the next offset it will
    /// fetch (past any transaction markers; under read_committed, the last stable offset).
    End(u64),
    Error(KafkaError),
}

impl<'c> Batches<'c> {
    /// Batches of at most `size` messages from `reader`'s queue.
    pub(crate) fn new(reader: &'c Reader, size: usize) -> Option<Batches<'c>> {
        // SAFETY: the client pointer is valid while `reader` lives, which the borrow ensures;
        // the queue handle returned is our own reference, released in `drop`.
        let queue = unsafe { rdkafka::bindings::rd_kafka_queue_get_consumer(reader.client().native_ptr()) };
        let size = size.max(1);
        (!queue.is_null()).then(|| Batches {
            queue,
            messages: Vec::with_capacity(size),
            size,
            _reader: Default::default(),
        })
    }

    /// Fetch the next batch: the messages queued now, or if there are none, the first to come
    /// within `timeout` (librdkafka's batch call would otherwise wait out the whole timeout for
    /// a full batch). The previous batch is released first. Returns how many were fetched.
    pub(crate) fn fetch(&mut self, timeout: Duration) -> usize {
        self.release();
        let mut n = self.consume(0, self.size);
        if n == 0 {
            n = self.consume(timeout.as_millis().min(i32::MAX as u128) as i32, 1);
        }
        n
    }

    fn consume(&mut self, timeout_ms: i32, size: usize) -> usize {
        // SAFETY: the queue is valid until `drop`; librdkafka writes at most `size` message
        // pointers into the spare capacity (at least `size`), and returns how many, or -1.
        let n = unsafe {
            rdkafka::bindings::rd_kafka_consume_batch_queue(
                self.queue,
                timeout_ms,
                self.messages.as_mut_ptr().add(self.messages.len()),
                size.min(self.messages.capacity() - self.messages.len()),
            )
        };
        // (-1 is an error librdkafka 2.12 never returns here: read as nothing fetched.)
        let n = n.max(0) as usize;
        // SAFETY: librdkafka initialised the first `n` slots after the length.
        unsafe { self.messages.set_len(self.messages.len() + n) };
        n
    }

    /// The batch last fetched, in the order fetched.
    pub(crate) fn messages(&self) -> impl Iterator<Item = Fetched<'_>> {
        self.messages.iter().map(|&m| {
            // SAFETY: a message of this batch, valid until it is released (which needs `&mut
            // self`, so not while this borrow lives).
            let m = unsafe { &*m };
            use rdkafka::bindings::rd_kafka_resp_err_t as Err;
            match m.err {
                Err::RD_KAFKA_RESP_ERR_NO_ERROR => {}
                Err::RD_KAFKA_RESP_ERR__PARTITION_EOF => return Fetched::End(m.offset.max(0) as u64),
                e => return Fetched::Error(KafkaError::MessageConsumption(e.into())),
            }
            // SAFETY: librdkafka's key and payload are `len` bytes, or null; they live as long
            // as the message.
            let bytes = |p: *mut std::ffi::c_void, len: usize| {
                (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, len) })
            };
            let mut kind = rdkafka::bindings::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
            // SAFETY: a valid message; librdkafka only writes the timestamp's type.
            let timestamp = unsafe { rdkafka::bindings::rd_kafka_message_timestamp(m, &mut kind) };
            Fetched::Record(Entry {
                offset: m.offset.max(0) as u64,
                key: bytes(m.key, m.key_len),
                value: bytes(m.payload, m.len),
                timestamp: if timestamp < 0 { 0 } else { timestamp },
            })
        })
    }

    /// The batch last fetched as stored records (headers included, key and value copied), its
    /// partition's end and errors as [`Batches::messages`] has them.
    pub(crate) fn stored(&self) -> impl Iterator<Item = std::result::Result<Stored, Fetched<'_>>> {
        self.messages().zip(&self.messages).map(|(f, &m)| match f {
            Fetched::Record(e) => Ok(Stored {
                offset: e.offset,
                next: Pos::at(e.offset + 1),
                record: Record {
                    key: e.key.map(<[u8]>::to_vec),
                    value: e.value.map(<[u8]>::to_vec),
                    timestamp: e.timestamp,
                    headers: headers_of(m),
                },
            }),
            other => Err(other),
        })
    }

    fn release(&mut self) {
        for m in self.messages.drain(..) {
            // SAFETY: each message was handed to us by librdkafka and is destroyed once.
            unsafe { rdkafka::bindings::rd_kafka_message_destroy(m) };
        }
    }
}

impl Drop for Batches<'_> {
    fn drop(&mut self) {
        self.release();
        // SAFETY: our reference to the queue, released once, before the reader (borrowed) goes.
        unsafe { rdkafka::bindings::rd_kafka_queue_destroy(self.queue) };
    }
}

/// A message's headers, as [`stored`] reads them: a header without a value has an empty one.
fn headers_of(m: *mut rdkafka::bindings::rd_kafka_message_t) -> Vec<(String, Vec<u8>)> {
    use rdkafka::bindings::rd_kafka_resp_err_t as Err;
    let mut hdrs: *mut rdkafka::bindings::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: a valid message of a batch; librdkafka parses its headers (kept with the message,
    // freed with it) and writes the pointer, or says there are none.
    if unsafe { rdkafka::bindings::rd_kafka_message_headers(m, &mut hdrs) } != Err::RD_KAFKA_RESP_ERR_NO_ERROR
        || hdrs.is_null()
    {
        return Vec::new();
    }
    // SAFETY: `hdrs` is valid as long as the message.
    let n = unsafe { rdkafka::bindings::rd_kafka_header_cnt(hdrs) };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
        // SAFETY: `i` is below the count; librdkafka writes pointers into the message's own
        // header storage (a NUL-terminated name, `size` bytes of value or null).
        let err = unsafe { rdkafka::bindings::rd_kafka_header_get_all(hdrs, i, &mut name, &mut value, &mut size) };
        if err != Err::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: as above.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let value = if value.is_null() {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(value as *const u8, size) }.to_vec()
        };
        out.push((name, value));
    }
    out
}

/// A consumed message as a stored record.
pub fn stored(m: &rdkafka::message::BorrowedMessage<'_>) -> Stored {
    let headers = m
        .headers()
        .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec).unwrap_or_default())).collect())
        .unwrap_or_default();
    let record = Record {
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        timestamp: m.timestamp().to_millis().unwrap_or(0),
        headers,
    };
    let offset = m.offset() as u64;
    Stored { offset, next: Pos::at(offset + 1), record }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setting librdkafka refuses (a typo in a credentials file) is named without its value:
    /// rdkafka's own message would print the password.
    #[test]
    fn a_refused_setting_is_named_without_its_value() {
        let props = BTreeMap::from([
            ("bootstrap.servers".to_string(), "127.0.0.1:1".to_string()),
            ("sasl.passwd".to_string(), "hunter2".to_string()),
        ]);
        let e = Kafka::new(&props)
            .config()
            .create::<BaseConsumer>()
            .map_err(client("Kafka client"))
            .err()
            .expect("refused");
        let text = e.to_string();
        assert!(text.contains("kafka.sasl.passwd") && !text.contains("hunter2"), "{text}");
        let e = Kafka::connect(&props).err().expect("refused");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
