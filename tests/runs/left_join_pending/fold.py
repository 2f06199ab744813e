#!/usr/bin/env python3
"""left_join_pending: each (order, payment) pair of one id at most 5 m apart; an order with no
such payment is emitted with a null payment side only if the final stream time (the largest
event time of both inputs; nothing closes windows at the end) is > its time + 5 m (within, no
grace). The input is in time order, so every payment within 5 m of its order arrives in time."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

WITHIN = 5 * 60_000

orders = [r["value"] for r in read_input("orders")]
pays = [r["value"] for r in read_input("payments")]
stream_time = max([o["placed"] for o in orders] + [p["paid"] for p in pays])
out = []
for o in orders:
    matches = [p for p in pays if p["order_id"] == o["order_id"] and abs(p["paid"] - o["placed"]) <= WITHIN]
    for p in matches:
        out.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "total": float(o["total"]), "amount": float(p["amount"]),
                                                    "paid": True, "late_by": p["paid"] - o["placed"]}})
    if not matches and stream_time > o["placed"] + WITHIN:
        out.append({"key": o["order_id"], "value": {"order_id": o["order_id"], "total": float(o["total"]), "amount": None,
                                                    "paid": False, "late_by": None}})
write_expected("order-payments", out)
