#!/usr/bin/env python3
"""Trades as a feed would stamp them: each record's timestamp is its arrival time; its `ts`
field (the event time) lags it by up to 500 ms, so event times are out of order by less than the
1 s grace. A few trades have a non-positive price."""
import json
import random
from pathlib import Path

rng = random.Random(11)
clock = 1_700_000_000_000
prices = {f"T{i:04}": 100.0 + 10 * i for i in range(4)}
lines = []
for i in range(160):
    clock += rng.randrange(0, 150)
    ticker = rng.choice(sorted(prices))
    prices[ticker] = round(prices[ticker] + rng.uniform(-0.5, 0.5), 2)
    price = prices[ticker] if rng.random() > 0.03 else rng.choice([0.0, -1.5])
    ts = clock - rng.randrange(0, 500)
    lines.append({"key": ticker, "value": {"ticker": ticker, "price": price, "size": rng.randrange(1, 1000), "ts": ts}, "timestamp": clock})
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
