#!/usr/bin/env python3
"""table_group_by_input: records in file order (one partition). A record without a key, or whose
value is not a JSON object of the declared types, goes to <app>-dlq as it came in, with its
source topic, partition (0) and offset, and changes nothing; so does a row whose region (the group
key) is null. Otherwise the key's old row (if any) leaves its group; a null value deletes the
key; else the row joins its region's group, unless that overflows the group's sum: then the
repartition record that carried it (keyed by region) goes to <app>-dlq and the row into no
aggregate (all or nothing: the count it already went into takes it back); it is still the key's
row, and taking it back later takes nothing. A row replaced by one of the same region is one
repartition record (the new row, carrying the old), else the old row taken back and the new row
are two; the records carry the key `id` in their value. The final table per region: count and
sum of balances of the rows it holds; a region left empty stays with count 0 and sum 0."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name


def decodes(v):
    return isinstance(v, dict) and isinstance(v.get("balance"), int) and (
        v.get("region") is None or isinstance(v["region"], str))


I64 = 2**63

REPARTITION = f"{APP}-by_region-group-by-region-repartition"
rows, groups, dlq = {}, {}, []
# Records written to the repartition topic so far: a key's old row taken back, then its new row.
written = 0
for offset, rec in enumerate(read_input("accounts")):
    k, v = rec["key"], rec["value"]
    bad = {"key": k, "value": v, "headers": {"streamc.source.topic": "accounts",
           "streamc.source.partition": "0", "streamc.source.offset": str(offset)}}
    if k is None or (v is not None and not decodes(v)) or (v is not None and v["region"] is None):
        dlq.append(bad)
        continue
    old = rows.pop(k, None)
    # An update within the region travels as one record.
    in_place = old is not None and v is not None and old["region"] == v["region"]
    if old is not None and not in_place:
        written += 1
    if old is not None and not old.get("refused"):
        g = groups[old["region"]]
        g["accounts"] -= 1
        g["total"] -= old["balance"]
    if v is None:
        continue
    at = written
    written += 1
    rows[k] = v
    g = groups.get(v["region"], {"region": v["region"], "accounts": 0, "total": 0})
    if not -I64 <= g["total"] + v["balance"] < I64:
        # The sum overflows in the aggregate's task: the repartition record is the dead letter
        # (keyed by the group), the row goes into no aggregate, and taking it back later takes
        # nothing.
        dlq.append({"key": v["region"], "value": dict(v, id=k), "headers": {"streamc.source.topic": REPARTITION,
                    "streamc.source.partition": "0", "streamc.source.offset": str(at)}})
        rows[k] = dict(v, refused=True)
        continue
    g["accounts"] += 1
    g["total"] += v["balance"]
    groups[v["region"]] = g

write_expected("region-stats", [{"key": k, "value": g} for k, g in groups.items()])
write_expected(f"{APP}-dlq", dlq)
