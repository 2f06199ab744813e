//! A store's shard in sled, its rows packed into pages: sled's cost is per key (about 14 K
//! instructions to write one and read it back, and hundreds of bytes of memory for each key it
//! holds in its caches), so one sled key per row made sled the bottleneck of every first run and
//! restore. Here a sled key holds a page of about [`PAGE_FILL`] bytes of rows in key order: a
//! 1 M-row store is some 25 K sled keys.
//!
//! Layout of a tree: each page under `0x00` followed by its smallest row key (its fence); a row
//! lives in the page with the greatest fence at or below its key. A page is a run of rows, each
//! `uvarint(key length) key uvarint(value length) value`, in key order. Beside the pages: the
//! checkpoint ([`CHECKPOINT`]) and the layout's version ([`LAYOUT`]). A tree without the version
//! holds rows of an earlier layout: it is emptied when opened, and the store restores from its
//! changelog, as it does from any local state it cannot use.
//!
//! Writing a sorted run of changes rewrites each page they fall in once: the page read, the
//! changes merged into its rows, the page removed and written again under its new fence, split
//! into pages of about [`PAGE_FILL`] bytes once it holds more than [`PAGE_MAX`] (a row larger than
//! that is a page of its own). A page emptied is removed; pages are not merged when they shrink.

use std::ops::Bound;

use crate::log::Pos;

/// The key under which a tree holds its checkpoint: the changelog position it reflects.
pub(crate) const CHECKPOINT: &[u8] = b"\xff\xff\xff\xffcheckpoint";

/// The key under which a tree holds the version of its layout.
const LAYOUT: &[u8] = b"\xff\xff\xff\xfflayout";
const LAYOUT_VERSION: &[u8] = b"pages 1";

/// The first byte of every page's key.
const PAGE: u8 = 0x00;

/// A page rewritten with more bytes of rows than this is split…
pub(crate) const PAGE_MAX: usize = 4096;
/// …into pages of about this many.
pub(crate) const PAGE_FILL: usize = 3072;

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

fn page_key(fence: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(fence.len() + 1);
    k.push(PAGE);
    k.extend_from_slice(fence);
    k
}

fn is_page(key: &[u8]) -> bool {
    key.first() == Some(&PAGE)
}

fn put_len(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_len(bytes: &[u8], at: &mut usize) -> Option<usize> {
    let mut v = 0usize;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn damaged() -> sled::Error {
    sled::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, "a page of local state is damaged"))
}

/// The rows of a page, in key order.
fn decode(page: &[u8]) -> sled::Result<Vec<Row<'_>>> {
    let mut rows = Vec::new();
    let mut at = 0;
    while at < page.len() {
        let mut field = || {
            let n = read_len(page, &mut at)?;
            let f = page.get(at..at.checked_add(n)?)?;
            at += n;
            Some(f)
        };
        let (Some(k), Some(v)) = (field(), field()) else { return Err(damaged()) };
        rows.push((k, v));
    }
    Ok(rows)
}

fn row_bytes((k, v): &Row<'_>) -> usize {
    k.len() + v.len() + 2
}

fn encode(rows: &[Row<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.iter().map(|r| row_bytes(r) + 4).sum());
    for (k, v) in rows {
        put_len(&mut out, k.len());
        out.extend_from_slice(k);
        put_len(&mut out, v.len());
        out.extend_from_slice(v);
    }
    out
}

/// The rows of a page with the changes (sorted, all within the page's range) applied.
fn merge<'a>(rows: Vec<Row<'a>>, changes: &[Change<'a>]) -> Vec<Row<'a>> {
    let mut out = Vec::with_capacity(rows.len() + changes.len());
    let mut rows = rows.into_iter().peekable();
    for (k, v) in changes {
        while let Some(r) = rows.next_if(|r| r.0 < *k) {
            out.push(r);
        }
        rows.next_if(|r| r.0 == *k);
        if let Some(v) = v {
            out.push((*k, *v));
        }
    }
    out.extend(rows);
    out
}

/// Rows cut into pages: one if they hold at most [`PAGE_MAX`] bytes, else pages of about
/// [`PAGE_FILL`] bytes each, evenly.
fn split<'r, 'a>(rows: &'r [Row<'a>]) -> Vec<&'r [Row<'a>]> {
    let total: usize = rows.iter().map(row_bytes).sum();
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
    /// Open store shard `name` of `db`; a tree of an earlier layout is emptied first.
    pub(crate) fn open(db: &sled::Db, name: &str) -> sled::Result<PagedTree> {
        let tree = db.open_tree(name)?;
        if tree.get(LAYOUT)?.as_deref() != Some(LAYOUT_VERSION) {
            // Rows of an earlier layout (or none): the store restores from its changelog.
            tree.clear()?;
            tree.insert(LAYOUT, LAYOUT_VERSION)?;
        }
        Ok(PagedTree { tree })
    }

    /// The page `key` lives in, or would: the one with the greatest fence at or below it, else
    /// the first (None: no page at all).
    fn page_of(&self, key: &[u8]) -> sled::Result<Option<(sled::IVec, sled::IVec)>> {
        if let Some((k, v)) = self.tree.range(..=page_key(key)).next_back().transpose()? {
            if is_page(&k) {
                return Ok(Some((k, v)));
            }
        }
        self.next_page(Bound::Unbounded)
    }

    /// The first page after `from`.
    fn next_page(&self, from: Bound<Vec<u8>>) -> sled::Result<Option<(sled::IVec, sled::IVec)>> {
        let from = match from {
            Bound::Unbounded => Bound::Included(vec![PAGE]),
            b => b,
        };
        match self.tree.range::<Vec<u8>, _>((from, Bound::Unbounded)).next().transpose()? {
            Some((k, v)) if is_page(&k) => Ok(Some((k, v))),
            _ => Ok(None),
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> sled::Result<Option<Vec<u8>>> {
        let Some((_, page)) = self.page_of(key)? else { return Ok(None) };
        Ok(decode(&page)?.into_iter().find(|r| r.0 == key).map(|r| r.1.to_vec()))
    }

    /// Every row, in key order.
    pub(crate) fn rows(&self) -> Rows {
        self.scan_prefix(b"")
    }

    /// Every row whose key starts with `prefix`, in key order.
    pub(crate) fn scan_prefix(&self, prefix: &[u8]) -> Rows {
        let start = match self.tree.range(..=page_key(prefix)).next_back() {
            Some(Ok((k, _))) if is_page(&k) => k.to_vec(),
            _ => vec![PAGE],
        };
        Rows { pages: self.tree.range(start..), page: None, at: 0, prefix: prefix.to_vec(), done: false }
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

    /// Remove every row and the checkpoint.
    pub(crate) fn clear(&self) -> sled::Result<()> {
        self.tree.clear()?;
        self.tree.insert(LAYOUT, LAYOUT_VERSION)?;
        Ok(())
    }

    /// Apply `changes` (sorted by key, each key once) and then set the checkpoint, if any: in
    /// one atomic batch if `atomic`, else in batches of at most [`BATCH_ROWS`] changes, the
    /// checkpoint with the last (a crash in between leaves changes after the checkpoint, which
    /// a restore from it replays). Each page written is read back: sled 0.34 consolidates a
    /// page's updates only when it is read, and a tree only written keeps every update in
    /// memory and on disk.
    pub(crate) fn write(&self, changes: &[Change<'_>], checkpoint: Option<&Pos>, atomic: bool) -> sled::Result<()> {
        debug_assert!(changes.windows(2).all(|w| w[0].0 < w[1].0), "sorted, each key once");
        let mut batch = sled::Batch::default();
        let mut touched: Vec<Vec<u8>> = Vec::new();
        let (mut rows, mut bytes) = (0, 0);
        let mut i = 0;
        while i < changes.len() {
            let page = self.page_of(changes[i].0)?;
            // The changes that fall in this page: those before the next page's fence (in
            // batches, at most a batch's worth: the pages they make are then written before
            // the next changes are merged into the last of them).
            let all = match &page {
                Some((pk, _)) => match self.next_page(Bound::Excluded(pk.to_vec()))? {
                    Some((next, _)) => i + changes[i..].partition_point(|c| c.0 < &next[1..]),
                    None => changes.len(),
                },
                None => changes.len(),
            };
            let j = if atomic { all } else { all.min(i + BATCH_ROWS) };
            let held = match &page {
                Some((pk, v)) => {
                    batch.remove(pk.clone());
                    touched.push(pk.to_vec());
                    decode(v)?
                }
                None => Vec::new(),
            };
            let merged = merge(held, &changes[i..j]);
            for piece in split(&merged).into_iter().filter(|p| !p.is_empty()) {
                let key = page_key(piece[0].0);
                let value = encode(piece);
                bytes += value.len();
                batch.insert(key.clone(), value);
                touched.push(key);
            }
            rows += j - i;
            i = j;
            if !atomic && (j < all || rows >= BATCH_ROWS || bytes >= BATCH_BYTES) && i < changes.len() {
                self.apply(std::mem::take(&mut batch), &mut touched)?;
                (rows, bytes) = (0, 0);
            }
        }
        if let Some(cp) = checkpoint {
            batch.insert(CHECKPOINT, serde_json::to_vec(cp).unwrap_or_default());
        }
        self.apply(batch, &mut touched)
    }

    fn apply(&self, batch: sled::Batch, touched: &mut Vec<Vec<u8>>) -> sled::Result<()> {
        self.tree.apply_batch(batch)?;
        for k in touched.drain(..) {
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
/// Costs one pass over the local state's pages (some 25 K sled keys for 1 M rows).
pub(crate) fn verify(db: &sled::Db) -> sled::Result<()> {
    for name in db.tree_names() {
        let tree = db.open_tree(&name)?;
        let paged = tree.get(LAYOUT)?.as_deref() == Some(LAYOUT_VERSION);
        for kv in tree.iter() {
            let (k, v) = kv?;
            if paged && is_page(&k) {
                decode(&v)?;
            }
        }
    }
    Ok(())
}

/// Rows of a tree in key order, from a prefix on (see [`PagedTree::scan_prefix`]).
pub(crate) struct Rows {
    pages: sled::Iter,
    /// The page being read, decoded lazily.
    page: Option<sled::IVec>,
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
                    let mut at = self.at;
                    let mut field = || {
                        let n = read_len(page, &mut at)?;
                        let f = page.get(at..at.checked_add(n)?)?;
                        at += n;
                        Some(f)
                    };
                    let (Some(k), Some(v)) = (field(), field()) else {
                        self.done = true;
                        return Some(Err(damaged()));
                    };
                    self.at = at;
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
                Some(Ok((k, v))) if is_page(&k) => {
                    (self.page, self.at) = (Some(v), 0);
                }
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
                t.write(&sorted, Some(&Pos { offset: run, byte: 0 }), atomic).unwrap();
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

    /// A key below every page's fence goes to the first page, which takes it as its fence; the
    /// empty key is a key like another.
    #[test]
    fn keys_below_the_first_fence_and_the_empty_key() {
        let (_db, t) = tree();
        t.put(b"m", Some(b"1")).unwrap();
        t.put(b"c", Some(b"2")).unwrap();
        t.put(b"", Some(b"3")).unwrap();
        assert_eq!(t.page_count(), 1);
        assert_eq!(t.get(b"").unwrap().as_deref(), Some(&b"3"[..]));
        assert_eq!(t.get(b"c").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(t.get(b"a").unwrap(), None);
        t.put(b"", None).unwrap();
        t.put(b"c", None).unwrap();
        t.put(b"m", None).unwrap();
        assert!(t.holds_no_rows());
        assert_eq!(t.page_count(), 0);
    }

    /// A tree holding rows of the earlier layout (a row per sled key) is emptied when opened:
    /// the store restores from its changelog; a paged tree opened again keeps its rows.
    #[test]
    fn a_tree_of_the_earlier_layout_is_emptied() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let raw = db.open_tree("s#0").unwrap();
        raw.insert(b"row", b"v".to_vec()).unwrap();
        raw.insert(CHECKPOINT, serde_json::to_vec(&Pos { offset: 3, byte: 0 }).unwrap()).unwrap();
        let t = PagedTree::open(&db, "s#0").unwrap();
        assert!(t.holds_no_rows());
        assert_eq!(t.checkpoint(), None);
        t.put(b"row", Some(b"w")).unwrap();
        let t = PagedTree::open(&db, "s#0").unwrap();
        assert_eq!(t.get(b"row").unwrap().as_deref(), Some(&b"w"[..]));
    }

    /// A page whose bytes are damaged is an error, never a panic.
    #[test]
    fn a_damaged_page_is_an_error() {
        let (db, t) = tree();
        t.put(b"row", Some(b"value")).unwrap();
        db.open_tree("s#0").unwrap().insert(page_key(b"row"), vec![0x05, b'r']).unwrap();
        assert!(t.get(b"row").is_err());
        assert!(t.rows().any(|r| r.is_err()));
        assert!(t.put(b"rox", Some(b"v")).is_err());
    }
}
