//! Micro-benchmarks (criterion): `cargo bench --bench micro`.
//!
//! - `front_end/parse_check_500_lines`: parse and check a generated 500-line program.
//! - `eval/filter_select`: a stateless query (decode, `where`, `select`, sink) per trade.
//! - `record_cache/hopping_stats`: `examples/stats.stream`'s aggregate (5 s hopping windows)
//!   per trade, with the record cache flushed every 10,000 trades.
//! - `embedded/stats_end_to_end`: `streamc run examples/stats.stream --input … --drain` on the
//!   embedded log, 20,000 trades, a fresh state directory each time.
//!
//! Throughput is reported per trade (or per line). Targets and comparisons live here, never in
//! timed tests.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use streamc::plan::physical::{self, TaskSpec};
use streamc::record::Record;
use streamc::runtime::task::{NoStores as Empty, Task};

const TRADES: &str = r#"stream trades from "stocks" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}
"#;

/// A program of about 500 lines: the trades stream and 40 queries.
fn program_500_lines() -> String {
    let mut s = TRADES.to_string();
    for i in 0..40 {
        s += &format!(
            "query q{i} {{\n  from trades\n  where price > {i}.5 and size % 7 != {m}\n  select {{\n    ticker,\n    notional = price * size,\n    big = size > 100,\n    label = concat(lower(ticker), \"-{i}\"),\n  }}\n  to \"out-{i}\"\n}}\n",
            m = i % 7
        );
    }
    s
}

fn trades(n: u64) -> Vec<Record> {
    let mut buf = Vec::new();
    streamc::gen::trades(
        &streamc::gen::TradesOptions { count: n, tickers: 100, seed: 1, rate: 1000, disorder_ms: 200 },
        &mut buf,
    )
    .unwrap();
    let program = streamc::compile(TRADES).unwrap();
    let source = program.sources[0].clone();
    buf.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| streamc::runtime::value_record(Some(&source), l, 0))
        .collect()
}

fn spec_of(src: &str) -> Arc<TaskSpec> {
    let program = streamc::compile(src).unwrap();
    let topo = streamc::plan::lower(&program, "bench");
    Arc::new(physical::specs(&program, &topo).unwrap().remove(0))
}

fn front_end(c: &mut Criterion) {
    let text = program_500_lines();
    let mut g = c.benchmark_group("front_end");
    g.throughput(Throughput::Elements(text.lines().count() as u64));
    g.bench_function("parse_check_500_lines", |b| b.iter(|| streamc::compile(std::hint::black_box(&text)).unwrap()));
    g.finish();
}

fn run_task(spec: &Arc<TaskSpec>, records: &[Record], flush_every: usize) -> usize {
    let mut t = Task::new(spec.clone(), 0, i64::MIN);
    let (mut out, mut changes) = (streamc::runtime::task::Outputs::default(), Vec::new());
    for (i, r) in records.iter().enumerate() {
        if let Ok(input) = t.decode_main(r) {
            let _ = t.process(input, &mut out, &Empty);
        }
        if (i + 1) % flush_every == 0 {
            t.flush(&mut out, &mut changes, false, &Empty);
            out.clear();
            changes.clear();
        }
    }
    t.flush(&mut out, &mut changes, false, &Empty);
    out.len() + changes.len()
}

fn eval(c: &mut Criterion) {
    let spec = spec_of(&(TRADES.to_string() + "query q { from trades where price > 100.0 and size % 7 != 3 select { ticker, notional = price * size, label = concat(lower(ticker), \"-x\") } to \"out\" }"));
    let records = trades(10_000);
    let mut g = c.benchmark_group("eval");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("filter_select", |b| b.iter(|| run_task(&spec, &records, usize::MAX)));
    g.finish();
}

fn record_cache(c: &mut Criterion) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/stats.stream")).unwrap();
    let spec = spec_of(&text);
    let records = trades(50_000);
    let mut g = c.benchmark_group("record_cache");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.sample_size(20);
    g.bench_function("hopping_stats", |b| b.iter(|| run_task(&spec, &records, 10_000)));
    g.finish();
}

fn end_to_end(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("streamc-bench-micro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("trades.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    streamc::gen::trades(
        &streamc::gen::TradesOptions { count: 20_000, tickers: 100, seed: 1, rate: 1000, disorder_ms: 200 },
        &mut f,
    )
    .unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/stats.stream");
    let text = std::fs::read_to_string(path).unwrap();
    let program = streamc::compile(&text).unwrap();
    let topo = streamc::plan::lower(&program, "stats");
    let mut g = c.benchmark_group("embedded");
    g.throughput(Throughput::Elements(20_000));
    g.sample_size(10);
    let mut n = 0;
    g.bench_function("stats_end_to_end", |b| {
        b.iter_batched(
            || {
                n += 1;
                let state = dir.join(format!("state-{n}"));
                streamc::runtime::options::RunOptions {
                    state_dir: state,
                    app: "stats".into(),
                    threads: 1,
                    drain: true,
                    close_windows_at_end: false,
                    inputs: vec![("stocks".into(), input.clone())],
                    config: streamc::config::load(None, &[]).unwrap(),
                    metrics: None,
                    progress: false,
                    chaos: None,
                    restores: Default::default(),
                    program_text: text.clone(),
                }
            },
            |opts| {
                streamc::runtime::embedded::run(&program, &topo, &opts).unwrap();
                let _ = std::fs::remove_dir_all(&opts.state_dir);
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, front_end, eval, record_cache, end_to_end);
criterion_main!(benches);
