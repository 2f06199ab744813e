#!/usr/bin/env python3
"""table_nway_join: the three topics merged in timestamp order (all distinct); per record, the
table it belongs to is updated (a null value deletes), then each query's result for the key is
worked out as chained KTable-KTable joins do: users joined with scores gives a result or none
(inner: both hold the key; left: users does; outer: either does), and that result joined with
levels likewise; where the left side of a join has no result, the fields of every table before
it are null in the joined row. A key gets its row if it has a result now, else a tombstone if
its last result sent was a row, else nothing; inner_outer's `where` turns a row that does not
match into a tombstone if the key's last result sent was a row, else into nothing. by_level
groups the three-way inner join's current rows by level: count and sum of points per level, a
level that loses its last row kept with 0 and 0."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

TOPICS = ["users", "scores", "levels"]
events = [(t, r) for t in TOPICS for r in read_input(t)]
events.sort(key=lambda e: e[1]["timestamp"])
assert len({e[1]["timestamp"] for e in events}) == len(events), "timestamps must be distinct"

HAS = {
    "inner": lambda acc, other: acc and other,
    "left": lambda acc, other: acc,
    "outer": lambda acc, other: acc or other,
}


def chain(kinds, rows):
    """The joined row (one entry per table, None for a null side) or None: rows[0] is users',
    then one per join in order."""
    present = rows[0] is not None
    joined = [rows[0]]
    for kind, other in zip(kinds, rows[1:]):
        nxt = HAS[kind](present, other is not None)
        if not present:
            joined = [None] * len(joined)
        joined.append(other)
        present = nxt
    return joined if present else None


def fields(j):
    u, s, lv = j
    return {"name": u["name"] if u else None, "points": s["points"] if s else None, "level": lv["level"] if lv else None}


QUERIES = {
    "inner-left": (["inner", "left"], lambda r: True),
    "left-inner": (["left", "inner"], lambda r: True),
    "inner-outer": (["inner", "outer"], lambda r: r["level"] is None or r["level"] > 1),
}
tables = {t: {} for t in TOPICS}
out = {q: [] for q in QUERIES}
shown = {q: set() for q in QUERIES}  # per query, the keys whose last result sent was a row
for topic, rec in events:
    k, v = rec["key"], rec["value"]
    if v is None:
        tables[topic].pop(k, None)
    else:
        tables[topic][k] = v
    rows = [tables[t].get(k) for t in TOPICS]
    for q, (kinds, where) in QUERIES.items():
        j = chain(kinds, rows)
        row = fields(j) if j is not None else None
        if row is not None and not where(row):
            row = None
        if row is not None:
            out[q].append({"key": k, "value": row})
            shown[q].add(k)
        elif k in shown[q]:
            out[q].append({"key": k, "value": None})
            shown[q].discard(k)

groups = {}
for k in tables["users"]:
    j = chain(["inner", "inner"], [tables[t].get(k) for t in TOPICS])
    if j is not None:
        g = groups.setdefault(j[2]["level"], [0, 0])
        g[0] += 1
        g[1] += j[1]["points"]
# Every level that ever had a row stays (with 0 and 0 once it has none).
ever = set()
rows_now = {t: {} for t in TOPICS}
for topic, rec in events:
    if rec["value"] is None:
        rows_now[topic].pop(rec["key"], None)
    else:
        rows_now[topic][rec["key"]] = rec["value"]
    j = chain(["inner", "inner"], [rows_now[t].get(rec["key"]) for t in TOPICS])
    if j is not None:
        ever.add(j[2]["level"])
by_level = [{"key": lv, "value": {"level": lv, "users": groups.get(lv, [0, 0])[0], "points": groups.get(lv, [0, 0])[1]}} for lv in sorted(ever)]

for q in QUERIES:
    write_expected(q, out[q])
write_expected("by-level", by_level)
write_expected("table_nway_join-dlq", [])  # every record is good input
