#!/usr/bin/env python3
"""two_table_joins: merge the inputs in timestamp order (tables first on ties), keeping each
table's current value per key (a null value deletes it); per trade: the inner query needs both
a sector and a limit, the left query takes whatever each table has (null otherwise)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

events = []
for order, topic in enumerate(["sectors", "limits"]):
    for i, rec in enumerate(read_input(topic)):
        events.append((rec["timestamp"], 0, order, i, topic, rec))
for i, rec in enumerate(read_input("stocks")):
    events.append((rec["value"]["ts"], 1, 0, i, "stocks", rec))
events.sort(key=lambda e: e[:4])
tables = {"sectors": {}, "limits": {}}
inner, left = [], []
for _, _, _, _, topic, rec in events:
    if topic != "stocks":
        if rec["value"] is None:
            tables[topic].pop(rec["key"], None)
        else:
            tables[topic][rec["key"]] = rec["value"]
        continue
    v = rec["value"]
    s, l = tables["sectors"].get(v["ticker"]), tables["limits"].get(v["ticker"])
    row = {"ticker": v["ticker"], "price": v["price"], "sector": s and s["sector"],
           "limit": l and float(l["max_price"]), "at": v["ts"]}
    left.append({"key": v["ticker"], "value": row})
    if s is not None and l is not None:
        inner.append({"key": v["ticker"], "value": row})
assert inner and len(inner) < len(left)
write_expected("enriched", inner)
write_expected("enriched-left", left)
