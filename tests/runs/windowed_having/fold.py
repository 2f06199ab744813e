#!/usr/bin/env python3
"""windowed_having: per ticker and tumbling 10 s window, count and sum of sizes; the final table
holds the windows whose count is 2 or 3 (a window that reached 4 was deleted)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 10_000
windows = {}
for rec in read_input("trades"):
    v = rec["value"]
    start = v["ts"] - v["ts"] % SIZE
    w = windows.setdefault((v["ticker"], start), {"n": 0, "volume": 0})
    w["n"] += 1
    w["volume"] += v["size"]
rows = [{"key": t, "value": {"window_start": s, "window_end": s + SIZE, "ticker": t, **w}}
        for (t, s), w in windows.items() if 2 <= w["n"] <= 3]
assert sorted(r["key"] for r in rows) == ["AAA", "BBB"], rows
write_expected("busy-windows", rows)
