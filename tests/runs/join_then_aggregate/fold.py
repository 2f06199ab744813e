#!/usr/bin/env python3
"""join_then_aggregate: for each order, the payments with its id at most 10 minutes from it
(in either direction); an order with at least one has a row: their count and the sum of their
amounts (at most two per order here, so the order of addition cannot matter)."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WITHIN = 10 * 60_000


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


pays = [r["value"] for r in read_input("payments")]
rows = []
for o in (r["value"] for r in read_input("orders")):
    matches = [p for p in pays if p["order_id"] == o["order_id"] and abs(p["paid"] - o["placed"]) <= WITHIN]
    assert len(matches) <= 2
    if matches:
        rows.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "payments": len(matches),
                                                     "paid": sum(float(p["amount"]) for p in matches)}})
write_expected("paid-count", rows)
