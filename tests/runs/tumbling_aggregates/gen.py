#!/usr/bin/env python3
"""Deterministic trades, in time order, a few on window boundaries; some without a venue."""
import json
import random
from pathlib import Path

rng = random.Random(5)
B = 1_700_000_000_000  # a multiple of 10 s
lines = []
t = B
for i in range(60):
    t += rng.choice([0, 250, 1_000, 1_750, 2_500])
    if i in (20, 40):
        t = t - t % 10_000 + 10_000  # exactly on a window boundary
    ticker = rng.choice(["AAA", "BBB", "CCC"])
    v = {"ticker": ticker, "price": rng.randrange(400, 800) / 4, "size": rng.randrange(1, 50), "ts": t}
    r = rng.random()
    if r < 0.6:
        v["venue"] = rng.choice(["xnys", "bats", "arca"])
    elif r < 0.8:
        v["venue"] = None
    lines.append({"key": ticker, "value": v, "timestamp": t})
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
