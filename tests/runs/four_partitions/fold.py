#!/usr/bin/env python3
"""four_partitions: how the input is split over partitions does not change any result here
(the input is in time order, so no partition sees a late record; the 1 h grace covers the
repartition's interleaving). Per ticker and 10 s window: count, sum, max; per account:
count, sum, min; trades of size >= 50, keyed by ticker."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

SIZE = 10_000

per_ticker, per_account, big = {}, {}, []
for rec in read_input("stocks"):
    v = rec["value"]
    p = float(v["price"])
    a = per_ticker.setdefault((v["ticker"], v["ts"] - v["ts"] % SIZE), [0, 0, p])
    a[0] += 1
    a[1] += v["size"]
    a[2] = max(a[2], p)
    b = per_account.setdefault(v["account"], [0, 0, p])
    b[0] += 1
    b[1] += v["size"]
    b[2] = min(b[2], p)
    if v["size"] >= 50:
        big.append({"key": v["ticker"], "value": {"ticker": v["ticker"], "account": v["account"], "size": v["size"]}})
write_expected("per-ticker", [
    {"key": k, "value": {"window_start": s, "window_end": s + SIZE, "ticker": k, "n": n, "volume": vol, "high": hi}}
    for (k, s), (n, vol, hi) in per_ticker.items()])
write_expected("per-account", [
    {"key": k, "value": {"account": k, "n": n, "volume": vol, "low": lo}} for k, (n, vol, lo) in per_account.items()])
write_expected("big-trades", big)
