//! The other instances of an application on Kafka, for interactive queries: who owns each
//! partition (the consumer group's current assignment, described by the broker) and where each
//! instance serves its stores (a record each instance writes to `<app>-metrics` when it starts).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka::Kafka;
use crate::log::Record;
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
    /// The topics whose partitions make the tasks (every sub-topology's main input).
    topics: Vec<String>,
    cache: Mutex<Option<(Instant, Owners)>>,
}

impl GroupPeers {
    pub(crate) fn new(app: &str, kafka: &BTreeMap<String, String>, topics: Vec<String>) -> Result<GroupPeers, String> {
        let k = Kafka::new(kafka);
        let client: BaseConsumer = k.config().create().map_err(|e| format!("cannot create a Kafka client: {e}"))?;
        Ok(GroupPeers { app: app.to_string(), kafka: k, client, topics, cache: Mutex::new(None) })
    }

    fn ask(&self) -> Result<Owners, String> {
        let timeout = Duration::from_secs(10);
        let groups = self
            .client
            .fetch_group_list(Some(&self.app), timeout)
            .map_err(|e| format!("cannot describe consumer group `{}`: {e}", self.app))?;
        let mut by_client: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
        for g in groups.groups().iter().filter(|g| g.name() == self.app) {
            if g.state() != "Stable" {
                return Err(format!("consumer group `{}` is rebalancing ({}): retry", self.app, g.state()));
            }
            for m in g.members() {
                let parts = m.assignment().map(parse_assignment).transpose()?.unwrap_or_default();
                by_client.entry(m.client_id().to_string()).or_default().extend(parts);
            }
        }
        // Where each instance serves, by the client id its group consumer uses.
        let mut servers: BTreeMap<String, (String, String, i64)> = BTreeMap::new();
        let metrics = format!("{}-metrics", self.app);
        for (_, s) in self.kafka.read_to_ends(&metrics, true).map_err(|e| e.to_string())?.0 {
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
            let instance = servers.get(&client).map_or(client.clone(), |s| s.0.clone());
            if let Some((_, srv, _)) = servers.get(&client) {
                o.servers.insert(instance.clone(), srv.clone());
            }
            for p in parts {
                if let Some(other) = o.parts.insert(p.clone(), instance.clone()) {
                    if other != instance {
                        return Err(format!(
                            "partition {} of `{}` is assigned to two members (client ids not distinct? set kafka.client.id per instance or leave it unset)",
                            p.1, p.0
                        ));
                    }
                }
            }
        }
        for t in &self.topics {
            let n = self.kafka.partitions(t).map_err(|e| e.to_string())?.unwrap_or(0);
            o.partitions.insert(t.clone(), n);
        }
        Ok(o)
    }
}

impl Peers for GroupPeers {
    fn owners(&self) -> Result<Owners, String> {
        if let Ok(c) = self.cache.lock() {
            if let Some((_, o)) = c.as_ref().filter(|(at, _)| at.elapsed() < FRESH) {
                return Ok(o.clone());
            }
        }
        let o = self.ask()?;
        if let Ok(mut c) = self.cache.lock() {
            *c = Some((Instant::now(), o.clone()));
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
