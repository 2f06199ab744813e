#!/usr/bin/env python3
"""Purchases of two tenants with the same user names over three hours, in time order (RFC 3339
event times); two records without a tenant; a refund (amount <= 0) filtered by the query."""
import json
import random
from datetime import datetime, timezone
from pathlib import Path

rng = random.Random(2026)
t = int(datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc).timestamp() * 1000)
lines = []
for i in range(45):
    t += rng.randrange(0, 8 * 60_000)
    v = {"tenant": rng.choice(["acme", "globex"]), "user": rng.choice(["alice", "bob", "carol"]),
         "amount": round(rng.uniform(5, 200), 2) if i != 7 else -20.0,
         "at": datetime.fromtimestamp(t / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if i == 12:
        del v["tenant"]
    if i == 30:
        v["tenant"] = None
    lines.append({"key": None, "value": v, "timestamp": 1_800_000_000_000 + i})
(Path(__file__).resolve().parent / "in" / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
