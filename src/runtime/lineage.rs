//! Lineage for `streamc trace`: which input records made each output record, worked out while
//! a program is replayed (never in a normal run, where every hook below is one relaxed atomic
//! load that finds tracing off).
//!
//! The replay is single-threaded, so one tracer serves the process. It follows the record
//! being processed:
//! - an input record's lineage is itself (a record of an input the trace copied) or the
//!   lineage its writer gave it (a repartition or a chained query's topic, matched by topic,
//!   key and value in the order written);
//! - an aggregate's entry (a key, or a key's window or session) gathers the lineage of every
//!   record folded into it, and a merged session that of the sessions merged;
//! - a table input's row has the lineage of the record that set it; a stream–table join adds
//!   the row's to the stream record's;
//! - an output record takes the lineage of what is being processed when it is made: the input
//!   record's, or during a flush the entry whose result it is.
//!
//! A record that fails is applied all or nothing: its outputs are taken back here too.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// An input record: (index of its topic in [`Tracer::topics`], partition, offset).
pub type Src = (u32, u32, u64);

/// An output record the replay made, with its lineage (sorted, each record once).
#[derive(Debug, Clone)]
pub struct Traced {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: i64,
    pub headers: Vec<(String, Vec<u8>)>,
    pub lineage: Vec<Src>,
}

/// A store entry of a task: (task, partition, store, key).
type EntryKey = (String, u32, usize, Vec<u8>);

/// A record by its topic, key and value.
type Content = (String, Option<Vec<u8>>, Option<Vec<u8>>);

/// What a replay found (see the module's documentation).
#[derive(Debug, Default)]
pub struct Tracer {
    /// The topics whose records are the sources (copied from the application's inputs).
    sources: BTreeSet<String>,
    /// Topic names, indexed by [`Src`].
    pub topics: Vec<String>,
    /// The task at work: (name, partition).
    task: (String, u32),
    /// The lineage of what is being processed.
    current: Vec<Src>,
    entries: HashMap<EntryKey, Vec<Src>>,
    /// Every output record, in the order made.
    pub outputs: Vec<Traced>,
    /// Output records not read yet by (topic, key, value): indexes into `outputs`, oldest first.
    unread: HashMap<Content, VecDeque<usize>>,
    /// `outputs.len()` when the record being processed began.
    record_mark: usize,
    /// Input records processed so far.
    seen: u64,
}

static ON: AtomicBool = AtomicBool::new(false);
static TRACER: Mutex<Option<Tracer>> = Mutex::new(None);

/// Whether a replay is being traced.
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

fn with(f: impl FnOnce(&mut Tracer)) {
    if !on() {
        return;
    }
    let mut g = TRACER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = g.as_mut() {
        f(t);
    }
}

/// Trace what runs from now on, with the records of `sources` as the sources.
pub fn start(sources: BTreeSet<String>) {
    *TRACER.lock().unwrap_or_else(|e| e.into_inner()) = Some(Tracer { sources, ..Tracer::default() });
    ON.store(true, Ordering::Relaxed);
}

/// How many input records the replay processed so far.
pub fn seen() -> u64 {
    let mut n = 0;
    with(|t| n = t.seen);
    n
}

/// Stop tracing; what was found.
pub fn finish() -> Tracer {
    ON.store(false, Ordering::Relaxed);
    TRACER.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default()
}

/// Sorted union of two lineages.
fn union(a: &[Src], b: &[Src]) -> Vec<Src> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

impl Tracer {
    fn topic_index(&mut self, topic: &str) -> u32 {
        match self.topics.iter().position(|t| t == topic) {
            Some(i) => i as u32,
            None => {
                self.topics.push(topic.to_string());
                (self.topics.len() - 1) as u32
            }
        }
    }

    fn entry(&self, store: usize, key: &[u8]) -> EntryKey {
        (self.task.0.clone(), self.task.1, store, key.to_vec())
    }
}

/// Task `name` on partition `p` is at work (what follows is its).
pub(crate) fn enter(name: &str, p: u32) {
    with(|t| {
        if t.task.0 != name || t.task.1 != p {
            t.task = (name.to_string(), p);
        }
        t.current.clear();
    })
}

/// A record of `topic` partition `p` at `offset` is processed next.
pub(crate) fn input(topic: &str, p: u32, offset: u64, key: Option<&[u8]>, value: Option<&[u8]>) {
    with(|t| {
        t.seen += 1;
        t.current.clear();
        if t.sources.contains(topic) {
            let i = t.topic_index(topic);
            t.current.push((i, p, offset));
            return;
        }
        let k = (topic.to_string(), key.map(<[u8]>::to_vec), value.map(<[u8]>::to_vec));
        if let Some(n) = t.unread.get_mut(&k).and_then(|q| q.pop_front()) {
            t.current = t.outputs[n].lineage.clone();
        }
    })
}

/// The record being processed is folded into entry `key` of `store`.
pub(crate) fn fold(store: usize, key: &[u8]) {
    with(|t| {
        let k = t.entry(store, key);
        let e = t.entries.entry(k).or_default();
        *e = union(e, &t.current);
    })
}

/// Entry `from` of `store` (a session) is merged into entry `into`.
pub(crate) fn merge(store: usize, into: &[u8], from: &[u8]) {
    with(|t| {
        let from = t.entries.get(&t.entry(store, from)).cloned().unwrap_or_default();
        let e = t.entries.entry(t.entry(store, into)).or_default();
        *e = union(e, &from);
    })
}

/// Entry `key` of `store` (a table's row) is set by the record being processed.
pub(crate) fn put(store: usize, key: &[u8]) {
    with(|t| {
        let current = t.current.clone();
        t.entries.insert(t.entry(store, key), current);
    })
}

/// What is processed now is the result of entry `key` of `store` (an aggregate's flush).
pub(crate) fn result_of(store: usize, key: &[u8]) {
    with(|t| {
        t.current = t.entries.get(&t.entry(store, key)).cloned().unwrap_or_default();
    })
}

/// The row of entry `key` of `store` (a table's) joins what is processed.
pub(crate) fn join(store: usize, key: &[u8]) {
    with(|t| {
        if let Some(e) = t.entries.get(&t.entry(store, key)) {
            let e = e.clone();
            t.current = union(&t.current, &e);
        }
    })
}

/// Back to a lineage taken with [`current`] (the stream record's, after a [`join`] sent its
/// row on).
pub(crate) fn reset(saved: Vec<Src>) {
    with(|t| t.current = saved)
}

/// The current lineage (to put back with [`reset`]).
pub(crate) fn current() -> Vec<Src> {
    let mut c = Vec::new();
    with(|t| c = t.current.clone());
    c
}

/// A record's processing begins: the outputs it makes from here are taken back if it fails.
pub(crate) fn begin_record() {
    with(|t| t.record_mark = t.outputs.len())
}

/// The record being processed failed: its outputs are taken back.
pub(crate) fn drop_record() {
    with(|t| {
        while t.outputs.len() > t.record_mark {
            let n = t.outputs.len() - 1;
            let o = t.outputs.pop().expect("an output");
            if let Some(q) = t.unread.get_mut(&(o.topic, o.key, o.value)) {
                if q.back() == Some(&n) {
                    q.pop_back();
                }
            }
        }
    })
}

/// An output record is made.
pub(crate) fn output(
    topic: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    timestamp: i64,
    headers: Vec<(String, Vec<u8>)>,
) {
    with(|t| {
        let o = Traced {
            topic: topic.to_string(),
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            timestamp,
            headers,
            lineage: t.current.clone(),
        };
        let n = t.outputs.len();
        t.unread.entry((o.topic.clone(), o.key.clone(), o.value.clone())).or_default().push_back(n);
        t.outputs.push(o);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_is_sorted_and_keeps_each_source_once() {
        assert_eq!(
            union(&[(0, 0, 1), (0, 0, 5)], &[(0, 0, 2), (0, 0, 5), (1, 0, 0)]),
            vec![(0, 0, 1), (0, 0, 2), (0, 0, 5), (1, 0, 0)]
        );
        assert_eq!(union(&[], &[(0, 1, 1)]), vec![(0, 1, 1)]);
    }
}
