#!/usr/bin/env python3
"""composite_group_key: per (region, lower(user)) and 1-minute tumbling window of the record
timestamp, count/max/min of ms, emitted once per window (all windows closed at the end). A
record whose window has closed (stream time >= window end, grace 0) is dropped. And per
(region, ms >= 1000, ms / 1000), a count and sum over every record."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 60_000

windows = {}
speed = {}
stream_time = None
for rec in read_input("views"):
    v, ts = rec["value"], rec["timestamp"]
    stream_time = ts if stream_time is None else max(stream_time, ts)
    start = ts - ts % SIZE
    if stream_time < start + SIZE:  # the window is still open
        k = (v["region"], v["user"].lower(), start)
        acc = windows.setdefault(k, [0, v["ms"], v["ms"]])
        acc[0] += 1
        acc[1] = max(acc[1], v["ms"])
        acc[2] = min(acc[2], v["ms"])
    sk = (v["region"], v["ms"] >= 1000, v["ms"] // 1000)
    acc = speed.setdefault(sk, [0, 0])
    acc[0] += 1
    acc[1] += v["ms"]

write_expected("views-per-region-user", [
    {"key": [r, u], "value": {"window_start": s, "window_end": s + SIZE, "region": r, "user": u,
                              "views": n, "longest": hi, "shortest": lo}}
    for (r, u, s), (n, hi, lo) in windows.items()
])
write_expected("views-per-region-speed", [
    {"key": [r, slow, secs], "value": {"region": r, "slow": slow, "secs": secs, "views": n, "total": total}}
    for (r, slow, secs), (n, total) in speed.items()
])
