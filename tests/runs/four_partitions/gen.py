#!/usr/bin/env python3
"""Trades for twelve tickers and five accounts, in time order (record timestamp = event time)."""
import json
import random
from pathlib import Path

rng = random.Random(12)
t = 1_700_000_000_000
lines = []
for i in range(200):
    t += rng.randrange(0, 700)
    k = f"K{rng.randrange(12):02}"
    lines.append({"key": k, "value": {"ticker": k, "account": f"acct-{rng.randrange(5)}", "price": rng.randrange(100, 200) / 2, "size": rng.randrange(1, 100), "ts": t}, "timestamp": t})
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
