#!/usr/bin/env python3
"""all_or_nothing_join: records of both streams in event-time order; each joins every record
the other side keeps with the same key within 10 s (all are, here), giving (k, n, m, q = 100 //
(n - m)) truncated toward zero. A record for which one of its rows divides by zero goes to
<app>-dlq with its source topic/partition/offset, writes none of its rows, and is not kept."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name

events = [("others", o, r) for o, r in enumerate(read_input("others"))]
events += [("mains", o, r) for o, r in enumerate(read_input("mains"))]
events.sort(key=lambda e: e[2]["value"]["ts"])
kept = {"mains": [], "others": []}
rows, dlq = [], []
for topic, offset, rec in events:
    v = rec["value"]
    other = "others" if topic == "mains" else "mains"
    made, failed = [], False
    for w in kept[other]:
        if w["k"] != v["k"] or abs(w["ts"] - v["ts"]) > 10_000:
            continue
        main, oth = (v, w) if topic == "mains" else (w, v)
        d = main["n"] - oth["m"]
        if d == 0:
            failed = True
            break
        q = abs(100) // abs(d) * (1 if d > 0 else -1)
        made.append({"key": main["k"], "value": {"k": main["k"], "n": main["n"], "m": oth["m"], "q": q}})
    if failed:
        dlq.append({"key": rec["key"], "value": v, "headers": {
            "streamc.source.topic": topic, "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})
        continue
    rows += made
    kept[topic].append(v)
write_expected("joined", rows)
write_expected(f"{APP}-dlq", dlq)
