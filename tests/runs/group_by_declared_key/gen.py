#!/usr/bin/env python3
"""Writes in/: events keyed by an int that is not in the value, and table rows keyed by an int id
(updates that move a row between regions, and deletions)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

HERE = Path(__file__).resolve().parent
nxt = lcg(41)
(HERE / "in").mkdir(exist_ok=True)
with open(HERE / "in" / "events.jsonl", "w") as f:
    for i in range(300):
        rec = {"key": nxt(7), "value": {"v1": 10 * nxt(4), "x": nxt(100) - 50}, "timestamp": 1700000000000 + i * 1000}
        f.write(json.dumps(rec) + "\n")
with open(HERE / "in" / "accounts.jsonl", "w") as f:
    for i in range(200):
        key = nxt(30)
        value = None if nxt(6) == 0 else {"region": ["north", "south", "east"][nxt(3)], "balance": nxt(1000)}
        f.write(json.dumps({"key": key, "value": value, "timestamp": 1700000000000 + i * 1000}) + "\n")
