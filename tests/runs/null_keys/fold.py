#!/usr/bin/env python3
"""null_keys: passthrough keeps each record's key (null included); per action: count and sum
over all records (the final table) and count per 1 m tumbling window of the record timestamp
(in order, nothing late; all closed at the end)."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZE = 60_000


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


out, per, minute = [], {}, {}
for rec in read_input("events"):
    v = rec["value"]
    if v["action"] != "noop":
        out.append({"key": rec["key"], "value": {"user": v["user"], "action": v["action"], "n2": v["n"] * 2}})
    a = per.setdefault(v["action"], [0, 0])
    a[0] += 1
    a[1] += v["n"]
    k = (v["action"], rec["timestamp"] - rec["timestamp"] % SIZE)
    minute[k] = minute.get(k, 0) + 1
write_expected("events-out", out)
write_expected("per-action", [{"key": k, "value": {"action": k, "events": n, "total": s}} for k, (n, s) in per.items()])
write_expected("per-action-minute", [{"key": k, "value": {"window_start": s, "window_end": s + SIZE, "action": k, "events": n}} for (k, s), n in minute.items()])
