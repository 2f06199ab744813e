#!/usr/bin/env python3
"""Trades and quotes for three tickers, each topic in time order (record timestamp = event
time), some pairs exactly 2 s apart."""
import json
import random
from pathlib import Path

rng = random.Random(31)
B = 1_700_000_000_000
tickers = ["AA", "BB", "CC"]


def series(n, mk):
    t, out = B, []
    for _ in range(n):
        t += rng.choice([0, 500, 1_000, 2_000, 2_000, 3_500])
        out.append(mk(rng.choice(tickers), t))
    return out


trades = series(30, lambda k, t: {"key": k, "value": {"ticker": k, "price": rng.randrange(396, 404) / 4, "size": rng.randrange(1, 9), "ts": t}, "timestamp": t})
quotes = series(25, lambda k, t: {"key": k, "value": {"ticker": k, "bid": rng.randrange(396, 400) / 4, "ask": rng.randrange(400, 404) / 4, "at": t}, "timestamp": t})
here = Path(__file__).resolve().parent
(here / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in trades))
(here / "in" / "quotes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in quotes))
