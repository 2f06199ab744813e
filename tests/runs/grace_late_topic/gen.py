#!/usr/bin/env python3
"""Readings for two sensors with event times (seconds from a 10 s boundary) out of order."""
import json
from pathlib import Path

B = 1_700_000_000_000  # a multiple of 10 s
rows = [
    # (sensor, event time in ms after B, value)
    ("a", 1_000, 1), ("b", 2_000, 10),
    ("a", 12_000, 2),            # stream time 12 s: [0, 10) open until 15 s
    ("a", 9_000, 3),             # within grace: counted in [0, 10)
    ("b", 9_999, 20),            # within grace
    ("a", 14_999, 4),            # stream time 14.999 s: still open
    ("b", 0, 30),                # still within grace
    ("b", 15_000, 40),           # stream time 15 s = 10 s + 5 s grace: [0, 10) closes and is emitted
    ("a", 9_500, 5),             # late for [0, 10)
    ("b", 5_000, 50),            # late
    ("a", 19_999, 6),
    ("b", 24_000, 60),
    ("a", 30_000, 7),            # stream time 30 s: [10, 20) closes (20 + 5 <= 30)
    ("a", 19_000, 8),            # late for [10, 20)
    ("b", 20_000, 70),           # [20, 30) is open until 35 s
    ("a", 34_000, 9),            # [30, 40) stays open: never emitted
]
lines = [{"key": s, "value": {"sensor": s, "value": val, "at": B + t}, "timestamp": 1_800_000_000_000 + i * 1000} for i, (s, t, val) in enumerate(rows)]
(Path(__file__).resolve().parent / "in" / "readings.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
