#!/usr/bin/env python3
"""sliding_window: offline enumeration of sliding windows (as in tests/embedded.rs): per ticker,
a window [t - 3 s, t] ends at every record ([0, 3 s] for a record within 3 s of the epoch), and a window [t + 1, t + 1 + 3 s] starts after every
record that has a later one inside it; each holds every record between its bounds, inclusive.
Nothing is late in this input, so every window is emitted once."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 3_000

records = read_input("stocks")
by_ticker = {}
for i, rec in enumerate(records):
    by_ticker.setdefault(rec["value"]["ticker"], []).append((i, rec["value"]))

rows = []
for ticker, recs in by_ticker.items():
    starts = set()
    for _, v in recs:
        starts.add(max(0, v["ts"] - SIZE))  # no window starts before the epoch
        if any(v["ts"] + 1 <= w["ts"] <= v["ts"] + 1 + SIZE for _, w in recs):
            starts.add(v["ts"] + 1)
    for s in starts:
        inside = [v for _, v in recs if s <= v["ts"] <= s + SIZE]  # arrival order
        total = 0.0
        for v in inside:
            total += float(v["price"])
        rows.append({"key": ticker, "value": {
            "window_start": s, "window_end": s + SIZE, "ticker": ticker,
            "n": len(inside), "volume": sum(v["size"] for v in inside),
            "hi": max(float(v["price"]) for v in inside), "mean": total / len(inside)}})
write_expected("moving", rows)
