//! The embedded log as a [`Backend`]: a feed reads each input with a [`PartitionReader`] up to
//! an end the worker sets before each step; a task's commit ([`LogCommit`]) and appends outside
//! a task's commit are each one atomic `log.commit`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::log::{EmbeddedLog, PartitionReader};
use crate::plan::physical::TaskSpec;
use crate::record::{Append, Entry, Pos, Stored};
use crate::runtime::backend::{Backend, Extent, Membership};
use crate::runtime::error::RunError;
use crate::runtime::run::commit::{Commit, Share};
use crate::runtime::run::{Feed, Next};

/// The embedded log, as the runtime core sees it.
pub(crate) struct Embedded<'a> {
    pub(crate) log: &'a EmbeddedLog,
}

/// The embedded log's commit step: every share's outputs, changelog records and commit record
/// in one `log.commit`.
pub(crate) struct LogCommit<'a> {
    pub(crate) log: &'a EmbeddedLog,
    /// The partition count of an output topic the log does not have yet.
    pub(crate) partitions: u32,
}

impl Commit for LogCommit<'_> {
    fn commit(&mut self, shares: Vec<Share<'_>>) -> Result<Vec<Vec<Pos>>, RunError> {
        // The records are encoded as frames straight from the tasks' changes and outputs.
        let mut appends: BTreeMap<(&str, u32), Append> = BTreeMap::new();
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        let mut metas = Vec::new();
        let mut tasks = Vec::new();
        for s in &shares {
            // Each append sized up front, not grown by copies: its store's changes, and an even
            // share of the outputs over a topic's partitions (an estimate: the frames' headers
            // are not in `byte_len`).
            let mut sizes = vec![0usize; s.spec.stores.len()];
            for ch in s.changes {
                sizes[ch.store] += FRAME + ch.key.len() + ch.value.as_ref().map_or(0, Vec::len);
            }
            for (changelog, ch) in s.changelog() {
                let a = appends.entry((changelog, s.partition)).or_insert_with(|| {
                    let mut a = Append::new(changelog, s.partition);
                    a.reserve(sizes[ch.store]);
                    a
                });
                a.push_parts(ch.timestamp, Some(&ch.key), ch.value.as_deref(), std::iter::empty());
            }
            let outputs = s.outputs.byte_len() + OUTPUT_FRAME * s.outputs.len();
            for o in s.outputs.iter() {
                let n = match counts.get(o.topic()) {
                    Some(n) => *n,
                    None => {
                        let n = self.log.ensure_topic(o.topic(), self.partitions)?.partitions;
                        counts.insert(o.topic(), n);
                        n
                    }
                };
                let part = o.partition_in(n);
                let a = appends.entry((o.topic(), part)).or_insert_with(|| {
                    let mut a = Append::new(o.topic(), part);
                    a.reserve(outputs / n as usize);
                    a
                });
                a.push_parts(o.timestamp(), o.key(), o.value(), o.headers());
            }
        }
        let appends: Vec<Append> = appends.into_values().collect();
        for s in shares {
            metas.push((s.group.to_string(), s.meta));
            tasks.push((s.spec, s.partition));
        }
        let c = self.log.commit(appends, metas)?;
        Ok(tasks.into_iter().map(|(spec, p)| spec.stores.iter().map(|st| c.end(&st.changelog, p)).collect()).collect())
    }

    fn ends_now(&self, spec: &TaskSpec, p: u32, _known: &[Pos]) -> Result<Vec<Pos>, RunError> {
        let c = self.log.committed()?;
        Ok(spec.stores.iter().map(|st| c.end(&st.changelog, p)).collect())
    }
}

/// A frame's bytes besides its key and value: length, timestamp, the key's and value's lengths,
/// the header count ([`crate::record::Append`]).
const FRAME: usize = 22;
/// An output's frame besides its key, value and header values, about: a header or two named.
const OUTPUT_FRAME: usize = FRAME + 32;

/// The embedded log's feed: one reader per input, each read up to an end set before a step (ends
/// only grow), a few records ahead at a time.
pub(crate) struct EmbeddedFeed {
    pub(crate) readers: Vec<PartitionReader>,
    /// Per input: records read and not taken yet, in order.
    pub(crate) ahead: Vec<VecDeque<Stored>>,
    pub(crate) ends: Vec<Pos>,
}

/// Records an input's reader reads at once.
const READ_AHEAD: usize = 64;

impl Feed for EmbeddedFeed {
    fn peek(&mut self, i: usize) -> Result<Next, RunError> {
        if self.ahead[i].is_empty() {
            self.ahead[i].extend(self.readers[i].read(self.ends[i], READ_AHEAD)?);
        }
        Ok(self.ahead[i].front().map_or(Next::End, |s| Next::Record(s.record.timestamp)))
    }
    fn take(&mut self, i: usize) -> Option<Stored> {
        self.ahead[i].pop_front()
    }
    fn peeked(&self, i: usize) -> Option<&Stored> {
        self.ahead[i].front()
    }
    fn lags(&self) -> Vec<(String, u64)> {
        (self.readers.iter().zip(&self.ahead).zip(&self.ends))
            .map(|((r, ahead), end)| {
                let (topic, p) = r.partition();
                let at = ahead.front().map_or(r.position().offset, |s| s.offset);
                (format!("{topic}/{p}"), end.offset.saturating_sub(at))
            })
            .collect()
    }
}

/// Readers of a task's inputs from its positions.
pub(crate) fn embedded_feed(
    spec: &TaskSpec,
    p: u32,
    log: &EmbeddedLog,
    positions: &BTreeMap<String, Pos>,
) -> EmbeddedFeed {
    let mut topics = vec![spec.main.topic.clone()];
    topics.extend(spec.side_topics());
    let readers = topics
        .iter()
        .map(|t| log.reader(t, p, positions.get(&format!("{t}/{p}")).copied().unwrap_or_default()))
        .collect();
    EmbeddedFeed {
        readers,
        ahead: topics.iter().map(|_| VecDeque::new()).collect(),
        ends: vec![Pos::default(); topics.len()],
    }
}

/// Batches of changelog records read at once.
const BATCH: usize = 10_000;

impl Backend for Embedded<'_> {
    type Feed = EmbeddedFeed;

    fn feed(&self, spec: &TaskSpec, p: u32, positions: &BTreeMap<String, Pos>) -> Result<EmbeddedFeed, RunError> {
        Ok(embedded_feed(spec, p, self.log, positions))
    }

    fn changelog_extent(&self, topic: &str, p: u32) -> Result<Option<Extent>, RunError> {
        if self.log.topic(topic)?.is_none_or(|m| p >= m.partitions) {
            return Ok(None);
        }
        // A compacted changelog holds every key's last record from offset 0, and every deletion
        // from its horizon on (with no compaction under way that could move the horizon past
        // where a restore starts).
        self.log.settle_compaction(topic, p);
        let c = self.log.committed()?;
        let deletions_from = c.bases.get(&format!("{topic}/{p}")).map_or(0, |b| b.horizon);
        Ok(Some(Extent { low: 0, end: c.end(topic, p), deletions_from }))
    }

    fn read_changelog(
        &self,
        topic: &str,
        p: u32,
        from: Pos,
        end: Pos,
        visit: &mut crate::runtime::backend::Visit<'_>,
    ) -> Result<Pos, RunError> {
        let mut r = self.log.reader(topic, p, from);
        loop {
            let batch = r.read(end, BATCH)?;
            if batch.is_empty() {
                return Ok(r.position());
            }
            let entries: Vec<Entry<'_>> = batch.iter().map(Stored::entry).collect();
            visit(&entries, r.position())?;
        }
    }

    fn changelog_may_pass_commit(&self) -> bool {
        false
    }

    fn append_alone(&self, appends: Vec<Append>) -> Result<Vec<Pos>, RunError> {
        let keys: Vec<(String, u32)> = appends.iter().map(|a| (a.topic.clone(), a.partition)).collect();
        let c = self.log.commit(appends, vec![])?;
        Ok(keys.iter().map(|(t, p)| c.end(t, *p)).collect())
    }
}

/// The embedded log's membership: one process, which owns every partition of every main input
/// (the partition counts as topic set-up left them, per sub-topology).
pub(crate) struct WholeLog<'a> {
    pub(crate) specs: &'a [Arc<TaskSpec>],
    pub(crate) counts: &'a [u32],
}

impl Membership for WholeLog<'_> {
    fn owned(&self) -> Result<BTreeSet<(String, u32)>, RunError> {
        let mut owned = BTreeSet::new();
        for spec in self.specs {
            let n = self.counts.get(spec.sub).copied().unwrap_or(0);
            owned.extend((0..n).map(|p| (spec.main.topic.clone(), p)));
        }
        Ok(owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    /// An input's lag is the committed end the feed reads to minus the offset of the next
    /// record the task takes, records read ahead but not taken included.
    #[test]
    fn an_inputs_lag_counts_the_records_not_taken_yet() {
        let dir = std::env::temp_dir().join(format!("streamc-feed-lag-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        log.create_topic("in", 2, false).unwrap();
        let r = Record { key: None, value: Some(b"{}".to_vec()), timestamp: 1, headers: vec![] };
        log.commit(vec![Append::of("in", 1, [&r, &r, &r, &r, &r])], vec![]).unwrap();
        let end = log.committed().unwrap().end("in", 1);
        let mut feed = EmbeddedFeed {
            readers: vec![log.reader("in", 1, Pos::default())],
            ahead: vec![VecDeque::new()],
            ends: vec![end],
        };
        assert_eq!(feed.lags(), [("in/1".to_string(), 5)]);
        assert_eq!(feed.peek(0).unwrap(), Next::Record(1));
        assert_eq!(feed.lags(), [("in/1".to_string(), 5)], "read ahead, not taken");
        feed.take(0);
        feed.take(0);
        assert_eq!(feed.lags(), [("in/1".to_string(), 3)]);
        for _ in 0..3 {
            feed.take(0);
        }
        assert_eq!(feed.lags(), [("in/1".to_string(), 0)]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
