#!/usr/bin/env python3
"""udf_aggregates: per ticker and 1 m tumbling window: count,
range_of = max - min of price, weighted_mean = sum(price * size) / sum(size) or null when the
sizes sum to 0, longest = the longest venue name (the first one on ties - lengths differ here).
Nothing is late; every window is closed at the end."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

MINUTE = 60_000

def longest(words):
    best = ""
    for w in words:
        if len(w) > len(best):
            best = w
    return best

trades = [r["value"] for r in read_input("stocks")]
minutes = {}
for t in trades:
    minutes.setdefault((t["ticker"], t["ts"] - t["ts"] % MINUTE), []).append(t)
rows = []
for (k, s), ts in minutes.items():
    prices = [float(t["price"]) for t in ts]
    den = sum(t["size"] for t in ts)
    num = 0.0
    for t in ts:
        num += float(t["price"]) * t["size"]
    rows.append({"key": k, "value": {"window_start": s, "window_end": s + MINUTE, "ticker": k, "n": len(ts),
                                     "range": max(prices) - min(prices), "vwap": num / den if den != 0 else None,
                                     "venue": longest(t["venue"] for t in ts)}})
write_expected("udf-minute", rows)
