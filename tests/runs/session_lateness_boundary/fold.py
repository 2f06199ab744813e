#!/usr/bin/env python3
"""session_lateness_boundary: sessionize per user (gap 30 s), a record being late when it would
start or extend no open session and its own session [t, t] closes before stream time, where a
session is closed once stream time passes end + gap + grace (Kafka Streams' rule: a session
whose end + gap + grace equals stream time is still open). All sessions closed at the end."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
GAP, GRACE = 30_000, 60_000
stream_time = None
sessions = {}  # user -> list of [start, end, n]
late = []
for rec in read_input("visits"):
    v = rec["value"]
    t = v["at"]
    stream_time = t if stream_time is None else max(stream_time, t)
    is_open = lambda s: stream_time <= s[1] + GAP + GRACE
    mine = sessions.setdefault(v["user"], [])
    near = [s for s in mine if is_open(s) and s[0] - GAP <= t <= s[1] + GAP]
    start = min([t] + [s[0] for s in near])
    end = max([t] + [s[1] for s in near])
    if not stream_time <= end + GAP + GRACE:
        late.append({"key": rec["key"], "value": v, "headers": {"streamc.source.topic": "visits"}})
        continue
    n = 1 + sum(s[2] for s in near)
    mine[:] = [s for s in mine if s not in near] + [[start, end, n]]
assert [r["value"]["user"] for r in late] == ["b"], late
out = [{"key": u, "value": {"window_start": s, "window_end": e, "user": u, "n": n}}
       for u, ss in sessions.items() for s, e, n in ss]
write_expected("sessions", out)
write_expected(f"{HERE.name}-late", late)
