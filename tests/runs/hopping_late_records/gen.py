#!/usr/bin/env python3
"""Trades whose event times lag their arrival by up to 4 s: many are late for some windows."""
import json
import random
from pathlib import Path

rng = random.Random(21)
clock = 1_700_000_000_000
lines = []
for i in range(120):
    clock += rng.randrange(0, 400)
    ticker = rng.choice(["T0000", "T0001", "T0002"])
    price = round(rng.uniform(90, 110), 2)
    ts = clock - rng.randrange(0, 4_000)
    lines.append({"key": ticker, "value": {"ticker": ticker, "price": price, "size": rng.randrange(1, 100), "ts": ts}, "timestamp": clock})
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
