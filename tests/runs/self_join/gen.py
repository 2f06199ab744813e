#!/usr/bin/env python3
"""Trades of five tickers (300, an LCG, seed 29), in event-time order (the joins' grace of an hour
makes no record late), and 120 tasks whose parent is an earlier task (or none), some of them
more than 10 s apart. Record keys are the declared keys; record timestamps are not event times."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(29)
here = Path(__file__).resolve().parent
clock = 1_700_000_000_000
trades = []
for i in range(300):
    clock += nxt(900)
    t = "ABCDE"[nxt(5)]
    trades.append({"key": t, "value": {"ticker": t, "id": i, "price": (100 + nxt(50)) / 4, "ts": clock},
                   "timestamp": 1_800_000_000_000 + i})
tasks = []
for i in range(120):
    clock += nxt(3_000)
    parent = f"t{nxt(i):03}" if i > 0 and nxt(5) else None
    tid = f"t{i:03}"
    tasks.append({"key": tid, "value": {"id": tid, "parent": parent, "name": f"task {i}", "ts": clock},
                  "timestamp": 1_800_000_000_000 + i})
(here / "in" / "trades.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trades))
(here / "in" / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tasks))
