#!/usr/bin/env python3
"""left_table_join: merge customers and orders by time (the table first on ties), keeping the
current row per customer (null deletes); every order is emitted, keyed by its customer id, with the
row's fields or nulls."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

customers, orders = read_input("customers"), read_input("orders")
events = [(r["timestamp"], 0, i, r) for i, r in enumerate(customers)] + \
         [(r["value"]["at"], 1, i, r) for i, r in enumerate(orders)]
table = {}
out = []
for _, side, _, r in sorted(events, key=lambda e: e[:3]):
    if side == 0:
        if r["value"] is None:
            table.pop(r["key"], None)
        else:
            table[r["key"]] = r["value"]
        continue
    v = r["value"]
    row = table.get(v["customer_id"])
    out.append({"key": v["customer_id"], "value": {
        "order_id": v["order_id"], "customer_id": v["customer_id"], "amount": float(v["amount"]),
        "name": row["name"] if row else "unknown",
        "tier": row["tier"] if row else None,
        "vip": (row["tier"] if row else None) == "gold",
        "missing": row is None}})
write_expected("enriched-orders", out)
