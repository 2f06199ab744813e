#!/usr/bin/env python3
"""hopping_stats: the stats example folded plainly (from tests/embedded.rs stats_reference):
hopping 5 s windows advancing 1 s, grace 1 s, over trades with price > 0, in input order. A
record belongs to every window [s, s + 5 s) with s a multiple of 1 s and s <= ts < s + 5 s; it
is late for a window when stream time (the largest event time so far) has reached the window's
end plus grace. The result is the final table of (ticker, window)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE, ADVANCE, GRACE = 5_000, 1_000, 1_000
acc = {}
stream_time = None
late = 0
for rec in read_input("stocks"):
    v = rec["value"]
    price = float(v["price"])
    if not price > 0:
        continue
    ts = v["ts"]
    stream_time = ts if stream_time is None else max(stream_time, ts)
    start = max(0, ts - SIZE + ADVANCE) // ADVANCE * ADVANCE
    while start <= ts:
        if ts < start + SIZE:
            if start + SIZE + GRACE <= stream_time:
                late += 1
            else:
                a = acc.setdefault((v["ticker"], start), {"trades": 0, "volume": 0, "sum": 0.0, "low": None, "high": None})
                a["trades"] += 1
                a["volume"] += v["size"]
                a["sum"] += price
                a["low"] = price if a["low"] is None else min(a["low"], price)
                a["high"] = price if a["high"] is None else max(a["high"], price)
        start += ADVANCE
assert late == 0, "the data is meant to be within grace"

write_expected("stock-stats", [
    {"key": t, "value": {"window_start": s, "window_end": s + SIZE, "ticker": t, "trades": a["trades"],
                         "volume": a["volume"], "avg_price": a["sum"] / a["trades"], "low": a["low"], "high": a["high"]}}
    for (t, s), a in acc.items()
])
