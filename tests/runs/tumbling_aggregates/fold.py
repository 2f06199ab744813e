#!/usr/bin/env python3
"""tumbling_aggregates: per ticker and 10 s window [start, start + 10 s), the aggregates over the
window's trades (the input is in time order: nothing is late). The final table: one row per
(ticker, window)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 10_000

groups = {}
for rec in read_input("stocks"):
    v = rec["value"]
    start = v["ts"] - v["ts"] % SIZE
    groups.setdefault((v["ticker"], start), []).append(v)

rows = []
for (ticker, start), vs in groups.items():
    venues = [v["venue"] for v in vs if v.get("venue") is not None]
    notional = 0.0
    for v in vs:  # in arrival order
        notional += float(v["price"]) * v["size"]
    rows.append({"key": ticker, "value": {
        "window_start": start, "window_end": start + SIZE, "ticker": ticker,
        "n": len(vs),
        "venues": len(venues),
        "volume": sum(v["size"] for v in vs),
        "notional": notional,
        "low": min(float(v["price"]) for v in vs),
        "high": max(float(v["price"]) for v in vs),
        "first_v": min(venues) if venues else None,
        "first_ts": min(v["ts"] for v in vs),
        "last_ts": max(v["ts"] for v in vs),
    }})
write_expected("trades-10s", rows)
