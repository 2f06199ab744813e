#!/usr/bin/env python3
"""hopping_late_records: the stats example folded plainly with late records (from
tests/embedded.rs stats_reference_with_late_records). A record belongs to every hopping window
[s, s + 5 s) (s a multiple of 1 s) holding its event time; it is dropped from each such window
whose end + 1 s grace is at or before stream time (the largest event time seen, this record
included) and counted in the others. A record dropped from at least one window is written once
to the late topic, as it came in."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE, ADVANCE, GRACE = 5_000, 1_000, 1_000
acc = {}
late_records = []
stream_time = None
for rec in read_input("stocks"):
    v = rec["value"]
    price = float(v["price"])
    if not price > 0:
        continue
    ts = v["ts"]
    stream_time = ts if stream_time is None else max(stream_time, ts)
    start = max(0, ts - SIZE + ADVANCE) // ADVANCE * ADVANCE
    was_late = False
    while start <= ts:
        if ts < start + SIZE:
            if start + SIZE + GRACE <= stream_time:
                was_late = True
            else:
                a = acc.setdefault((v["ticker"], start), {"trades": 0, "volume": 0, "sum": 0.0, "low": None, "high": None})
                a["trades"] += 1
                a["volume"] += v["size"]
                a["sum"] += price
                a["low"] = price if a["low"] is None else min(a["low"], price)
                a["high"] = price if a["high"] is None else max(a["high"], price)
        start += ADVANCE
    if was_late:
        late_records.append({"key": rec["key"], "value": v, "headers": {"streamc.source.topic": "stocks"}})
assert len(late_records) > 10

write_expected("stock-stats", [
    {"key": t, "value": {"window_start": s, "window_end": s + SIZE, "ticker": t, "trades": a["trades"],
                         "volume": a["volume"], "avg_price": a["sum"] / a["trades"], "low": a["low"], "high": a["high"]}}
    for (t, s), a in acc.items()
])
write_expected("hopping_late_records-late", late_records)
