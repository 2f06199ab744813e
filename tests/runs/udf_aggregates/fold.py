#!/usr/bin/env python3
"""udf_aggregates: per ticker and 1 m tumbling window: count,
range_of = max - min of price, weighted_mean = sum(price * size) / sum(size) or null when the
sizes sum to 0, longest = the longest venue name (the first one on ties - lengths differ here).
Nothing is late; every window is closed at the end."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
MINUTE = 60_000


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


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
