#!/usr/bin/env python3
"""Trades of five tickers (120, an LCG, seed 53) as csv text written by hand the way producers
write it (quoting only where needed, sometimes always; CRLF or LF or no line end; spaces around
numbers; empty size or venue; bools in several cases; timestamps as epoch ms or RFC 3339), each
with a record timestamp off its event time by up to 5 s; then bad records. A tab-delimited table
of names, with a rename, a tombstone and a name that is empty (null)."""
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(53)
T0 = 1_700_000_000_000
TICKERS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA"]
VENUES = ["NYSE", "Nasdaq, Inc.", 'the "big" board', "BATS|Z", "dark\npool", " padded ", "Zürich"]


def quote(field, always=False):
    if always or any(c in field for c in ',"\r\n'):
        return '"' + field.replace('"', '""') + '"'
    return field


def rfc3339(ms):
    dt = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


trades = []
for i in range(120):
    t = TICKERS[nxt(5)]
    ts = T0 + 1000 * i + nxt(900)
    price = f"{100 + nxt(5000) / 100:.2f}"
    size = "" if nxt(6) == 0 else str(1 + nxt(500))
    venue = "" if nxt(5) == 0 else VENUES[nxt(len(VENUES))]
    ok = ["true", "false", "TRUE", "False", " true "][nxt(5)]
    time_text = str(ts) if nxt(2) else rfc3339(ts)
    always = nxt(4) == 0
    if nxt(3) == 0:
        price = f" {price} "
    cols = [quote(t, always), price, size, quote(venue, always), ok, time_text]
    end = ["", "\n", "\r\n"][nxt(3)]
    trades.append({"key": t, "value": ",".join(cols) + end, "timestamp": ts - 5000 + nxt(10000)})


def bad(t, text, i):
    trades.append({"key": t, "value": text, "timestamp": T0 + 1000 * i})


bad("AAPL", "AAPL,101.5,10,NYSE,true", 120)                        # a column too few
bad("MSFT", "MSFT,101.5,10,NYSE,true,1700000121000,extra", 121)    # a column too many
bad("GOOG", "GOOG,cheap,10,NYSE,true,1700000122000", 122)          # not a float
bad("AMZN", "AMZN,101.5,1.5,NYSE,true,1700000123000", 123)         # not an int
bad("NVDA", "NVDA,101.5,10,NYSE,yes,1700000124000", 124)           # not a bool
bad("AAPL", "AAPL,101.5,10,NYSE,true,yesterday", 125)              # not a timestamp
bad("MSFT", "MSFT,,10,NYSE,true,1700000126000", 126)               # an empty float
bad("GOOG", "GOOG,1,1,a,true,1700000127000\nGOOG,2,2,b,true,1700000127001", 127)  # two records
bad("AMZN", "AMZN,NaN,10,NYSE,true,1700000128000", 128)            # not a finite float
trades.append({"key": "NVDA", "value": 'NVDA,150.25,7,"last, ""one""",TRUE,1700000129000', "timestamp": T0 + 129000})

names = []
for i, t in enumerate(TICKERS):
    names.append({"key": t, "value": f"{t}\t{t.title()} Corp", "timestamp": T0 + 1000 * i})
names.append({"key": "AAPL", "value": "AAPL\t\"Apple\tInc.\"\r\n", "timestamp": T0 + 30_000})
names.append({"key": "MSFT", "value": None, "timestamp": T0 + 60_000})
names.append({"key": "GOOG", "value": "GOOG\t", "timestamp": T0 + 70_000})
names.append({"key": "AMZN", "value": "AMZN\tAmazon\textra", "timestamp": T0 + 80_000})  # bad: 3 columns

here = Path(__file__).resolve().parent
(here / "in" / "trades.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in trades))
(here / "in" / "names.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in names))
