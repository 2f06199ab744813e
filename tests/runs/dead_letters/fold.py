#!/usr/bin/env python3
"""dead_letters: decode each record against the declared schema (a JSON object; every
non-nullable field present, non-null and of its type; a timestamp is epoch ms or RFC 3339;
the record key must equal the `ticker` field); evaluate `100 / size` (division by zero is an
evaluation error). A record that fails goes to <app>-dlq as it came in (key, value; a value
that is not JSON prints as a string) with its source topic/partition/offset; the others are
aggregated per ticker and 5 s tumbling window (the final table); a good record whose window
has closed (stream time, the largest event time of the good records, >= its end; no grace) is
late and dropped (none is, in this input)."""
import json
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZE = 5_000
APP = HERE.name

def decode(raw):
    """The decoded trade, or None if the value does not fit the schema."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, dict):
        return None
    tk, price, size, ts = raw.get("ticker"), raw.get("price"), raw.get("size"), raw.get("ts")
    if not isinstance(tk, str):
        return None
    if isinstance(price, bool) or not isinstance(price, (int, float)):
        return None
    if isinstance(size, bool) or not isinstance(size, int):
        return None
    if isinstance(ts, str):
        try:
            ts = round(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    elif isinstance(ts, bool) or not isinstance(ts, int):
        return None
    return {"ticker": tk, "price": float(price), "size": size, "ts": ts}

def printed(raw):
    """A value as `streamc consume` prints it: JSON-decoded when it parses, else the text."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw

windows = {}
dlq = []
stream_time = None
late = 0
for offset, rec in enumerate(read_input("stocks")):
    t = decode(rec["value"])
    ok = t is not None and rec["key"] == t["ticker"] and t["size"] != 0
    if not ok:
        dlq.append({"key": rec["key"], "value": printed(rec["value"]), "headers": {
            "streamc.source.topic": "stocks", "streamc.source.partition": "0", "streamc.source.offset": str(offset)}})
        continue
    lots = 100 // t["size"]
    stream_time = t["ts"] if stream_time is None else max(stream_time, t["ts"])
    if t["ts"] - t["ts"] % SIZE + SIZE <= stream_time:
        late += 1
        continue
    a = windows.setdefault((t["ticker"], t["ts"] - t["ts"] % SIZE), {"trades": 0, "volume": 0, "total_lots": 0, "low": None, "high": None})
    a["trades"] += 1
    a["volume"] += t["size"]
    a["total_lots"] += lots
    a["low"] = t["price"] if a["low"] is None else min(a["low"], t["price"])
    a["high"] = t["price"] if a["high"] is None else max(a["high"], t["price"])
assert late == 0
write_expected("trades-5s", [
    {"key": k, "value": {"window_start": s, "window_end": s + SIZE, "ticker": k, **a}} for (k, s), a in windows.items()
])
write_expected(f"{APP}-dlq", dlq)
