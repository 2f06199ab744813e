#!/usr/bin/env python3
"""stream_join_lateness: Kafka Streams' left stream-stream join (within W = 2 s, grace G = 1 s)
simulated record by record. The inputs are merged by event time (heads compared, a payment
first on ties), each in file order. Stream time T is the largest event time of either side;
each side's own time is the largest of its records. Per record at t:
1. T and the side's time move; if t == T and the gate min_t allows (min_t unset, or
   min_t + W + G < T), a pass: every pending order with time + W + G < T is passed on with a
   null payment, and min_t becomes the time of the last pending order looked at (Kafka Streams'
   minTime; an order made pending lowers it to its time);
2. each side drops the records older than its own time - (2W + G); a pending order dropped
   stays owed its null row (Kafka Streams keeps it in the outer join's own store), matching
   nothing, until a pass;
3. an order is kept if t + 2W + G > the orders' time; it joins every kept payment of its id at
   most W away; with none, it is passed on with a null payment at once if t + W < T, else it is
   pending (when not kept, as a dropped one is);
   a payment is kept likewise by the payments' time, joins every kept order of its id at most
   W away (those are no longer pending), and is late if it is not kept and joins nothing."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
W, G = 2_000, 1_000
R = 2 * W + G
orders = [(i, r) for i, r in enumerate(read_input("orders"))]
payments = [(i, r) for i, r in enumerate(read_input("payments"))]
NEG = -(1 << 62)
T = main_t = other_t = NEG
min_t = None
kept_orders = []    # [t, id, value, pending]
stale_orders = []   # dropped by their side but still pending: [t, id, value, pending]
kept_payments = []  # [t, id, value]
out, late = [], []
stats = {"joined": 0, "null_now": 0, "null_closed": 0, "late": 0, "late_joined": 0}


def row(o, p):
    return {"key": o["id"], "value": {"id": o["id"], "amount": o["amount"], "paid": p["paid"] if p else None,
                                      "order_at": o["at"], "paid_at": p["at"] if p else None}}


while orders or payments:
    take_payment = payments and (not orders or payments[0][1]["value"]["at"] <= orders[0][1]["value"]["at"])
    offset, rec = (payments if take_payment else orders).pop(0)
    v = rec["value"]
    t = v["at"]
    T = max(T, t)
    if take_payment:
        other_t = max(other_t, t)
    else:
        main_t = max(main_t, t)
    if t == T and (min_t is None or min_t + W + G < T):
        min_t = None
        for o in sorted((o for o in kept_orders + stale_orders if o[3]), key=lambda o: o[0]):
            min_t = o[0]
            if o[0] + W + G < T:
                o[3] = False
                out.append(row(o[2], None))
                stats["null_closed"] += 1
    stale_orders = [o for o in stale_orders if o[3]]
    for o in [o for o in kept_orders if o[0] + R <= main_t]:
        kept_orders.remove(o)
        if o[3]:
            stale_orders.append(o)
    kept_payments = [p for p in kept_payments if p[0] + R > other_t]
    if take_payment:
        matches = [o for o in kept_orders if o[1] == v["id"] and abs(o[0] - t) <= W]
        for o in matches:
            out.append(row(o[2], v))
            o[3] = False
            stats["joined"] += 1
        if t + R > other_t:
            kept_payments.append([t, v["id"], v])
            if t + W < T and matches:
                stats["late_joined"] += 1
        elif not matches:
            late.append({"key": rec["key"], "value": v,
                         "headers": {"streamc.source.topic": "payments", "streamc.source.partition": "0",
                                     "streamc.source.offset": str(offset)}})
            stats["late"] += 1
    else:
        matches = [p for p in kept_payments if p[1] == v["id"] and abs(p[0] - t) <= W]
        for p in matches:
            out.append(row(v, p[2]))
            stats["joined"] += 1
        now = not matches and t + W < T
        if now:
            out.append(row(v, None))
            stats["null_now"] += 1
        owed = not matches and not now
        if t + R > main_t:
            kept_orders.append([t, v["id"], v, owed])
        elif owed:
            stale_orders.append([t, v["id"], v, True])
        if owed:
            min_t = t if min_t is None else min(min_t, t)
assert all(n > 0 for n in stats.values()), stats
write_expected("settled", out)
write_expected(f"{HERE.name}-late", late)
