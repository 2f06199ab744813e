#!/usr/bin/env python3
"""Clicks of two users, event times in minutes from a base, out of order so sessions merge."""
import json
from pathlib import Path

M = 60_000
B = 1_700_000_000_000
rows = [
    ("u1", 0, "/home"), ("u2", 1, "/a"), ("u1", 15, "/search"),
    ("u1", 8, "/item"),        # within 10 m of [0, 0] and [15, 15]: merged into [0, 15]
    ("u2", 5, "/b"),           # extends [1, 1] forwards
    ("u1", -5, "/ad"),         # extends [0, 15] backwards: a new start
    ("u1", 40, "/help"), ("u2", 30, "/c"),
    ("u2", 20, "/d"),          # exactly the gap before [30, 30]: joins it
    ("u1", 26, "/cart"),       # 11 m after 15 and 14 m before 40: a session of its own
    ("u1", 33, "/pay"),        # bridges [26, 26] and [40, 40]
    ("u1", 25, "/back"),       # bridges [-5, 15] (exactly 10 m) and [26, 40]
]
lines = [{"key": u, "value": {"user": u, "page": p, "at": B + m * M}, "timestamp": B + 3_600_000 + i} for i, (u, m, p) in enumerate(rows)]
(Path(__file__).resolve().parent / "in" / "clicks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
