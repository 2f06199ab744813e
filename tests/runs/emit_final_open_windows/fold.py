#!/usr/bin/env python3
"""emit_final_open_windows: tumbling 1 m windows, grace 30 s, emit final, without
--close-windows-at-end: only the windows that closed during the run (end + grace <= the final
stream time, the largest event time seen) are emitted; the others stay open and are not."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE, GRACE = 60_000, 30_000
windows = {}
stream_time = None
for rec in read_input("purchases"):
    v = rec["value"]
    stream_time = v["at"] if stream_time is None else max(stream_time, v["at"])
    start = v["at"] - v["at"] % SIZE
    assert start + SIZE + GRACE > stream_time, "nothing is late in this input"
    acc = windows.setdefault((v["user"], start), [0, 0.0, None])
    acc[0] += 1
    acc[1] += float(v["amount"])
    acc[2] = float(v["amount"]) if acc[2] is None else max(acc[2], float(v["amount"]))
rows = [
    {"key": u, "value": {"window_start": s, "window_end": s + SIZE, "user": u, "n": n, "spent": spent, "biggest": big}}
    for (u, s), (n, spent, big) in windows.items()
    if s + SIZE + GRACE <= stream_time
]
assert 0 < len(rows) < len(windows)
write_expected("spend-per-minute", rows)
