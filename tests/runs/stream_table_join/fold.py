#!/usr/bin/env python3
"""stream_table_join: merge the two inputs, each in its own order, taking the earlier head next
(the table first on ties), keeping the table's current value per key (a null value deletes
it); a trade whose ticker has a limit and whose price is above it is an alert (the reference of
tests/embedded.rs alerts_example_joins_trades_with_the_limits_table_in_timestamp_order)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

trades, limits = read_input("stocks"), read_input("limits")
table = {}
out = []
li = ti = 0
while ti < len(trades):
    if li < len(limits) and limits[li]["timestamp"] <= trades[ti]["value"]["ts"]:
        rec = limits[li]
        if rec["value"] is None:
            table.pop(rec["key"], None)
        else:
            table[rec["key"]] = float(rec["value"]["max_price"])
        li += 1
        continue
    v = trades[ti]["value"]
    limit = table.get(v["ticker"])
    if limit is not None and float(v["price"]) > limit:
        out.append({"key": v["ticker"], "value": {"ticker": v["ticker"], "price": float(v["price"]), "limit": limit, "at": v["ts"]}})
    ti += 1
write_expected("price-alerts", out)
