#!/usr/bin/env python3
"""400 visits of eight users (an LCG, seed 5): each a list of 0 to 6 pages and a list of dwell
times (sometimes empty, sometimes out of the 100..50,000 range the query keeps); user u0 visits
with 100 pages at a time, 130 times, so that a list of every page it saw passes 10,000 items."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(5)


pages = ["/home", "/search", "/item", "/cart", "/checkout", "/help"]
clock = 1_700_000_000_000
lines = []
heavy = 0
for i in range(400):
    clock += 1 + nxt(5_000)
    if heavy < 130 and nxt(3) == 0:
        heavy += 1
        user = "u0"
        ps = [pages[nxt(6)] for _ in range(100)]
    else:
        user = f"u{1 + nxt(7)}"
        ps = [pages[nxt(6)] for _ in range(nxt(7))]
    dwell = [nxt(60_000) for _ in range(nxt(4))]
    value = {"user": user, "pages": ps, "dwell": dwell, "at": clock}
    lines.append({"key": user, "value": value, "timestamp": clock})
assert heavy == 130, heavy
(Path(__file__).resolve().parent / "in" / "visits.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
