#!/usr/bin/env python3
"""Trades for four tickers over ~5 s (record timestamp = the `ts` field, up to 300 ms of
disorder); limits that change every second (from 1 s after the first trade), one deleted."""
import json
import random
from pathlib import Path

rng = random.Random(17)
B = 1_700_000_000_000
tickers = [f"T{i:04}" for i in range(4)]
prices = {t: 100.0 for t in tickers}
trades = []
clock = B
for i in range(150):
    clock += rng.randrange(0, 70)
    t = rng.choice(tickers)
    prices[t] = round(prices[t] + rng.uniform(-1.0, 1.0), 2)
    ts = clock - rng.randrange(0, 300)
    trades.append({"key": t, "value": {"ticker": t, "price": prices[t], "size": rng.randrange(1, 500), "ts": ts}, "timestamp": ts})
limits = []
for step in range(5):
    for i, t in enumerate(tickers):
        ts = B + 1_000 + step * 1_000
        value = None if (step == 2 and i == 1) else {"max_price": 99.0 + i + step * 0.5}
        limits.append({"key": t, "value": value, "timestamp": ts})
here = Path(__file__).resolve().parent
(here / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in trades))
(here / "in" / "limits.jsonl").write_text("".join(json.dumps(x) + "\n" for x in limits))
