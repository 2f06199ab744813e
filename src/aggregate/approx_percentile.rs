//! `approx_percentile(x, p)`: the value at percentile `p` (0 to 1) of the non-null values of `x`,
//! estimated with a DDSketch (the `sketches-ddsketch` crate) of relative accuracy 1%: the result
//! is within 1% of the value of rank ⌊p·(n−1)⌋ among the n sorted values (0-based), and exactly the
//! smallest and largest value for p = 0 and p = 1. Values within 10⁻⁹ of zero count as zero.
//!
//! The sketch counts values in buckets whose bounds grow by a factor of (1 + 1%) / (1 − 1%),
//! the mapping of `sketches-ddsketch` (the Rust port of DataDog's DDSketch; pinned, since the mapping
//! is stored state, and checked by a test): `Config::key` gives a
//! value's bucket, `Config::value` a bucket's representative value. At most 2,048 buckets per
//! sign are kept (past that the buckets nearest zero collapse into one, as DDSketch's collapsing
//! store does), so the state stays a few KB whatever the number of values. Two sketches merge
//! bucket by bucket, so the result depends only on the values, not on their order or on how
//! sessions merge.
//!
//! The state is the sketch as plain values, `{p, zero, min, max, pos_lo, pos, neg_lo, neg}`:
//! `p` (the result is computed from the state alone), the count of zeros, the smallest and
//! largest value (exact results for p = 0 and 1), and per sign the first bucket's key and the
//! counts of consecutive buckets from it (negative values by the bucket of their magnitude). A
//! record changes one count in place.

use std::sync::Arc;

use std::sync::OnceLock;

use sketches_ddsketch::Config;

use super::{ArgProblem, Doc, Example, Native, Signature, SignatureError};
use crate::ast::Literal;
use crate::types::{RecordType, Type};
use crate::value::Value;

/// The sketch's relative accuracy.
pub const ACCURACY: f64 = 0.01;
/// The most buckets per sign.
const MAX_BINS: u32 = 2048;
/// Values closer to zero count as zero.
const MIN_VALUE: f64 = 1.0e-9;

pub struct ApproxPercentile;

static DOC: Doc = Doc {
    signature: "approx_percentile(x: int | float, p) -> float?",
    summary: "the value at percentile `p` (a literal from 0 to 1) of the non-null values of `x`, within 1% (DDSketch); null when there are none",
    example: Example {
        arg_type: "float?",
        call: "approx_percentile(x, 0.5)",
        records: &[(1000, "10.0"), (4000, "40.0"), (5000, "50.0"), (2000, "20.0"), (2500, "null"), (3000, "30.0")],
        // The median is 30; the sketch answers with its bucket's representative value: with
        // γ = 1.01 / 0.99, bucket ⌊ln 30 / ln γ⌋ = 170, whose value is γ¹⁷⁰ · 2γ / (1 + γ).
        result: "30.267171338721898",
    },
};

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config::new(ACCURACY, MAX_BINS, MIN_VALUE))
}

impl Native for ApproxPercentile {
    fn name(&self) -> &'static str {
        "approx_percentile"
    }
    fn doc(&self) -> &'static Doc {
        &DOC
    }
    fn signature(&self, args: &[Type]) -> Result<Signature, SignatureError> {
        let [t, p] = args else { return Err(SignatureError::Arity("two arguments: a value and p")) };
        if !t.is_numeric() {
            return Err(SignatureError::Argument {
                arg: 0,
                problem: ArgProblem::NotNumeric,
                message: format!("`approx_percentile` of a {t}"),
                label: "not a number",
                help: "`approx_percentile` takes ints or floats".into(),
            });
        }
        if !matches!(p, Type::Float | Type::Int | Type::Error) {
            return Err(not_a_fraction());
        }
        let counts = || Type::List(Box::new(Type::Int));
        let fields = vec![
            ("p".into(), Type::Float),
            ("zero".into(), Type::Int),
            ("min".into(), Type::Float),
            ("max".into(), Type::Float),
            ("pos_lo".into(), Type::Int),
            ("pos".into(), counts()),
            ("neg_lo".into(), Type::Int),
            ("neg".into(), counts()),
        ];
        let state = RecordType { fields };
        Ok(Signature { result: Type::Float.nullable(), state: Type::Record(state).nullable() })
    }
    fn check_literals(&self, args: &[Option<&Literal>]) -> Result<(), SignatureError> {
        let p = match args.get(1) {
            Some(Some(Literal::Float(p))) => *p,
            Some(Some(Literal::Int(p))) => *p as f64,
            _ => return Err(not_a_fraction()),
        };
        if (0.0..=1.0).contains(&p) {
            Ok(())
        } else {
            Err(not_a_fraction())
        }
    }
    fn init(&self) -> Value {
        Value::Null
    }
    fn update(&self, state: &mut Value, args: &[Value], _ts: i64) -> Result<(), String> {
        let v = match args.first() {
            Some(Value::Int(i)) => *i as f64,
            Some(Value::Float(f)) if f.is_finite() => *f,
            // NaN and infinities have no place in a sketch of values: skipped like nulls.
            Some(Value::Float(_)) | Some(Value::Null) => return Ok(()),
            _ => return Err("`approx_percentile` of a value that is not a number".into()),
        };
        if state.is_null() {
            let p = match args.get(1) {
                Some(Value::Float(p)) => *p,
                Some(Value::Int(p)) => *p as f64,
                _ => return Err("`approx_percentile` without its p".into()),
            };
            *state = Sketch::empty(p);
        }
        let mut sk = Sketch::of(state)?;
        sk.add(v, 1)?;
        Ok(())
    }
    fn merge(&self, state: &mut Value, other: Value) -> Result<(), String> {
        if other.is_null() {
            return Ok(());
        }
        if state.is_null() {
            *state = other;
            return Ok(());
        }
        let mut other = other;
        let o = Sketch::of(&mut other)?;
        let (zero, min, max) = (o.int(ZERO)?, o.float(MIN)?, o.float(MAX)?);
        let pos = o.buckets(POS_LO, POS)?;
        let neg = o.buckets(NEG_LO, NEG)?;
        let mut sk = Sketch::of(state)?;
        sk.set(ZERO, Value::Int(sk.int(ZERO)? + zero));
        sk.set(MIN, Value::Float(sk.float(MIN)?.min(min)));
        sk.set(MAX, Value::Float(sk.float(MAX)?.max(max)));
        for (key, n) in pos {
            sk.add_to(POS_LO, POS, key, n)?;
        }
        for (key, n) in neg {
            sk.add_to(NEG_LO, NEG, key, n)?;
        }
        Ok(())
    }
    fn result(&self, state: &Value) -> Value {
        let mut state = state.clone();
        if state.is_null() {
            return Value::Null;
        }
        match Sketch::of(&mut state).and_then(|sk| sk.quantile()) {
            Ok(q) => q.map(Value::Float).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }
}

fn not_a_fraction() -> SignatureError {
    SignatureError::Argument {
        arg: 1,
        problem: ArgProblem::NotConstant,
        message: "`approx_percentile`'s p must be a number literal from 0 to 1".into(),
        label: "not a literal from 0 to 1",
        help: "the median is `approx_percentile(x, 0.5)`, the 99th percentile `approx_percentile(x, 0.99)`".into(),
    }
}

// The fields of the state.
const P: usize = 0;
const ZERO: usize = 1;
const MIN: usize = 2;
const MAX: usize = 3;
const POS_LO: usize = 4;
const POS: usize = 5;
const NEG_LO: usize = 6;
const NEG: usize = 7;

/// A non-null state, changed in place.
struct Sketch<'a>(&'a mut Vec<Value>);

impl<'a> Sketch<'a> {
    fn empty(p: f64) -> Value {
        let none = || Value::List(Arc::new(Vec::new()));
        Value::Record(Arc::new(vec![
            Value::Float(p),
            Value::Int(0),
            Value::Float(f64::INFINITY),
            Value::Float(f64::NEG_INFINITY),
            Value::Int(0),
            none(),
            Value::Int(0),
            none(),
        ]))
    }

    fn of(state: &'a mut Value) -> Result<Self, String> {
        match state {
            Value::Record(f) if f.len() == 8 => Ok(Sketch(Arc::make_mut(f))),
            _ => Err("an approx_percentile state is not a sketch".into()),
        }
    }

    fn int(&self, i: usize) -> Result<i64, String> {
        match self.0[i] {
            Value::Int(n) => Ok(n),
            _ => Err("a damaged approx_percentile state".into()),
        }
    }

    fn float(&self, i: usize) -> Result<f64, String> {
        match self.0[i] {
            Value::Float(x) => Ok(x),
            Value::Int(n) => Ok(n as f64),
            _ => Err("a damaged approx_percentile state".into()),
        }
    }

    fn set(&mut self, i: usize, v: Value) {
        self.0[i] = v;
    }

    /// The non-empty buckets of one sign: (key, count).
    fn buckets(&self, lo: usize, counts: usize) -> Result<Vec<(i64, i64)>, String> {
        let first = self.int(lo)?;
        let Value::List(c) = &self.0[counts] else { return Err("a damaged approx_percentile state".into()) };
        let mut out = Vec::new();
        for (i, n) in c.iter().enumerate() {
            match n {
                Value::Int(0) => {}
                Value::Int(n) if *n > 0 => out.push((first + i as i64, *n)),
                _ => return Err("a damaged approx_percentile state".into()),
            }
        }
        Ok(out)
    }

    fn add(&mut self, v: f64, n: i64) -> Result<(), String> {
        if v > MIN_VALUE {
            self.add_to(POS_LO, POS, config().key(v) as i64, n)?;
        } else if v < -MIN_VALUE {
            self.add_to(NEG_LO, NEG, config().key(-v) as i64, n)?;
        } else {
            self.0[ZERO] = Value::Int(self.int(ZERO)? + n);
        }
        self.0[MIN] = Value::Float(self.float(MIN)?.min(v));
        self.0[MAX] = Value::Float(self.float(MAX)?.max(v));
        Ok(())
    }

    /// Add `n` to bucket `key` of one sign, growing its range; past [`MAX_BINS`] buckets the
    /// lowest collapse into the lowest one kept.
    fn add_to(&mut self, lo: usize, counts: usize, key: i64, n: i64) -> Result<(), String> {
        let first = self.int(lo)?;
        let Value::List(c) = &mut self.0[counts] else { return Err("a damaged approx_percentile state".into()) };
        let c = Arc::make_mut(c);
        let max = MAX_BINS as i64;
        let mut first = first;
        if c.is_empty() {
            first = key;
            c.push(Value::Int(0));
        } else if key < first {
            let last = first + c.len() as i64 - 1;
            let new_first = key.max(last - max + 1);
            c.splice(0..0, std::iter::repeat_n(Value::Int(0), (first - new_first) as usize));
            first = new_first;
        } else if key >= first + c.len() as i64 {
            c.resize((key - first + 1) as usize, Value::Int(0));
            if c.len() as i64 > max {
                let drop = c.len() - MAX_BINS as usize;
                let collapsed: i64 = c.drain(..drop).map(|v| if let Value::Int(n) = v { n } else { 0 }).sum();
                if let Value::Int(b) = &mut c[0] {
                    *b += collapsed;
                }
                first += drop as i64;
            }
        }
        let at = (key.max(first) - first) as usize;
        match &mut c[at] {
            Value::Int(b) => *b += n,
            _ => return Err("a damaged approx_percentile state".into()),
        }
        self.0[lo] = Value::Int(first);
        Ok(())
    }

    /// The value at percentile p: the rank ⌊p·(n−1)⌋ walked through the negative buckets (by
    /// falling magnitude), the zeros and the positive buckets.
    fn quantile(&self) -> Result<Option<f64>, String> {
        let p = self.float(P)?.clamp(0.0, 1.0);
        let neg = self.buckets(NEG_LO, NEG)?;
        let pos = self.buckets(POS_LO, POS)?;
        let zero = self.int(ZERO)?;
        let neg_n: i64 = neg.iter().map(|b| b.1).sum();
        let total = neg_n + zero + pos.iter().map(|b| b.1).sum::<i64>();
        if total == 0 {
            return Ok(None);
        }
        if p == 0.0 {
            return Ok(Some(self.float(MIN)?));
        }
        if p == 1.0 {
            return Ok(Some(self.float(MAX)?));
        }
        let rank = (p * (total as f64 - 1.0)) as i64;
        let at_rank = |buckets: &[(i64, i64)], rank: i64| {
            let mut seen = 0;
            for (key, n) in buckets {
                seen += n;
                if seen > rank {
                    return *key;
                }
            }
            buckets.last().map(|b| b.0).unwrap_or(0)
        };
        let q = if rank < neg_n {
            -config().value(at_rank(&neg, neg_n - rank - 1) as i32)
        } else if rank < neg_n + zero {
            0.0
        } else {
            config().value(at_rank(&pos, rank - neg_n - zero) as i32)
        };
        Ok(Some(q))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentiles of 1 to 20,000 values (two shapes, with negatives and zeros), fed in one
    /// state or in three merged ones: within 1% of the value of rank ⌊p·(n−1)⌋ of the sorted
    /// values, the same either way, and exact at p = 0 and 1.
    #[test]
    fn within_one_percent_of_the_exact_rank() {
        let a = ApproxPercentile;
        for n in [1usize, 7, 100, 20_000] {
            for shape in 0..2 {
                let values: Vec<f64> = (0..n)
                    .map(|i| {
                        let x = ((i as u64).wrapping_mul(2654435761) % 1_000_003) as f64;
                        if shape == 0 {
                            x / 7.0
                        } else {
                            (x - 300_000.0) * (x / 1e6).powi(3)
                        }
                    })
                    .collect();
                let mut sorted = values.clone();
                sorted.sort_by(f64::total_cmp);
                let mut one = Value::Null;
                let mut parts = [Value::Null, Value::Null, Value::Null];
                for (i, v) in values.iter().enumerate() {
                    a.update(&mut one, &[Value::Float(*v), Value::Float(0.5)], 0).unwrap();
                    a.update(&mut parts[i % 3], &[Value::Float(*v), Value::Float(0.5)], 0).unwrap();
                }
                let [mut merged, b, c] = parts;
                a.merge(&mut merged, b).unwrap();
                a.merge(&mut merged, c).unwrap();
                for p in [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0] {
                    // The same sketch asked for another percentile.
                    let at = |state: &Value| {
                        let Value::Record(f) = state else { panic!("not a state") };
                        let mut f = (**f).clone();
                        f[P] = Value::Float(p);
                        a.result(&Value::Record(Arc::new(f)))
                    };
                    let exact = sorted[(p * (n as f64 - 1.0)) as usize];
                    let Value::Float(got) = at(&one) else { panic!("no result") };
                    assert_eq!(at(&merged), Value::Float(got), "n={n} p={p}: merged differs");
                    let tolerance = if p == 0.0 || p == 1.0 { 0.0 } else { ACCURACY * exact.abs() + MIN_VALUE };
                    assert!((got - exact).abs() <= tolerance, "n={n} shape={shape} p={p}: {got} against {exact}");
                }
            }
        }
    }

    /// Values from 10⁻⁸ to 10²⁰ need more than 2,048 buckets: the lowest collapse, the state
    /// stays bounded, and high percentiles stay within 1%.
    #[test]
    fn buckets_are_bounded_and_high_percentiles_stay_accurate() {
        let a = ApproxPercentile;
        let values: Vec<f64> =
            (0..5_000).map(|i| 10f64.powf(-8.0 + 28.0 * ((i * 7919) % 5_000) as f64 / 5_000.0)).collect();
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let mut state = Value::Null;
        for v in &values {
            a.update(&mut state, &[Value::Float(*v), Value::Float(0.99)], 0).unwrap();
        }
        let Value::Record(f) = &state else { panic!("no state") };
        let Value::List(pos) = &f[POS] else { panic!("no buckets") };
        assert_eq!(pos.len(), MAX_BINS as usize);
        let exact = sorted[(0.99 * 4_999.0) as usize];
        let Value::Float(got) = a.result(&state) else { panic!("no result") };
        assert!((got - exact).abs() <= ACCURACY * exact, "{got} against {exact}");
    }

    /// The bucket mapping is stored state: a restored or merged sketch relies on it. Computed
    /// independently (Python: γ = 1.01 / 0.99; ⌊ln 30 / ln γ⌋ = 170; γ¹⁷⁰ · 2γ / (1 + γ)), so a
    /// change in the crate's mapping fails here rather than shifting restored buckets.
    #[test]
    fn the_bucket_mapping_is_the_documented_one() {
        assert_eq!(config().key(30.0), 170);
        assert_eq!(config().value(170), 30.267171338721898);
        assert_eq!(config().key(1.0), 0);
        assert_eq!(config().key(0.5), -35);
    }

    #[test]
    fn empty_is_null_and_damage_is_an_error() {
        let a = ApproxPercentile;
        assert_eq!(a.result(&Value::Null), Value::Null);
        let damaged = Value::Record(Arc::new(vec![Value::Float(0.5), Value::str("zz")]));
        assert!(a.update(&mut damaged.clone(), &[Value::Float(1.0), Value::Float(0.5)], 0).is_err());
        assert_eq!(a.result(&damaged), Value::Null);
        let Value::Record(mut f) = Sketch::empty(0.5) else { panic!() };
        Arc::make_mut(&mut f)[POS] = Value::List(Arc::new(vec![Value::str("x")]));
        let damaged = Value::Record(f);
        assert_eq!(a.result(&damaged), Value::Null);
        assert!(a.merge(&mut Sketch::empty(0.5), damaged).is_err());
    }
}
