#!/usr/bin/env python3
"""event_time_field: the event time is the `occurred` field (epoch ms, or RFC 3339 with an
offset); record timestamps are ignored. Stream time is the largest event time seen. Per
device, tumbling 1 h windows with a 10 m grace: a record whose window has closed (stream time
>= end + grace) is dropped. Per kind, hopping 2 h windows advancing 1 h, grace 0: a record is
dropped from each of its windows that has closed. Every window is emitted once (all closed at
the end)."""
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

H = 3_600_000

def ts_ms(x):
    if isinstance(x, int):
        return x
    return round(datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp() * 1000)

hourly, kinds = {}, {}
stream_time = None
dropped = 0
for rec in read_input("events"):
    v = rec["value"]
    t = ts_ms(v["occurred"])
    stream_time = t if stream_time is None else max(stream_time, t)
    start = t - t % H
    if start + H + 10 * 60_000 <= stream_time:
        dropped += 1
    else:
        acc = hourly.setdefault((v["device"], start), [0, 0, t, t])
        acc[0] += 1
        acc[1] += v["reading"]
        acc[2] = min(acc[2], t)
        acc[3] = max(acc[3], t)
    s = max(0, t - 2 * H + H) // H * H
    while s <= t:
        if t < s + 2 * H and s + 2 * H > stream_time:
            kinds[(v["kind"], s)] = kinds.get((v["kind"], s), 0) + 1
        s += H
assert dropped == 1

write_expected("hourly", [
    {"key": d, "value": {"window_start": s, "window_end": s + H, "device": d, "n": n, "total": total, "first": lo, "last": hi}}
    for (d, s), (n, total, lo, hi) in hourly.items()
])
write_expected("kinds", [
    {"key": k, "value": {"window_start": s, "window_end": s + 2 * H, "kind": k, "n": n}}
    for (k, s), n in kinds.items()
])
