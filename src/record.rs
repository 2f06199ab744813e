//! Records and positions, as every backend and command has them: a record (key, value,
//! timestamp, headers), a record read back with its offset, a place in a partition, a batch of
//! records to append to one partition (encoded as frames, the embedded log's file format, which
//! the Kafka backend decodes back), and the partitioner both backends share (Kafka's murmur2).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: i64,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
    }
}

/// A record read back, with its offset and the position of the record after it.
#[derive(Clone, Debug)]
pub struct Stored {
    pub offset: u64,
    pub next: Pos,
    pub record: Record,
}

/// A changelog record as a restore reads it: borrowed from the reader's buffers (no copy per
/// record; a restore copies only into the rows it keeps), without its headers.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub offset: u64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp: i64,
}

impl Stored {
    /// The record as an [`Entry`].
    pub fn entry(&self) -> Entry<'_> {
        Entry {
            offset: self.offset,
            key: self.record.key.as_deref(),
            value: self.record.value.as_deref(),
            timestamp: self.record.timestamp,
        }
    }
}

/// A place in a partition: an offset and its byte position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pos {
    pub offset: u64,
    pub byte: u64,
}

impl Pos {
    /// A place by its offset alone: a Kafka partition's (which has no byte positions), or one of
    /// the embedded log whose byte position its reader finds.
    pub fn at(offset: u64) -> Pos {
        Pos { offset, byte: 0 }
    }
}

/// Where a reading of a topic starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every partition, from its first record.
    Beginning,
    /// Every partition, from its end as of now.
    End,
    /// These partitions only, each from this offset (from its first record if that one is
    /// gone, from its end if the offset is past it).
    At(Vec<(u32, u64)>),
}

impl Start {
    /// Where partition `p` is read from: None if it is not read, Some(None) from its end,
    /// Some(Some(offset)) from that offset.
    pub fn offset(&self, p: u32) -> Option<Option<u64>> {
        match self {
            Start::Beginning => Some(Some(0)),
            Start::End => Some(None),
            Start::At(parts) => parts.iter().find(|(q, _)| *q == p).map(|(_, o)| Some(*o)),
        }
    }
}

/// Records to append to one partition in a commit, encoded as the log's frames as they are
/// added (from borrowed parts: a record is copied once, into its frame).
#[derive(Debug, Default)]
pub struct Append {
    pub topic: String,
    pub partition: u32,
    /// The records as frames, in order (see [`encode`]).
    pub(crate) frames: Vec<u8>,
    pub(crate) count: u64,
}

impl Append {
    pub fn new(topic: impl Into<String>, partition: u32) -> Append {
        Append { topic: topic.into(), partition, frames: Vec::new(), count: 0 }
    }

    /// These records, in order.
    pub fn of<'r>(topic: impl Into<String>, partition: u32, records: impl IntoIterator<Item = &'r Record>) -> Append {
        let mut a = Append::new(topic, partition);
        for r in records {
            a.push(r);
        }
        a
    }

    pub fn push(&mut self, r: &Record) {
        let headers = r.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        self.push_parts(r.timestamp, r.key.as_deref(), r.value.as_deref(), headers);
    }

    /// A record given by its parts.
    pub fn push_parts<'h>(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl ExactSizeIterator<Item = (&'h str, &'h [u8])>,
    ) {
        encode(timestamp, key, value, headers, &mut self.frames);
        self.count += 1;
    }

    /// Room for `records` more records of about `bytes` bytes in all.
    pub fn reserve(&mut self, bytes: usize) {
        self.frames.reserve(bytes);
    }

    /// The records, decoded back (for a backend that writes them elsewhere).
    pub fn records(&self) -> Vec<Record> {
        let mut out = Vec::with_capacity(self.count as usize);
        let mut at = 0;
        while let Some((r, len)) = self.frames.get(at..).and_then(decode) {
            out.push(r);
            at += len;
        }
        out
    }

    /// How many records.
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Frame: u32 length of the rest; i64 timestamp; key and value as u32 length (u32::MAX for
/// null) and bytes; u16 header count; each header u16 name length, name, u32 value length, value.
pub(crate) fn encode<'h>(
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl ExactSizeIterator<Item = (&'h str, &'h [u8])>,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&timestamp.to_le_bytes());
    for part in [key, value] {
        match part {
            Some(b) => {
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        }
    }
    out.extend_from_slice(&(headers.len().min(u16::MAX as usize) as u16).to_le_bytes());
    for (n, v) in headers.take(u16::MAX as usize) {
        let n = &n.as_bytes()[..n.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(n.len() as u16).to_le_bytes());
        out.extend_from_slice(n);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Decode one frame from the front of `b`: the record and the frame's total length.
pub(crate) fn decode(b: &[u8]) -> Option<(Record, usize)> {
    let len = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let mut c = Cursor { b: b.get(4..4 + len)?, p: 0 };
    let timestamp = i64::from_le_bytes(c.take(8)?.try_into().ok()?);
    let key = c.opt_bytes()?;
    let value = c.opt_bytes()?;
    let nh = u16::from_le_bytes(c.take(2)?.try_into().ok()?);
    let mut headers = Vec::with_capacity(nh as usize);
    for _ in 0..nh {
        let nl = u16::from_le_bytes(c.take(2)?.try_into().ok()?) as usize;
        let name = String::from_utf8_lossy(c.take(nl)?).into_owned();
        let vl = u32::from_le_bytes(c.take(4)?.try_into().ok()?) as usize;
        headers.push((name, c.take(vl)?.to_vec()));
    }
    Some((Record { key, value, timestamp, headers }, 4 + len))
}

pub(crate) struct Cursor<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) p: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.p..self.p.checked_add(n)?)?;
        self.p += n;
        Some(s)
    }
    pub(crate) fn opt_slice(&mut self) -> Option<Option<&'a [u8]>> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        if n == u32::MAX {
            Some(None)
        } else {
            Some(Some(self.take(n as usize)?))
        }
    }
    pub(crate) fn opt_bytes(&mut self) -> Option<Option<Vec<u8>>> {
        Some(self.opt_slice()?.map(<[u8]>::to_vec))
    }
}

/// Kafka's murmur2 (the Java client's `Utils.murmur2`), so keys land in the same partitions on
/// both backends.
pub fn murmur2(data: &[u8]) -> i32 {
    let length = data.len() as i32;
    let seed: i32 = 0x9747_b28c_u32 as i32;
    let m: i32 = 0x5bd1_e995;
    let r = 24;
    let mut h: i32 = seed ^ length;
    let chunks = data.len() / 4;
    for i in 0..chunks {
        let i4 = i * 4;
        let mut k = (data[i4] as i32 & 0xff)
            | ((data[i4 + 1] as i32 & 0xff) << 8)
            | ((data[i4 + 2] as i32 & 0xff) << 16)
            | ((data[i4 + 3] as i32 & 0xff) << 24);
        k = k.wrapping_mul(m);
        k ^= ((k as u32) >> r) as i32;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    let rest = data.len() % 4;
    let base = chunks * 4;
    if rest == 3 {
        h ^= (data[base + 2] as i32 & 0xff) << 16;
    }
    if rest >= 2 {
        h ^= (data[base + 1] as i32 & 0xff) << 8;
    }
    if rest >= 1 {
        h ^= data[base] as i32 & 0xff;
        h = h.wrapping_mul(m);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(m);
    h ^= ((h as u32) >> 15) as i32;
    h
}

/// The partition of a key: `(murmur2(key) & 0x7fffffff) % partitions`.
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values from Kafka's own test suite (UtilsTest.testMurmur2).
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn frames_round_trip() {
        let r =
            Record { key: Some(b"k".to_vec()), value: None, timestamp: -5, headers: vec![("h".into(), vec![1, 2])] };
        let mut a = Append::new("t", 0);
        a.push(&r);
        let b = a.frames;
        let (back, len) = decode(&b).unwrap();
        assert_eq!(back, r);
        assert_eq!(len, b.len());
        assert!(decode(&b[..b.len() - 1]).is_none());
    }
}
