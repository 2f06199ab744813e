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
//! Only what is needed is kept: the lineage of records written to a topic the replay reads
//! again, and of the one record looked for ([`Wanted`]), found as the replay goes: the
//! topic's records of its key up to it, each matched in order to the first replay record after
//! the match before with the same value, timestamp and headers. A record that fails is applied
//! all or nothing: what it changed here is taken back too.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// An input record: (index of its topic in [`Tracer::topics`], partition, offset).
pub type Src = (u32, u32, u64);

/// A record's value, timestamp and headers: what two records of one key are compared by.
pub type Shape = (Option<Vec<u8>>, i64, Vec<(String, Vec<u8>)>);

/// The record a trace looks for: its topic and key, and that topic's records of the key and
/// entry up to it (it last), in order. `same_entry` tells a record of the key is of the same
/// entry (window) as it: within one entry, results come in the order they were made, which a
/// commit's results of several windows need not be.
#[derive(Default)]
pub struct Wanted {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub history: Vec<Shape>,
    pub same_entry: Option<Box<SameEntry>>,
}

/// Whether a record (its value and headers) is of the entry a trace looks for.
pub type SameEntry = dyn Fn(Option<&[u8]>, &[(String, Vec<u8>)]) -> bool + Send;

impl std::fmt::Debug for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wanted").field("topic", &self.topic).field("history", &self.history.len()).finish()
    }
}

/// A store entry of a task: (task, partition, store, key).
type EntryKey = (String, u32, usize, Vec<u8>);

/// A record by its topic, key and value.
type Content = (String, Option<Vec<u8>>, Option<Vec<u8>>);

/// A lineage, and that of a grouped table's old row carried on the same record (an update
/// within its group).
type Carried = (Vec<Src>, Option<Vec<Src>>);

/// What a record changed here, taken back if it fails.
#[derive(Debug)]
enum Undo {
    Entry(EntryKey, Option<Vec<Src>>),
    Unread(Content),
}

/// What a replay found (see the module's documentation).
#[derive(Debug, Default)]
pub struct Tracer {
    /// The topics whose records are the sources (copied from the application's inputs).
    sources: BTreeSet<String>,
    /// The topics the replay writes and reads again (repartitions, chained queries' inputs).
    reread: BTreeSet<String>,
    /// Topic names, indexed by [`Src`].
    pub topics: Vec<String>,
    /// The task at work: (name, partition).
    task: (String, u32),
    /// The lineage of what is being processed.
    current: Vec<Src>,
    entries: HashMap<EntryKey, Vec<Src>>,
    /// Records written to `reread` topics and not read yet, by content: their lineages, oldest
    /// first.
    unread: HashMap<Content, VecDeque<Carried>>,
    /// The lineage of the grouped table's old row the record being processed carries.
    old: Option<Vec<Src>>,
    /// That of an old row a repartition holds for the next record it writes.
    stashed: Option<Vec<Src>>,
    wanted: Wanted,
    /// How many of `wanted.history` are matched.
    matched: usize,
    /// The lineage of the record looked for, once matched.
    pub found: Option<Vec<Src>>,
    /// How many of the replay's records are the same as the one looked for.
    pub alike: usize,
    /// What the record being processed changed, and `(matched, alike, found)` before it.
    undo: Vec<Undo>,
    mark: (usize, usize, bool),
    /// Input records processed so far.
    seen: u64,
    /// Since when a record of a `reread` topic waits for its writer's (reset by progress).
    waiting: Option<(u64, std::time::Instant)>,
    /// Records of `reread` topics no record of the replay matched (the replay differs from
    /// the application: the trace is refused).
    pub unmatched: u64,
    /// The lineages of rows an operator made and is about to send on, in order (a join's).
    queued: VecDeque<Vec<Src>>,
}

static ON: AtomicBool = AtomicBool::new(false);
static TRACER: Mutex<Option<Tracer>> = Mutex::new(None);

/// Whether a replay is being traced.
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

#[inline]
fn with(f: impl FnOnce(&mut Tracer)) {
    if on() {
        locked(f)
    }
}

#[cold]
#[inline(never)]
fn locked(f: impl FnOnce(&mut Tracer)) {
    let mut g = TRACER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = g.as_mut() {
        f(t);
    }
}

/// Trace what runs from now on, with the records of `sources` as the sources, `reread` the
/// topics the replay writes and reads again, looking for `wanted`.
pub fn start(sources: BTreeSet<String>, reread: BTreeSet<String>, wanted: Wanted) {
    *TRACER.lock().unwrap_or_else(|e| e.into_inner()) = Some(Tracer { sources, reread, wanted, ..Tracer::default() });
    ON.store(true, Ordering::Relaxed);
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

    /// Entry `k` is about to change: what it was is kept, to put back if the record fails.
    fn journal(&mut self, k: &EntryKey) {
        if !self.undo.iter().any(|u| matches!(u, Undo::Entry(j, _) if j == k)) {
            self.undo.push(Undo::Entry(k.clone(), self.entries.get(k).cloned()));
        }
    }
}

/// Task `name` on partition `p` is at work (what follows is its).
#[inline]
pub(crate) fn enter(name: &str, p: u32) {
    with(|t| {
        if t.task.0 != name || t.task.1 != p {
            t.task = (name.to_string(), p);
        }
        t.current.clear();
        t.queued.clear();
        t.old = None;
        t.stashed = None;
    })
}

/// A record of `topic` partition `p` at `offset` is processed next.
#[inline]
pub(crate) fn input(topic: &str, p: u32, offset: u64, key: Option<&[u8]>, value: Option<&[u8]>) {
    with(|t| {
        t.seen += 1;
        t.queued.clear();
        t.current.clear();
        t.old = None;
        t.stashed = None;
        if t.sources.contains(topic) {
            let i = t.topic_index(topic);
            t.current.push((i, p, offset));
            return;
        }
        let k = (topic.to_string(), key.map(<[u8]>::to_vec), value.map(<[u8]>::to_vec));
        if let Some((l, old)) = t.unread.get_mut(&k).and_then(|q| q.pop_front()) {
            t.current = l;
            t.old = old;
        }
    })
}

/// Whether the next record of `topic` (key, value) can be processed: a record of a topic the
/// replay writes and reads again (copied from the application, so that it is read in the
/// application's order) waits until the replay has written the same record, whose lineage it
/// takes. One that nothing matches while the replay makes no progress for 2 s goes on with no
/// lineage, counted in [`Tracer::unmatched`].
#[inline]
pub(crate) fn ready(topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) -> bool {
    let mut ok = true;
    with(|t| {
        if !t.reread.contains(topic) {
            return;
        }
        let c: Content = (topic.to_string(), key.map(<[u8]>::to_vec), value.map(<[u8]>::to_vec));
        if t.unread.get(&c).is_some_and(|q| !q.is_empty()) {
            return;
        }
        let seen = t.seen;
        match t.waiting {
            Some((at, since)) if at == seen => {
                if since.elapsed() >= std::time::Duration::from_secs(2) {
                    t.unmatched += 1;
                    t.waiting = None;
                    return;
                }
            }
            _ => t.waiting = Some((seen, std::time::Instant::now())),
        }
        ok = false;
    });
    ok
}

/// The record being processed is folded into entry `key` of `store`.
#[inline]
pub(crate) fn fold(store: usize, key: &[u8]) {
    with(|t| {
        let k = t.entry(store, key);
        t.journal(&k);
        let e = t.entries.entry(k).or_default();
        match (e.last(), t.current.first()) {
            // Records come in offset order within a partition: most folds add to the end.
            (Some(last), Some(first)) if last < first => e.extend_from_slice(&t.current),
            _ => *e = union(e, &t.current),
        }
    })
}

/// Entry `from` of `store` (a session) is merged into entry `into`.
#[inline]
pub(crate) fn merge(store: usize, into: &[u8], from: &[u8]) {
    with(|t| {
        let from = t.entries.get(&t.entry(store, from)).cloned().unwrap_or_default();
        let k = t.entry(store, into);
        t.journal(&k);
        let e = t.entries.entry(k).or_default();
        *e = union(e, &from);
    })
}

/// A grouped table's old row leaves entry `key` of `store` (its group): its lineage (carried
/// with the record, or the record's own) is taken out of the entry's.
#[inline]
pub(crate) fn unfold(store: usize, key: &[u8]) {
    with(|t| {
        let k = t.entry(store, key);
        t.journal(&k);
        let gone = t.old.clone().unwrap_or_else(|| t.current.clone());
        if let Some(e) = t.entries.get_mut(&k) {
            e.retain(|s| gone.binary_search(s).is_err());
        }
    })
}

/// A repartition holds a grouped table's old row (the current lineage) for the next record it
/// writes, which carries it.
#[inline]
pub(crate) fn stash_old() {
    with(|t| t.stashed = Some(t.current.clone()))
}

/// Entry `key` of `store` (a table's row) is set by the record being processed.
#[inline]
pub(crate) fn put(store: usize, key: &[u8]) {
    with(|t| {
        let k = t.entry(store, key);
        t.journal(&k);
        let current = t.current.clone();
        t.entries.insert(k, current);
    })
}

/// What is processed now is the result of entry `key` of `store` (an aggregate's flush).
#[inline]
pub(crate) fn result_of(store: usize, key: &[u8]) {
    with(|t| {
        t.current = t.entries.get(&t.entry(store, key)).cloned().unwrap_or_default();
    })
}

/// A row made now (a stream–stream join's) came from what is processed and, with `other`, from
/// entry `key` of `store` (the other side's record): queued until it is sent ([`next`]).
#[inline]
pub(crate) fn queue(other: Option<(usize, &[u8])>) {
    with(|t| {
        let l = match other {
            Some((store, key)) => match t.entries.get(&t.entry(store, key)) {
                Some(e) => union(&t.current, e),
                None => t.current.clone(),
            },
            None => t.current.clone(),
        };
        t.queued.push_back(l);
    })
}

/// A row made now came from entry `key` of `store` alone (a join's pending record whose
/// window closed): queued until it is sent.
#[inline]
pub(crate) fn queue_entry(store: usize, key: &[u8]) {
    with(|t| {
        let l = t.entries.get(&t.entry(store, key)).cloned().unwrap_or_default();
        t.queued.push_back(l);
    })
}

/// The next queued row is sent: its lineage is the current one.
#[inline]
pub(crate) fn next() {
    with(|t| {
        if let Some(l) = t.queued.pop_front() {
            t.current = l;
        }
    })
}

/// The row of entry `key` of `store` (a table's) joins what is processed.
#[inline]
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
#[inline]
pub(crate) fn reset(saved: Vec<Src>) {
    with(|t| t.current = saved)
}

/// The current lineage (to put back with [`reset`]).
#[inline]
pub(crate) fn current() -> Vec<Src> {
    let mut c = Vec::new();
    with(|t| c = t.current.clone());
    c
}

/// A record's processing begins (or what it made so far is kept whatever becomes of it): what
/// it changes from here is taken back if it fails.
#[inline]
pub(crate) fn begin_record() {
    with(|t| {
        t.undo.clear();
        t.mark = (t.matched, t.alike, t.found.is_some());
    })
}

/// The record being processed failed: what it changed is taken back.
#[inline]
pub(crate) fn drop_record() {
    with(|t| {
        while let Some(u) = t.undo.pop() {
            match u {
                Undo::Entry(k, Some(old)) => {
                    t.entries.insert(k, old);
                }
                Undo::Entry(k, None) => {
                    t.entries.remove(&k);
                }
                Undo::Unread(c) => {
                    if let Some(q) = t.unread.get_mut(&c) {
                        q.pop_back();
                    }
                }
            }
        }
        t.stashed = None;
        let (matched, alike, found) = t.mark;
        (t.matched, t.alike) = (matched, alike);
        if !found {
            t.found = None;
        }
    })
}

/// An output record is made. True if it is not to be written: a record of a topic the replay
/// reads again, which holds the application's records (see [`ready`]).
#[inline]
pub(crate) fn output(
    topic: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    timestamp: i64,
    headers: impl FnOnce() -> Vec<(String, Vec<u8>)>,
) -> bool {
    let mut swallow = false;
    with(|t| {
        if t.wanted.topic == topic && t.wanted.key.as_deref() == key {
            let shape: Shape = (value.map(<[u8]>::to_vec), timestamp, headers());
            let entry = t.wanted.same_entry.as_ref().is_none_or(|same| same(shape.0.as_deref(), &shape.2));
            if entry && t.wanted.history.last() == Some(&shape) {
                t.alike += 1;
            }
            if entry && t.wanted.history.get(t.matched) == Some(&shape) {
                t.matched += 1;
                if t.matched == t.wanted.history.len() && t.found.is_none() {
                    t.found = Some(t.current.clone());
                }
            }
        }
        if t.reread.contains(topic) {
            let c: Content = (topic.to_string(), key.map(<[u8]>::to_vec), value.map(<[u8]>::to_vec));
            let carried = (t.current.clone(), t.stashed.take());
            t.unread.entry(c.clone()).or_default().push_back(carried);
            t.undo.push(Undo::Unread(c));
            swallow = true;
        }
    });
    swallow
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
