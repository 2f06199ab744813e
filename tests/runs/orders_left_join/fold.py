#!/usr/bin/env python3
"""orders_left_join (the references of tests/embedded.rs):
- order-status: every (order, payment) pair of one id at most 10 minutes apart; an order with
  no such payment once, unpaid (payment side null).
- big-spenders: per customer and UTC day of `placed`, count, sum, mean and sample standard
  deviation (the stdlib's Welford update, in arrival order) of order totals; a row is in the
  final table while its sum exceeds 1000 (sums only grow, so the last row is the final one)."""
import sys
import math
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

WITHIN, DAY = 10 * 60_000, 86_400_000
orders = [r["value"] for r in read_input("orders")]
pays = [r["value"] for r in read_input("payments")]

status = []
for o in orders:
    total = float(o["total"])
    matches = [p for p in pays if p["order_id"] == o["order_id"] and abs(p["paid"] - o["placed"]) <= WITHIN]
    if not matches:
        status.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "customer": o["customer"], "total": total,
                                                       "paid": False, "method": "unpaid", "shortfall": total}})
    for p in matches:
        status.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "customer": o["customer"], "total": total,
                                                       "paid": True, "method": p["method"], "shortfall": total - float(p["amount"])}})
write_expected("order-status", status)

groups = {}
for o in orders:  # arrival order
    groups.setdefault((o["customer"], o["placed"] - o["placed"] % DAY), []).append(float(o["total"]))
rows = []
for (customer, start), totals in groups.items():
    s = 0.0
    for x in totals:
        s += x
    if not s > 1000.0:
        continue
    n, mean, m2 = 0, 0.0, 0.0
    for x in totals:
        d = x - mean
        n += 1
        mean = mean + d / n
        m2 = m2 + d * (x - mean)
    rows.append({"key": customer, "value": {
        "window_start": start, "window_end": start + DAY, "customer": customer,
        "orders": len(totals), "spent": s, "typical": s / len(totals),
        "spread": math.sqrt(m2 / (n - 1)) if n >= 2 else None}})
write_expected("big-spenders", rows)
