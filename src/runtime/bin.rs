//! The binary encoding of values in state: self-describing (a tag byte per value, so reading
//! needs no type), little-endian, written and read without a text format in between. Aggregate
//! entries use it (`runtime/agg.rs`); topics users read stay JSON.
//!
//! | tag | value | then |
//! | --- | --- | --- |
//! | 0 | null | |
//! | 1, 2 | false, true | |
//! | 3 | int | i64 |
//! | 4 | float | f64 (its bits: every value, non-finite ones included, comes back as it was) |
//! | 5 | string | u32 length, UTF-8 bytes |
//! | 6 | timestamp | i64 epoch ms |
//! | 7 | duration | i64 ms |
//! | 8 | list | u32 count, values |
//! | 9 | record | u32 count, values (positional) |
//! | 10 | map | u32 count, then each entry's key and value (in key order) |

use std::sync::Arc;

use crate::value::Value;

/// Lists and records nested deeper than this are refused when read (as serde_json refuses JSON
/// nested deeper than 128).
pub(crate) const MAX_DEPTH: usize = 128;

pub(crate) fn write_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0),
        Value::Bool(b) => out.push(if *b { 2 } else { 1 }),
        Value::Int(i) => tagged(out, 3, i.to_le_bytes()),
        Value::Float(f) => tagged(out, 4, f.to_bits().to_le_bytes()),
        Value::Str(s) => {
            out.push(5);
            write_len(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        Value::Ts(t) => tagged(out, 6, t.to_le_bytes()),
        Value::Dur(d) => tagged(out, 7, d.to_le_bytes()),
        Value::List(items) | Value::Record(items) => {
            out.push(if matches!(v, Value::List(_)) { 8 } else { 9 });
            write_values(items, out);
        }
        Value::Map(entries) => {
            out.push(10);
            write_len(out, entries.len());
            for (k, v) in entries.iter() {
                write_value(k, out);
                write_value(v, out);
            }
        }
    }
}

fn tagged(out: &mut Vec<u8>, tag: u8, b: [u8; 8]) {
    out.push(tag);
    out.extend_from_slice(&b);
}

pub(crate) fn write_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

/// A count, then each value.
pub(crate) fn write_values(vs: &[Value], out: &mut Vec<u8>) {
    write_len(out, vs.len());
    for v in vs {
        write_value(v, out);
    }
}

/// Reads what [`write_value`] wrote, from the front of a byte slice.
pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err("cut short".into());
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn i64(&mut self) -> Result<i64, String> {
        let b = self.take(8)?;
        Ok(i64::from_le_bytes(b.try_into().map_err(|_| "cut short")?))
    }

    pub(crate) fn len(&mut self) -> Result<usize, String> {
        let b = self.take(4)?;
        let n = u32::from_le_bytes(b.try_into().map_err(|_| "cut short")?) as usize;
        // Every value takes at least a byte: a count past what is left is damage (and no
        // damaged count makes a huge allocation).
        if n > self.b.len() {
            return Err(format!("a count of {n} with {} bytes left", self.b.len()));
        }
        Ok(n)
    }

    pub(crate) fn value(&mut self) -> Result<Value, String> {
        self.value_at(0)
    }

    /// A value nested `depth` lists or records deep: past [`MAX_DEPTH`] the bytes are damaged
    /// (no state nests so deep), and reading them would exhaust the stack.
    fn value_at(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested more than {MAX_DEPTH} deep"));
        }
        Ok(match self.u8()? {
            0 => Value::Null,
            1 => Value::Bool(false),
            2 => Value::Bool(true),
            3 => Value::Int(self.i64()?),
            4 => Value::Float(f64::from_bits(self.i64()? as u64)),
            5 => {
                let n = self.len()?;
                let s = std::str::from_utf8(self.take(n)?).map_err(|e| format!("a string that is not UTF-8: {e}"))?;
                Value::str(s)
            }
            6 => Value::Ts(self.i64()?),
            7 => Value::Dur(self.i64()?),
            8 => Value::List(Arc::new(self.values_at(depth + 1)?)),
            9 => Value::Record(Arc::new(self.values_at(depth + 1)?)),
            10 => {
                let n = self.len()?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = self.value_at(depth + 1)?;
                    entries.push((k, self.value_at(depth + 1)?));
                }
                // Sorted and distinct as written; rebuilt so that damage cannot break lookups.
                Value::map(entries)
            }
            t => return Err(format!("unknown value tag {t}")),
        })
    }

    pub(crate) fn values(&mut self) -> Result<Vec<Value>, String> {
        self.values_at(0)
    }

    fn values_at(&mut self, depth: usize) -> Result<Vec<Value>, String> {
        let n = self.len()?;
        (0..n).map(|_| self.value_at(depth)).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_value_comes_back_as_it_was() {
        let vs = vec![
            Value::Null,
            Value::Bool(false),
            Value::Bool(true),
            Value::Int(i64::MIN),
            Value::Int(-1),
            Value::Float(0.1),
            Value::Float(-0.0),
            Value::Float(f64::INFINITY),
            Value::str(""),
            Value::str("naïve \"quoted\"\n"),
            Value::Ts(1_700_000_000_000),
            Value::Dur(-5),
            Value::List(Arc::new(vec![Value::Int(1), Value::List(Arc::new(vec![]))])),
            Value::Record(Arc::new(vec![Value::str("a"), Value::Null])),
            Value::map(vec![(Value::str("b"), Value::Int(2)), (Value::str("a"), Value::map(vec![]))]),
        ];
        let mut out = Vec::new();
        write_values(&vs, &mut out);
        let mut r = Reader { b: &out };
        let back = r.values().unwrap();
        assert!(r.is_empty());
        assert_eq!(back.len(), vs.len());
        for (a, b) in vs.iter().zip(&back) {
            match (a, b) {
                (Value::Float(x), Value::Float(y)) => assert_eq!(x.to_bits(), y.to_bits()),
                _ => assert_eq!(a, b),
            }
        }
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        write_values(&[Value::str("abc"), Value::Int(7)], &mut out);
        for cut in 0..out.len() {
            assert!(Reader { b: &out[..cut] }.values().is_err(), "cut at {cut}");
        }
        assert!(Reader { b: &[0xff, 0xff, 0xff, 0x7f] }.values().is_err());
        assert!(Reader { b: &[1, 0, 0, 0, 42] }.values().is_err());
        assert!(Reader { b: &[1, 0, 0, 0, 5, 1, 0, 0, 0, 0xff] }.values().is_err());
    }

    #[test]
    fn nesting_past_the_limit_is_damage_not_a_stack_overflow() {
        let nested = |depth: usize| {
            let mut b = Vec::new();
            for _ in 0..depth {
                b.extend_from_slice(&[8, 1, 0, 0, 0]);
            }
            b.push(0);
            b
        };
        assert!(Reader { b: &nested(MAX_DEPTH) }.value().is_ok());
        assert!(Reader { b: &nested(MAX_DEPTH + 2) }.value().is_err());
        assert!(Reader { b: &nested(100_000) }.value().is_err());
    }
}
