#!/usr/bin/env python3
"""stdlib_aggregates: per station and 1 m tumbling window (nothing late, all closed at the end):
count; avg = sum / n; variance and stddev by the stdlib's documented method (Welford's update,
in arrival order), null below two values; avg of clamp(temp, -10, 40); count_if(ok) and
count_if(temp > 30); count and max of pct_change(open, close) = (close - open) / open * 100,
null when open is 0 (count and max skip nulls; max of none is null)."""
import sys
import math
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 60_000

def clamp(x, lo, hi):
    return lo if x < lo else (hi if x > hi else x)

def pct_change(old, new):
    return None if old == 0.0 else (new - old) / old * 100.0

def welford(xs):
    n, mean, m2 = 0, 0.0, 0.0
    for x in xs:
        d = x - mean
        n += 1
        mean = mean + d / n
        m2 = m2 + d * (x - mean)
    return None if n < 2 else m2 / (n - 1)

def mean(xs):
    s = 0.0
    for x in xs:
        s += x
    return s / len(xs)

groups = {}
for rec in read_input("readings"):
    v = rec["value"]
    groups.setdefault((v["station"], v["at"] - v["at"] % SIZE), []).append(v)
rows = []
for (st, s), vs in groups.items():
    temps = [float(v["temp"]) for v in vs]
    changes = [c for c in (pct_change(float(v["open"]), float(v["close"])) for v in vs) if c is not None]
    var = welford(temps)
    rows.append({"key": st, "value": {
        "window_start": s, "window_end": s + SIZE, "station": st,
        "n": len(vs), "mean": mean(temps), "var": var, "sd": math.sqrt(var) if var is not None else None,
        "capped_mean": mean([clamp(x, -10.0, 40.0) for x in temps]),
        "ok_count": sum(1 for v in vs if v["ok"]), "hot": sum(1 for x in temps if x > 30.0),
        "changes": len(changes), "max_change": max(changes) if changes else None}})
write_expected("station-stats", rows)
