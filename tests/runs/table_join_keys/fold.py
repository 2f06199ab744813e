#!/usr/bin/env python3
"""table_join_keys: both topics in timestamp order. A record's key is parsed as an int (JSON
number text, spaces allowed); a users record's key, when present, must equal its `id` field
(without a key it is keyed by `id`); a record whose key does not parse or differs goes to
<app>-dlq as it came in (printed as `streamc consume` prints keys), with its source topic, partition (0) and offset. The others update
their table; the left join's row (users' `id` and `name`, scores' `points` or null) follows
each change of a key users holds; a deletion of a user that was there sends a tombstone."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name


def int_key(text):
    try:
        return int(text.strip()) if text.strip().lstrip("-").isdigit() else None
    except ValueError:
        return None


def printed(raw):
    """A key as `streamc consume` prints it: JSON if the bytes are JSON, else a string."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


events = []
for topic in ["users", "scores"]:
    for offset, rec in enumerate(read_input(topic)):
        events.append((rec["timestamp"], topic, offset, rec))
events.sort()
users, scores = {}, {}
out, dlq = [], []
for _, topic, offset, rec in events:
    raw, v = rec["key"], rec["value"]
    key = int_key(raw) if raw is not None else (v["id"] if topic == "users" and v else None)
    bad = key is None or (topic == "users" and v is not None and v["id"] != key)
    if bad:
        dlq.append({"key": printed(raw), "value": v, "headers": {"streamc.source.topic": topic,
                    "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})
        continue
    had = key in users
    table = users if topic == "users" else scores
    if v is None:
        table.pop(key, None)
    else:
        table[key] = v
    if key in users:
        s = scores.get(key)
        out.append({"key": key, "value": {"id": key, "name": users[key]["name"],
                                               "points": s["points"] if s else None}})
    elif had:
        out.append({"key": key, "value": None})
write_expected("user-scores", out)
write_expected(f"{APP}-dlq", dlq)
