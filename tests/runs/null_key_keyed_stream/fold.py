#!/usr/bin/env python3
"""null_key_keyed_stream: `copy` passes every record keyed by its `user` field; `per_user`
counts and sums `n` per user over the records that carry their key, and each record without a
key is a dead letter with the documented reason (one partition: its offset is its line)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name
REASON = ("the record has no key, but `events` is keyed by its `user` field: a stateful query needs each "
          "record in the partition of its key (write records with their key)")

copy, per, dlq = [], {}, []
for offset, rec in enumerate(read_input("events")):
    v = rec["value"]
    copy.append({"key": v["user"], "value": {"user": v["user"], "n": v["n"]}})
    if rec["key"] is None:
        dlq.append({"key": None, "value": v, "headers": {
            "streamc.error": REASON, "streamc.source.topic": "events", "streamc.source.partition": "0",
            "streamc.source.offset": str(offset)}})
        continue
    a = per.setdefault(v["user"], [0, 0])
    a[0] += 1
    a[1] += v["n"]
write_expected("events-copy", copy)
write_expected("per-user", [{"key": u, "value": {"user": u, "events": n, "total": t}} for u, (n, t) in per.items()])
write_expected(f"{APP}-dlq", dlq)
