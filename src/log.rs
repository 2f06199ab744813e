//! The embedded log: topics, partitions and offsets in files under `<state-dir>/log`, shared by
//! every process that opens the same state directory (`run`, `produce`, `consume`).
//!
//! Layout:
//! - `topics/<topic>/meta.json` — partition count and cleanup policy;
//! - `topics/<topic>/<p>.log` — frames, appended only under the writer lock; a compacted
//!   topic's partition, once compacted, is `<p>.<gen>.compact` (the last record of every key
//!   up to some offset, each frame after its offset) followed by `<p>.<gen>.log` (the frames
//!   appended since), generation `gen` named in `COMMITTED`;
//! - `COMMITTED` — the committed end (offset, byte position) of every partition and the
//!   committed metadata of every consumer group, replaced atomically (write + rename);
//! - `LOCK` — an exclusive file lock held by one writer at a time;
//! - `RUN-<app>` — held by the one `streamc run` of application `app` for its whole life.
//!
//! A commit appends all its records, to any number of partitions, and then replaces
//! `COMMITTED` in one rename: that rename is the commit point. Readers read only up to the
//! committed ends, so a batch is visible whole or not at all, and bytes past a committed end
//! (a writer killed mid-commit) are cut off by the next writer before it appends.
//!
//! Compaction (topics created compacted: changelogs) keeps, like Kafka's log cleaner, the last
//! record of every key at its own offset, and a deletion (tombstone) for one compaction more
//! (the [`Base::horizon`]): a reader from any offset after the horizon still ends with every
//! key's latest value, and a full restore reads one record per key instead of every update. A
//! partition is due once the frames since its last compaction exceed [`COMPACT_MIN_BYTES`] and
//! the compacted part; the commit that finds it due queues it for the process's compactor
//! thread ([`compactor`]), which writes the new generation's files from the committed records
//! while commits go on, then, under the lock, copies the frames committed meanwhile after them
//! and makes them the partition in one `COMMITTED` rename; the old ones are deleted after. Byte
//! positions stay absolute (the new `.log` starts at the compacted end), so positions taken
//! before a compaction remain valid, and readers move to the new files when the old ones end.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::record::{decode, Cursor};
use crate::record::{Append, Pos, Record, Stored};

mod compactor;

/// What is committed: partition ends and consumer-group metadata.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Committed {
    /// `topic/partition` → committed end.
    pub ends: BTreeMap<String, Pos>,
    /// group → its committed metadata (the runtime's commit record).
    pub groups: BTreeMap<String, serde_json::Value>,
    /// `topic/partition` → its files, for a partition compacted at least once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bases: BTreeMap<String, Base>,
}

/// The files of a compacted partition: generation `gen`'s `.compact` holds the records before
/// `start` (the last of each key), its `.log` the frames from `start` on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    pub gen: u64,
    /// Where the `.log` file begins: its first frame's offset and absolute byte position.
    pub start: Pos,
    /// The size of the `.compact` file.
    pub compacted_bytes: u64,
    /// Deletions (tombstones) before this offset may be gone: the compacted part keeps each
    /// tombstone through one compaction after the one that first compacted it. A reader from
    /// an earlier offset may miss deletions (a restore from such a checkpoint starts over).
    #[serde(default)]
    pub horizon: u64,
}

/// A compacted topic's partition is compacted when the frames appended since its last
/// compaction exceed this many bytes and the size of its compacted part.
pub const COMPACT_MIN_BYTES: u64 = 8 << 20;

/// The keys a compaction holds in memory at most: its map's table of 2^19 slots of 25 bytes,
/// 13 MB, whatever the keys' length. More keys take more scans, not more memory (a scan of
/// 1.75 M records takes about 0.15 s).
const COMPACT_MAP_KEYS: usize = 458_752;

/// The most shares a compaction splits its keys into (each one more scan).
const COMPACT_MAX_SHARES: usize = 8;

/// An exclusive lock of the file at `path` (made if missing), held for as long as the returned
/// file lives; None if someone else holds it.
fn try_lock_file(path: &Path) -> Result<Option<File>> {
    let f =
        OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io(At("cannot open", path)))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(io(At("cannot lock", path))(e)),
    }
}

/// Whether a partition whose files are `base`, committed up to `end`, is due for compaction:
/// the frames since its last one exceed [`COMPACT_MIN_BYTES`] and the compacted part.
fn due_for_compaction(base: &Base, end: &Pos) -> bool {
    end.byte - base.start.byte > COMPACT_MIN_BYTES.max(base.compacted_bytes)
}

/// A key's hash (128 bits) → the place in a compaction's scan of its last record.
type KeyPlaces = rustc_hash::FxHashMap<[u64; 2], usize>;

impl Committed {
    pub fn end(&self, topic: &str, partition: u32) -> Pos {
        self.ends.get(&part_key(topic, partition)).copied().unwrap_or_default()
    }
}

fn part_key(topic: &str, partition: u32) -> String {
    format!("{topic}/{partition}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub partitions: u32,
    pub compacted: bool,
}

#[derive(Clone, Debug)]
pub struct EmbeddedLog {
    dir: PathBuf,
    fsync: bool,
    /// What this process knows of the log's files, shared by its clones.
    known: Arc<Known>,
}

/// What a process keeps of the log's files between calls, so that a commit does not read
/// them again: about 4 of the 10 files a commit opened.
#[derive(Debug, Default)]
struct Known {
    /// Topics' metadata as read: written once, when a topic is created (forgotten when this
    /// process deletes it; another deletes only an application's own topics, with its run lock).
    metas: Mutex<BTreeMap<String, TopicMeta>>,
    /// The log lock's file, opened once: this process's commits take it in turn.
    lock: Mutex<Option<File>>,
    /// `COMMITTED` as read or written last, with the identity of the file then: read again
    /// only once another process replaced it.
    committed: Mutex<Option<(FileId, Committed)>>,
}

/// A file's identity: device, inode, size and modification time (a file another process
/// renamed over it differs in one of them).
type FileId = (u64, u64, u64, i64, i64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The log lock, held while this lives.
struct Locked<'a>(std::sync::MutexGuard<'a, Option<File>>);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0.as_ref() {
            let _ = f.unlock();
        }
    }
}

/// What can go wrong with the embedded log. Callers that report errors as text get the same
/// messages through `Display` (and `From<LogError> for String`).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file operation failed: what was being done, and the I/O error.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A metadata file (`meta.json`, `COMMITTED`) does not parse.
    #[error("{what}: {source}")]
    Corrupt {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("`{0}` is not a valid topic name")]
    InvalidTopic(String),
    #[error("topic `{topic}` exists with {has} partitions, {needs} needed")]
    PartitionCount { topic: String, has: u32, needs: u32 },
    #[error("no topic `{0}`")]
    NoTopic(String),
    #[error("topic `{topic}` has no partition {partition}")]
    NoPartition { topic: String, partition: u32 },
    /// A frame of a partition file is damaged (a torn write past the committed end is not).
    #[error("{path}: a record at byte {byte} is damaged")]
    Damaged { path: String, byte: u64 },
    /// Another process runs the application on this log.
    #[error("another `streamc run` of `{app}` is using {dir} (it holds {lock}); stop it first")]
    Busy { app: String, dir: String, lock: String },
    /// A partition file holds fewer bytes than its committed records: it was cut short.
    #[error(
        "{path} holds {len} bytes, but its committed records end at byte {end}: the file was cut \
         short (damaged); nothing is appended after the tear; restore the file from a backup, or \
         remove the log to start over"
    )]
    Truncated { path: String, len: u64, end: u64 },
    /// The commit metadata is gone while the log holds records: without it nothing is known to
    /// be committed, and reading or appending would start over on top of the data.
    #[error(
        "{path} is missing, but the log holds records ({data}): the log is damaged and is not reset; \
         restore {path} from a backup, or remove {dir} to start over"
    )]
    MissingCommitted { path: String, data: String, dir: String },
}

impl From<LogError> for String {
    fn from(e: LogError) -> String {
        e.to_string()
    }
}

pub type Result<T> = std::result::Result<T, LogError>;

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> LogError {
    move |source| LogError::Io { what: what.to_string(), source }
}

/// What was being done to a file, formatted only if it failed (hot loops pass it per frame).
struct At<'a>(&'static str, &'a Path);

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.0, self.1.display())
    }
}

fn corrupt(what: impl std::fmt::Display) -> impl FnOnce(serde_json::Error) -> LogError {
    move |source| LogError::Corrupt { what: what.to_string(), source }
}

impl EmbeddedLog {
    /// Open (creating if needed) the log in `<state_dir>/log`.
    pub fn open(state_dir: &Path, fsync: bool) -> Result<EmbeddedLog> {
        let dir = state_dir.join("log");
        fs::create_dir_all(dir.join("topics")).map_err(io(At("cannot create", &dir)))?;
        let log = EmbeddedLog { dir, fsync, known: Arc::default() };
        // A new log gets its (empty) commit metadata at once: from then on a missing COMMITTED
        // is damage, never a log that has not committed yet.
        if !log.dir.join("COMMITTED").exists() && log.data_file()?.is_none() {
            let tmp = log.dir.join(format!("COMMITTED.{}.new", std::process::id()));
            fs::write(&tmp, serde_json::to_vec(&Committed::default()).unwrap_or_default())
                .map_err(io("cannot write COMMITTED"))?;
            // A link, not a rename: it never replaces a COMMITTED another process made (and
            // committed to) meanwhile.
            let linked = fs::hard_link(&tmp, log.dir.join("COMMITTED"));
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("cannot write COMMITTED")(e)),
            }
        }
        Ok(log)
    }

    /// A partition file that holds bytes, if any.
    fn data_file(&self) -> Result<Option<PathBuf>> {
        for t in fs::read_dir(self.dir.join("topics")).map_err(io("cannot list topics"))? {
            let t = t.map_err(io("cannot list topics"))?;
            let Ok(files) = fs::read_dir(t.path()) else { continue };
            for f in files.flatten() {
                let p = f.path();
                if p.extension().is_some_and(|e| e == "log") && f.metadata().is_ok_and(|m| m.len() > 0) {
                    return Ok(Some(p));
                }
            }
        }
        Ok(None)
    }

    fn topic_dir(&self, topic: &str) -> PathBuf {
        self.dir.join("topics").join(topic)
    }

    /// The frames of a partition from `base.start` on.
    fn data_path(&self, topic: &str, partition: u32, base: &Base) -> PathBuf {
        match base.gen {
            0 => self.topic_dir(topic).join(format!("{partition}.log")),
            g => self.topic_dir(topic).join(format!("{partition}.{g}.log")),
        }
    }

    /// The compacted records of a partition before `base.start`.
    fn compact_path(&self, topic: &str, partition: u32, gen: u64) -> PathBuf {
        self.topic_dir(topic).join(format!("{partition}.{gen}.compact"))
    }

    pub fn topic(&self, topic: &str) -> Result<Option<TopicMeta>> {
        if let Some(m) = self.known.metas.lock().unwrap_or_else(|e| e.into_inner()).get(topic) {
            return Ok(Some(*m));
        }
        let p = self.topic_dir(topic).join("meta.json");
        match fs::read(&p) {
            Ok(b) => {
                let m: TopicMeta = serde_json::from_slice(&b).map_err(corrupt(format!("corrupt {}", p.display())))?;
                self.known.metas.lock().unwrap_or_else(|e| e.into_inner()).insert(topic.to_string(), m);
                Ok(Some(m))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(At("cannot read", &p))(e)),
        }
    }

    /// Create a topic, or check an existing one: a different partition count is an error.
    pub fn create_topic(&self, topic: &str, partitions: u32, compacted: bool) -> Result<TopicMeta> {
        if !crate::check::valid_topic(topic) {
            return Err(LogError::InvalidTopic(topic.to_string()));
        }
        let _lock = self.lock()?;
        if let Some(m) = self.topic(topic)? {
            if m.partitions != partitions {
                return Err(LogError::PartitionCount {
                    topic: topic.to_string(),
                    has: m.partitions,
                    needs: partitions,
                });
            }
            return Ok(m);
        }
        let meta = TopicMeta { partitions: partitions.max(1), compacted };
        let d = self.topic_dir(topic);
        fs::create_dir_all(&d).map_err(io(At("cannot create", &d)))?;
        let tmp = d.join("meta.json.tmp");
        fs::write(&tmp, serde_json::to_vec(&meta).unwrap_or_default()).map_err(io("cannot write topic metadata"))?;
        fs::rename(&tmp, d.join("meta.json")).map_err(io("cannot write topic metadata"))?;
        Ok(meta)
    }

    /// The topic's metadata, creating it with `partitions` if it does not exist.
    pub fn ensure_topic(&self, topic: &str, partitions: u32) -> Result<TopicMeta> {
        match self.topic(topic)? {
            Some(m) => Ok(m),
            None => self.create_topic(topic, partitions, false),
        }
    }

    pub fn topics(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for e in fs::read_dir(self.dir.join("topics")).map_err(io("cannot list topics"))? {
            let e = e.map_err(io("cannot list topics"))?;
            out.push(e.file_name().to_string_lossy().into_owned());
        }
        out.sort();
        Ok(out)
    }

    /// Take the run lock of application `app`, held for as long as the returned file lives:
    /// one `streamc run` of an application per log at a time, whatever happens to its local
    /// state (other commands still append and read).
    pub fn lock_run(&self, app: &str) -> Result<File> {
        let path = self.dir.join(format!("RUN-{app}"));
        try_lock_file(&path)?.ok_or_else(|| LogError::Busy {
            app: app.to_string(),
            dir: self.dir.display().to_string(),
            lock: path.display().to_string(),
        })
    }

    /// An exclusive lock named `name` in the log's directory (a command that must run alone),
    /// held for as long as the returned file lives; None if someone else holds it.
    pub fn try_lock_named(&self, name: &str) -> Result<Option<File>> {
        try_lock_file(&self.dir.join(name))
    }

    fn lock(&self) -> Result<Locked<'_>> {
        let mut g = self.known.lock.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(self.dir.join("LOCK"))
                .map_err(io("cannot open the log lock"))?;
            *g = Some(f);
        }
        if let Some(f) = g.as_ref() {
            f.lock().map_err(io("cannot lock the log"))?;
        }
        Ok(Locked(g))
    }

    /// The committed state read from the file, whatever is known (under the lock, before a
    /// commit: a file another process wrote may have taken a freed inode number of the same
    /// size within one timestamp tick, so its identity alone does not prove it unchanged).
    fn committed_now(&self) -> Result<Committed> {
        *self.known.committed.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.committed()
    }

    /// The current committed state (as last known, when the file is the same one).
    pub fn committed(&self) -> Result<Committed> {
        let path = self.dir.join("COMMITTED");
        let id = file_id(&path);
        if let (Some(id), Some((at, c))) = (id, &*self.known.committed.lock().unwrap_or_else(|e| e.into_inner())) {
            if id == *at {
                return Ok(c.clone());
            }
        }
        match fs::read(&path) {
            Ok(b) => {
                let c: Committed =
                    serde_json::from_slice(&b).map_err(corrupt("the log's COMMITTED file is corrupt"))?;
                // (Known as of the identity seen before the read: a file replaced in between
                // is read again next time.)
                if let Some(id) = id {
                    *self.known.committed.lock().unwrap_or_else(|e| e.into_inner()) = Some((id, c.clone()));
                }
                Ok(c)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match self.data_file()? {
                // (A log that never committed: created by an older streamc, or empty topics.)
                None => Ok(Committed::default()),
                Some(data) => Err(LogError::MissingCommitted {
                    path: self.dir.join("COMMITTED").display().to_string(),
                    data: data.display().to_string(),
                    dir: self.dir.display().to_string(),
                }),
            },
            Err(e) => Err(io("cannot read COMMITTED")(e)),
        }
    }

    /// Check every committed partition's file against its committed end: a file cut short
    /// before it is damage ([`LogError::Truncated`]); bytes past it (a writer interrupted
    /// before its commit) are harmless, and the next append cuts them off.
    pub fn check_tails(&self) -> Result<()> {
        // Under the lock: a commit (and the compaction inside it) is not halfway.
        let _lock = self.lock()?;
        let c = self.committed_now()?;
        for (key, end) in &c.ends {
            let Some((topic, p)) = key.rsplit_once('/') else { continue };
            let Ok(p) = p.parse::<u32>() else { continue };
            let base = c.bases.get(key).copied().unwrap_or_default();
            let path = self.data_path(topic, p, &base);
            let at = end.byte - base.start.byte;
            let len = match fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(io(At("cannot read the size of", &path))(e)),
            };
            if len < at {
                return Err(LogError::Truncated { path: path.display().to_string(), len, end: at });
            }
        }
        Ok(())
    }

    /// Append every batch and set `groups`' metadata, atomically. Returns the committed state.
    pub fn commit(&self, appends: Vec<Append>, groups: Vec<(String, serde_json::Value)>) -> Result<Committed> {
        let _lock = self.lock()?;
        let mut c = self.committed_now()?;
        // Partitions due for compaction, compacted by the compactor thread after the commit.
        let mut compact = BTreeMap::new();
        for a in appends {
            if a.is_empty() {
                continue;
            }
            let meta = self.topic(&a.topic)?.ok_or_else(|| LogError::NoTopic(a.topic.clone()))?;
            if a.partition >= meta.partitions {
                return Err(LogError::NoPartition { topic: a.topic.clone(), partition: a.partition });
            }
            let key = part_key(&a.topic, a.partition);
            let mut end = c.ends.get(&key).copied().unwrap_or_default();
            let base = c.bases.get(&key).copied().unwrap_or_default();
            let path = self.data_path(&a.topic, a.partition, &base);
            let mut f = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io(At("cannot open", &path)))?;
            // Cut off whatever an interrupted writer left past the committed end; a file shorter
            // than that end is damage (extending it would leave a hole inside the records).
            let at = end.byte - base.start.byte;
            let len = f.metadata().map_err(io(At("cannot read the size of", &path)))?.len();
            if len < at {
                return Err(LogError::Truncated { path: path.display().to_string(), len, end: at });
            }
            f.set_len(at).map_err(io(At("cannot truncate", &path)))?;
            f.seek(SeekFrom::Start(at)).map_err(io("seek"))?;
            f.write_all(&a.frames).map_err(io(At("cannot append to", &path)))?;
            let written = a.frames.len() as u64;
            if self.fsync {
                f.sync_data().map_err(io("fsync"))?;
            }
            end.byte += written;
            end.offset += a.count;
            c.ends.insert(key.clone(), end);
            if meta.compacted && due_for_compaction(&base, &end) {
                compact.insert((a.topic.clone(), a.partition), end);
            }
        }
        for (g, v) in groups {
            c.groups.insert(g, v);
        }
        self.write_committed(&c)?;
        drop(_lock);
        for ((topic, p), end) in compact {
            compactor::request(self, &topic, p, end);
        }
        Ok(c)
    }

    /// Replace `COMMITTED` with `c` (the caller holds the lock): the commit point.
    fn write_committed(&self, c: &Committed) -> Result<()> {
        let tmp = self.dir.join("COMMITTED.tmp");
        let mut f = File::create(&tmp).map_err(io("cannot write COMMITTED"))?;
        f.write_all(&serde_json::to_vec(c).unwrap_or_default()).map_err(io("cannot write COMMITTED"))?;
        if self.fsync {
            f.sync_data().map_err(io("fsync"))?;
        }
        let path = self.dir.join("COMMITTED");
        fs::rename(&tmp, &path).map_err(io("cannot replace COMMITTED"))?;
        if let Some(id) = file_id(&path) {
            *self.known.committed.lock().unwrap_or_else(|e| e.into_inner()) = Some((id, c.clone()));
        }
        Ok(())
    }

    /// Compact a partition as its committed state stands, if it is due: its next generation is
    /// written outside the lock, while commits go on, and then made the partition's, under the
    /// lock, with the frames committed meanwhile copied after it. False if it was not due, or
    /// the partition changed under it (another compaction, a reset).
    fn compact_committed(&self, topic: &str, p: u32) -> Result<bool> {
        // One compaction of a partition at a time, in any process: the next generation's
        // files have fixed names (a compaction killed part way leaves them, to be overwritten).
        let Some(_compacting) = self.try_lock_compaction(topic, p)? else { return Ok(false) };
        let key = part_key(topic, p);
        let c = self.committed()?;
        let base = c.bases.get(&key).copied().unwrap_or_default();
        let end = c.end(topic, p);
        if !due_for_compaction(&base, &end) {
            return Ok(false);
        }
        let next = self.compact(topic, p, base, end)?;
        let _lock = self.lock()?;
        let mut c = self.committed_now()?;
        let now = c.end(topic, p);
        if c.bases.get(&key).copied().unwrap_or_default() != base || now.offset < end.offset {
            return Ok(false);
        }
        // The frames committed since `end`, after it in the new generation's `.log`.
        let (old_log, new_log) = (self.data_path(topic, p, &base), self.data_path(topic, p, &next));
        let mut from = File::open(&old_log).map_err(io(At("cannot open", &old_log)))?;
        from.seek(SeekFrom::Start(end.byte - base.start.byte)).map_err(io("seek"))?;
        let mut to = OpenOptions::new().append(true).open(&new_log).map_err(io(At("cannot open", &new_log)))?;
        let tail = now.byte - end.byte;
        let copied = std::io::copy(&mut from.take(tail), &mut to).map_err(io(At("cannot write", &new_log)))?;
        if copied != tail {
            return Err(LogError::Damaged { path: old_log.display().to_string(), byte: end.byte + copied });
        }
        if self.fsync {
            to.sync_data().map_err(io("fsync"))?;
        }
        c.bases.insert(key, next);
        self.write_committed(&c)?;
        // Committed: the superseded generation's files go (a failure leaves garbage, not harm).
        let _ = fs::remove_file(old_log);
        if base.gen > 0 {
            let _ = fs::remove_file(self.compact_path(topic, p, base.gen));
        }
        Ok(true)
    }

    /// The lock of a partition's compaction, if no one else holds it.
    fn try_lock_compaction(&self, topic: &str, p: u32) -> Result<Option<File>> {
        try_lock_file(&self.topic_dir(topic).join(format!("{p}.compacting")))
    }

    /// Wait until no compaction of this log is queued or running (the end of a run).
    pub fn settle_compactions(&self) {
        compactor::settle(self, None);
    }

    /// Wait until no compaction of one partition is queued or running: a restore reads it from
    /// a checkpoint only if its compacted part keeps every deletion from there on, which a
    /// compaction made current in the middle of the restore might not. (While its task
    /// restores, nothing else asks for its changelog to be compacted.)
    pub fn settle_compaction(&self, topic: &str, p: u32) {
        compactor::settle(self, Some((topic, p)));
    }

    /// Write generation `base.gen + 1` of a partition compacted up to `end`: every record of it
    /// (the compacted part and the frames up to `end`) is read to find each key's last record,
    /// then once more to keep those; its `.log` is made empty. Returns the new generation's
    /// base; the caller commits it.
    fn compact(&self, topic: &str, p: u32, base: Base, end: Pos) -> Result<Base> {
        self.compact_within(topic, p, base, end, COMPACT_MAP_KEYS)
    }

    /// [`Self::compact`] holding about `map_keys` keys in memory at most. Keys are known by a
    /// 128-bit hash (as Kafka's log cleaner keys its offset map by a 16-byte digest), so the
    /// map's size does not depend on the keys' length. A partition with more keys than that
    /// has its keys split by hash into shares, each found in a scan of its own: `r` records cost
    /// about `2 + 8r / 7map_keys` scans, at most 2 + 8 (past 3.2 M keys the map grows instead,
    /// by about 3 bytes a key).
    /// The records to keep are marked in a bitset by their place in the scan.
    fn compact_within(&self, topic: &str, p: u32, base: Base, end: Pos, map_keys: usize) -> Result<Base> {
        let gen = base.gen + 1;
        // Deletions compacted by the previous compaction go now.
        let horizon = base.start.offset;
        // Pass 1: each key's last record (frames are scanned, not decoded), all keys at once
        // if they fit. (The table is made at its full size at once: growing it would hold the
        // old one beside it. There are at most `end.offset` records.)
        let mut last = KeyPlaces::with_capacity_and_hasher(map_keys.min(end.offset as usize), Default::default());
        let (records, fits) = self.last_places(topic, p, base, end, (0, 1), Some(map_keys), &mut last)?;
        let mut keep = vec![0u64; records.div_ceil(64)];
        let mut mark = |last: &KeyPlaces| {
            for &nth in last.values() {
                keep[nth / 64] |= 1 << (nth % 64);
            }
        };
        if fits {
            mark(&last);
        } else {
            // At most `records` keys, in shares of at most `7/8 map_keys` expected keys each (a
            // share's spread around its expected size stays well under the bound; one over it
            // would still be taken whole, the map growing).
            // At most COMPACT_MAX_SHARES scans: past that many keys the map grows instead (3
            // bytes a key over 8 shares), so that the scans do not grow with the square of them.
            let shares = records.div_ceil((map_keys - map_keys / 8).max(1)).min(COMPACT_MAX_SHARES) as u64;
            for share in 0..shares {
                self.last_places(topic, p, base, end, (share, shares), None, &mut last)?;
                mark(&last);
            }
        }
        drop(last);
        // Pass 2: the frames to keep, copied as they are after their offsets.
        let path = self.compact_path(topic, p, gen);
        let file = File::create(&path).map_err(io(At("cannot create", &path)))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut bytes = 0u64;
        let mut nth = 0usize;
        self.scan_frames(topic, p, base, end, &mut |offset, frame| {
            // Keyless records cannot be compacted away: they are kept. A key's last record
            // stays, unless it is a deletion from before the horizon.
            let latest = keep.get(nth / 64).is_some_and(|w| w & (1 << (nth % 64)) != 0);
            nth += 1;
            let (latest, deletion) = match frame_key(frame) {
                Some((Some(_), deletion)) => (latest, deletion),
                Some((None, deletion)) => (true, deletion),
                None => (true, false),
            };
            if latest && !(deletion && offset < horizon) {
                w.write_all(&offset.to_le_bytes())
                    .and_then(|_| w.write_all(frame))
                    .map_err(io(At("cannot write", &path)))?;
                bytes += 8 + frame.len() as u64;
            }
            Ok(())
        })?;
        let file = w.into_inner().map_err(|e| io(At("cannot write", &path))(e.into_error()))?;
        if self.fsync {
            file.sync_data().map_err(io("fsync"))?;
        }
        let next = Base { gen, start: end, compacted_bytes: bytes, horizon };
        let log = self.data_path(topic, p, &next);
        File::create(&log).map_err(io(At("cannot create", &log)))?;
        Ok(next)
    }

    /// One scan of a partition up to `end`: into `last`, the place in the scan (0 for its first
    /// record) of the last record of each key whose hash falls in share `share.0` of `share.1`.
    /// Returns the number of records scanned, and whether every such key fit under `bound`
    /// (past it the map is not filled further, and the scan only counts).
    #[allow(clippy::too_many_arguments)]
    fn last_places(
        &self,
        topic: &str,
        p: u32,
        base: Base,
        end: Pos,
        share: (u64, u64),
        bound: Option<usize>,
        last: &mut KeyPlaces,
    ) -> Result<(usize, bool)> {
        last.clear();
        let mut nth = 0usize;
        let mut fits = true;
        self.scan_frames(topic, p, base, end, &mut |_, frame| {
            if let (true, Some((Some(k), _))) = (fits, frame_key(frame)) {
                let h = xxhash_rust::xxh3::xxh3_128(k);
                let h = [h as u64, (h >> 64) as u64];
                if h[1] % share.1 == share.0 {
                    if bound.is_some_and(|b| last.len() >= b) && !last.contains_key(&h) {
                        fits = false;
                    } else {
                        last.insert(h, nth);
                    }
                }
            }
            nth += 1;
            Ok(())
        })?;
        Ok((nth, fits))
    }

    /// Every frame of a partition up to `end`, in offset order, with its offset: the compacted
    /// part of `base`, then its `.log` (which may hold frames not committed yet, up to `end`).
    /// `visit` gets each whole frame (its length prefix included).
    fn scan_frames(
        &self,
        topic: &str,
        p: u32,
        base: Base,
        end: Pos,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        if base.gen > 0 {
            let mut c = CompactedFrames::open(self.compact_path(topic, p, base.gen), base.compacted_bytes)?;
            while let Some((offset, frame)) = c.next()? {
                visit(offset, frame)?;
            }
        }
        let path = self.data_path(topic, p, &base);
        let f = File::open(&path).map_err(io(At("cannot open", &path)))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, f);
        let mut at = base.start;
        let mut frame = Vec::new();
        while at.offset < end.offset && at.byte < end.byte {
            let damaged = |_| LogError::Damaged { path: path.display().to_string(), byte: at.byte };
            let mut len = [0u8; 4];
            r.read_exact(&mut len).map_err(damaged)?;
            frame.clear();
            frame.extend_from_slice(&len);
            frame.resize(4 + u32::from_le_bytes(len) as usize, 0);
            r.read_exact(&mut frame[4..]).map_err(damaged)?;
            visit(at.offset, &frame)?;
            at = Pos { offset: at.offset + 1, byte: at.byte + frame.len() as u64 };
        }
        if at != end {
            return Err(LogError::Damaged { path: path.display().to_string(), byte: at.byte });
        }
        Ok(())
    }

    /// The committed records a partition holds (after compaction): what reading it from the
    /// start yields. Counts frames without decoding them.
    pub fn records(&self, topic: &str, partition: u32) -> Result<u64> {
        // A run that compacts the partition meanwhile deletes the files of the generation being
        // read: read the newer one.
        let mut tries = 0;
        loop {
            let c = self.committed()?;
            let end = c.end(topic, partition);
            if end.offset == 0 {
                return Ok(0);
            }
            let base = c.bases.get(&part_key(topic, partition)).copied().unwrap_or_default();
            let mut n = 0;
            match self.scan_frames(topic, partition, base, end, &mut |_, _| {
                n += 1;
                Ok(())
            }) {
                Ok(()) => return Ok(n),
                Err(_) if tries < 5 && self.committed()?.bases.get(&part_key(topic, partition)) != Some(&base) => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Delete topics and consumer-group metadata (`run --reset`): the groups `delete` says yes to.
    pub fn delete(&self, topics: &[String], delete: impl Fn(&str) -> bool) -> Result<()> {
        let _lock = self.lock()?;
        let mut c = self.committed_now()?;
        c.groups.retain(|g, _| !delete(g));
        for t in topics {
            c.ends.retain(|k, _| k.rsplit_once('/').is_none_or(|(topic, _)| topic != t));
            c.bases.retain(|k, _| k.rsplit_once('/').is_none_or(|(topic, _)| topic != t));
            let d = self.topic_dir(t);
            self.known.metas.lock().unwrap_or_else(|e| e.into_inner()).remove(t);
            if d.exists() {
                fs::remove_dir_all(&d).map_err(io(At("cannot delete", &d)))?;
            }
        }
        let tmp = self.dir.join("COMMITTED.tmp");
        fs::write(&tmp, serde_json::to_vec(&c).unwrap_or_default()).map_err(io("cannot write COMMITTED"))?;
        fs::rename(&tmp, self.dir.join("COMMITTED")).map_err(io("cannot replace COMMITTED"))
    }

    /// The state directory the log is in (`<state_dir>/log`).
    pub fn state_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// A reader of one partition, starting at `from`. It finds the partition's files (see
    /// [`Base`]) when it first reads.
    pub fn reader(&self, topic: &str, partition: u32, from: Pos) -> PartitionReader {
        PartitionReader {
            log: self.clone(),
            topic: topic.to_string(),
            partition,
            base: None,
            compacted: None,
            path: PathBuf::new(),
            file: None,
            pos: from,
            buf: Vec::new(),
            start: 0,
        }
    }
}

/// Reads a `.compact` file: each frame after its offset. Its length must be the one
/// `COMMITTED` recorded, and a frame cut short is damage, not an end.
struct CompactedFrames {
    path: PathBuf,
    r: std::io::BufReader<File>,
    /// The last frame read (reused).
    frame: Vec<u8>,
    /// Bytes read so far.
    read: u64,
}

impl CompactedFrames {
    fn open(path: PathBuf, len: u64) -> Result<CompactedFrames> {
        let f = File::open(&path).map_err(io(At("cannot open", &path)))?;
        let has = f.metadata().map_err(io(At("cannot read", &path)))?.len();
        if has != len {
            return Err(LogError::Damaged { path: path.display().to_string(), byte: has });
        }
        Ok(CompactedFrames { path, r: std::io::BufReader::with_capacity(1 << 20, f), frame: Vec::new(), read: 0 })
    }

    /// The next frame (its length prefix included) with its offset; None at the end.
    fn next(&mut self) -> Result<Option<(u64, &[u8])>> {
        use std::io::BufRead;
        if self.r.fill_buf().map_err(io(At("cannot read", &self.path)))?.is_empty() {
            return Ok(None);
        }
        let (path, read) = (&self.path, self.read);
        let damaged = |_| LogError::Damaged { path: path.display().to_string(), byte: read };
        let mut head = [0u8; 12];
        self.r.read_exact(&mut head).map_err(damaged)?;
        let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
        self.frame.clear();
        self.frame.extend_from_slice(&head[8..]);
        self.frame.resize(4 + len, 0);
        self.r.read_exact(&mut self.frame[4..]).map_err(damaged)?;
        self.read += 8 + self.frame.len() as u64;
        let offset = u64::from_le_bytes([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
        Ok(Some((offset, &self.frame)))
    }
}

/// The compacted part of a partition as a reader reads it: its frames, and a record read ahead
/// of the reader's end.
struct Compacted {
    frames: CompactedFrames,
    ahead: Option<(u64, Record)>,
}

/// Reads one partition sequentially, never past the end it is given: first, when it starts
/// before a compacted partition's `.log`, the compacted records from its offset on, then the
/// frames.
pub struct PartitionReader {
    log: EmbeddedLog,
    topic: String,
    partition: u32,
    /// The partition's files, once looked up.
    base: Option<Base>,
    /// While reading the compacted part.
    compacted: Option<Compacted>,
    path: PathBuf,
    file: Option<File>,
    pos: Pos,
    buf: Vec<u8>,
    /// Where `buf` starts (an absolute byte position).
    start: u64,
}

impl PartitionReader {
    pub fn position(&self) -> Pos {
        self.pos
    }

    /// The topic and partition read.
    pub fn partition(&self) -> (&str, u32) {
        (&self.topic, self.partition)
    }

    fn use_base(&mut self, base: Base) -> Result<()> {
        self.path = self.log.data_path(&self.topic, self.partition, &base);
        self.base = Some(base);
        if self.pos.offset < base.start.offset && base.gen > 0 {
            let path = self.log.compact_path(&self.topic, self.partition, base.gen);
            let frames = CompactedFrames::open(path, base.compacted_bytes)?;
            self.compacted = Some(Compacted { frames, ahead: None });
        } else if self.pos.offset <= base.start.offset {
            self.pos = base.start;
        } else if self.pos.byte < base.start.byte {
            // Not a position in this partition's frames.
            return Err(LogError::Damaged { path: self.path.display().to_string(), byte: self.pos.byte });
        }
        Ok(())
    }

    /// The next compacted record at or after the reader's offset and before `end`, if any.
    fn next_compacted(&mut self, end: Pos) -> Result<Option<Stored>> {
        let Some(c) = self.compacted.as_mut() else { return Ok(None) };
        loop {
            let (offset, record) = match c.ahead.take() {
                Some(x) => x,
                None => match c.frames.next()? {
                    None => return Ok(None),
                    Some((offset, _)) if offset < self.pos.offset => continue,
                    Some((offset, frame)) => match decode(frame) {
                        Some((record, _)) => (offset, record),
                        None => {
                            let (path, byte) = (c.frames.path.display().to_string(), c.frames.read);
                            return Err(LogError::Damaged { path, byte });
                        }
                    },
                },
            };
            if offset >= end.offset {
                c.ahead = Some((offset, record));
                return Ok(None);
            }
            return Ok(Some(Stored { offset, next: Pos { offset: offset + 1, byte: 0 }, record }));
        }
    }

    /// Up to `max` records before `end`.
    pub fn read(&mut self, end: Pos, max: usize) -> Result<Vec<Stored>> {
        if self.base.is_none() {
            self.use_current_base()?;
        }
        let mut out = Vec::new();
        'files: loop {
            while self.compacted.is_some() && out.len() < max && self.pos.offset < end.offset {
                match self.next_compacted(end)? {
                    Some(s) => {
                        self.pos = s.next;
                        out.push(s);
                        // Past the compacted part's last offset the frames begin: a position
                        // there has their byte (the reader may stop here, at the end).
                        let start = self.base.unwrap_or_default().start;
                        if self.pos.offset >= start.offset {
                            self.pos = start;
                            self.compacted = None;
                        }
                    }
                    None if self.compacted.as_ref().is_some_and(|c| c.ahead.is_some()) => return Ok(out),
                    None => {
                        // The compacted part is read: the frames follow.
                        self.compacted = None;
                        let start = self.base.unwrap_or_default().start;
                        if self.pos.offset <= start.offset {
                            self.pos = start;
                        }
                    }
                }
            }
            while out.len() < max && self.pos.offset < end.offset {
                let rel = (self.pos.byte - self.start) as usize;
                match decode(&self.buf[rel.min(self.buf.len())..]) {
                    Some((rec, len)) => {
                        let next = Pos { offset: self.pos.offset + 1, byte: self.pos.byte + len as u64 };
                        out.push(Stored { offset: self.pos.offset, next, record: rec });
                        self.pos = next;
                    }
                    None => {
                        let filled = match self.fill(end) {
                            Ok(f) => f,
                            Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => false,
                            Err(e) => return Err(e),
                        };
                        if filled {
                            continue;
                        }
                        // A compaction since this reader looked made other files current.
                        if self.rebase()? {
                            continue 'files;
                        }
                        return Err(LogError::Damaged { path: self.path.display().to_string(), byte: self.pos.byte });
                    }
                }
            }
            return Ok(out);
        }
    }

    /// Look the partition's files up again; true if they changed (a compaction), and the reader
    /// now reads the new ones from where it is.
    fn rebase(&mut self) -> Result<bool> {
        let now = self.log.committed()?.bases.get(&part_key(&self.topic, self.partition)).copied().unwrap_or_default();
        if Some(now) == self.base {
            return Ok(false);
        }
        self.file = None;
        self.buf.clear();
        self.start = self.pos.byte;
        self.compacted = None;
        self.use_current_base()?;
        Ok(true)
    }

    /// Read the partition's current files. (A compaction that ends meanwhile deletes the
    /// ones just looked up: the newer ones are looked up again.)
    fn use_current_base(&mut self) -> Result<()> {
        let mut tries = 0;
        loop {
            let base = self.log.committed()?.bases.get(&part_key(&self.topic, self.partition)).copied();
            match self.use_base(base.unwrap_or_default()) {
                Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && tries < 5 => {
                    tries += 1;
                }
                r => return r,
            }
        }
    }

    /// Load the next chunk of the file (up to `end`); false if nothing more could be read.
    fn fill(&mut self, end: Pos) -> Result<bool> {
        if self.file.is_none() {
            self.file = Some(File::open(&self.path).map_err(io(At("cannot open", &self.path)))?);
        }
        let Some(f) = self.file.as_mut() else { return Ok(false) };
        let want = (end.byte.saturating_sub(self.pos.byte)).min(4 << 20) as usize;
        if want == 0 {
            return Ok(false);
        }
        let rel = (self.pos.byte - self.start) as usize;
        let have = self.buf.len().saturating_sub(rel);
        if have >= want {
            return Ok(false);
        }
        // Keep the unread tail, read more after it.
        self.buf.drain(..rel.min(self.buf.len()));
        self.start = self.pos.byte;
        let old = self.buf.len();
        self.buf.resize(want.max(old), 0);
        let file_start = self.base.unwrap_or_default().start.byte;
        f.seek(SeekFrom::Start(self.start + old as u64 - file_start)).map_err(io("seek"))?;
        let mut filled = old;
        while filled < self.buf.len() {
            let n = f.read(&mut self.buf[filled..]).map_err(io(At("cannot read", &self.path)))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        self.buf.truncate(filled);
        Ok(filled > old)
    }
}

/// The key of a whole frame (None: a null key) and whether it is a deletion (a null value),
/// read without copying; None if the frame is malformed.
fn frame_key(frame: &[u8]) -> Option<(Option<&[u8]>, bool)> {
    let mut c = Cursor { b: frame.get(4..)?, p: 0 };
    c.take(8)?; // the timestamp
    let key = c.opt_slice()?;
    Some((key, c.opt_slice()?.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_typed_and_read_as_before() {
        let dir = std::env::temp_dir().join(format!("streamc-log-errors-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        log.create_topic("t", 2, false).unwrap();
        let e = log.create_topic("t", 3, false).unwrap_err();
        assert!(matches!(e, LogError::PartitionCount { has: 2, needs: 3, .. }), "{e:?}");
        assert_eq!(String::from(e), "topic `t` exists with 2 partitions, 3 needed");
        let e = log.create_topic("no spaces", 1, false).unwrap_err();
        assert!(matches!(e, LogError::InvalidTopic(_)), "{e:?}");
        let r = Record { key: None, value: Some(b"{}".to_vec()), timestamp: 0, headers: vec![] };
        let e = log.commit(vec![Append::of("t", 7, [&r])], vec![]).unwrap_err();
        assert_eq!(e.to_string(), "topic `t` has no partition 7");
        std::fs::write(dir.join("log").join("COMMITTED"), b"{not json").unwrap();
        let e = log.committed().unwrap_err();
        assert!(
            matches!(e, LogError::Corrupt { .. }) && e.to_string().starts_with("the log's COMMITTED file is corrupt: "),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Deleting COMMITTED is damage: the log refuses to be read or appended to, naming the
    /// file, and no partition file changes (it used to read as an empty log, and the next
    /// append overwrote the records already there).
    #[test]
    fn a_missing_committed_file_is_damage_not_an_empty_log() {
        let dir = std::env::temp_dir().join(format!("streamc-log-missing-committed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        assert!(dir.join("log").join("COMMITTED").exists(), "a new log has its commit metadata");
        assert_eq!(log.committed().unwrap().groups.len(), 0);
        log.create_topic("t", 1, false).unwrap();
        let r = Record { key: None, value: Some(b"{}".to_vec()), timestamp: 0, headers: vec![] };
        log.commit(vec![Append::of("t", 0, [&r, &r, &r])], vec![]).unwrap();
        let data = dir.join("log").join("topics").join("t").join("0.log");
        let before = std::fs::read(&data).unwrap();
        std::fs::remove_file(dir.join("log").join("COMMITTED")).unwrap();
        for log in [log, EmbeddedLog::open(&dir, false).unwrap()] {
            let e = log.committed().unwrap_err();
            assert!(matches!(e, LogError::MissingCommitted { .. }), "{e:?}");
            assert!(e.to_string().contains("COMMITTED is missing") && e.to_string().contains("0.log"), "{e}");
            let e = log.commit(vec![Append::of("t", 0, [&r])], vec![]).unwrap_err();
            assert!(matches!(e, LogError::MissingCommitted { .. }), "{e:?}");
        }
        assert_eq!(std::fs::read(&data).unwrap(), before, "the partition file is untouched");
        assert!(!dir.join("log").join("COMMITTED").exists(), "not recreated");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A partition file cut short inside its committed records is damage: found at open
    /// (`check_tails`) and refused at the next append, which used to extend the file with zeros
    /// and append after the hole; bytes past the committed end are cut off by the next append.
    #[test]
    fn a_partition_file_cut_short_is_refused_and_a_torn_tail_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("streamc-log-torn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        log.create_topic("t", 1, false).unwrap();
        let r = Record { key: None, value: Some(b"{\"a\":1}".to_vec()), timestamp: 0, headers: vec![] };
        log.commit(vec![Append::of("t", 0, [&r, &r, &r])], vec![]).unwrap();
        let data = dir.join("log").join("topics").join("t").join("0.log");
        let full = std::fs::read(&data).unwrap();
        // A torn tail past the committed end: harmless, cut off by the next append.
        std::fs::write(&data, [&full[..], b"garbage"].concat()).unwrap();
        log.check_tails().unwrap();
        log.commit(vec![Append::of("t", 0, [&r])], vec![]).unwrap();
        let c = log.committed().unwrap();
        assert_eq!(log.reader("t", 0, Pos::default()).read(c.end("t", 0), usize::MAX).unwrap().len(), 4);
        // Cut short mid-record: refused at open and at append, the file left as it is.
        let full = std::fs::read(&data).unwrap();
        std::fs::write(&data, &full[..full.len() - 3]).unwrap();
        let e = log.check_tails().unwrap_err();
        assert!(matches!(e, LogError::Truncated { .. }) && e.to_string().contains("0.log"), "{e}");
        let e = log.commit(vec![Append::of("t", 0, [&r])], vec![]).unwrap_err();
        assert!(matches!(e, LogError::Truncated { .. }), "{e:?}");
        assert_eq!(std::fs::read(&data).unwrap().len(), full.len() - 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two processes' views of one log (each its own `Known`): each sees what the other
    /// committed, its own view of `COMMITTED` read again once the other replaced it.
    #[test]
    fn a_commit_of_another_process_is_seen_by_the_next_read_and_commit() {
        let dir = std::env::temp_dir().join(format!("streamc-log-two-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (a, b) = (EmbeddedLog::open(&dir, false).unwrap(), EmbeddedLog::open(&dir, false).unwrap());
        a.create_topic("t", 1, false).unwrap();
        let rec = |i: i64| Record { key: None, value: Some(i.to_string().into_bytes()), timestamp: i, headers: vec![] };
        for round in 0..20u64 {
            let (w, r) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let c =
                w.commit(vec![Append::of("t", 0, &[rec(round as i64)])], vec![("g".into(), serde_json::json!(round))]);
            assert_eq!(c.unwrap().end("t", 0).offset, round + 1);
            let seen = r.committed().unwrap();
            assert_eq!((seen.end("t", 0).offset, &seen.groups["g"]), (round + 1, &serde_json::json!(round)));
        }
        let mut rd = a.reader("t", 0, Pos::default());
        let got: Vec<i64> =
            rd.read(a.committed().unwrap().end("t", 0), 100).unwrap().iter().map(|s| s.record.timestamp).collect();
        assert_eq!(got, (0..20).collect::<Vec<i64>>());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn commits_are_visible_whole_and_torn_tails_are_cut() {
        let dir = std::env::temp_dir().join(format!("streamc-log-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        log.create_topic("t", 2, false).unwrap();
        let rec = |i: i64| Record { key: None, value: Some(i.to_string().into_bytes()), timestamp: i, headers: vec![] };
        let c = log
            .commit(vec![Append::of("t", 1, &[rec(1), rec(2)])], vec![("g".into(), serde_json::json!({"x": 1}))])
            .unwrap();
        assert_eq!(c.end("t", 1).offset, 2);
        // A writer killed mid-commit leaves bytes past the committed end.
        let mut f = OpenOptions::new().append(true).open(log.data_path("t", 1, &Base::default())).unwrap();
        f.write_all(b"garbage").unwrap();
        let c = log.commit(vec![Append::of("t", 1, &[rec(3)])], vec![]).unwrap();
        let mut r = log.reader("t", 1, Pos::default());
        let got: Vec<i64> = r.read(c.end("t", 1), 10).unwrap().iter().map(|s| s.record.timestamp).collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(c.groups["g"], serde_json::json!({"x": 1}));
        assert!(log.create_topic("t", 3, false).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Everything a reader from `from` gets up to the committed end.
    fn read_all(log: &EmbeddedLog, from: Pos) -> Vec<Stored> {
        let end = log.committed().unwrap().end("cl", 0);
        let mut r = log.reader("cl", 0, from);
        let mut out = Vec::new();
        loop {
            let b = r.read(end, 777).unwrap();
            if b.is_empty() {
                assert_eq!(r.position(), end);
                return out;
            }
            out.extend(b);
        }
    }

    /// A new log in a temporary directory with one compacted topic `cl` of one partition.
    fn compacted_log(name: &str) -> (PathBuf, EmbeddedLog) {
        let dir = std::env::temp_dir().join(format!("streamc-log-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let log = EmbeddedLog::open(&dir, false).unwrap();
        log.create_topic("cl", 1, true).unwrap();
        (dir, log)
    }

    /// Each key's last record read: its offset and value (None: a deletion).
    fn last_of_each_key(read: &[Stored]) -> BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> {
        read.iter().map(|s| (s.record.key.clone().unwrap(), (s.offset, s.record.value.clone()))).collect()
    }

    #[test]
    fn compacted_topics_keep_the_last_record_of_each_key_at_its_offset() {
        let (dir, log) = compacted_log("compact");
        // The fold the log must agree with: each key's last write (offset, value or deletion).
        let mut last: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        // Keys deleted at once: their tombstones go after two compactions.
        let gone: Vec<Record> = (0..100)
            .flat_map(|i| {
                let key = Some(format!("d{i}").into_bytes());
                [
                    Record { key: key.clone(), value: Some(b"x".to_vec()), timestamp: 0, headers: vec![] },
                    Record { key, value: None, timestamp: 0, headers: vec![] },
                ]
            })
            .collect();
        log.commit(vec![Append::of("cl", 0, &gone)], vec![]).unwrap();
        let mut offset = 200u64;
        let mut before = Vec::new();
        let mut x = 1u64;
        let mut write = |log: &EmbeddedLog, commits: usize, last: &mut BTreeMap<_, _>| {
            for _ in 0..commits {
                let mut records = Vec::new();
                for _ in 0..100 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let key = format!("k{}", (x >> 33) % 500).into_bytes();
                    let value = (!(x >> 20).is_multiple_of(10)).then(|| vec![b'v'; 1000 + (x % 7) as usize]);
                    last.insert(key.clone(), (offset, value.clone()));
                    records.push(Record { key: Some(key), value, timestamp: offset as i64, headers: vec![] });
                    offset += 1;
                }
                log.commit(vec![Append::of("cl", 0, &records)], vec![]).unwrap();
            }
        };
        write(&log, 40, &mut last);
        let checkpoint = log.committed().unwrap().end("cl", 0);
        before.extend(read_all(&log, Pos::default()));
        assert_eq!(before.len(), 4_200, "not compacted below the threshold");
        // A reader that started before the compactions reads on across them.
        let mut early = log.reader("cl", 0, Pos::default());
        let mut early_read = early.read(checkpoint, 100).unwrap();
        write(&log, 200, &mut last);
        // (Compactions run on the compactor thread, beside the commits.)
        log.settle_compactions();
        let c = log.committed().unwrap();
        loop {
            let b = early.read(c.end("cl", 0), 1000).unwrap();
            if b.is_empty() {
                break;
            }
            early_read.extend(b);
        }
        assert!(early_read.windows(2).all(|w| w[0].offset < w[1].offset));
        let mut folded_early: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        for s in &early_read {
            folded_early.insert(s.record.key.clone().unwrap(), (s.offset, s.record.value.clone()));
        }
        folded_early.retain(|k, _| !k.starts_with(b"d"));
        assert_eq!(folded_early, last);
        let base = c.bases["cl/0"];
        assert!(base.gen >= 1 && base.start.offset > 0, "{base:?}");
        assert!(!dir.join("log/topics/cl/0.log").exists(), "generation 0 deleted");

        // From the start: one record per key written before the compaction point, at the
        // offset of its last write, then every frame since; every key's last value.
        let all = read_all(&log, Pos::default());
        assert!(all.windows(2).all(|w| w[0].offset < w[1].offset));
        assert!(all.len() < 24_000 / 2, "{} records", all.len());
        assert_eq!(log.records("cl", 0).unwrap(), all.len() as u64, "the records a compacted partition holds");
        let mut folded = last_of_each_key(&all);
        // (The first keys' deletions are still there until a compaction passes their horizon:
        // how many compactions ran by now depends on the compactor thread's pace.)
        assert!(folded.iter().filter(|(k, _)| k.starts_with(b"d")).all(|(_, (_, v))| v.is_none()));
        folded.retain(|k, _| !k.starts_with(b"d"));
        assert!(folded == last, "every key's last value, at its offset");
        // From a checkpoint taken before the compaction (its byte position is no longer in a
        // file): every key whose last write is at or after it, nothing before it.
        let since = read_all(&log, checkpoint);
        assert!(since.iter().all(|s| s.offset >= checkpoint.offset));
        let want: Vec<&Vec<u8>> = last.iter().filter(|(_, (o, _))| *o >= checkpoint.offset).map(|(k, _)| k).collect();
        let mut got: Vec<&Vec<u8>> = since.iter().map(|s| s.record.key.as_ref().unwrap()).collect();
        got.sort();
        got.dedup();
        assert_eq!(got, want);
        // From the compacted end on: exactly the frames appended since, by their byte positions.
        let tail = read_all(&log, base.start);
        assert_eq!(tail.first().map(|s| s.offset), Some(base.start.offset).filter(|_| !tail.is_empty()));
        assert_eq!(tail.len() as u64, c.end("cl", 0).offset - base.start.offset);
        // A second compaction replaces the first generation.
        write(&log, 400, &mut last);
        log.settle_compactions();
        let next = log.committed().unwrap().bases["cl/0"];
        assert!(next.gen > base.gen);
        assert!(next.horizon >= base.start.offset, "{next:?}");
        // Deletions before the horizon are gone; every later one is still there.
        last.retain(|_, (o, v)| v.is_some() || *o >= next.horizon);
        assert!(!dir.join(format!("log/topics/cl/0.{}.compact", base.gen)).exists());
        let folded = last_of_each_key(&read_all(&log, Pos::default()));
        assert!(folded == last, "every key's last value at its offset, the old deletions gone");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A partition compacted up to its end (no frame after the compacted part): a reader that
    /// reads it to the end stands at the end, byte included, so that it can go on from there.
    #[test]
    fn a_reader_at_the_end_of_a_wholly_compacted_partition_stands_at_its_end() {
        let (dir, log) = compacted_log("compact-whole");
        // One commit past the threshold: the compaction it queues takes every frame.
        let records: Vec<Record> = (0..9_000u64)
            .map(|i| Record {
                key: Some(format!("k{}", i % 100).into_bytes()),
                value: Some(vec![b'v'; 1_000]),
                timestamp: i as i64,
                headers: vec![],
            })
            .collect();
        log.commit(vec![Append::of("cl", 0, &records)], vec![]).unwrap();
        log.settle_compactions();
        let c = log.committed().unwrap();
        assert_eq!(c.bases["cl/0"].start, c.end("cl", 0), "compacted up to the end");
        // (read_all requires the reader's position to be the end.)
        let all = read_all(&log, Pos::default());
        assert_eq!(all.len(), 100);
        assert_eq!(all.last().map(|s| s.offset), Some(8_999));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A compaction runs beside commits: the frames committed while it writes the new
    /// generation are copied after it, and readers from any position still read every key's
    /// last record at its offset. Two compactions of a partition never run at once.
    #[test]
    fn commits_made_while_a_partition_is_compacted_are_kept() {
        let (dir, log) = compacted_log("compact-beside");
        let record = |n: u64| Record {
            key: Some(format!("k{}", n % 3_000).into_bytes()),
            value: (!n.is_multiple_of(11)).then(|| vec![b'a' + (n % 26) as u8; 400]),
            timestamp: n as i64,
            headers: vec![],
        };
        // Past the threshold, compacted once.
        let mut n = 0u64;
        while log.committed().unwrap().end("cl", 0).byte < 2 * COMPACT_MIN_BYTES {
            let records: Vec<Record> = (n..n + 500).map(record).collect();
            log.commit(vec![Append::of("cl", 0, &records)], vec![]).unwrap();
            n += 500;
        }
        log.settle_compactions();
        let gen = |log: &EmbeddedLog| log.committed().unwrap().bases["cl/0"].gen;
        let first = gen(&log);
        assert!(first >= 1);
        // 1,200 commits of 50 records (26 MB, past the threshold three times over), while this
        // thread compacts too whenever it can, racing the compactor thread the commits ask.
        let done = std::sync::atomic::AtomicBool::new(false);
        let total = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut n = n;
                for _ in 0..1_200 {
                    let records: Vec<Record> = (n..n + 50).map(record).collect();
                    log.commit(vec![Append::of("cl", 0, &records)], vec![]).unwrap();
                    n += 50;
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                n
            });
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if !log.compact_committed("cl", 0).unwrap() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            writer.join().unwrap()
        });
        log.settle_compactions();
        assert!(gen(&log) > first, "compacted beside the commits");
        let mut want: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        for o in 0..total {
            let r = record(o);
            want.insert(r.key.unwrap(), (o, r.value));
        }
        let horizon = log.committed().unwrap().bases["cl/0"].horizon;
        want.retain(|_, (o, v)| v.is_some() || *o >= horizon);
        let all = read_all(&log, Pos::default());
        assert!(all.windows(2).all(|w| w[0].offset < w[1].offset));
        let got = last_of_each_key(&all);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the compacted partition differs from the fold of every commit");
        assert_eq!(log.committed().unwrap().end("cl", 0).offset, total);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_compaction_with_more_keys_than_its_map_holds_keeps_the_same_records() {
        let (dir, log) = compacted_log("compact-shares");
        // Updates, deletions and keyless records over 300 keys, below the compaction threshold.
        // The fold: each key's last offset, and every keyless record.
        let mut want: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        let mut keyless = Vec::new();
        let mut x = 7u64;
        let mut records = Vec::new();
        for offset in 0..3_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = (!(x >> 40).is_multiple_of(50)).then(|| format!("key-{}", (x >> 33) % 300).into_bytes());
            let value = (!(x >> 20).is_multiple_of(9)).then(|| offset.to_le_bytes().to_vec());
            match &key {
                Some(k) => {
                    want.insert(k.clone(), offset);
                }
                None => keyless.push(offset),
            }
            records.push(Record { key, value, timestamp: offset as i64, headers: vec![] });
        }
        log.commit(vec![Append::of("cl", 0, &records)], vec![]).unwrap();
        let end = log.committed().unwrap().end("cl", 0);
        let mut expected: Vec<u64> = want.values().copied().chain(keyless).collect();
        expected.sort();
        let compacted = |map_keys: usize| {
            let next = log.compact_within("cl", 0, Base::default(), end, map_keys).unwrap();
            let mut frames = CompactedFrames::open(log.compact_path("cl", 0, next.gen), next.compacted_bytes).unwrap();
            let mut kept = Vec::new();
            while let Some((offset, frame)) = frames.next().unwrap() {
                kept.push((offset, frame.to_vec()));
            }
            kept
        };
        let whole = compacted(1_000_000);
        assert_eq!(whole.iter().map(|(o, _)| *o).collect::<Vec<_>>(), expected);
        // 300 keys through maps too small: one scan that does not fit, then shares (at most 8,
        // so a map of 7 grows to about 38 keys).
        for map_keys in [299, 64, 7, 1] {
            assert_eq!(compacted(map_keys), whole, "map of {map_keys} keys");
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
