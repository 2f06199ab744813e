#!/usr/bin/env python3
"""table_table_join: both topics merged in timestamp order (all distinct); per record, the
table it belongs to is updated (a null value deletes), then each join's result for the key is
worked out from both tables, as Kafka Streams' KTable-KTable joins do: a row if the key has a
result now (inner: both tables hold it; left: users does, scores' side null without a match;
outer: either does, the missing side null), else a tombstone if it had one before the record,
else nothing. The outer join's filter then turns a row that does not match into a tombstone if
the key's last result sent was a row (Kafka Streams with old values, as ksqlDB runs it), else
into nothing; a result that disappears is deleted only if its last result sent was a row."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

events = [("users", r) for r in read_input("users")] + [("scores", r) for r in read_input("scores")]
events.sort(key=lambda e: e[1]["timestamp"])
assert len({e[1]["timestamp"] for e in events}) == len(events), "timestamps must be distinct"

KINDS = {
    "inner": lambda u, s: u is not None and s is not None,
    "left": lambda u, s: u is not None,
    "outer": lambda u, s: u is not None or s is not None,
}
tables = {"users": {}, "scores": {}}
out = {"inner": [], "left": [], "outer": []}
# Per join, the keys whose last result sent was a row.
shown = {"inner": set(), "left": set(), "outer": set()}
for topic, rec in events:
    k, v = rec["key"], rec["value"]
    before = (tables["users"].get(k), tables["scores"].get(k))
    if v is None:
        tables[topic].pop(k, None)
    else:
        tables[topic][k] = v
    u, s = tables["users"].get(k), tables["scores"].get(k)
    points = s["points"] if s else None
    for kind, has in KINDS.items():
        if has(u, s):
            if kind == "inner":
                row = {"name": u["name"], "city": u["city"], "points": points}
            else:
                row = {"name": u["name"] if u else None, "points": points}
            if kind == "outer" and not (points is None or points > 3):
                row = None  # the filter after the join
            if row is not None or k in shown[kind]:
                out[kind].append({"key": k, "value": row})
            if row is None:
                shown[kind].discard(k)
            else:
                shown[kind].add(k)
        elif has(*before) and k in shown[kind]:
            out[kind].append({"key": k, "value": None})
            shown[kind].discard(k)

write_expected("user-scores", out["inner"])
write_expected("user-scores-left", out["left"])
write_expected("user-scores-outer", out["outer"])
