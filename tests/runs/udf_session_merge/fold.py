#!/usr/bin/env python3
"""udf_session_merge: plain sessionization (per ticker, records sorted by time, a new session
when the gap to the previous record exceeds 10 s); per session: count, range_of = max - min of
price, longest = the longest venue name (lengths never tie within a session here), avg of
price, min, max, sum of size. Nothing is late (grace 30 s); all sessions closed at the end."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

GAP = 10_000

def longest(words):
    best = ""
    for w in words:
        if len(w) > len(best):
            best = w
    return best

by_key = {}
for rec in read_input("stocks"):
    by_key.setdefault(rec["value"]["ticker"], []).append(rec["value"])
rows = []
for k, ts in by_key.items():
    ts = sorted(ts, key=lambda t: t["ts"])
    i = 0
    while i < len(ts):
        j = i + 1
        while j < len(ts) and ts[j]["ts"] - ts[j - 1]["ts"] <= GAP:
            j += 1
        s = ts[i:j]
        prices = [float(t["price"]) for t in s]
        lengths = [len(t["venue"]) for t in s]
        assert lengths.count(max(lengths)) == 1, "no tie for the longest venue"
        rows.append({"key": k, "value": {"window_start": s[0]["ts"], "window_end": s[-1]["ts"], "ticker": k, "n": len(s),
                                         "range": max(prices) - min(prices), "venue": longest(t["venue"] for t in s),
                                         "mean": sum(prices) / len(prices), "low": min(prices), "high": max(prices),
                                         "volume": sum(t["size"] for t in s)}})
        i = j
write_expected("udf-sessions", rows)
