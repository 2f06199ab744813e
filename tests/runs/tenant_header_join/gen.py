#!/usr/bin/env python3
"""Stock rows of two tenants for the same skus and orders (keyed by sku) carrying their tenant in the
x-tenant header (record timestamp = event time); one order without the header."""
import json
from pathlib import Path

B = 1_700_000_000_000
S = 1_000
stock = [  # (sku, tenant, on_hand, time)
    ("W1", "acme", 5, 0), ("W1", "globex", 1, 0), ("W2", "acme", 10, 0), ("W3", "globex", 4, 0),
    ("W1", "acme", 0, 5 * S), ("W2", "globex", 7, 6 * S),
]
orders = [  # (order, tenant or None, sku, qty, time)
    ("o1", "acme", "W1", 3, 1 * S), ("o2", "globex", "W1", 3, 2 * S), ("o3", "acme", "W3", 1, 3 * S),
    ("o4", "globex", "W2", 2, 4 * S), ("o5", "acme", "W1", 2, 5 * S), ("o6", "globex", "W2", 9, 7 * S),
    ("o7", None, "W1", 1, 8 * S), ("o8", "acme", "W2", 12, 9 * S),
]
here = Path(__file__).resolve().parent
(here / "in" / "stock.jsonl").write_text("".join(
    json.dumps({"key": sku, "value": {"tenant": ten, "on_hand": n}, "timestamp": B + t}) + "\n" for sku, ten, n, t in stock))
lines = []
for o, ten, sku, qty, t in orders:
    rec = {"key": sku, "value": {"order_id": o, "sku": sku, "qty": qty, "at": B + t}, "timestamp": B + t}
    if ten is not None:
        rec["headers"] = {"x-tenant": ten}
    lines.append(rec)
(here / "in" / "orders.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
