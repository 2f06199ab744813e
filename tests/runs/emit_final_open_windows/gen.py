#!/usr/bin/env python3
"""Purchases of three users over ~5 minutes, event times within 20 s of order (grace 30 s)."""
import json
import random
from pathlib import Path

rng = random.Random(42)
B = 1_700_000_040_000  # a minute boundary
clock = B
lines = []
for i in range(50):
    clock += rng.randrange(0, 12_000)
    at = clock - rng.randrange(0, 20_000)
    user = rng.choice(["ann", "bob", "cy"])
    lines.append({"key": user, "value": {"user": user, "amount": rng.randrange(1, 400) / 8, "at": at}, "timestamp": clock})
(Path(__file__).resolve().parent / "in" / "purchases.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
