#!/usr/bin/env python3
"""500 trades of three tickers (an LCG, seed 21) from 2023-10-26 to 2023-11-08 UTC, event times
rising with up to 3 h of disorder, every 37th 8 h behind (late when its day closed more than
the 2 h grace before); the record timestamp is
the arrival time, not the event time."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(21)


clock = 1_698_278_400_000  # 2023-10-26T00:00:00Z
lines = []
for i in range(500):
    clock += nxt(4_600_000)
    ts = clock - (nxt(10_800_000) if nxt(10) == 0 else 0)
    if i % 37 == 36:
        ts = clock - 8 * 3_600_000  # far behind: late if its day closed more than 2 h ago
    t = ["A", "B", "C"][nxt(3)]
    lines.append({"key": t, "value": {"ticker": t, "size": 1 + nxt(100), "ts": ts}, "timestamp": clock + 5_000})
(Path(__file__).resolve().parent / "in" / "trades.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
