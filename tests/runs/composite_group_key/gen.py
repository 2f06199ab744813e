#!/usr/bin/env python3
"""Views with record timestamps (the event time); user names in mixed case."""
import json
from pathlib import Path

M = 60_000
B = 1_700_000_040_000  # a minute boundary
rows = [
    # (offset ms, page, user, region, ms)
    (1_000, "p1", "Ann", "eu", 300),
    (2_000, "p2", "ann", "eu", 1_500),
    (3_000, "p1", "BOB", "eu", 999),
    (4_000, "p3", "bob", "us", 2_000),
    (30_000, "p2", "ANN", "eu", 4_200),
    (59_999, "p1", "Cy", "us", 1_000),
    (M, "p1", "ann", "eu", 10),           # stream time reaches the end of the first minute
    (59_000, "p2", "ann", "eu", 7_000),    # late for [B, B+1m): dropped by the window, counted by the other query
    (M + 5_000, "p4", "Bob", "us", 50),
    (M + 40_000, "p4", "bob", "eu", 12_345),
    (M + 20_000, "p2", "cy", "us", 999),  # out of order but its window is open
    (2 * M + 1, "p1", "Ann", "apac", 2_500),
    (2 * M + 2, "p1", "ann", "apac", 2_999),
]
lines = [{"key": p, "value": {"user": u, "region": r, "ms": ms}, "timestamp": B + off} for off, p, u, r, ms in rows]
(Path(__file__).resolve().parent / "in" / "views.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
