#!/usr/bin/env python3
"""Orders of four customers (60, an LCG, seed 31): lists of 0 to 5 quantities and prices (prices
are multiples of 0.25, so that sums are exact in any order)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(31)
lines = []
for i in range(60):
    c = f"c{nxt(4)}"
    n = nxt(6)
    value = {
        "customer": c,
        "quantities": [1 + nxt(20) for _ in range(n)],
        "prices": [nxt(400) / 4 for _ in range(nxt(4))],
        "min_qty": 1 + nxt(15),
    }
    lines.append({"key": c, "value": value, "timestamp": 1_700_000_000_000 + 1000 * i})
here = Path(__file__).resolve().parent
(here / "in" / "orders.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
