#!/usr/bin/env python3
"""table_group_by_input: records in file order (one partition). A record without a key, or whose
value is not a JSON object of the declared types, goes to <app>-dlq as it came in, with its
source topic, partition (0) and offset, and changes nothing. Otherwise the key's old row (if any)
leaves its group; a null value deletes the key; a row whose region is null goes to <app>-dlq
too and leaves the key without a row; else the row joins its region's group. The final table
per region: count and sum of balances of the rows it holds, none for a region left empty."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name


def decodes(v):
    return isinstance(v, dict) and isinstance(v.get("balance"), int) and (
        v.get("region") is None or isinstance(v["region"], str))


rows, dlq = {}, []
for offset, rec in enumerate(read_input("accounts")):
    k, v = rec["key"], rec["value"]
    bad = {"key": k, "value": v, "headers": {"streamc.source.topic": "accounts",
           "streamc.source.partition": "0", "streamc.source.offset": str(offset)}}
    if k is None or (v is not None and not decodes(v)):
        dlq.append(bad)
        continue
    rows.pop(k, None)
    if v is None:
        continue
    if v["region"] is None:
        dlq.append(bad)
        continue
    rows[k] = v

groups = {}
for r in rows.values():
    g = groups.setdefault(r["region"], {"region": r["region"], "accounts": 0, "total": 0})
    g["accounts"] += 1
    g["total"] += r["balance"]
write_expected("region-stats", [{"key": k, "value": g} for k, g in groups.items()])
write_expected(f"{APP}-dlq", dlq)
