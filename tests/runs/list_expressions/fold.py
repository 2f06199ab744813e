#!/usr/bin/env python3
"""The list expressions folded plainly, from docs/language.md.

visit-summaries: each visit with at least one page whose first dwell time is between 100 and
50,000 (both included; no dwell time: null, so left out): the first, last and second page
(positions from 1; past the end null), pages 2 to the one before last, the dwell times largest
first, the pages without repeats in first-seen order, joined by ">", whether "/cart" is among
them, the pages followed by "/end", and whether the number of pages is outside 2..5.

recent-entries: per user, in arrival order, the entry pages (first page of a visit with pages)
kept to the last three.

page-volume: per user, in arrival order, a list of every page seen; a visit whose pages would
take it past 10,000 items is a dead letter (list_expressions-dlq, with its source headers) and
the list stays as it was. The result is the list's length."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

MAX_LIST = 10_000
visits = read_input("visits")


def at(xs, pos):
    i = pos - 1 if pos > 0 else len(xs) + pos
    return xs[i] if pos != 0 and 0 <= i < len(xs) else None


def sl(xs, frm, to):
    n = len(xs)
    pos = lambda p: p - 1 if p > 0 else (n + p if p < 0 else 0)
    a, b = max(pos(frm), 0), min(pos(to), n - 1)
    return xs[a:b + 1] if a <= b else []


summaries = []
for r in visits:
    v = r["value"]
    ps, dwell = v["pages"], v["dwell"]
    if not ps or not dwell or not (100 <= dwell[0] <= 50_000):
        continue
    distinct = []
    for p in ps:
        if p not in distinct:
            distinct.append(p)
    summaries.append({"key": v["user"], "value": {
        "user": v["user"], "entry": ps[0], "exit": ps[-1], "second": at(ps, 2),
        "middle": sl(ps, 2, -2), "slowest": sorted(dwell, reverse=True), "distinct": distinct,
        "path": ">".join(ps), "cart": "/cart" in ps, "ended": ps + ["/end"],
        "short": not (2 <= len(ps) <= 5), "at": v["at"]}})
write_expected("visit-summaries", summaries)

recent = {}
for r in visits:
    v = r["value"]
    if v["pages"]:
        recent[v["user"]] = (recent.get(v["user"], []) + [v["pages"][0]])[-3:]
write_expected("recent-entries", [{"key": u, "value": {"user": u, "last3": xs}} for u, xs in recent.items()])

seen, dead = {}, []
for offset, r in enumerate(visits):
    v = r["value"]
    n = seen.get(v["user"], 0)
    if n + len(v["pages"]) > MAX_LIST:
        dead.append({"key": r["key"], "value": v, "headers": {
            "streamc.source.topic": "visits", "streamc.source.partition": "0",
            "streamc.source.offset": str(offset)}})
        continue
    seen[v["user"]] = n + len(v["pages"])
write_expected("page-volume", [{"key": u, "value": {"user": u, "pages": n}} for u, n in seen.items()])
write_expected("list_expressions-dlq", dead)
