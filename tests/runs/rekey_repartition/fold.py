#!/usr/bin/env python3
"""rekey_repartition: per user, count/sum/max/min of ms over all views (the final table);
and every view re-keyed by its region."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


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
