#!/usr/bin/env python3
"""Orders (record timestamp = event time) and customer rows changing between them."""
import json
from pathlib import Path

B = 1_700_000_000_000
S = 1_000
customers = [
    ("c1", {"name": "Ada", "tier": "gold"}, 0),
    ("c2", {"name": "Bo", "tier": "silver"}, 0),
    ("c3", {"name": "Cleo", "tier": "bronze"}, 5 * S),       # created after c3's first order
    ("c2", {"name": "Bo", "tier": "gold"}, 7 * S),           # upgraded
    ("c1", None, 9 * S),                                     # deleted
    ("c4", {"name": "Dan", "tier": "gold"}, 12 * S),         # same time as an order: the table first
]
orders = [
    ("o1", "c1", 10.5, 1 * S),
    ("o2", "c2", 20.25, 2 * S),
    ("o3", "c3", 30.0, 3 * S),
    ("o4", "c9", 40.75, 4 * S),     # never a customer
    ("o5", "c3", 5.5, 6 * S),
    ("o6", "c2", 60.0, 8 * S),
    ("o7", "c1", 70.125, 10 * S),
    ("o8", "c4", 80.0, 12 * S),
    ("o9", "c2", 90.5, 13 * S),
]
here = Path(__file__).resolve().parent
(here / "in" / "customers.jsonl").write_text("".join(json.dumps({"key": k, "value": v, "timestamp": B + t}) + "\n" for k, v, t in customers))
(here / "in" / "orders.jsonl").write_text("".join(
    json.dumps({"key": c, "value": {"order_id": o, "customer_id": c, "amount": a, "at": B + t}, "timestamp": B + t}) + "\n"
    for o, c, a, t in orders))
