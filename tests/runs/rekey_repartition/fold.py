#!/usr/bin/env python3
"""rekey_repartition: per user, count/sum/max/min of ms over all views (the final table);
and every view re-keyed by its region."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

views = read_input("views")
per_user = {}
by_region = []
for rec in views:
    v = rec["value"]
    acc = per_user.setdefault(v["user"], {"views": 0, "total_ms": 0, "longest": None, "shortest": None})
    acc["views"] += 1
    acc["total_ms"] += v["ms"]
    acc["longest"] = v["ms"] if acc["longest"] is None else max(acc["longest"], v["ms"])
    acc["shortest"] = v["ms"] if acc["shortest"] is None else min(acc["shortest"], v["ms"])
    by_region.append({"key": v["region"], "value": {"region": v["region"], "user": v["user"], "page": rec["key"], "ms": v["ms"]}})

write_expected("views-per-user", [{"key": u, "value": {"user": u, **a}} for u, a in per_user.items()])
write_expected("views-by-region", by_region)
