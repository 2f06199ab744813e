//! Deterministic inputs for the examples, shared by the embedded and the Kafka tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn clicks(n: usize, seed: u64) -> Vec<(String, String, i64, i64)> {
    clicks_with_lag(n, seed, 120_000)
}

pub fn clicks_with_lag(n: usize, seed: u64, max_lag: u64) -> Vec<(String, String, i64, i64)> {
    let mut x = seed;
    let mut next = move |m: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let pages = ["/home", "/search", "/item", "/cart", "/checkout", "/help"];
    let mut clock = 1_700_000_000_000i64;
    let mut out = Vec::new();
    for _ in 0..n {
        // Mostly seconds to minutes apart; now and then a long pause (new sessions).
        clock += match next(20) {
            0 => 40 * 60_000 + next(3_600_000) as i64,
            _ => next(300_000) as i64,
        };
        let user = format!("u{}", next(10));
        let page = pages[next(pages.len() as u64) as usize].to_string();
        let dwell = next(60_000) as i64 - 100; // a few negatives, filtered by the query
        let lag = next(max_lag) as i64;
        out.push((user, page, dwell, clock - lag));
    }
    out
}

pub fn write_clicks(path: &Path, clicks: &[(String, String, i64, i64)]) {
    let lines: Vec<String> = clicks
        .iter()
        .map(|(u, p, d, at)| serde_json::json!({"user": u, "page": p, "dwell_ms": d, "at": at}).to_string())
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Orders (id, customer, total, placed) and payments (order id, amount, method, paid).
pub type OrdersAndPayments = (Vec<(String, String, f64, i64)>, Vec<(String, f64, String, i64)>);

pub fn orders_and_payments(n: usize, seed: u64) -> OrdersAndPayments {
    let mut x = seed;
    let mut next = move |m: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let mut t = 1_700_000_000_000i64;
    let (mut orders, mut pays) = (Vec::new(), Vec::new());
    for i in 0..n {
        t += next(120_000) as i64;
        let id = format!("o{i}");
        let total = (500 + next(50_000)) as f64 / 100.0;
        orders.push((id.clone(), format!("c{}", next(7)), total, t));
        let times = match next(10) {
            0..=2 => 0,
            3 => 2,
            _ => 1,
        };
        for _ in 0..times {
            let amount = if next(5) == 0 { 1.0 } else { total };
            let method = ["card", "cash", "wire"][next(3) as usize].to_string();
            pays.push((id.clone(), amount, method, t - 60_000 + next(960_000) as i64));
        }
    }
    pays.sort_by_key(|p| p.3);
    (orders, pays)
}

pub fn write_orders_and_payments(
    dir: &Path,
    orders: &[(String, String, f64, i64)],
    pays: &[(String, f64, String, i64)],
) -> (PathBuf, PathBuf) {
    let (of, pf) = (dir.join("orders.jsonl"), dir.join("payments.jsonl"));
    let lines = |v: Vec<serde_json::Value>| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("\n") + "\n";
    std::fs::write(
        &of,
        lines(
            orders
                .iter()
                .map(|(id, c, tot, at)| serde_json::json!({"order_id": id, "customer": c, "total": tot, "placed": at}))
                .collect(),
        ),
    )
    .unwrap();
    std::fs::write(
        &pf,
        lines(
            pays.iter()
                .map(|(id, a, m, at)| serde_json::json!({"order_id": id, "amount": a, "method": m, "paid": at}))
                .collect(),
        ),
    )
    .unwrap();
    (of, pf)
}
