#!/usr/bin/env python3
"""multi_tenant: each tenant's events folded on their own: per (tenant, user) and 1 h tumbling
window of `at`, the purchases with amount > 0: count, sum, max. Keys are [tenant, user]; the
value ends with `tenant`; the streamc.tenant header is the tenant. A record whose tenant is
missing or null is a dead letter. The input is in time order: nothing is late."""
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
H = 3_600_000
APP = HERE.name

windows = {}
dlq = []
for offset, rec in enumerate(read_input("events")):
    v = rec["value"]
    if v.get("tenant") is None:
        dlq.append({"key": rec["key"], "value": v, "headers": {
            "streamc.error": "the record has no tenant: its tenant field `tenant` is missing or null",
            "streamc.source.topic": "events", "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})
        continue
    amount = float(v["amount"])
    if not amount > 0:
        continue
    at = round(datetime.fromisoformat(v["at"].replace("Z", "+00:00")).timestamp() * 1000)
    a = windows.setdefault((v["tenant"], v["user"], at - at % H), [0, 0.0, None])
    a[0] += 1
    a[1] += amount
    a[2] = amount if a[2] is None else max(a[2], amount)
write_expected("spend-per-user", [
    {"key": [tenant, user], "value": {"window_start": s, "window_end": s + H, "user": user, "purchases": n,
                                      "total": total, "largest": big, "tenant": tenant},
     "headers": {"streamc.tenant": tenant}}
    for (tenant, user, s), (n, total, big) in windows.items()])
write_expected(f"{APP}-dlq", dlq)
