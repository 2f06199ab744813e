#!/usr/bin/env python3
"""Orders and payments as tests/common/data.rs orders_and_payments(60, 24) makes them (same LCG):
most orders paid once, some twice, some not at all, some for a wrong amount; payments from 1
minute before to 15 minutes after their order; each topic in time order (record timestamp =
event time)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

N, SEED = 60, 24
nxt = lcg(SEED)


t = 1_700_000_000_000
orders, pays = [], []
for i in range(N):
    t += nxt(120_000)
    oid = f"o{i}"
    total = (500 + nxt(50_000)) / 100.0
    orders.append((oid, f"c{nxt(7)}", total, t))
    r = nxt(10)
    times = 0 if r <= 2 else (2 if r == 3 else 1)
    for _ in range(times):
        amount = 1.0 if nxt(5) == 0 else total
        method = ["card", "cash", "wire"][nxt(3)]
        pays.append((oid, amount, method, t - 60_000 + nxt(960_000)))
pays.sort(key=lambda p: p[3])
here = Path(__file__).resolve().parent
(here / "in" / "orders.jsonl").write_text("".join(
    json.dumps({"key": o, "value": {"order_id": o, "customer": c, "total": tot, "placed": at}, "timestamp": at}) + "\n"
    for o, c, tot, at in orders))
(here / "in" / "payments.jsonl").write_text("".join(
    json.dumps({"key": o, "value": {"order_id": o, "amount": a, "method": m, "paid": at}, "timestamp": at}) + "\n"
    for o, a, m, at in pays))
