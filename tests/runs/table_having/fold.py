#!/usr/bin/env python3
"""table_having: every result as sent with a commit after every record.

pairs: per name, the count after each vote; the row {name, c} when c == 2, a tombstone when the
count passes 2 (the last result sent matched), nothing otherwise.
regions / busy-regions: the accounts table's rows grouped by region. A new row for a key in the
same region as its old row changes that region once; in another region (or a deletion) it
changes the old region (the row taken out) and then the new one (the row added). Each change
sends the region's result: regions always (n, total, mean; a region left without rows stays
with n = 0, total = 0, mean = 0.0); busy-regions only where n >= 2 and total > 100, else a
tombstone if the region's last result sent passed, else nothing. No dead letters."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent

pairs, counts, sent = [], {}, set()
for rec in read_input("votes"):
    name = rec["value"]["name"]
    counts[name] = counts.get(name, 0) + 1
    if counts[name] == 2:
        pairs.append({"key": name, "value": {"name": name, "c": 2}})
        sent.add(name)
    elif name in sent:
        pairs.append({"key": name, "value": None})
        sent.discard(name)
write_expected("pairs", pairs)

rows, groups, busy_sent = {}, {}, set()
regions, busy = [], []


def changed(region):
    bal = groups[region]
    n, total = len(bal), sum(bal)
    regions.append({"key": region, "value": {"region": region, "n": n, "total": total,
                                             "mean": total / n if n else 0.0}})
    if n >= 2 and total > 100:
        busy.append({"key": region, "value": {"region": region, "n": n, "total": total,
                                              "label": f"{region}/{n}"}})
        busy_sent.add(region)
    elif region in busy_sent:
        busy.append({"key": region, "value": None})
        busy_sent.discard(region)


for rec in read_input("accounts"):
    key, new = rec["key"], rec["value"]
    old = rows.pop(key, None)
    if new is not None:
        rows[key] = new
    if old is not None and new is not None and old["region"] == new["region"]:
        groups[old["region"]].remove(old["balance"])
        groups[old["region"]].append(new["balance"])
        changed(new["region"])
        continue
    if old is not None:
        groups[old["region"]].remove(old["balance"])
        changed(old["region"])
    if new is not None:
        groups.setdefault(new["region"], []).append(new["balance"])
        changed(new["region"])
write_expected("regions", regions)
write_expected("busy-regions", busy)
write_expected(f"{HERE.name}-dlq", [])
