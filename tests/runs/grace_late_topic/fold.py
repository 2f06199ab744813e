#!/usr/bin/env python3
"""grace_late_topic: tumbling 10 s windows, grace 5 s, emit final. Stream time is the largest
event time seen; a window closes (and is emitted, once) when stream time >= end + grace; a
record whose window has closed is late: dropped and written to <app>-late as it came in, with
its source topic, partition and offset headers. Windows open at the end are not emitted."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZE, GRACE = 10_000, 5_000
APP = HERE.name

windows = {}  # (sensor, start) -> [n, total]
emitted = []
late = []
stream_time = None
for offset, rec in enumerate(read_input("readings")):
    v = rec["value"]
    t = v["at"]
    stream_time = t if stream_time is None else max(stream_time, t)
    start = t - t % SIZE
    if start + SIZE + GRACE <= stream_time:
        late.append({"key": rec["key"], "value": v, "headers": {
            "streamc.source.topic": "readings", "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})
    else:
        acc = windows.setdefault((v["sensor"], start), [0, 0])
        acc[0] += 1
        acc[1] += v["value"]
    for (sensor, s), (n, total) in list(windows.items()):
        if s + SIZE + GRACE <= stream_time:
            emitted.append({"key": sensor, "value": {"window_start": s, "window_end": s + SIZE, "sensor": sensor, "n": n, "total": total}})
            del windows[(sensor, s)]
write_expected("readings-10s", emitted)
write_expected(f"{APP}-late", late)
