#!/usr/bin/env python3
"""Writes in/: votes for a few names (counts passing 2 and beyond, names voted once), and table
rows that are updated within their region, moved between regions, and deleted."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

HERE = Path(__file__).resolve().parent
nxt = lcg(4106)
(HERE / "in").mkdir(exist_ok=True)
with open(HERE / "in" / "votes.jsonl", "w") as f:
    for i in range(60):
        name = "abcdefghij"[nxt(10)]
        f.write(json.dumps({"key": name, "value": {"name": name, "n": nxt(9)}, "timestamp": 1700000000000 + i}) + "\n")
rows = {}
with open(HERE / "in" / "accounts.jsonl", "w") as f:
    for i in range(150):
        key = nxt(12)
        r = nxt(10)
        if r == 0 or (r == 1 and key in rows):
            value = None
        elif r < 5 and key in rows:
            value = {"region": rows[key]["region"], "balance": nxt(120)}   # within its region
        else:
            value = {"region": ["north", "south", "east", "west"][nxt(4)], "balance": nxt(120)}
        if value is None:
            rows.pop(key, None)
        else:
            rows[key] = value
        f.write(json.dumps({"key": key, "value": value, "timestamp": 1700000000000 + i}) + "\n")
