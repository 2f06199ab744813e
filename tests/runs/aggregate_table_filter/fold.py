#!/usr/bin/env python3
"""aggregate_table_filter: per item, count, min, max and count of non-null bidders over all
bids; the final table holds the items with min >= 10 and at least 2 bids, mapped by the select."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

groups = {}
for rec in read_input("bids"):
    groups.setdefault(rec["value"]["item"], []).append(rec["value"])
rows = []
for item, vs in groups.items():
    amounts = [v["amount"] for v in vs]
    bids, low, high = len(vs), min(amounts), max(amounts)
    if low >= 10 and bids >= 2:
        rows.append({"key": item, "value": {"item": item, "bids": bids, "named": sum(1 for v in vs if v.get("bidder") is not None),
                                            "spread": high - low, "label": f"{item}:{bids}"}})
write_expected("hot-items", rows)
