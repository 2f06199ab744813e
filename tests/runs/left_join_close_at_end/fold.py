#!/usr/bin/env python3
"""left_join_close_at_end: per order id and UTC day of its joined rows' time, the rows of a left
join within 10 minutes (one per payment at most 10 minutes from the order, at the later of
the two times; one with the payment side null, at the order's time, for an order with none)
and how many of them have a payment. Every unmatched order counts, those still pending at the
end of the input included."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

WITHIN, DAY = 10 * 60_000, 86_400_000
orders = [r["value"] for r in read_input("orders")]
pays = [r["value"] for r in read_input("payments")]

windows = {}
for o in orders:
    matches = [p for p in pays if p["order_id"] == o["order_id"] and abs(p["paid"] - o["placed"]) <= WITHIN]
    rows = [(max(o["placed"], p["paid"]), True) for p in matches] or [(o["placed"], False)]
    for t, paid in rows:
        w = windows.setdefault((o["order_id"], t - t % DAY), [0, 0])
        w[0] += 1
        w[1] += 1 if paid else 0
out = []
for (oid, start), (n, paid) in sorted(windows.items()):
    out.append({"key": oid, "value": {"window_start": start, "window_end": start + DAY, "order_id": oid,
                                      "rows": n, "paid": paid}})
write_expected("per-order", out)
