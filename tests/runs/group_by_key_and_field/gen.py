#!/usr/bin/env python3
"""group_by_key_and_field: 80 events of 6 ids and 3 kinds (seeded), keyed by id, record
timestamps increasing."""
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
rng = random.Random(12)
lines = []
for i in range(80):
    oid = rng.randrange(0, 6)
    v = {"id": oid, "kind": rng.choice(["buy", "sell", "hold"]), "x": rng.randrange(-50, 100)}
    lines.append({"key": str(oid), "value": v, "timestamp": 1_700_000_000_000 + 1_000 * i})
(HERE / "in").mkdir(exist_ok=True)
(HERE / "in" / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
