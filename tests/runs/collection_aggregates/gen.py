#!/usr/bin/env python3
"""1,200 clicks (and the late bridging ones) of ten users on one site (same LCG as ../session_emit_final/gen.py, seed 11):
bursts of activity with now and then a pause over 40 minutes, delivered with up to 2 minutes of
disorder, and now and then a late click (about 16 minutes late, within gap + grace) half-way
through a pause of 30 to 32 minutes, which merges the sessions on either side; about one page in
eight null; now and then a click at the same event time as the
user's previous one if that is under 2 minutes old (ties, which collect_list keeps in arrival order). The record timestamp is
the arrival time. Every click falls in one 7-day window, [1699488000000, 1700092800000)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

N, SEED, MAX_LAG = 1200, 11, 120_000
WEEK_START, WEEK = 1_699_488_000_000, 7 * 86_400_000
nxt = lcg(SEED)


pages = ["/home", "/search", "/item", "/cart", "/checkout", "/help"]
clock = WEEK_START + 3_600_000
last_at = {}
prev_at = {}
lines = []
for _ in range(N):
    clock += 40 * 60_000 + nxt(3_600_000) if nxt(20) == 0 else nxt(300_000)
    user = f"u{nxt(10)}"
    page = None if nxt(8) == 0 else pages[nxt(len(pages))]
    dwell = nxt(60_000)
    lag = nxt(MAX_LAG)
    recent = user in last_at and clock - last_at[user] <= MAX_LAG
    at = last_at[user] if recent and nxt(2) == 0 else clock - lag
    last_at[user] = at
    value = {"user": user, "site": "shop", "page": page, "dwell_ms": dwell, "at": at}
    lines.append({"key": user, "value": value, "timestamp": clock})
    # Now and then, after a pause of 30 to 32 minutes, a late click half-way through it: it
    # bridges the session before the pause and the one this click starts. Stream time is then
    # at most 34 minutes past the first session's end, so that session is still open (it
    # closes 30 min gap + 5 min grace after its end) and the two merge.
    before = prev_at.get(user)
    if before is not None and 30 * 60_000 < at - before < 32 * 60_000 and nxt(2) == 0:
        mid = before + (at - before) // 2
        bridge = {"user": user, "site": "shop", "page": pages[nxt(len(pages))], "dwell_ms": nxt(60_000), "at": mid}
        lines.append({"key": user, "value": bridge, "timestamp": clock})
    prev_at[user] = max(at, prev_at.get(user, at))
assert all(WEEK_START <= r["value"]["at"] < WEEK_START + WEEK for r in lines)
# Sessions (gap 30 min) as records arrive, per user: a record within the gap of two open
# sessions merges them. The case must exercise merges.
GAP = 30 * 60_000
merges = 0
open_sessions = {}
for r in lines:
    u, t = r["value"]["user"], r["value"]["at"]
    near = [s for s in open_sessions.get(u, []) if s[0] - GAP <= t <= s[1] + GAP]
    rest = [s for s in open_sessions.get(u, []) if s not in near]
    merges += max(len(near) - 1, 0)
    start = min([t] + [s[0] for s in near])
    end = max([t] + [s[1] for s in near])
    open_sessions[u] = rest + [(start, end)]
assert merges > 0, "no session merges"
print(f"{len(lines)} clicks, {merges} session merges")
(Path(__file__).resolve().parent / "in" / "clicks.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
