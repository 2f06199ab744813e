#!/usr/bin/env python3
"""Orders and payments in minutes from a base; record timestamp = event time."""
import json
from pathlib import Path

M = 60_000
B = 1_700_000_000_000
orders = [("o1", 10.0, 0), ("o2", 20.5, 2), ("o3", 30.25, 4), ("o8", 80.0, 15), ("o4", 40.0, 20), ("o7", 70.75, 20), ("o5", 50.5, 25), ("o6", 60.0, 30)]
payments = [("o1", 10.0, 3), ("o2", 20.5, 9), ("o8", 79.5, 12), ("o4", 40.0, 24), ("o9", 99.0, 26)]
here = Path(__file__).resolve().parent
(here / "in" / "orders.jsonl").write_text("".join(
    json.dumps({"key": o, "value": {"order_id": o, "total": tot, "placed": B + m * M}, "timestamp": B + m * M}) + "\n" for o, tot, m in orders))
(here / "in" / "payments.jsonl").write_text("".join(
    json.dumps({"key": o, "value": {"order_id": o, "amount": a, "paid": B + m * M}, "timestamp": B + m * M}) + "\n" for o, a, m in payments))
