#!/usr/bin/env python3
"""foreign_key_join_input: records in file order (one partition per topic). A record of either
table that does not decode (not JSON, a field of a wrong type) or has no key goes to <app>-dlq
once per query reading it, as it came in, with its source topic, partition and offset; so does
an order whose foreign key cannot be evaluated (by_code: 100 / qty with qty 0), in that query
only. The final tables: enriched is the left join of each order with the customer its
`customer` names (name null without one); by_code the inner join with the customer "c" +
100 / qty (integer division) names."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name


def as_consumed(v):
    try:
        return json.loads(v) if isinstance(v, str) else v
    except ValueError:
        return v


def dead(topic, offset, rec):
    return {"key": rec["key"], "value": as_consumed(rec["value"]), "headers": {
        "streamc.source.topic": topic, "streamc.source.partition": "0", "streamc.source.offset": str(offset)}}


def order_ok(v):
    return isinstance(v, dict) and isinstance(v.get("id"), str) and isinstance(v.get("qty"), int) and (
        v.get("customer") is None or isinstance(v["customer"], str))


dlq = []
customers = {}
for off, rec in enumerate(read_input("customers")):
    v = rec["value"]
    if rec["key"] is None or (v is not None and not (isinstance(v, dict) and isinstance(v.get("name"), str))):
        dlq += [dead("customers", off, rec)] * 2
    elif v is None:
        customers.pop(rec["key"], None)
    else:
        customers[rec["key"]] = v
orders, by_code_orders = {}, {}
for off, rec in enumerate(read_input("orders")):
    v = rec["value"]
    if rec["key"] is None or (v is not None and not order_ok(v)):
        dlq += [dead("orders", off, rec)] * 2
        continue
    if v is None:
        orders.pop(rec["key"], None)
        by_code_orders.pop(rec["key"], None)
        continue
    orders[rec["key"]] = v
    if v["qty"] == 0:
        dlq.append(dead("orders", off, rec))  # by_code: division by zero; the key keeps its old row
    else:
        by_code_orders[rec["key"]] = v

enriched = [{"key": k, "value": {"id": k, "qty": o["qty"], "name": (customers.get(o["customer"]) or {}).get("name")}}
            for k, o in orders.items()]
by_code = []
for k, o in by_code_orders.items():
    c = customers.get("c" + str(100 // o["qty"]))
    if c is not None:
        by_code.append({"key": k, "value": {"id": k, "name": c["name"]}})
write_expected("enriched", enriched)
write_expected("by-code", by_code)
write_expected(f"{APP}-dlq", dlq)
