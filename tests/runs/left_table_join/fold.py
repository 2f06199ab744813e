#!/usr/bin/env python3
"""left_table_join: merge customers and orders by time (the table first on ties), keeping the
current row per customer (null deletes); every order is emitted, keyed by its customer id, with the
row's fields or nulls."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


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
