#!/usr/bin/env python3
"""Pings of three hosts, in time order, with one record (host h2) a year ahead in the middle."""
import json
import random
from pathlib import Path

rng = random.Random(6)
B = 1_700_000_040_000
YEAR = 365 * 86_400_000
t = B
lines = []
for i in range(40):
    t += rng.randrange(0, 10_000)
    host = rng.choice(["h1", "h2", "h3"])
    at = t + YEAR if i == 20 else t
    lines.append({"key": host, "value": {"host": host, "ms": rng.randrange(1, 200), "at": at}, "timestamp": 1_800_000_000_000 + i})
(Path(__file__).resolve().parent / "in" / "pings.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
