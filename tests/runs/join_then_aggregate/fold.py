#!/usr/bin/env python3
"""join_then_aggregate: for each order, the payments with its id at most 10 minutes from it
(in either direction); an order with at least one has a row: their count and the sum of their
amounts (at most two per order here, so the order of addition cannot matter)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

WITHIN = 10 * 60_000

pays = [r["value"] for r in read_input("payments")]
rows = []
for o in (r["value"] for r in read_input("orders")):
    matches = [p for p in pays if p["order_id"] == o["order_id"] and abs(p["paid"] - o["placed"]) <= WITHIN]
    assert len(matches) <= 2
    if matches:
        rows.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "payments": len(matches),
                                                     "paid": sum(float(p["amount"]) for p in matches)}})
write_expected("paid-count", rows)
