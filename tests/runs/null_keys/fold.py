#!/usr/bin/env python3
"""null_keys: passthrough keeps each record's key (null included); per action: count and sum
over all records (the final table) and count per 1 m tumbling window of the record timestamp
(in order, nothing late; all closed at the end)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 60_000

out, per, minute = [], {}, {}
for rec in read_input("events"):
    v = rec["value"]
    if v["action"] != "noop":
        out.append({"key": rec["key"], "value": {"user": v["user"], "action": v["action"], "n2": v["n"] * 2}})
    a = per.setdefault(v["action"], [0, 0])
    a[0] += 1
    a[1] += v["n"]
    k = (v["action"], rec["timestamp"] - rec["timestamp"] % SIZE)
    minute[k] = minute.get(k, 0) + 1
write_expected("events-out", out)
write_expected("per-action", [{"key": k, "value": {"action": k, "events": n, "total": s}} for k, (n, s) in per.items()])
write_expected("per-action-minute", [{"key": k, "value": {"window_start": s, "window_end": s + SIZE, "action": k, "events": n}} for (k, s), n in minute.items()])
