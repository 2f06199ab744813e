#!/usr/bin/env python3
"""stream_join_lateness: 60 orders of 30 ids, 1.5 s apart on average; most ids get a payment
within -3 s to +4 s of the order, some none and some two; each topic is written in arrival order
with up to 1.5 s of lag, and 15 % of the records up to 9 s late. Record timestamps are the
arrival times, not the event times."""
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
rng = random.Random(5)
T0 = 1_700_000_000_000
orders, payments = [], []
t = T0
for n in range(60):
    t += rng.randrange(200, 2_800)
    oid = f"o{n % 30:02d}"
    orders.append((t, oid, rng.randrange(1, 500)))
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        payments.append((t + rng.randrange(-3_000, 4_001), oid, rng.randrange(1, 500)))


def arrival(at):
    return at + (rng.randrange(3_000, 9_001) if rng.random() < 0.15 else rng.randrange(0, 1_501))


def write(topic, recs, field):
    lines = []
    for at, oid, x in recs:
        lines.append((arrival(at), {"key": oid, "value": {"id": oid, field: x, "at": at}}))
    lines.sort(key=lambda p: p[0])
    (HERE / "in" / f"{topic}.jsonl").write_text(
        "".join(json.dumps({**r, "timestamp": arr}) + "\n" for arr, r in lines))


(HERE / "in").mkdir(exist_ok=True)
write("orders", orders, "amount")
write("payments", payments, "paid")
