//! Local state: one sled tree per store and partition, the committed changes not written to it
//! yet, and the checkpoint (the changelog position the tree reflects) written with them.

use std::collections::BTreeMap;
use std::path::Path;

use rustc_hash::FxHashMap;

use crate::log::{Pos, Stored};
use crate::runtime::error::{state, RunError};
use crate::runtime::task::{Change, StoreRead, Task};

pub(crate) const CHECKPOINT: &[u8] = b"\xff\xff\xff\xffcheckpoint";

/// The committed local state of one task: a sled tree per store, and the committed changes not
/// yet written to it. Local state is written every few commits, not at each: a window created
/// and expired in between costs no sled write at all, and the changelog tail after the
/// checkpoint covers the rest after a crash.
pub(crate) struct Trees {
    pub(crate) trees: Vec<sled::Tree>,
    /// Per store: key → (value or deletion, whether the key may be in sled).
    pub(crate) pending: Vec<Pending>,
    /// Commits since local state was last written.
    pub(crate) commits: u32,
    /// Keys per tenant over every store, in a tenant-scoped task (None otherwise): counted once
    /// when the task opens, then kept up to date as changes are staged.
    pub(crate) tenant_keys: Option<BTreeMap<Vec<u8>, i64>>,
}

/// Changes to one store that are not in sled yet, coalesced by key: key → (value or deletion,
/// whether the key may already be in sled). Used by commits and by restore alike.
#[derive(Default)]
pub(crate) struct Pending(FxHashMap<Vec<u8>, (Option<Vec<u8>>, bool)>);

impl Pending {
    /// Record a change. A key created and deleted while pending never reaches sled.
    pub(crate) fn stage(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, may_exist: bool) {
        match self.0.get_mut(&key) {
            Some(slot) if value.is_none() && !slot.1 => {
                self.0.remove(&key);
            }
            Some(slot) => slot.0 = value,
            None if value.is_some() || may_exist => {
                self.0.insert(key, (value, may_exist));
            }
            None => {}
        }
    }

    fn get(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.0.get(key).map(|(v, _)| v)
    }

    /// The pending change of `key`, if any: its new value or its deletion (None).
    pub(crate) fn value(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.get(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Apply the changes to keys starting with `prefix` to `entries` (read from sled).
    pub(crate) fn overlay(&self, prefix: &[u8], entries: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        for (k, (v, _)) in self.0.iter().filter(|(k, _)| k.starts_with(prefix)) {
            match v {
                Some(v) => entries.insert(k.clone(), v.clone()),
                None => entries.remove(k),
            };
        }
    }

    /// Write the changes and the checkpoint to the tree in one atomic batch, sorted by key (so
    /// the batch does not depend on hash order), then read the keys back (see [`consolidate`]).
    /// `written` sees each key and whether it was put (true) or deleted.
    pub(crate) fn write(
        &mut self,
        tree: &sled::Tree,
        checkpoint: &Pos,
        mut written: impl FnMut(&[u8], bool),
    ) -> Result<(), sled::Error> {
        let mut entries: Vec<_> = self.0.drain().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // (sled copies keys and values into its own buffers: keys are handed over borrowed and
        // read back from `entries`, not from a copy of them; each value is freed once copied.)
        let mut batch = sled::Batch::default();
        for (k, (v, _)) in entries.iter_mut() {
            written(k, v.is_some());
            match v.take() {
                Some(v) => batch.insert(k.as_slice(), v),
                None => batch.remove(k.as_slice()),
            }
        }
        batch.insert(CHECKPOINT, serde_json::to_vec(checkpoint).unwrap_or_default());
        tree.apply_batch(batch)?;
        consolidate(tree, entries.iter().map(|(k, _)| k.as_slice()));
        Ok(())
    }
}

/// Local state is written at least every this many commits…
pub(crate) const LOCAL_WRITE_COMMITS: u32 = 8;

/// …or once this many changes are pending.
pub(crate) const LOCAL_WRITE_PENDING: usize = 20_000;

impl Trees {
    /// Record the changes of a commit; written to sled later by [`Trees::write`].
    pub(crate) fn stage(&mut self, changes: &mut Vec<Change>, task: &Task) {
        for ch in changes.drain(..) {
            if self.tenant_keys.is_some() {
                if let Some(t) = task.key_tenant(ch.store, &ch.key) {
                    let before = self.get(ch.store, &ch.key).is_some();
                    let delta = ch.value.is_some() as i64 - before as i64;
                    if delta != 0 {
                        if let Some(m) = self.tenant_keys.as_mut() {
                            *m.entry(t.to_vec()).or_default() += delta;
                        }
                    }
                }
            }
            self.pending[ch.store].stage(ch.key, ch.value, ch.existed);
        }
    }

    /// Count every tenant's keys (a tenant-scoped task), or stop counting.
    pub(crate) fn count_tenants(&mut self, task: &Task) {
        if !task.spec.tenant {
            self.tenant_keys = None;
            return;
        }
        let mut m: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for (i, (tree, pending)) in self.trees.iter().zip(&self.pending).enumerate() {
            live_store_keys(tree, pending, |k| {
                if let Some(t) = task.key_tenant(i, k) {
                    *m.entry(t.to_vec()).or_default() += 1;
                }
            });
        }
        self.tenant_keys = Some(m);
    }

    /// Delete every key of the given tenants from every store, and queue a tombstone each in
    /// `changes` for the changelogs. Returns how many. The deletions are pending, like a
    /// commit's changes: they reach sled only after the log commit that carries the tombstones
    /// (a commit that fails reopens the task from committed state, and the purge runs again).
    pub(crate) fn purge(
        &mut self,
        tenants: &[&[u8]],
        task: &Task,
        stream_time: i64,
        changes: &mut Vec<Change>,
    ) -> Result<u64, RunError> {
        let mut n = 0;
        for (i, (tree, pending)) in self.trees.iter().zip(self.pending.iter_mut()).enumerate() {
            let mut keys = Vec::new();
            live_store_keys(tree, pending, |k| {
                if task.key_tenant(i, k).is_some_and(|t| tenants.contains(&t)) {
                    keys.push(k.to_vec());
                }
            });
            for k in &keys {
                pending.stage(k.clone(), None, true);
            }
            n += keys.len() as u64;
            changes.extend(keys.into_iter().map(|key| Change {
                store: i,
                key,
                value: None,
                timestamp: stream_time.max(0),
                existed: true,
            }));
        }
        Ok(n)
    }

    /// Write the pending changes with each store's checkpoint, one atomic batch per store.
    pub(crate) fn write(&mut self, checkpoints: &[Pos]) -> Result<(), RunError> {
        for ((tree, pending), cp) in self.trees.iter().zip(self.pending.iter_mut()).zip(checkpoints) {
            pending.write(tree, cp, |_, _| {}).map_err(state("cannot write local state"))?;
        }
        self.commits = 0;
        Ok(())
    }

    pub(crate) fn due(&self) -> bool {
        self.commits >= LOCAL_WRITE_COMMITS
            || self.pending.iter().map(|p| p.len()).sum::<usize>() >= LOCAL_WRITE_PENDING
    }
}

impl StoreRead for Trees {
    fn get(&self, store: usize, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(v) = self.pending.get(store)?.get(key) {
            return v.clone();
        }
        self.trees.get(store)?.get(key).ok().flatten().map(|v| v.to_vec())
    }
    fn entries(&self, store: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        // Called when a task starts: after a restore (nothing pending) or after a control
        // statement replaced its query (committed changes may be pending).
        let Some(t) = self.trees.get(store) else { return Vec::new() };
        let mut all: BTreeMap<Vec<u8>, Vec<u8>> = t
            .iter()
            .filter_map(|r| r.ok())
            .filter(|(k, _)| &k[..] != CHECKPOINT)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        if let Some(p) = self.pending.get(store) {
            for (k, (v, _)) in &p.0 {
                match v {
                    Some(v) => all.insert(k.clone(), v.clone()),
                    None => all.remove(k),
                };
            }
        }
        all.into_iter().collect()
    }

    fn keys(&self, store: usize) -> Vec<Vec<u8>> {
        // As `entries`, without copying the values.
        let Some(t) = self.trees.get(store) else { return Vec::new() };
        let mut all: std::collections::BTreeSet<Vec<u8>> =
            t.iter().keys().filter_map(|r| r.ok()).filter(|k| &k[..] != CHECKPOINT).map(|k| k.to_vec()).collect();
        if let Some(p) = self.pending.get(store) {
            for (k, (v, _)) in &p.0 {
                match v {
                    Some(_) => all.insert(k.clone()),
                    None => all.remove(k),
                };
            }
        }
        all.into_iter().collect()
    }
}

/// Open the sled tree of one store's shard.
pub(crate) fn open_tree(db: &sled::Db, store: &str, p: u32) -> Result<sled::Tree, RunError> {
    db.open_tree(format!("{store}#{p}")).map_err(state(format!("cannot open store {store}")))
}

/// Open the local state. It is a cache of the changelogs: if sled cannot open it (damage after
/// an abrupt stop, or bytes overwritten), it is wiped and every store is restored from its
/// changelog. Only a lock held by another process is an error.
pub(crate) fn open_local_state(path: &Path, app: &str) -> Result<sled::Db, RunError> {
    let open = || sled::Config::new().path(path).cache_capacity(64 << 20).open();
    let damage = match open_catching_panics(open) {
        Ok(Ok(db)) => return Ok(db),
        Ok(Err(e)) if e.to_string().contains("lock") => {
            return Err(RunError::Locked { path: path.display().to_string(), app: app.to_string(), source: e });
        }
        Ok(Err(e)) => e.to_string(),
        Err(panic) => format!("its files are damaged: {panic}"),
    };
    eprintln!(
        "local state {} cannot be opened ({damage}): wiping it; the stores are restored from their changelogs",
        path.display()
    );
    std::fs::remove_dir_all(path).map_err(|source| RunError::Io {
        doing: format!("cannot remove damaged local state {}", path.display()),
        source,
    })?;
    open().map_err(state(format!("cannot open local state {}", path.display())))
}

/// `open()`, or the message of the panic it stopped with: sled 0.34 panics on some damaged
/// files instead of returning an error ("tried to serialize Uninitialized" while it reads its
/// snapshot). The panic is not printed.
fn open_catching_panics(open: impl Fn() -> sled::Result<sled::Db>) -> Result<sled::Result<sled::Db>, String> {
    // The panic hook is the process's: one swap at a time, so that the default one always comes
    // back (a panic elsewhere during an open goes unprinted, not uncaught).
    static SWAP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = SWAP.lock().unwrap_or_else(|p| p.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&open));
    std::panic::set_hook(hook);
    r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "sled stopped".into())
    })
}

/// Read back the keys a batch just wrote. sled 0.34 consolidates a page's pending updates when
/// the page is read, not when it is written; a store that is only written (windows are served
/// from the record cache, never read) otherwise keeps every update in memory and on disk: 3 M
/// trades of the stats example grew to 680 MB of memory and 76 MB on disk without this, against
/// 148 MB and 10 MB with it.
pub(crate) fn consolidate<'a>(tree: &sled::Tree, keys: impl IntoIterator<Item = &'a [u8]>) {
    for k in keys {
        let _ = tree.get(k);
    }
}

/// Empty store `i` of a task: its local tree cleared, its pending changes dropped, and a
/// tombstone queued for every key it held, to be committed to the changelog. Returns how many.
pub(crate) fn empty_store(
    i: usize,
    tree: &sled::Tree,
    pending: &mut Pending,
    stream_time: i64,
    changes: &mut Vec<Change>,
) -> Result<u64, RunError> {
    let mut keys = Vec::new();
    live_store_keys(tree, pending, |k| keys.push(k.to_vec()));
    *pending = Pending::default();
    tree.clear().map_err(state("cannot clear local state"))?;
    let n = keys.len() as u64;
    changes.extend(keys.into_iter().map(|key| Change {
        store: i,
        key,
        value: None,
        timestamp: stream_time.max(0),
        existed: false,
    }));
    Ok(n)
}

/// Every key a store holds, in key order: those in sled that no pending change deletes, and those
/// pending changes put (its checkpoint is not a key).
pub(crate) fn live_store_keys(tree: &sled::Tree, pending: &Pending, mut f: impl FnMut(&[u8])) {
    let mut pending_puts: Vec<&Vec<u8>> = pending.0.iter().filter(|(_, (v, _))| v.is_some()).map(|(k, _)| k).collect();
    pending_puts.sort_unstable();
    let mut puts = pending_puts.into_iter().peekable();
    for k in tree.iter().keys().filter_map(|k| k.ok()) {
        // Pending puts before this key, then the key itself unless pending changes decide it.
        while let Some(p) = puts.next_if(|p| p.as_slice() < &k[..]) {
            f(p);
        }
        if &k[..] == CHECKPOINT || pending.0.contains_key(&k[..]) {
            continue;
        }
        f(&k);
    }
    for p in puts {
        f(p);
    }
}

/// Fold changelog records, in order, into the keys the changelog still holds a value for (the
/// last record of each key is not a tombstone), with that record's timestamp.
pub(crate) fn live_keys(live: &mut BTreeMap<Vec<u8>, i64>, records: impl IntoIterator<Item = Stored>) {
    for s in records {
        if let Some(k) = s.record.key {
            match s.record.value {
                Some(_) => live.insert(k, s.record.timestamp),
                None => live.remove(&k),
            };
        }
    }
}

/// The local checkpoint of a store: the changelog position its local state reflects.
pub(crate) fn checkpoint(tree: &sled::Tree) -> Option<Pos> {
    tree.get(CHECKPOINT).ok().flatten().and_then(|b| serde_json::from_slice(&b).ok())
}
