#!/usr/bin/env python3
"""Clicks of four users in bursts (2-6 clicks, the first two 15-60 s apart, then 0.5-8 minutes apart) separated by 35-90 minute
pauses, delivered in arrival order with up to 4.5 minutes of lag (within the 5-minute grace:
nothing is late). The first click of a burst is often delivered after the second, so the
session is emitted first with the later start and then extended backwards: a merge whose old
session is deleted by a tombstone. A few negative dwell times (filtered by the query). The
record timestamp is the arrival time."""
import json
import random
from pathlib import Path

M = 60_000
rng = random.Random(11)
pages = ["/home", "/search", "/item", "/cart", "/checkout", "/help"]
clicks = []  # (arrival, user, page, dwell, at)
for u in range(4):
    t = 1_700_000_000_000 + rng.randrange(0, 20 * M)
    for burst in range(8):
        n = rng.randrange(2, 7)
        for i in range(n):
            if i == 1:
                t += rng.randrange(M // 4, M)
            elif i > 1:
                t += rng.randrange(M // 2, 8 * M)
            lag = rng.randrange(3 * M, 4 * M + M // 2) if i == 0 and rng.random() < 0.7 else rng.randrange(0, M)
            clicks.append((t + lag, f"u{u}", rng.choice(pages), rng.randrange(-100, 60_000), t))
        t += rng.randrange(35 * M, 90 * M)
clicks.sort()
lines = [{"key": u, "value": {"user": u, "page": p, "dwell_ms": d, "at": at}, "timestamp": arr} for arr, u, p, d, at in clicks]
(Path(__file__).resolve().parent / "in" / "clicks.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
