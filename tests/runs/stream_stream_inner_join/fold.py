#!/usr/bin/env python3
"""stream_stream_inner_join: every (trade, quote) pair with the same ticker and
|trade.ts - quote.at| <= 2 s, once. Both inputs are in time order and merged by time, so no
record is late."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

WITHIN = 2_000

out = []
for tr in read_input("stocks"):
    t = tr["value"]
    for qr in read_input("quotes"):
        q = qr["value"]
        if q["ticker"] == t["ticker"] and abs(q["at"] - t["ts"]) <= WITHIN:
            price, bid, ask = float(t["price"]), float(q["bid"]), float(q["ask"])
            out.append({"key": t["ticker"], "value": {
                "ticker": t["ticker"], "price": price, "size": t["size"], "bid": bid, "ask": ask,
                "traded": t["ts"], "quoted": q["at"], "off": price < bid or price > ask}})
write_expected("trade-quotes", out)
