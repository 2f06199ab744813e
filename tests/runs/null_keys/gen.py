#!/usr/bin/env python3
"""Events, most with a null key, some keyed by a session id; record timestamps in order."""
import json
import random
from pathlib import Path

rng = random.Random(4)
t = 1_700_000_040_000
lines = []
for i in range(30):
    t += rng.randrange(0, 9_000)
    key = None if rng.random() < 0.6 else f"s{rng.randrange(3)}"
    lines.append({"key": key, "value": {"user": rng.choice(["ann", "bob"]), "action": rng.choice(["click", "view", "noop"]), "n": rng.randrange(0, 10)}, "timestamp": t})
(Path(__file__).resolve().parent / "in" / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
