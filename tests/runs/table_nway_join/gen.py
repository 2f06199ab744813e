#!/usr/bin/env python3
"""Three tables keyed by user id (u00 .. u09): 200 updates and deletions (an LCG, seed 7), each
record on one of the three topics, every record timestamp distinct (the tables' event time), so
that the order of a key's updates across the tables is the same on any backend. Some deletions
are of keys the table does not hold (they change nothing)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(7)

names = ["Ann", "Bob", "Cyd", "Dee", "Eve", "Fay"]
topics = ["users", "scores", "levels"]
clock = 1_700_000_000_000
held = {t: set() for t in topics}
out = {t: [] for t in topics}
for _ in range(200):
    clock += 1 + nxt(1_000)
    topic = topics[nxt(3)]
    key = f"u{nxt(10):02}"
    if key not in held[topic] and nxt(5) == 0:
        value = None  # a deletion of a key the table does not hold
    elif key in held[topic] and nxt(4) == 0:
        value = None
        held[topic].discard(key)
    else:
        held[topic].add(key)
        if topic == "users":
            value = {"name": names[nxt(len(names))]}
        elif topic == "scores":
            value = {"points": nxt(10)}
        else:
            value = {"level": 1 + nxt(3)}
    out[topic].append({"key": key, "value": value, "timestamp": clock})
here = Path(__file__).resolve().parent
for topic, lines in out.items():
    (here / "in" / f"{topic}.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
