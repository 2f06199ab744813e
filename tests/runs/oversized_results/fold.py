#!/usr/bin/env python3
"""oversized_results: a record takes its key, value and headers' bytes plus 128 (a record batch
of one); nothing over 4096 (embedded.max_message_bytes) is written. counts: the group key is in
the changelog record twice (key and value) and in the result: a key of k bytes is refused when
2k + 128 > 4096. echo: the output record is the key and the value {id, text, twice = text +
text} as compact JSON. named: an inner join with the countries table, by country (the events
repartitioned by it, so keyed by it); a table row whose record
(key, value, 128) is over 4096 is a dead letter of the table and not in the table.
country-counts: the countries table grouped by its key, one row per code; a row too large is a
dead letter there too. team-sizes: the profiles table grouped by team (no row too large alone,
so none refused, though an update's old and new rows together are over 4096). Each refused
record goes to <app>-dlq once per query that refused it, as it came in."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name
MAX, OVERHEAD = 4096, 128


def size(key, value):
    return len(key.encode()) + len(json.dumps(value, separators=(",", ":")).encode()) + OVERHEAD


dlq, counts, echo, named, table = [], {}, [], [], {}


def dead(topic, offset, rec):
    dlq.append({"key": rec["key"], "value": rec["value"], "headers": {
        "streamc.source.topic": topic, "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})


for offset, rec in enumerate(read_input("countries")):
    if size(rec["key"], rec["value"]) > MAX:
        # Refused by both queries that keep the table's rows: the join's and the grouping's.
        dead("countries", offset, rec)
        dead("countries", offset, rec)
    else:
        table[rec["key"]] = rec["value"]["name"]

for offset, rec in enumerate(read_input("events")):
    v = rec["value"]
    if 2 * len(v["id"].encode()) + OVERHEAD > MAX:
        dead("events", offset, rec)
    else:
        counts[v["id"]] = counts.get(v["id"], 0) + 1
    out = {"id": v["id"], "text": v["text"], "twice": v["text"] * 2}
    if size(v["id"], out) > MAX:
        dead("events", offset, rec)
    else:
        echo.append({"key": v["id"], "value": out})
    if v["country"] in table:
        # (Joined by country: repartitioned by it, so keyed by it.)
        joined = {"id": v["id"], "name": table[v["country"]]}
        if size(v["country"], joined) > MAX:
            dead("events", offset, rec)
        else:
            named.append({"key": v["country"], "value": joined})

profiles = {}
for rec in read_input("profiles"):
    profiles[rec["key"]] = rec["value"]["team"]
teams = {}
for t in profiles.values():
    teams[t] = teams.get(t, 0) + 1
write_expected("team-sizes", [{"key": t, "value": {"team": t, "n": n}} for t, n in teams.items()])
write_expected("country-counts", [{"key": k, "value": {"code": k, "n": 1}} for k in table])
write_expected("counts", [{"key": k, "value": {"id": k, "n": n}} for k, n in counts.items()])
write_expected("echo", echo)
write_expected("named", named)
write_expected(f"{APP}-dlq", dlq)
