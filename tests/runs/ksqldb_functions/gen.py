#!/usr/bin/env python3
"""Writes in/: events with null and non-null words and tags, lists of ints, event times out of
order (about a third up to 10 minutes early)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

HERE = Path(__file__).resolve().parent
nxt = lcg(4112)
users = ["ana", "bob", "caravaggio", "dee", "al"]
words = ["alpha", "beta", "gamma", "beta", None, "delta"]
(HERE / "in").mkdir(exist_ok=True)
with open(HERE / "in" / "events.jsonl", "w") as f:
    t = 1700000000000
    for i in range(80):
        t += 1000 * nxt(90)
        at = t - (600000 if nxt(3) == 0 else 0)
        tags = None if nxt(5) == 0 else [None if nxt(4) == 0 else ["x", "yy", "zzz"][nxt(3)] for _ in range(nxt(4))]
        v = {"id": f"e{i}", "user": users[nxt(5)], "word": words[nxt(6)], "tags": tags,
             "nums": [nxt(6) for _ in range(nxt(5))], "extra": [nxt(6) for _ in range(nxt(4))], "at": at}
        f.write(json.dumps({"key": v["id"], "value": v, "timestamp": 1800000000000 + i}) + "\n")
