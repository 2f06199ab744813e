#!/usr/bin/env python3
"""Clicks of six users on two topics (an LCG, seed 21): web-clicks and app-clicks, each in its
own event-time order with up to 5 s of disorder, the app's stamped 40 s earlier than the
web's at the same arrival (so read in arrival order the app's records would be 40 s behind,
past the 30 s grace; read in event-time order across the topics nothing is late). A few negative
durations (filtered). The record timestamp is the arrival time."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(21)


pages = ["/home", "/search", "/item", "/cart"]
out = {"web-clicks": [], "app-clicks": []}
clock = 1_700_000_000_000
for i in range(400):
    clock += nxt(2_000)
    topic = "web-clicks" if nxt(2) == 0 else "app-clicks"
    user = f"u{nxt(6)}"
    at = clock - nxt(5_000) - (40_000 if topic == "app-clicks" else 0)
    value = {"user": user, "page": pages[nxt(4)], "ms": nxt(10_000) - 200, "at": at}
    out[topic].append({"key": user, "value": value, "timestamp": clock})
for topic, lines in out.items():
    (Path(__file__).resolve().parent / "in" / f"{topic}.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
