#!/usr/bin/env python3
"""The collecting aggregates folded plainly, from their documented meaning.

user-paths: per user, the clicks sorted by event time (a stable sort, so clicks of one time stay
in arrival order, the input's order); a click more than 30 minutes after the previous one starts
a new session. Per session: window_start/window_end (first and last click), pages = the
pages in that order, nulls included, distinct = the distinct non-null pages in the order of
their first occurrence (the same order), longest = the three largest dwell times (repeats kept), top_pages = the two greatest distinct
pages.

site-weeks: per site, the clicks of the 7-day window: n = their number, times = the event times
sorted, the first 1,000 of them, users = the distinct users in the order of their first click by
event time (ties: input order), slowest = the five largest
dwell times. The disorder (2 min) is within both grace periods (5 min): nothing is late."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

GAP = 30 * 60_000
WEEK = 7 * 86_400_000
clicks = [r["value"] for r in read_input("clicks")]

by_user = {}
for c in clicks:
    by_user.setdefault(c["user"], []).append(c)
paths = []
for user, cs in by_user.items():
    cs.sort(key=lambda c: c["at"])
    i = 0
    while i < len(cs):
        j = i + 1
        while j < len(cs) and cs[j]["at"] - cs[j - 1]["at"] <= GAP:
            j += 1
        s = cs[i:j]
        pages = [c["page"] for c in s]
        paths.append({"key": user, "value": {
            "window_start": s[0]["at"], "window_end": s[-1]["at"], "user": user,
            "pages": pages,
            "distinct": list(dict.fromkeys(p for p in pages if p is not None)),
            "longest": sorted((c["dwell_ms"] for c in s), reverse=True)[:3],
            "top_pages": sorted({p for p in pages if p is not None}, reverse=True)[:2]}})
        i = j
write_expected("user-paths", paths)

by_week = {}
for c in clicks:
    start = c["at"] - c["at"] % WEEK
    by_week.setdefault((c["site"], start), []).append(c)
weeks = []
for (site, start), cs in by_week.items():
    weeks.append({"key": site, "value": {
        "window_start": start, "window_end": start + WEEK, "site": site,
        "n": len(cs),
        "times": sorted(c["at"] for c in cs)[:1000],
        "users": list(dict.fromkeys(c["user"] for c in sorted(cs, key=lambda c: c["at"]))),
        "slowest": sorted((c["dwell_ms"] for c in cs), reverse=True)[:5]}})
write_expected("site-weeks", weeks)
