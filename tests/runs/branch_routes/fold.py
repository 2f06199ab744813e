#!/usr/bin/env python3
"""Branches folded plainly, from docs/language.md: each order with a positive amount, as
`select` makes it (with eu = region is fr, de or es), goes to the first branch whose condition
holds: big-orders (amount >= 1000), else eu-orders (eu), else other-orders when region != "zz",
else nowhere.

per_region: per region and epoch-aligned minute [start, start + 60 s), the count and sum of the
amounts; windows with at least 4 orders go to busy-regions, the others to quiet-regions. The
disorder (under 5 s) is within the grace (10 s): nothing is late, and every window is closed
at the end."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

orders = [r["value"] for r in read_input("orders")]
out = {"big-orders": [], "eu-orders": [], "other-orders": []}
for o in orders:
    if not o["amount"] > 0:
        continue
    v = dict(o, eu=o["region"] in ("fr", "de", "es"))
    rec = {"key": o["id"], "value": v}
    if v["amount"] >= 1000:
        out["big-orders"].append(rec)
    elif v["eu"]:
        out["eu-orders"].append(rec)
    elif v["region"] != "zz":
        out["other-orders"].append(rec)
for topic, recs in out.items():
    write_expected(topic, recs)

windows = {}
for o in orders:
    start = o["at"] - o["at"] % 60_000
    w = windows.setdefault((o["region"], start), [0, 0.0])
    w[0] += 1
    w[1] += o["amount"]
busy, quiet = [], []
for (region, start), (n, total) in windows.items():
    rec = {"key": region, "value": {"window_start": start, "window_end": start + 60_000, "region": region, "n": n, "total": total}}
    (busy if n >= 4 else quiet).append(rec)
write_expected("busy-regions", busy)
write_expected("quiet-regions", quiet)
