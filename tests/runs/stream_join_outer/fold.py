#!/usr/bin/env python3
"""stream_join_outer: Kafka Streams' full outer stream-stream join (within W = 2 s, grace
G = 1 s) simulated record by record, as ../stream_join_lateness/fold.py simulates the left join,
with both sides symmetric: an unmatched record of either side is owed a row with the other side
null - at once if its time + W is before stream time T when it arrives (or it is too old for its
side to keep), else once T passes its time + W + G (checked when a record at T arrives, or when
its side drops it) unless a record of the other side matches it first. Nothing is late: every
record either matches or gets its null row."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
W, G = 2_000, 1_000
R = 2 * W + G
queues = {"o": list(read_input("orders")), "p": list(read_input("payments"))}
NEG = -(1 << 62)
T = NEG
side_t = {"o": NEG, "p": NEG}
kept = {"o": [], "p": []}  # [t, id, value, pending]
out = []
stats = {"joined": 0, "null_now": 0, "null_closed": 0, "payment_only": 0}


def row(o, p):
    return {"key": (o or p)["id"], "value": {"id": (o or p)["id"], "amount": o["amount"] if o else None,
                                             "paid": p["paid"] if p else None,
                                             "order_at": o["at"] if o else None, "paid_at": p["at"] if p else None}}


def null_row(side, v):
    if side == "p":
        stats["payment_only"] += 1
    return row(v, None) if side == "o" else row(None, v)


while queues["o"] or queues["p"]:
    o, p = queues["o"], queues["p"]
    side = "p" if p and (not o or p[0]["value"]["at"] <= o[0]["value"]["at"]) else "o"
    other = "o" if side == "p" else "p"
    v = queues[side].pop(0)["value"]
    t = v["at"]
    T = max(T, t)
    side_t[side] = max(side_t[side], t)
    if t == T:
        for s in ("o", "p"):
            for e in kept[s]:
                if e[3] and e[0] + W + G < T:
                    e[3] = False
                    out.append(null_row(s, e[2]))
                    stats["null_closed"] += 1
    for s in ("o", "p"):
        for e in [e for e in kept[s] if e[0] + R <= side_t[s]]:
            kept[s].remove(e)
            if e[3]:
                out.append(null_row(s, e[2]))
    matches = [e for e in kept[other] if e[1] == v["id"] and abs(e[0] - t) <= W]
    for e in matches:
        out.append(row(v, e[2]) if side == "o" else row(e[2], v))
        e[3] = False
        stats["joined"] += 1
    stored = t + R > side_t[side]
    now = not matches and (t + W < T or not stored)
    if now:
        out.append(null_row(side, v))
        stats["null_now"] += 1
    if stored:
        kept[side].append([t, v["id"], v, not matches and not now])
assert all(n > 0 for n in stats.values()), stats
write_expected("settled", out)
write_expected(f"{HERE.name}-late", [])
