#!/usr/bin/env python3
"""Writes in/events.jsonl (seeded): log lines with and without order numbers, JSON payloads
(some not JSON, some without the fields), local New York times across the DST change."""
import json
import random
from pathlib import Path

rng = random.Random(19)
out = []
base = 1699999990000  # 2023-11-14T22:13:10Z
for i in range(40):
    has = rng.random() < 0.6
    line = f"user {rng.choice(['ann', 'bob', 'cy'])} placed order-{rng.randint(1, 99999)} at gate {rng.randint(1, 9)}" if has else f"heartbeat {i} ok"
    kind = rng.random()
    if kind < 0.6:
        payload = json.dumps({"user": {"name": rng.choice(["ann", "bob"])}, "tags": [rng.choice(["a", "b"]), "z"]})
    elif kind < 0.8:
        payload = json.dumps({"other": 1})
    else:
        payload = "not json {"
    # Local New York wall-clock times around 2023-03-12 (clocks went forward at 02:00).
    day = rng.choice(["2023-03-11", "2023-03-12", "2023-03-13", "2023-11-05", "2023-11-06"])
    hour = rng.choice([1, 3, 12, 23])
    local = f"{day} {hour:02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    bonus = None if rng.random() < 0.3 else rng.randint(0, 20)
    delta = round(rng.uniform(-5, 5), 2)
    at = base + i * 3_600_000 * 7 + rng.randint(0, 999)
    out.append({"key": f"e{i:02d}", "value": {"id": f"e{i:02d}", "line": line, "payload": payload, "local": local,
                                             "bonus": bonus, "delta": delta, "at": at}, "timestamp": at})
with open(Path(__file__).resolve().parent / "in" / "events.jsonl", "w") as f:
    for r in out:
        f.write(json.dumps(r) + "\n")
