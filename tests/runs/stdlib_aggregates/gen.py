#!/usr/bin/env python3
"""Weather readings of three stations over about two minutes, in time order (record timestamp = event
time); station "solo" has one reading in a window; some temperatures outside [-10, 40]; some
`open` values of 0."""
import json
import random
from pathlib import Path

rng = random.Random(77)
B = 1_700_000_040_000  # a minute boundary
lines = []
t = B
for i in range(40):
    t += rng.randrange(0, 6_000)
    st = "solo" if i == 5 else rng.choice(["north", "south"])
    temp = round(rng.uniform(-15.0, 45.0), 1)
    opn = 0.0 if rng.random() < 0.15 else round(rng.uniform(1.0, 9.0), 2)
    lines.append({"key": st, "value": {"station": st, "temp": temp, "open": opn, "close": round(rng.uniform(1.0, 9.0), 2),
                                       "ok": rng.random() < 0.7, "at": t}, "timestamp": t})
(Path(__file__).resolve().parent / "in" / "readings.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
