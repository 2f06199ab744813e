#!/usr/bin/env python3
"""Trades in seconds from a minute boundary (record timestamp = event time), arranged so that
late-arriving records bridge sessions (gap 10 s): for A, the record at 12 s bridges [0, 5] and
[18, 25]; for B, the record at 9 s bridges [0, 0] and [18, 18]; for C, the record at 30 s
bridges [22, 22] and [38, 38], and the one at 11 s extends [4, 4]. D's sessions never merge. The extreme
prices sit in the earlier sessions."""
import json
from pathlib import Path

B = 1_700_000_040_000  # a minute boundary
rows = [
    ("A", 0, 10.0, 5, "x"), ("A", 5, 12.5, 1, "nyse"), ("A", 18, 9.5, 10, "ab"), ("A", 25, 11.0, 2, "x"),
    ("B", 0, 12.5, 3, "nasdaq"), ("B", 18, 11.0, 4, "x"),
    ("C", 4, 1.0, 1, "arcax"), ("C", 22, 7.0, 1, "x"), ("C", 38, 3.0, 1, "ab"),
    ("D", 1, 5.0, 1, "ab"), ("D", 30, 6.0, 2, "nyse"),
    ("A", 12, 8.25, 4, "ab"),
    ("B", 9, 8.25, 2, "x"),
    ("C", 30, 4.0, 1, "x"),
    ("C", 11, 2.0, 1, "nyse"),
]
lines = [{"key": k, "value": {"ticker": k, "price": p, "size": s, "venue": v, "ts": B + t * 1000}, "timestamp": B + t * 1000} for k, t, p, s, v in rows]
(Path(__file__).resolve().parent / "in" / "stocks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
