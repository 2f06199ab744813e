#!/usr/bin/env python3
"""all_or_nothing: per query, a record either updates every aggregate of every window it falls
in, or (one of them failing: an int `sum` outside 64 bits) none, and goes to <app>-dlq once per
query that refused it with its source topic/partition/offset. `avg` adds floats (no overflow).
Hopping windows are 10 s advancing 5 s from the epoch, none late here. `exploded` writes one
row per item d of `ds` with 100 / d > 0; an item 0 is a division by zero, and then none of the
record's rows is written; `exploded_sums` adds a record's items to its key's count and
sum all, or (one overflowing) none."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name
LO, HI = -(1 << 63), (1 << 63) - 1
SIZE, ADVANCE = 10_000, 5_000

recs = [r["value"] for r in read_input("nums")]
dlq = []


def dead(offset, rec):
    dlq.append({"key": rec["k"], "value": rec, "headers": {
        "streamc.source.topic": "nums", "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})


def fits(x):
    return LO <= x <= HI


# The three unwindowed queries: count, sum, max, and the float average, per key.
for topic, names in [("count-then-sum", ["c", "s", "mx"]), ("sum-then-count", ["s", "c", "mx"]),
                     ("user-aggregate-first", ["a", "c", "s"])]:
    groups = {}
    for offset, r in enumerate(recs):
        g = groups.get(r["k"], {"c": 0, "s": None, "mx": None, "total": 0.0})
        s = r["n"] if g["s"] is None else g["s"] + r["n"]
        if not fits(s):
            dead(offset, r)
            continue
        total = g["total"] + float(r["n"])
        groups[r["k"]] = {"c": g["c"] + 1, "s": s, "mx": r["n"] if g["mx"] is None else max(g["mx"], r["n"]),
                          "total": total, "a": total / (g["c"] + 1)}
    write_expected(topic, [{"key": k, "value": {"k": k, **{n: g[n] for n in names}}} for k, g in groups.items()])

# Hopping windows: every window the record falls in is checked before any is updated.
windows = {}
for offset, r in enumerate(recs):
    starts = [s for s in range(0, r["ts"] + 1, ADVANCE) if s <= r["ts"] < s + SIZE]
    if not all(fits(windows.get((r["k"], s), {"s": 0})["s"] + r["n"]) for s in starts):
        dead(offset, r)
        continue
    for s in starts:
        w = windows.setdefault((r["k"], s), {"c": 0, "s": 0})
        w["c"] += 1
        w["s"] += r["n"]
write_expected("hopping", [
    {"key": k, "value": {"window_start": s, "window_end": s + SIZE, "k": k, **w}} for (k, s), w in windows.items()
])

# Explode, then a filter that divides: the record's rows all, or none.
rows = []
for offset, r in enumerate(recs):
    ds = r["ds"] or []
    if 0 in ds:
        dead(offset, r)
        continue
    rows += [{"key": r["k"], "value": {"k": r["k"], "d": d}} for d in ds if 100 // d > 0]
write_expected("exploded", rows)

# Explode, then an aggregate by the key in the same task: the record's rows all, or none.
sums = {}
for offset, r in enumerate(recs):
    g = dict(sums.get(r["k"], {"c": 0, "s": None}))
    ok = True
    for x in r["ds"] or []:
        s = x if g["s"] is None else g["s"] + x
        if not fits(s):
            ok = False
            break
        g = {"c": g["c"] + 1, "s": s}
    if not ok:
        dead(offset, r)
    elif r["ds"]:
        sums[r["k"]] = g
write_expected("exploded-sums", [{"key": k, "value": {"k": k, **g}} for k, g in sums.items()])
write_expected(f"{APP}-dlq", dlq)
