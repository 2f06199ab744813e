#!/usr/bin/env python3
"""self_join: every pair of records of the same stream whose join keys match and whose event times
are at most the window apart, each side a record of its own (a record pairs with itself too).
pairs: same ticker, |ts difference| <= 2 s, then `a.id < b.id`; pairs-after-error: those whose
first id is not divisible by 7. task-parents: a task whose parent
is the id of a task at most 10 s apart, keyed by the parent's id (the child side was repartitioned
by it)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

trades = [r["value"] for r in read_input("trades")]
out = []
for a in trades:
    for b in trades:
        if a["ticker"] == b["ticker"] and abs(a["ts"] - b["ts"]) <= 2_000 and a["id"] < b["id"]:
            out.append({"key": a["ticker"], "value": {"ticker": a["ticker"], "first": a["id"], "second": b["id"],
                                                    "rise": b["price"] - a["price"]}})
write_expected("pairs", out)

# pairs-after-error: the query's side without the ids divisible by 7 (their `where` fails), the
# joined side with every trade.
out = [{"key": r["key"], "value": {"ticker": r["value"]["ticker"], "first": r["value"]["first"],
                                   "second": r["value"]["second"]}}
       for r in out if r["value"]["first"] % 7 != 0]
write_expected("pairs-after-error", out)

tasks = [r["value"] for r in read_input("tasks")]
out = []
for c in tasks:
    for p in tasks:
        if c["parent"] == p["id"] and abs(c["ts"] - p["ts"]) <= 10_000:
            out.append({"key": p["id"], "value": {"task": c["id"], "name": c["name"], "parent_name": p["name"]}})
write_expected("task-parents", out)
