#!/usr/bin/env python3
"""The merge folded plainly: the records of both topics as one collection. all-clicks: each
record with ms >= 0. user-minutes: per user and epoch-aligned minute, the count and the sum of
ms of every record (no filter); page-minutes: per page and minute, the count. Read in
event-time order across the topics, the disorder is under 5 s, within the 30 s grace: nothing
is late, and every window is closed at the end."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

clicks = [r["value"] for t in ("web-clicks", "app-clicks") for r in read_input(t)]
write_expected("all-clicks", [{"key": c["user"], "value": c} for c in clicks if c["ms"] >= 0])


def minutes(field):
    w = {}
    for c in clicks:
        start = c["at"] - c["at"] % 60_000
        w.setdefault((c[field], start), []).append(c)
    return w


write_expected("user-minutes", [
    {"key": u, "value": {"window_start": s, "window_end": s + 60_000, "user": u, "n": len(cs), "total_ms": sum(c["ms"] for c in cs)}}
    for (u, s), cs in minutes("user").items()])
write_expected("page-minutes", [
    {"key": p, "value": {"window_start": s, "window_end": s + 60_000, "page": p, "n": len(cs)}}
    for (p, s), cs in minutes("page").items()])
