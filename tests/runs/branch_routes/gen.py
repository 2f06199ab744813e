#!/usr/bin/env python3
"""300 orders (an LCG, seed 9) in six regions, one of them "zz" (which no branch of `route`
takes), amounts from -50 to 2,000 (some not positive, filtered out), event times rising with up
to 5 s of disorder (within the 10 s grace). The record timestamp is the arrival time."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(9)


regions = ["fr", "de", "es", "us", "jp", "zz"]
clock = 1_700_000_000_000
lines = []
for i in range(300):
    clock += nxt(4_000)
    region = regions[nxt(6)]
    amount = (nxt(205_000) - 5_000) / 100
    at = clock - nxt(5_000)
    oid = f"o{i:03}"
    lines.append({"key": oid, "value": {"id": oid, "region": region, "amount": amount, "at": at}, "timestamp": clock})
(Path(__file__).resolve().parent / "in" / "orders.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
