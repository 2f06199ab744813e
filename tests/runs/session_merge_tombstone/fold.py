#!/usr/bin/env python3
"""session_merge_tombstone: plain sessionization, emitting changes after every record (the
case commits every record). A session runs from its first to its last record; a record within
the gap (<=) of one or more open sessions of its user joins them all into one. After each record:
the new or changed session is emitted, and every session merged away whose start differs from
the merged session's start is deleted by a tombstone with streamc.window.start/end headers
(downstream, results are keyed by user and window_start)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

GAP, GRACE = 10 * 60_000, 60 * 60_000
def row(user, s):
    pages = [p for _, p in s["recs"]]
    return {"window_start": s["start"], "window_end": s["end"], "user": user,
            "clicks": len(pages), "first_page": min(pages), "last_page": max(pages)}

sessions = {}  # user -> list of {start, end, recs}
stream_time = None
out = []
for rec in read_input("clicks"):
    v = rec["value"]
    user, t = v["user"], v["at"]
    stream_time = t if stream_time is None else max(stream_time, t)
    mine = sessions.setdefault(user, [])
    is_open = lambda s: stream_time <= s["end"] + GAP + GRACE
    touching = [s for s in mine if is_open(s) and s["start"] - GAP <= t <= s["end"] + GAP]
    merged = {"start": min([t] + [s["start"] for s in touching]),
              "end": max([t] + [s["end"] for s in touching]),
              "recs": [r for s in touching for r in s["recs"]] + [(t, v["page"])]}
    if not touching and not stream_time <= t + GAP + GRACE:
        continue  # late (never happens here: the grace is an hour)
    for s in touching:
        mine.remove(s)
        if s["start"] != merged["start"]:
            out.append({"key": user, "value": None,
                        "headers": {"streamc.window.start": str(s["start"]), "streamc.window.end": str(s["end"])}})
    mine.append(merged)
    out.append({"key": user, "value": row(user, merged)})
write_expected("sessions-out", out)
