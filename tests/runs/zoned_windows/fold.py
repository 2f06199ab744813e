#!/usr/bin/env python3
"""zoned_windows: per ticker, windows of whole days in a zone (Python's zoneinfo): a tumbling
day [local midnight of day d, local midnight of day d + 1), and hopping two-day windows starting
at local midnights of days whose number since 1970-01-01 is a multiple of the advance (1). A
record is late when its window's end plus the 2 h grace is at or before stream time (the largest
event time seen before it); late records are dropped. emit final: one result per window, all
closed at the end."""
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

GRACE = 2 * 3600 * 1000
EPOCH = date(1970, 1, 1)


def day_start(zone, day):
    d = EPOCH + timedelta(days=day)
    return int(datetime(d.year, d.month, d.day, tzinfo=zone).timestamp() * 1000)


def day_of(zone, ts):
    local = datetime.fromtimestamp(ts / 1000, timezone.utc).astimezone(zone).date()
    return (local - EPOCH).days


def fold(records, zone, size, advance):
    stream_time = None
    windows = {}
    for r in records:
        v = r["value"]
        ts, day = v["ts"], day_of(zone, v["ts"])
        for s in range(day - size + 1, day + 1):
            if s % advance:
                continue
            start, end = day_start(zone, s), day_start(zone, s + size)
            if stream_time is not None and end + GRACE <= stream_time:
                continue  # late
            w = windows.setdefault((v["ticker"], start), {"end": end, "trades": 0, "volume": 0})
            w["trades"] += 1
            w["volume"] += v["size"]
        stream_time = ts if stream_time is None else max(stream_time, ts)
    return [{"key": t, "value": {"window_start": s, "window_end": w["end"], "ticker": t,
                                 "trades": w["trades"], "volume": w["volume"]}}
            for (t, s), w in windows.items()]


trades = read_input("trades")
write_expected("paris-days", fold(trades, ZoneInfo("Europe/Paris"), 1, 1))
write_expected("new-york-two-days", fold(trades, ZoneInfo("America/New_York"), 2, 1))
