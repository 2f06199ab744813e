#!/usr/bin/env python3
"""Sessions folded plainly (from tests/embedded.rs sessions_reference): per user, the clicks with
dwell_ms >= 0 sorted by time; a click more than 30 minutes after the previous one starts a new
session. Each session: window_start/window_end (first and last click, inclusive), clicks,
checkouts (pages ending in /checkout), avg_dwell, last_page (the greatest page). The disorder
(under 4.5 min) is within the grace (5 min), so nothing is late."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

GAP = 30 * 60_000

by_user = {}
for rec in read_input("clicks"):
    v = rec["value"]
    if v["dwell_ms"] >= 0:
        by_user.setdefault(v["user"], []).append(v)

rows = []
for user, cs in by_user.items():
    cs.sort(key=lambda c: c["at"])
    i = 0
    while i < len(cs):
        j = i + 1
        while j < len(cs) and cs[j]["at"] - cs[j - 1]["at"] <= GAP:
            j += 1
        s = cs[i:j]
        rows.append({"key": user, "value": {
            "window_start": s[0]["at"], "window_end": s[-1]["at"], "user": user,
            "clicks": len(s),
            "checkouts": sum(1 for c in s if c["page"].endswith("/checkout")),
            "avg_dwell": float(sum(c["dwell_ms"] for c in s)) / len(s),
            "last_page": max(c["page"] for c in s)}})
        i = j
write_expected("user-sessions", rows)
