#!/usr/bin/env python3
"""left_join_pending: each (order, payment) pair of one id at most 5 m apart; an order with no
such payment is emitted with a null payment side only if the final stream time (the largest
event time of both inputs; nothing closes windows at the end) is >= its time + 10 m."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WITHIN = 5 * 60_000


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


orders = [r["value"] for r in read_input("orders")]
pays = [r["value"] for r in read_input("payments")]
stream_time = max([o["placed"] for o in orders] + [p["paid"] for p in pays])
out = []
for o in orders:
    matches = [p for p in pays if p["order_id"] == o["order_id"] and abs(p["paid"] - o["placed"]) <= WITHIN]
    for p in matches:
        out.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "total": float(o["total"]), "amount": float(p["amount"]),
                                                    "paid": True, "late_by": p["paid"] - o["placed"]}})
    if not matches and stream_time >= o["placed"] + 2 * WITHIN:
        out.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "total": float(o["total"]), "amount": None,
                                                    "paid": False, "late_by": None}})
write_expected("order-payments", out)
