#!/usr/bin/env python3
"""far_future_record: per host and 1 m tumbling window (grace 10 s): count and sum of ms, over
records whose window is open (stream time, the largest event time seen by the task, < end +
grace); records for closed windows are late: written to <app>-late as they came in. The slow
pings (ms > 100) are all emitted, whatever their time."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZE, GRACE = 60_000, 10_000
APP = HERE.name

windows, slow, late = {}, [], []
stream_time = None
for rec in read_input("pings"):
    v = rec["value"]
    t = v["at"]
    stream_time = t if stream_time is None else max(stream_time, t)
    if v["ms"] > 100:
        slow.append({"key": rec["key"], "value": {"host": v["host"], "ms": v["ms"], "at": t}})
    start = t - t % SIZE
    if start + SIZE + GRACE <= stream_time:
        late.append({"key": rec["key"], "value": v, "headers": {"streamc.source.topic": "pings"}})
        continue
    a = windows.setdefault((v["host"], start), [0, 0])
    a[0] += 1
    a[1] += v["ms"]
assert len(late) == 19
write_expected("pings-per-minute", [
    {"key": h, "value": {"window_start": s, "window_end": s + SIZE, "host": h, "n": n, "total_ms": tot}}
    for (h, s), (n, tot) in windows.items()])
write_expected("slow-pings", slow)
write_expected(f"{APP}-late", late)
