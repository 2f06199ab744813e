#!/usr/bin/env python3
"""tenant_header_join: merge stock rows and orders by time (the table first on ties); the table
is keyed by (tenant, sku); an order (tenant from its x-tenant header) joins its own tenant's
current row for its sku, if any. Results keyed [tenant, sku] with a trailing `tenant` field and
the streamc.tenant header. An order without the header is a dead letter (as it came in)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
APP = HERE.name

stock, orders = read_input("stock"), read_input("orders")
events = [(r["timestamp"], 0, i, r) for i, r in enumerate(stock)] + [(r["value"]["at"], 1, i, r) for i, r in enumerate(orders)]
table, out, dlq = {}, [], []
for _, side, i, r in sorted(events, key=lambda e: e[:3]):
    if side == 0:
        table[(r["value"]["tenant"], r["key"])] = r["value"]
        continue
    tenant = r.get("headers", {}).get("x-tenant")
    v = r["value"]
    if tenant is None:
        dlq.append({"key": r["key"], "value": v, "headers": {
            "streamc.source.topic": "orders", "streamc.source.partition": "0", "streamc.source.offset": str(i)}})
        continue
    row = table.get((tenant, v["sku"]))
    if row is None:
        continue
    on_hand = row["on_hand"]
    out.append({"key": [tenant, v["sku"]], "value": {
        "order_id": v["order_id"], "sku": v["sku"], "qty": v["qty"], "on_hand": on_hand,
        "missing": v["qty"] - on_hand if v["qty"] > on_hand else 0, "tenant": tenant},
        "headers": {"streamc.tenant": tenant}})
write_expected("shortfalls", out)
write_expected(f"{APP}-dlq", dlq)
