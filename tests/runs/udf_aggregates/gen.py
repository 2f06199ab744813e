#!/usr/bin/env python3
"""Trades in seconds from a minute boundary; the record timestamp is the event time. The
record at 12 s arrives after the one at 25 s (its window is still open)."""
import json
from pathlib import Path

B = 1_700_000_040_000  # a minute boundary
rows = [
    ("A", 0, 10.0, 5, "x"), ("B", 3, 100.0, 0, "ab"), ("A", 5, 12.5, 0, "nyse"),
    ("A", 18, 9.5, 10, "ab"), ("A", 25, 11.0, 0, "x"),
    ("A", 12, 8.25, 4, "nasdaq"),
    ("B", 40, 101.0, 0, "x"),
    ("A", 70, 10.0, 2, "arcax"), ("A", 75, 10.5, 2, "x"),
    ("C", 130, 50.0, 1, "x"),
]
lines = [{"key": k, "value": {"ticker": k, "price": p, "size": s, "venue": v, "ts": B + t * 1000}, "timestamp": B + t * 1000} for k, t, p, s, v in rows]
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
