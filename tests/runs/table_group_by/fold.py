#!/usr/bin/env python3
"""table_group_by: the table's final rows (each key's last record; a null value deletes), grouped:
a group's final result is the aggregate of the rows it holds at the end, since taking a row back
is the exact inverse of adding it (int sums; float sums of multiples of 0.5). A group that held
rows and holds none at the end stays, with count 0, sums 0 and mean 0.0 (Kafka Streams'
KGroupedTable and ksqlDB keep it). by_tier keeps only rows with balance >= 0."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

rows = {}
# Every group a row ever joined.
seen_regions, seen_tiers = set(), set()
for rec in read_input("accounts"):
    if rec["value"] is None:
        rows.pop(rec["key"], None)
    else:
        v = rec["value"]
        rows[rec["key"]] = v
        seen_regions.add(v["region"])
        if v["balance"] >= 0:
            seen_tiers.add((v["tier"], v["region"]))

regions = {r: [] for r in seen_regions}
for r in rows.values():
    regions.setdefault(r["region"], []).append(r)
out = []
for region, rs in regions.items():
    scores = sum(r["score"] for r in rs)
    value = {
        "region": region,
        "accounts": len(rs),
        "total": sum(r["balance"] for r in rs),
        "mean_score": scores / len(rs) if rs else 0.0,
    }
    out.append({"key": region, "value": value})
write_expected("region-stats", out)

tiers = {t: [] for t in seen_tiers}
for r in rows.values():
    if r["balance"] >= 0:
        tiers.setdefault((r["tier"], r["region"]), []).append(r)
out = []
for (tier, region), rs in tiers.items():
    value = {
        "tier": tier,
        "region": region,
        "accounts": len(rs),
        "total": sum(r["balance"] for r in rs),
        "rich": sum(1 for r in rs if r["balance"] > 100),
    }
    out.append({"key": [tier, region], "value": value})
write_expected("tier-stats", out)
