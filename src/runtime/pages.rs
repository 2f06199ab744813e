//! A store's shard in sled, its rows packed into pages: sled's cost is per key (about 14 K
//! instructions to write one and read it back, and hundreds of bytes of memory for each key it
//! holds in its caches), so one sled key per row made sled the bottleneck of every first run and
//! restore. Here a sled key holds a page of about [`PAGE_FILL`] bytes of rows in key order: a
//! 1 M-row store is some 12 K sled keys.
//!
//! Layout of a tree: each page but the last under `0x00` followed by its bound, a key at or above
//! every row it holds and above every row of the pages before it; the last page, holding every
//! row above the others' bounds, under `0x01` alone. A row lives in the first page whose key is
//! at or above `0x00` + its key, so a lookup is one forward step in sled. A page is a run of
//! rows, each `uvarint(key length) key uvarint(value length) value`, in key order, held in sled
//! compressed ([`seal`]: an LZ4 block after the run's length as 4 bytes, little-endian): sled
//! keeps the pages it reads in memory well past its cache (see [`crate::runtime::key_filter`]),
//! and rows of similar keys compress several times over. Beside the
//! pages: the checkpoint ([`CHECKPOINT`]) and the layout's version ([`LAYOUT`]). A tree without
//! this version holds rows of an earlier layout: it is emptied when opened, and the store
//! restores from its changelog, as it does from any local state it cannot use.
//!
//! Writing a sorted run of changes rewrites each page they fall in once, in one sled batch with
//! the page's removal: the changes merged into its rows, split into pages of about
//! [`PAGE_FILL`] bytes once it holds more than [`PAGE_MAX`] (a row larger than that is a page of
//! its own), the last piece keeping the page's key and the others keyed by their greatest row. A
//! page emptied is removed; pages are not merged when they shrink. No page's key ever moves
//! down, so a scan running beside the writer (an interactive query) misses no row it did not
//! change (it may see a row twice when a page splits under it).

use crate::record::Pos;

/// The key under which a tree holds its checkpoint: the changelog position it reflects. (Not
/// the key an earlier layout used, so that an earlier release finds no checkpoint in a paged
/// tree and restores from the changelog rather than read pages as rows.)
pub(crate) const CHECKPOINT: &[u8] = b"\xff\xff\xff\xffpaged checkpoint";

/// The key under which a tree holds the digest of its rows: the XOR of a hash of each row,
/// kept up to date in every batch that changes pages, so that `verify` can tell a tree whose
/// pages sled brought back inconsistent (a stale page beside newer ones, after damage) from
/// one it can use.
const DIGEST: &[u8] = b"\xff\xff\xff\xffdigest";

/// The key under which a tree holds the version of its layout.
const LAYOUT: &[u8] = b"\xff\xff\xff\xfflayout";
const LAYOUT_VERSION: &[u8] = b"pages 3, lz4";

/// The first byte of a bounded page's key…
const PAGE: u8 = 0x00;
/// …and the last page's whole key.
const LAST: u8 = 0x01;

/// A page rewritten with more bytes of rows than this is split…
pub(crate) const PAGE_MAX: usize = 8192;
/// …into pages of about this many. (Against 3 KB pages, compressed: the 3 M-key first run in
/// random order with 64 MiB 120 K → 169 K records/s and its restore 306 K → 429 K, the same
/// memory; in key order, no slower.)
pub(crate) const PAGE_FILL: usize = 6144;

/// The most rows one sled batch rewrites the pages of (sled takes big batches badly), and the
/// most page bytes it writes.
#[cfg(not(test))]
const BATCH_ROWS: usize = 20_000;
/// (Small in tests, so that they write in many batches.)
#[cfg(test)]
const BATCH_ROWS: usize = 50;
const BATCH_BYTES: usize = 4 << 20;

/// One change of a sorted run: a key and its new value (None: deleted).
pub(crate) type Change<'a> = (&'a [u8], Option<&'a [u8]>);

/// A row as a page holds it.
type Row<'a> = (&'a [u8], &'a [u8]);

/// One store's shard in sled, paged (see the module's description).
#[derive(Clone)]
pub(crate) struct PagedTree {
    tree: sled::Tree,
}

/// The key of a page bounded by `bound`, which is also where a lookup of row key `bound` starts.
fn page_key(bound: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(bound.len() + 1);
    k.push(PAGE);
    k.extend_from_slice(bound);
    k
}

fn is_page(key: &[u8]) -> bool {
    matches!(key.first(), Some(&PAGE) | Some(&LAST))
}

/// The bound of the page under `key`: None for the last page.
fn bound(key: &[u8]) -> Option<&[u8]> {
    (key.first() == Some(&PAGE)).then(|| &key[1..])
}

fn put_len(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn len_bytes(v: usize) -> usize {
    (usize::BITS - (v | 1).leading_zeros()).div_ceil(7) as usize
}

fn read_len(bytes: &[u8], at: &mut usize) -> Option<usize> {
    let mut v = 0usize;
    for shift in (0..usize::BITS).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= usize::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn damaged() -> sled::Error {
    sled::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, "a page of local state is damaged"))
}

/// The row of `page` at byte `at`, and the byte after it; None when the bytes are damaged.
fn row_at(page: &[u8], at: usize) -> Option<(Row<'_>, usize)> {
    let mut at = at;
    let mut field = || {
        let n = read_len(page, &mut at)?;
        let f = page.get(at..at.checked_add(n)?)?;
        at += n;
        Some(f)
    };
    let k = field()?;
    let v = field()?;
    Some(((k, v), at))
}

/// The most bytes a page's rows may claim to take once opened: more is damage (a row larger than
/// a page is a page of its own, and no record is this large).
const OPENED_MAX: usize = 1 << 30;

/// A page's run of rows as sled holds it: compressed, after its length.
fn seal(rows: &[u8]) -> Vec<u8> {
    lz4_flex::block::compress_prepend_size(rows)
}

/// A page's run of rows from what sled holds; damaged bytes are an error, never a panic.
fn open(stored: &[u8]) -> sled::Result<Vec<u8>> {
    let (len, block) = stored.split_first_chunk::<4>().ok_or_else(damaged)?;
    let len = u32::from_le_bytes(*len) as usize;
    // (An LZ4 block expands at most about 255 times: a length past that is damage, refused
    // before the decompressor allocates it.)
    if len > OPENED_MAX || len > block.len().saturating_mul(255).saturating_add(16) {
        return Err(damaged());
    }
    match lz4_flex::block::decompress(block, len) {
        Ok(rows) if rows.len() == len => Ok(rows),
        _ => Err(damaged()),
    }
}

/// The rows of a page (opened), in key order.
fn decode(page: &[u8]) -> sled::Result<Vec<Row<'_>>> {
    let mut rows = Vec::new();
    let mut at = 0;
    while at < page.len() {
        let (row, next) = row_at(page, at).ok_or_else(damaged)?;
        rows.push(row);
        at = next;
    }
    Ok(rows)
}

/// A row's share of the digest: the xxh3 hash of the key's length (8 bytes, little-endian),
/// the key and the value. (Hashed at once from a copy: the streaming hasher's set-up cost more
/// than the hashing, a third of the writer's time at 1 M keys.)
fn row_hash((k, v): &Row<'_>) -> u64 {
    let mut buf = [0u8; 256];
    let n = 8 + k.len() + v.len();
    if n > buf.len() {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&(k.len() as u64).to_le_bytes());
        h.update(k);
        h.update(v);
        return h.digest();
    }
    buf[..8].copy_from_slice(&(k.len() as u64).to_le_bytes());
    buf[8..8 + k.len()].copy_from_slice(k);
    buf[8 + k.len()..n].copy_from_slice(v);
    xxhash_rust::xxh3::xxh3_64(&buf[..n])
}

fn digest_of(bytes: Option<&[u8]>) -> u64 {
    bytes.and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

fn row_bytes((k, v): &Row<'_>) -> usize {
    k.len() + v.len() + len_bytes(k.len()) + len_bytes(v.len())
}

fn encode(rows: &[Row<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.iter().map(row_bytes).sum());
    for (k, v) in rows {
        put_len(&mut out, k.len());
        out.extend_from_slice(k);
        put_len(&mut out, v.len());
        out.extend_from_slice(v);
    }
    out
}

/// The rows of a page with the changes (sorted, all within the page's range) applied, whether
/// that changed anything, and the change of the digest (the rows it did not change cancel out,
/// so only the rows replaced and their replacements are hashed).
fn merge<'a>(rows: Vec<Row<'a>>, changes: &[Change<'a>]) -> (Vec<Row<'a>>, bool, u64) {
    let mut out = Vec::with_capacity(rows.len() + changes.len());
    let (mut changed, mut digest) = (false, 0);
    let mut rows = rows.into_iter().peekable();
    for (k, v) in changes {
        while let Some(r) = rows.next_if(|r| r.0 < *k) {
            out.push(r);
        }
        let old = rows.next_if(|r| r.0 == *k);
        if old.map(|r| r.1) != *v {
            changed = true;
            if let Some(r) = &old {
                digest ^= row_hash(r);
            }
            if let Some(v) = v {
                digest ^= row_hash(&(*k, *v));
            }
        }
        if let Some(v) = v {
            out.push((*k, *v));
        }
    }
    out.extend(rows);
    (out, changed, digest)
}

/// Rows cut into pages: one if they hold at most [`PAGE_MAX`] bytes, else pages of about
/// [`PAGE_FILL`] bytes each, evenly; never an empty one.
fn split<'r, 'a>(rows: &'r [Row<'a>]) -> Vec<&'r [Row<'a>]> {
    let total: usize = rows.iter().map(row_bytes).sum();
    if rows.is_empty() {
        return Vec::new();
    }
    if total <= PAGE_MAX {
        return vec![rows];
    }
    let pages = total.div_ceil(PAGE_FILL);
    let each = total / pages;
    let mut out = Vec::with_capacity(pages);
    let (mut start, mut held) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        held += row_bytes(r);
        if held >= each && out.len() + 1 < pages {
            out.push(&rows[start..=i]);
            (start, held) = (i + 1, 0);
        }
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

impl PagedTree {
    /// The sled tree's name (the store's).
    pub(crate) fn name(&self) -> String {
        String::from_utf8_lossy(&self.tree.name()).into_owned()
    }

    /// Open store shard `name` of `db`; a tree of an earlier layout is emptied first.
    pub(crate) fn open(db: &sled::Db, name: &str) -> sled::Result<PagedTree> {
        let tree = db.open_tree(name)?;
        let paged = PagedTree { tree };
        if paged.tree.get(LAYOUT)?.as_deref() != Some(LAYOUT_VERSION) {
            // Rows of an earlier layout (or none): the store restores from its changelog.
            paged.clear()?;
        }
        Ok(paged)
    }

    /// The page `key` lives in, or would: the first whose key is at or above `0x00` + `key`
    /// (None: `key` is above every bounded page and there is no last page).
    fn page_of(&self, key: &[u8]) -> sled::Result<Option<(sled::IVec, sled::IVec)>> {
        match self.tree.range(page_key(key)..).next().transpose()? {
            Some((k, v)) if is_page(&k) => Ok(Some((k, v))),
            _ => Ok(None),
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> sled::Result<Option<Vec<u8>>> {
        let Some((_, page)) = self.page_of(key)? else { return Ok(None) };
        let page = open(&page)?;
        let mut at = 0;
        while at < page.len() {
            let ((k, v), next) = row_at(&page, at).ok_or_else(damaged)?;
            match k.cmp(key) {
                std::cmp::Ordering::Less => at = next,
                std::cmp::Ordering::Equal => return Ok(Some(v.to_vec())),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    /// Every row, in key order.
    pub(crate) fn rows(&self) -> Rows {
        self.scan_prefix(b"")
    }

    /// Every row whose key starts with `prefix`, in key order.
    pub(crate) fn scan_prefix(&self, prefix: &[u8]) -> Rows {
        Rows { pages: self.tree.range(page_key(prefix)..), page: None, at: 0, prefix: prefix.to_vec(), done: false }
    }

    /// Whether the tree holds no row.
    pub(crate) fn holds_no_rows(&self) -> bool {
        match self.tree.first() {
            Ok(Some((k, _))) => !is_page(&k),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// The checkpoint: the changelog position the rows reflect.
    pub(crate) fn checkpoint(&self) -> Option<Pos> {
        self.tree.get(CHECKPOINT).ok().flatten().and_then(|b| serde_json::from_slice(&b).ok())
    }

    /// Remove every row and the checkpoint. The checkpoint and the layout's version go first, in
    /// one batch (sled's `clear` removes a key at a time): a crash part way leaves a tree without
    /// the version, emptied when opened, never a checkpoint over some of its rows.
    pub(crate) fn clear(&self) -> sled::Result<()> {
        let mut first = sled::Batch::default();
        first.remove(CHECKPOINT);
        first.remove(LAYOUT);
        self.tree.apply_batch(first)?;
        self.tree.clear()?;
        self.tree.insert(LAYOUT, LAYOUT_VERSION)?;
        Ok(())
    }

    /// Apply `changes` (sorted by key, each key once) and then set the checkpoint, if any: in
    /// one atomic batch if `atomic`, else in batches of at most [`BATCH_ROWS`] changes, the
    /// checkpoint with the last (a crash in between leaves changes after the checkpoint, which
    /// a restore from it replays; each page's rewrite is in one batch). Each page written is
    /// read back: sled 0.34 consolidates a page's updates only when it is read, and a tree only
    /// written keeps every update in memory and on disk.
    pub(crate) fn write(&self, changes: &[Change<'_>], checkpoint: Option<&Pos>, atomic: bool) -> sled::Result<()> {
        debug_assert!(changes.windows(2).all(|w| w[0].0 < w[1].0), "sorted, each key once");
        let mut batch = sled::Batch::default();
        let mut written: Vec<Vec<u8>> = Vec::new();
        let (mut rows, mut bytes) = (0, 0);
        let mut digest = digest_of(self.tree.get(DIGEST)?.as_deref());
        let mut i = 0;
        while i < changes.len() {
            let page = self.page_of(changes[i].0)?;
            // The changes that fall in this page: those up to its bound (in batches, at most a
            // batch's worth: the pages they make are then written before the next changes are
            // looked up).
            let all = match page.as_ref().and_then(|(k, _)| bound(k)) {
                Some(b) => i + changes[i..].partition_point(|c| c.0 <= b),
                None => changes.len(),
            };
            let j = if atomic { all } else { all.min(i + BATCH_ROWS) };
            let opened = match &page {
                Some((_, v)) => open(v)?,
                None => Vec::new(),
            };
            let held = decode(&opened)?;
            let (merged, changed, delta) = merge(held, &changes[i..j]);
            if changed {
                digest ^= delta;
                let key = match &page {
                    Some((k, _)) => {
                        batch.remove(k.clone());
                        k.to_vec()
                    }
                    None => vec![LAST],
                };
                let pieces = split(&merged);
                let n = pieces.len();
                for (p, piece) in pieces.into_iter().enumerate() {
                    let piece_key = if p + 1 == n { key.clone() } else { page_key(piece[piece.len() - 1].0) };
                    let value = seal(&encode(piece));
                    bytes += value.len();
                    batch.insert(piece_key.clone(), value);
                    written.push(piece_key);
                }
            }
            rows += j - i;
            i = j;
            if !atomic && (j < all || rows >= BATCH_ROWS || bytes >= BATCH_BYTES) && i < changes.len() {
                batch.insert(DIGEST, &digest.to_le_bytes()[..]);
                self.apply(std::mem::take(&mut batch), &mut written)?;
                (rows, bytes) = (0, 0);
            }
        }
        if let Some(cp) = checkpoint {
            batch.insert(CHECKPOINT, serde_json::to_vec(cp).unwrap_or_default());
        }
        batch.insert(DIGEST, &digest.to_le_bytes()[..]);
        self.apply(batch, &mut written)
    }

    fn apply(&self, batch: sled::Batch, written: &mut Vec<Vec<u8>>) -> sled::Result<()> {
        self.tree.apply_batch(batch)?;
        for k in written.drain(..) {
            let _ = self.tree.get(k);
        }
        Ok(())
    }

    /// Put one row, or delete it (tests and tools: a task writes through its writer).
    #[cfg(test)]
    pub(crate) fn put(&self, key: &[u8], value: Option<&[u8]>) -> sled::Result<()> {
        self.write(&[(key, value)], None, true)
    }

    /// How many sled keys hold pages (tests).
    #[cfg(test)]
    fn page_count(&self) -> usize {
        self.tree.iter().keys().filter(|k| k.as_ref().is_ok_and(|k| is_page(k))).count()
    }
}

/// Read every tree of `db` through, decoding every page of the paged ones: sled 0.34 opens
/// some damaged files without complaint and panics (or errs) only when the damaged part is read,
/// which may be in the middle of a run. The caller runs this where a panic is caught, so that
/// local state with damage anywhere is wiped and restored from the changelogs when it opens.
/// Costs one pass over the local state's pages (some 12 K sled keys for 1 M rows).
pub(crate) fn verify(db: &sled::Db) -> sled::Result<()> {
    for name in db.tree_names() {
        let tree = db.open_tree(&name)?;
        let paged = tree.get(LAYOUT)?.as_deref() == Some(LAYOUT_VERSION);
        let mut digest = 0;
        for kv in tree.iter() {
            let (k, v) = kv?;
            if paged && is_page(&k) {
                digest = decode(&open(&v)?)?.iter().fold(digest, |d, r| d ^ row_hash(r));
            }
        }
        if paged && digest != digest_of(tree.get(DIGEST)?.as_deref()) {
            return Err(sled::Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the rows of local state {} do not match their digest", String::from_utf8_lossy(&name)),
            )));
        }
    }
    Ok(())
}

/// Rows of a tree in key order, from a prefix on (see [`PagedTree::scan_prefix`]).
pub(crate) struct Rows {
    pages: sled::Iter,
    /// The page being read, opened.
    page: Option<Vec<u8>>,
    at: usize,
    prefix: Vec<u8>,
    done: bool,
}

impl Iterator for Rows {
    type Item = sled::Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if let Some(page) = &self.page {
                if self.at < page.len() {
                    let Some(((k, v), next)) = row_at(page, self.at) else {
                        self.done = true;
                        return Some(Err(damaged()));
                    };
                    self.at = next;
                    if k.starts_with(&self.prefix) {
                        return Some(Ok((k.to_vec(), v.to_vec())));
                    }
                    if k > self.prefix.as_slice() {
                        self.done = true;
                    }
                    continue;
                }
            }
            match self.pages.next() {
                Some(Ok((k, v))) if is_page(&k) => match open(&v) {
                    Ok(page) => (self.page, self.at) = (Some(page), 0),
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                },
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                _ => self.done = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn tree() -> (sled::Db, PagedTree) {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let t = PagedTree::open(&db, "s#0").unwrap();
        (db, t)
    }

    /// A row's hash is the one trees already written hold in their digests: xxh3 of the key's
    /// length, the key and the value, fed to a streaming hasher (short rows and long ones).
    #[test]
    fn a_rows_hash_is_that_of_its_length_key_and_value() {
        for (k, v) in [(0, 0), (9, 12), (16, 231), (17, 232), (100, 200), (3, 5000)] {
            let key: Vec<u8> = (0..k).map(|i| i as u8 ^ 0x5a).collect();
            let value: Vec<u8> = (0..v).map(|i| (i * 7) as u8).collect();
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            h.update(&(k as u64).to_le_bytes());
            h.update(&key);
            h.update(&value);
            assert_eq!(row_hash(&(&key[..], &value[..])), h.digest(), "key {k} bytes, value {v}");
        }
    }

    fn all(t: &PagedTree) -> BTreeMap<Vec<u8>, Vec<u8>> {
        t.rows().map(|r| r.unwrap()).collect()
    }

    /// Random runs of puts and deletions (values of 0 to 3,000 bytes, so that pages split and
    /// rows larger than a page occur), written in batches and atomically: reads, full scans
    /// and prefix scans equal a plain map after every run.
    #[test]
    fn pages_read_back_as_a_plain_map_of_the_changes() {
        for atomic in [false, true] {
            let (_db, t) = tree();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut rng = 0x2545F4914F6CDD1Du64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            for run in 0..40 {
                let mut changes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
                for _ in 0..(next() % 600) {
                    let key = format!("k{:05}", next() % 5_000).into_bytes();
                    let value = (next() % 5 != 0).then(|| {
                        let len = if next() % 50 == 0 { 3_000 } else { (next() % 60) as usize };
                        vec![b'a' + (run % 26) as u8; len]
                    });
                    changes.insert(key, value);
                }
                for (k, v) in &changes {
                    match v {
                        Some(v) => model.insert(k.clone(), v.clone()),
                        None => model.remove(k),
                    };
                }
                let sorted: Vec<Change<'_>> = changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
                t.write(&sorted, Some(&Pos::at(run)), atomic).unwrap();
                assert_eq!(all(&t), model, "run {run}");
                for k in changes.keys().chain([b"k".to_vec(), b"zz".to_vec(), Vec::new()].iter()) {
                    assert_eq!(t.get(k).unwrap().as_ref(), model.get(k), "run {run}, key {k:?}");
                }
                for prefix in ["k0", "k01", "k049", "k5", ""] {
                    let scanned: BTreeMap<_, _> = t.scan_prefix(prefix.as_bytes()).map(|r| r.unwrap()).collect();
                    let expected: BTreeMap<_, _> = model
                        .iter()
                        .filter(|(k, _)| k.starts_with(prefix.as_bytes()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(scanned, expected, "run {run}, prefix {prefix}");
                }
                assert_eq!(t.checkpoint().map(|c| c.offset), Some(run));
                assert_eq!(t.holds_no_rows(), model.is_empty());
            }
            assert!(t.page_count() * 10 < model.len(), "{} pages for {} rows", t.page_count(), model.len());
        }
    }

    /// Keys below and above every row go to the first and the last page; the empty key is a
    /// key like another; a store emptied holds no page.
    #[test]
    fn keys_at_both_ends_and_the_empty_key() {
        let (_db, t) = tree();
        t.put(b"m", Some(b"1")).unwrap();
        t.put(b"c", Some(b"2")).unwrap();
        t.put(b"", Some(b"3")).unwrap();
        t.put(b"\xff\xff", Some(b"4")).unwrap();
        assert_eq!(t.page_count(), 1);
        assert_eq!(t.get(b"").unwrap().as_deref(), Some(&b"3"[..]));
        assert_eq!(t.get(b"c").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(t.get(b"\xff\xff").unwrap().as_deref(), Some(&b"4"[..]));
        assert_eq!(t.get(b"a").unwrap(), None);
        assert_eq!(t.get(b"\xff\xff\xff").unwrap(), None);
        for k in [&b""[..], b"c", b"m", b"\xff\xff"] {
            t.put(k, None).unwrap();
        }
        assert!(t.holds_no_rows());
        assert_eq!(t.page_count(), 0);
    }

    /// A scan that the writer changes the tree under (an interactive query beside the writer
    /// thread) still yields every row nobody changed: rows put below, inside and above what it
    /// has read, pages split and emptied meanwhile.
    #[test]
    fn a_scan_beside_writes_misses_no_unchanged_row() {
        let (_db, t) = tree();
        let value = vec![b'v'; 100];
        let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("k{i:03}").into_bytes()).collect();
        let changes: Vec<Change<'_>> = keys.iter().map(|k| (k.as_slice(), Some(value.as_slice()))).collect();
        t.write(&changes, None, false).unwrap();
        assert!(t.page_count() > 5);
        let mut scan = t.scan_prefix(b"k1");
        let mut seen: Vec<Vec<u8>> = (0..5).map(|_| scan.next().unwrap().unwrap().0).collect();
        // Rows below the scan, around where it is and after it; rows of pages it has not read
        // yet deleted (k150 to k169).
        let new: Vec<Vec<u8>> = ["a", "k000a", "k0995", "k1025", "k104a", "k104b", "k1995", "z"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .chain((0..200).map(|i| format!("k12{i:03}").into_bytes()))
            .collect();
        let mut writes: BTreeMap<&[u8], Option<&[u8]>> = new.iter().map(|k| (k.as_slice(), Some(&value[..]))).collect();
        for k in &keys[150..170] {
            writes.insert(k, None);
        }
        let writes: Vec<Change<'_>> = writes.into_iter().collect();
        t.write(&writes, None, false).unwrap();
        seen.extend(scan.map(|r| r.unwrap().0));
        for k in keys[100..200].iter().filter(|k| !(b"k150".as_slice()..b"k170".as_slice()).contains(&k.as_slice())) {
            assert!(seen.contains(k), "{} missed", String::from_utf8_lossy(k));
        }
    }

    /// A tree holding rows of the earlier layout (a row per sled key) is emptied when opened:
    /// the store restores from its changelog; a paged tree opened again keeps its rows.
    #[test]
    fn a_tree_of_the_earlier_layout_is_emptied() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let raw = db.open_tree("s#0").unwrap();
        raw.insert(b"row", b"v".to_vec()).unwrap();
        raw.insert(&b"\xff\xff\xff\xffcheckpoint"[..], serde_json::to_vec(&Pos::at(3)).unwrap()).unwrap();
        raw.insert(CHECKPOINT, serde_json::to_vec(&Pos::at(3)).unwrap()).unwrap();
        let t = PagedTree::open(&db, "s#0").unwrap();
        assert!(t.holds_no_rows());
        assert_eq!(t.checkpoint(), None);
        t.put(b"row", Some(b"w")).unwrap();
        let t = PagedTree::open(&db, "s#0").unwrap();
        assert_eq!(t.get(b"row").unwrap().as_deref(), Some(&b"w"[..]));
    }

    /// verify accepts a tree as written and refuses one with a page put back to an older
    /// version of itself (valid bytes, stale rows), as sled may after damage to its files.
    #[test]
    fn verify_refuses_a_stale_page() {
        let (db, t) = tree();
        let value = vec![b'v'; 100];
        let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("k{i:03}").into_bytes()).collect();
        let changes: Vec<Change<'_>> = keys.iter().map(|k| (k.as_slice(), Some(value.as_slice()))).collect();
        t.write(&changes, Some(&Pos::at(1)), false).unwrap();
        verify(&db).unwrap();
        let raw = db.open_tree("s#0").unwrap();
        let (page, old) = raw.iter().next().unwrap().unwrap();
        t.put(b"k000", Some(b"new")).unwrap();
        verify(&db).unwrap();
        raw.insert(page, old).unwrap();
        assert!(verify(&db).is_err());
    }

    /// A page whose bytes are damaged is an error, never a panic (nor an allocation of what
    /// a damaged length claims): too short for its length, a length past any page or past what
    /// its block can expand to, a block that does not decompress to its length, and rows cut
    /// short inside a sound block.
    #[test]
    fn a_damaged_page_is_an_error() {
        let (db, t) = tree();
        t.put(b"row", Some(b"value")).unwrap();
        let mut garbage = 100u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(&[0xf0, 0x01, 0x02, 0x03, 0xff, 0xff]);
        let mut huge = ((1u32 << 30) - 1).to_le_bytes().to_vec();
        huge.extend_from_slice(&[0x00, 0x01, 0x02]);
        let damage = [
            vec![0x05, b'r'],
            huge,
            u32::MAX.to_le_bytes().to_vec(),
            garbage,
            seal(&[0x05, b'r']),
            seal(&[0x03, b'r', b'o', b'w', 0x09, b'v']),
        ];
        for bytes in damage {
            db.open_tree("s#0").unwrap().insert([LAST], bytes.clone()).unwrap();
            assert!(t.get(b"row").is_err(), "{bytes:?}");
            assert!(t.rows().any(|r| r.is_err()), "{bytes:?}");
            assert!(t.put(b"rox", Some(b"v")).is_err(), "{bytes:?}");
        }
    }

    /// Pages are held compressed: rows of similar keys take a fraction of their bytes in sled.
    #[test]
    fn pages_are_held_compressed() {
        let (db, t) = tree();
        let keys: Vec<Vec<u8>> = (0..2_000).map(|i| format!("K{i:08}").into_bytes()).collect();
        let value = br#"{"trades":1,"volume":500}"#;
        let changes: Vec<Change<'_>> = keys.iter().map(|k| (k.as_slice(), Some(&value[..]))).collect();
        t.write(&changes, None, false).unwrap();
        let raw = db.open_tree("s#0").unwrap();
        let held: usize = raw.iter().filter_map(|kv| kv.ok()).filter(|(k, _)| is_page(k)).map(|(_, v)| v.len()).sum();
        let rows: usize = changes.iter().map(|(k, v)| row_bytes(&(*k, v.unwrap()))).sum();
        assert!(held * 2 < rows, "{held} bytes held for {rows} bytes of rows");
        assert_eq!(all(&t).len(), 2_000);
    }
}
