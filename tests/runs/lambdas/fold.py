#!/usr/bin/env python3
"""lambdas: per order, the quantities doubled, those at least min_qty, the sum of the prices (from
0.0) and how many quantities are at least min_qty; per customer, the number of quantities of its
orders, the last three distinct such numbers in arrival order (a repeated one moves to the end)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

lines, recent = [], {}
for rec in read_input("orders"):
    v = rec["value"]
    qs, m = v["quantities"], v["min_qty"]
    total = 0.0
    for p in v["prices"]:
        total += p
    lines.append({"key": v["customer"], "value": {
        "customer": v["customer"],
        "doubled": [q * 2 for q in qs],
        "bulk": [q for q in qs if q >= m],
        "total": total,
        "lines": sum(1 for q in qs if q >= m),
    }})
    seen = [s for s in recent.get(v["customer"], []) if s != len(qs)] + [len(qs)]
    recent[v["customer"]] = seen[-3:]
write_expected("order-lines", lines)
write_expected("recent-sizes", [{"key": c, "value": {"customer": c, "recent": s}} for c, s in recent.items()])
