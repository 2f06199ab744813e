#!/usr/bin/env python3
"""foreign_key_join: the final tables after every record (a null value deletes its key). An
order's result joins it with the customer its `customer` field names, as the tables are in the
end: enriched has a row for each order whose customer exists and is not "blocked"; enriched_left
has one for every order, the name null when its customer is missing or null. (The results in
between depend on when each task runs, as in Kafka Streams: only the final tables are
compared.)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

tables = {}
for topic in ("orders", "customers"):
    t = tables[topic] = {}
    for rec in read_input(topic):
        if rec["value"] is None:
            t.pop(rec["key"], None)
        else:
            t[rec["key"]] = rec["value"]

enriched, left = [], []
for k, o in tables["orders"].items():
    c = tables["customers"].get(o["customer"]) if o["customer"] is not None else None
    if c is not None and c["tier"] != "blocked":
        enriched.append({"key": k, "value": {"id": k, "amount": o["amount"], "name": c["name"], "tier": c["tier"]}})
    left.append({"key": k, "value": {"id": k, "customer": o["customer"], "name": c["name"] if c else None}})
write_expected("enriched", enriched)
write_expected("enriched-left", left)
