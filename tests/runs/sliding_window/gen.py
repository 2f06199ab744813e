#!/usr/bin/env python3
"""Trades for three tickers, event times out of order by up to 500 ms (grace 2 s: none late);
some exactly 3 s apart and some at the same time, to hit the inclusive bounds."""
import json
import random
from pathlib import Path

rng = random.Random(8)
clock = 1_700_000_000_000
lines = []
for i in range(90):
    clock += rng.choice([0, 100, 400, 900, 1_500, 3_000])
    ticker = rng.choice(["A", "B", "C"])
    ts = clock - rng.choice([0, 0, 0, 250, 500])
    lines.append({"key": ticker, "value": {"ticker": ticker, "price": rng.randrange(400, 440) / 4, "size": rng.randrange(1, 20), "ts": ts}, "timestamp": clock})
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
