#!/usr/bin/env python3
"""stream_join_outer: Kafka Streams' full outer stream-stream join (within 2 s, grace G = 1 s:
an order at t matches payments in [t - B, t + A], B = A = 2 s) simulated record by record, as
../stream_join_lateness/fold.py simulates the left join. A side's own bound is A for an order, B
for a payment; each side keeps its records for B + A + G of its own time. An unmatched record of
either side is owed a row with the other side null: at once if its time + its bound is before
stream time T when it arrives; else at a pass once T is past its time + its bound + G, unless a
record of the other side matches it first. A pass happens when a record at T arrives and Kafka
Streams' gate allows it (min_t + the arriving side's bound + G < T, see
../stream_join_lateness/fold.py); it looks at the pending records of both sides in time order, a
payment first on ties, and stops once both sides have one whose window is open. A pending record
its side no longer keeps (dropped, or too old to keep when it arrived) stays owed, matching
nothing, until a pass - Kafka Streams keeps it in the outer join's own store. Nothing is late:
every record either matches or gets its null row."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import foldkit  # noqa: E402
from foldkit import read_input, write_expected  # noqa: E402

# An order at t matches payments in [t - B, t + A] (`within (B, A)`; here `within 2s`);
# ../stream_join_asymmetric/fold.py runs this fold with its own B and A.
B = globals().get("B", 2_000)
A = globals().get("A", 2_000)
G = 1_000
R = B + A + G
# A side's own bound: how far after a record of that side its window reaches.
BOUND = {"o": A, "p": B}
queues = {"o": list(read_input("orders")), "p": list(read_input("payments"))}
NEG = -(1 << 62)
T = NEG
min_t = None
side_t = {"o": NEG, "p": NEG}
kept = {"o": [], "p": []}  # [t, id, value, pending]
stale = {"o": [], "p": []}  # dropped by their side but still pending (matching nothing)
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
    if t == T and (min_t is None or min_t + BOUND[side] + G < T):
        min_t = None
        pend = sorted(((e[0], s == "o", s, e) for s in ("o", "p") for e in kept[s] + stale[s] if e[3]), key=lambda x: x[:2])
        open_sides = set()
        for t0, _, s, e in pend:
            min_t = t0
            if len(open_sides) == 2:
                break
            if t0 + BOUND[s] + G >= T:
                open_sides.add(s)
                continue
            e[3] = False
            out.append(null_row(s, e[2]))
            stats["null_closed"] += 1
    for s in ("o", "p"):
        stale[s] = [e for e in stale[s] if e[3]]
        for e in [e for e in kept[s] if e[0] + R <= side_t[s]]:
            kept[s].remove(e)
            if e[3]:
                stale[s].append(e)
    # The other side's records whose bounds hold t: an order at e[0] takes payments up to A
    # after it and B before it.
    if side == "o":
        matches = [e for e in kept[other] if e[1] == v["id"] and t - B <= e[0] <= t + A]
    else:
        matches = [e for e in kept[other] if e[1] == v["id"] and t - A <= e[0] <= t + B]
    for e in matches:
        out.append(row(v, e[2]) if side == "o" else row(e[2], v))
        e[3] = False
        stats["joined"] += 1
    stored = t + R > side_t[side]
    now = not matches and t + BOUND[side] < T
    if now:
        out.append(null_row(side, v))
        stats["null_now"] += 1
    owed = not matches and not now
    if stored:
        kept[side].append([t, v["id"], v, owed])
    elif owed:
        stale[side].append([t, v["id"], v, True])
    if owed:
        min_t = t if min_t is None else min(min_t, t)
assert all(n > 0 for n in stats.values()), stats
write_expected("settled", out)
write_expected(f"{foldkit.CASE.name}-late", [])
