#!/usr/bin/env python3
"""Device events over ~5 hours in event time (out of order by up to 8 minutes, one record 40
minutes behind), some times written as RFC 3339 in various offsets; record timestamps are a
shuffled wall clock around 1.8e12."""
import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

rng = random.Random(99)
B = 1_700_002_800_000  # an hour boundary
clock = B
rows = []
for i in range(70):
    clock += rng.randrange(0, 8 * 60_000)
    at = clock - rng.randrange(0, 8 * 60_000)
    if i == 50:
        at = clock - 40 * 60_000  # far behind: late if its hour closed
    rows.append((rng.choice(["d1", "d2"]), rng.choice(["temp", "door", "power"]), rng.randrange(0, 100), at))
wall = [1_800_000_000_000 + i * 997 for i in range(len(rows))]
rng.shuffle(wall)
lines = []
for i, ((dev, kind, reading, at), ts) in enumerate(zip(rows, wall)):
    occurred = at
    if i % 3 == 1:
        tz = timezone(timedelta(hours=rng.choice([-5, 0, 2, 9])))
        occurred = datetime.fromtimestamp(at / 1000, tz).isoformat(timespec="milliseconds")
        if occurred.endswith("+00:00"):
            occurred = occurred[:-6] + "Z"
    lines.append({"key": dev, "value": {"device": dev, "kind": kind, "reading": reading, "occurred": occurred}, "timestamp": ts})
(Path(__file__).resolve().parent / "in" / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
