//! The other instances of an application on Kafka, for interactive queries: who owns each
//! partition (the consumer group's current assignment, described by the broker) and where each
//! instance serves its stores (a record each instance writes to `<app>-metrics` when it starts).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka::Kafka;
use crate::record::Record;
use crate::runtime::query::{Owners, Peers};

/// How long an answer about the group is reused: queries in a burst ask the broker once.
const FRESH: Duration = Duration::from_millis(500);

/// The key prefix of the records that say where an instance serves its stores.
pub(crate) const SERVER_KEY: &str = "server/";

/// The record for `<app>-metrics` that tells other instances where this one's stores are:
/// `{"instance", "server", "client_id", "timestamp"}`, keyed `server/<instance>`.
pub(crate) fn server_record(instance: &str, server: &str, client_id: &str, now: i64) -> Record {
    let value = serde_json::json!({ "instance": instance, "server": server, "client_id": client_id, "timestamp": now });
    Record {
        key: Some(format!("{SERVER_KEY}{instance}").into_bytes()),
        value: Some(value.to_string().into_bytes()),
        timestamp: now,
        headers: vec![],
    }
}

pub(crate) struct GroupPeers {
    app: String,
    kafka: Kafka,
    client: BaseConsumer,
    /// This instance: its group consumer's client id, and its name.
    me: (String, String),
    /// The owners as last asked (one asker at a time: concurrent queries wait for its answer).
    cache: Mutex<Option<(Instant, Owners)>>,
    /// Partition counts by topic, with when they were read.
    counts: Mutex<BTreeMap<String, (Instant, u32)>>,
}

impl GroupPeers {
    pub(crate) fn new(
        app: &str,
        kafka: &BTreeMap<String, String>,
        client_id: &str,
        instance: &str,
    ) -> Result<GroupPeers, String> {
        let k = Kafka::new(kafka);
        let client: BaseConsumer =
            k.config().create().map_err(|e| format!("cannot create a Kafka client: {}", crate::kafka::describe(&e)))?;
        Ok(GroupPeers {
            app: app.to_string(),
            kafka: k,
            client,
            me: (client_id.to_string(), instance.to_string()),
            cache: Mutex::new(None),
            counts: Mutex::new(BTreeMap::new()),
        })
    }

    /// The partition count of `topic` (read again after a minute).
    pub(crate) fn partitions(&self, topic: &str) -> Result<u32, String> {
        let mut counts = self.counts.lock().map_err(|_| "lock poisoned")?;
        if let Some((_, n)) = counts.get(topic).filter(|(at, _)| at.elapsed() < Duration::from_secs(60)) {
            return Ok(*n);
        }
        let n = self.kafka.partitions(topic).map_err(|e| e.to_string())?.unwrap_or(0);
        counts.insert(topic.to_string(), (Instant::now(), n));
        Ok(n)
    }

    /// The group's members, by client id, with the partitions assigned to each (none for a
    /// group without members); an error while it rebalances.
    pub(crate) fn group(&self) -> Result<BTreeMap<String, Vec<(String, u32)>>, String> {
        let timeout = Duration::from_secs(10);
        let groups = self
            .client
            .fetch_group_list(Some(&self.app), timeout)
            .map_err(|e| format!("cannot describe consumer group `{}`: {e}", self.app))?;
        let mut by_client: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
        for g in groups.groups().iter().filter(|g| g.name() == self.app) {
            // (A group with no members is `Empty`, or `Dead` when it never had any.)
            if !matches!(g.state(), "Stable" | "Empty" | "Dead") {
                return Err(format!("consumer group `{}` is rebalancing ({}): retry", self.app, g.state()));
            }
            for m in g.members() {
                let parts = m.assignment().map(parse_assignment).transpose()?.unwrap_or_default();
                if by_client.insert(m.client_id().to_string(), parts).is_some() {
                    return Err(format!(
                        "two members of group `{}` have the client id `{}`: instances are told apart by it",
                        self.app,
                        m.client_id()
                    ));
                }
            }
        }
        Ok(by_client)
    }

    fn ask(&self) -> Result<Owners, String> {
        let by_client = self.group()?;
        // Where each instance serves, by the client id its group consumer uses.
        let mut servers: BTreeMap<String, (String, String, i64)> = BTreeMap::new();
        let metrics = format!("{}-metrics", self.app);
        for (_, s) in self.kafka.read_to_ends(&metrics, &crate::record::Start::Beginning).map_err(|e| e.to_string())?.0
        {
            if !s.record.key.as_deref().is_some_and(|k| k.starts_with(SERVER_KEY.as_bytes())) {
                continue;
            }
            let Some(v) = s.record.value.as_deref().and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
            else {
                continue;
            };
            let (Some(i), Some(srv), Some(c), Some(ts)) =
                (v["instance"].as_str(), v["server"].as_str(), v["client_id"].as_str(), v["timestamp"].as_i64())
            else {
                continue;
            };
            if servers.get(c).is_none_or(|(_, _, at)| ts >= *at) {
                servers.insert(c.to_string(), (i.to_string(), srv.to_string(), ts));
            }
        }
        let mut o = Owners::default();
        for (client, parts) in by_client {
            // This instance is known by its client id whether or not it publishes an address.
            let instance = match servers.get(&client) {
                _ if client == self.me.0 => self.me.1.clone(),
                Some(s) => s.0.clone(),
                None => client.clone(),
            };
            if let Some((_, srv, _)) = servers.get(&client) {
                o.servers.insert(instance.clone(), srv.clone());
            }
            for p in parts {
                o.parts.insert(p, instance.clone());
            }
        }
        Ok(o)
    }
}

impl Peers for GroupPeers {
    fn owners(&self, topics: &[&str]) -> Result<Owners, String> {
        let mut o = {
            let mut c = self.cache.lock().map_err(|_| "lock poisoned")?;
            match c.as_ref().filter(|(at, _)| at.elapsed() < FRESH) {
                Some((_, o)) => o.clone(),
                None => {
                    let o = self.ask()?;
                    *c = Some((Instant::now(), o.clone()));
                    o
                }
            }
        };
        for t in topics {
            o.partitions.insert(t.to_string(), self.partitions(t)?);
        }
        Ok(o)
    }
}

/// A member's assignment in the consumer protocol: a version (int16), then an array (int32
/// count) of topics, each a string (int16 length) and an array of partitions (int32), then user
/// data (ignored).
fn parse_assignment(b: &[u8]) -> Result<Vec<(String, u32)>, String> {
    let bad = || "a group member's assignment is not in the consumer protocol".to_string();
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = b.get(at..at + n).ok_or_else(bad)?;
        at += n;
        Ok(s)
    };
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let _version = i16::from_be_bytes(take(2)?.try_into().map_err(|_| bad())?);
    let topics = i32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?);
    let mut out = Vec::new();
    for _ in 0..topics.max(0) {
        let len = i16::from_be_bytes(take(2)?.try_into().map_err(|_| bad())?);
        let name = String::from_utf8(take(len.max(0) as usize)?.to_vec()).map_err(|_| bad())?;
        let n = i32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?);
        for _ in 0..n.max(0) {
            let p = i32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?);
            out.push((name.clone(), p.max(0) as u32));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_are_read_in_the_consumer_protocol() {
        // Version 3, two topics: "a" with partitions 0 and 2, "bc" with 1; then user data.
        let mut b = vec![0, 3, 0, 0, 0, 2];
        b.extend([0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2]);
        b.extend([0, 2, b'b', b'c', 0, 0, 0, 1, 0, 0, 0, 1]);
        b.extend([0, 0, 0, 0]);
        assert_eq!(parse_assignment(&b).unwrap(), vec![("a".into(), 0), ("a".into(), 2), ("bc".into(), 1)]);
        assert_eq!(parse_assignment(&[]).unwrap(), vec![]);
        assert!(parse_assignment(&b[..9]).is_err());
    }
}
