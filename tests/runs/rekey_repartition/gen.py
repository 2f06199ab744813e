#!/usr/bin/env python3
"""Deterministic page views keyed by page id (the key is outside the value)."""
import json
import random
from pathlib import Path

rng = random.Random(3)
users = ["ann", "bob", "cy", "dee"]
regions = ["eu", "us", "apac"]
t = 1_700_000_000_000
lines = []
for i in range(40):
    t += rng.randrange(0, 5_000)
    u = rng.choice(users)
    lines.append({"key": f"p{rng.randrange(6)}", "value": {"user": u, "region": rng.choice(regions), "ms": rng.randrange(10, 5_000)}, "timestamp": t})
out = Path(__file__).resolve().parent / "in" / "views.jsonl"
out.write_text("".join(json.dumps(x) + "\n" for x in lines))
