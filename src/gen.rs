//! Deterministic test data: `streamc gen trades --count N --tickers K --seed S`.

use std::io::Write;

/// SplitMix64: small and deterministic.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The first trade's event time: 2023-11-14T22:13:20Z.
pub const BASE_TS: i64 = 1_700_000_000_000;

#[derive(Clone, Debug)]
pub struct TradesOptions {
    pub count: u64,
    pub tickers: u64,
    pub seed: u64,
    /// Trades per second of event time.
    pub rate: u64,
    /// Largest amount (ms) by which a trade's time may lag behind the trade before it.
    pub disorder_ms: u64,
}

/// Write `count` JSON trades, one per line: `{"ticker","price","size","ts"}`. Prices follow a
/// random walk per ticker; event times advance at `rate` per second and lag by up to
/// `disorder_ms`; about one trade in a thousand has price 0 (filtered by the examples).
pub fn trades(o: &TradesOptions, out: &mut dyn Write) -> std::io::Result<()> {
    let mut rng = Rng(o.seed);
    let tickers = o.tickers.max(1);
    let mut prices: Vec<i64> = (0..tickers).map(|i| 10_000 + (i as i64 % 500) * 100).collect();
    let step = 1_000_000 / o.rate.max(1); // microseconds per trade
    let mut line = String::with_capacity(96);
    for i in 0..o.count {
        let t = rng.below(tickers) as usize;
        let walk = rng.below(201) as i64 - 100;
        prices[t] = (prices[t] + walk).max(100);
        let price = if rng.below(1000) == 0 { 0 } else { prices[t] };
        let size = 1 + rng.below(1000);
        let lag = if o.disorder_ms > 0 { rng.below(o.disorder_ms + 1) as i64 } else { 0 };
        let ts = BASE_TS + (i * step / 1000) as i64 - lag;
        line.clear();
        use std::fmt::Write as _;
        let _ = write!(
            line,
            "{{\"ticker\":\"T{t:04}\",\"price\":{}.{:02},\"size\":{size},\"ts\":{ts}}}",
            price / 100,
            price % 100
        );
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}
