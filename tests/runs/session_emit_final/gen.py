#!/usr/bin/env python3
"""Clicks as tests/common/data.rs clicks() makes them (same LCG, seed 3): ten users, bursts of
activity with now and then a pause over 40 minutes, delivered with up to 2 minutes of disorder;
a few negative dwell times (filtered by the query). The record timestamp is the arrival time."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

N, SEED, MAX_LAG = 200, 3, 120_000
nxt = lcg(SEED)


pages = ["/home", "/search", "/item", "/cart", "/checkout", "/help"]
clock = 1_700_000_000_000
lines = []
for _ in range(N):
    clock += 40 * 60_000 + nxt(3_600_000) if nxt(20) == 0 else nxt(300_000)
    user = f"u{nxt(10)}"
    page = pages[nxt(len(pages))]
    dwell = nxt(60_000) - 100
    lag = nxt(MAX_LAG)
    lines.append({"key": user, "value": {"user": user, "page": page, "dwell_ms": dwell, "at": clock - lag}, "timestamp": clock})
(Path(__file__).resolve().parent / "in" / "clicks.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
