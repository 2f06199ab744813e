#!/usr/bin/env python3
"""table_table_join: both topics merged in timestamp order (all distinct); per record, the
table it belongs to is updated (a null value deletes), then each join's result for the key is
worked out from both tables as Kafka Streams' KTable-KTable joins do:
- inner: a row while both tables hold the key; otherwise a tombstone if the record was a
  deletion and the other table holds the key (a result existed), else nothing;
- left: a row (scores' side null without a match) while users holds the key; a tombstone when a
  user is deleted; nothing for a score of a user that is not there;
- outer: a row while either table holds the key (the missing side null); a tombstone when a
  deletion leaves neither; then the filter after the join: a row that does not match becomes a
  tombstone (the row it may have replaced is deleted downstream)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

events = [("users", r) for r in read_input("users")] + [("scores", r) for r in read_input("scores")]
events.sort(key=lambda e: e[1]["timestamp"])
assert len({e[1]["timestamp"] for e in events}) == len(events), "timestamps must be distinct"

tables = {"users": {}, "scores": {}}
inner, left, outer = [], [], []
for topic, rec in events:
    k, v = rec["key"], rec["value"]
    if v is None:
        tables[topic].pop(k, None)
    else:
        tables[topic][k] = v
    u, s = tables["users"].get(k), tables["scores"].get(k)
    points = s["points"] if s else None
    name = u["name"] if u else None

    if u and s:
        inner.append({"key": k, "value": {"name": u["name"], "city": u["city"], "points": points}})
    elif v is None and (u or s):
        inner.append({"key": k, "value": None})

    if u:
        left.append({"key": k, "value": {"name": name, "points": points}})
    elif v is None and topic == "users":
        left.append({"key": k, "value": None})

    if u or s:
        keep = (points is not None and points > 3) or points is None
        outer.append({"key": k, "value": {"name": name, "points": points} if keep else None})
    else:
        outer.append({"key": k, "value": None})

write_expected("user-scores", inner)
write_expected("user-scores-left", left)
write_expected("user-scores-outer", outer)
