#!/usr/bin/env python3
"""csv_format: one partition, records in file order. A value is one csv record (Python's csv
module, the declared delimiter, RFC 4180 quotes; a value that holds two records is bad) of
exactly the declared columns: an empty column is null (a nullable string's too), a string is
taken as it is, the other types are read with surrounding spaces ignored: int as a decimal
integer, float finite, bool true/false in any case, timestamp as epoch ms or RFC 3339. A value
that does not read goes to <app>-dlq once per query reading it, as it came in. clean: the ok
trades as `ticker|price|size|venue|at`, a column quoted when it holds `|`, a quote or a line
end, null as an empty column, floats as their shortest text. volume (final): per ticker, the
number of trades, the sum of sizes (null as 0) and the highest price, as csv. named: each trade
with its ticker's name as of the trade's event time (the inputs merged by event time - a head
that does not read by its record timestamp -, the table first on ties; a null value deletes),
as JSON."""
import csv
import datetime
import io
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name
INT = re.compile(r"^[+-]?[0-9]+$")
RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def timestamp(s):
    if INT.match(s):
        return int(s)
    m = RFC3339.match(s)
    if not m:
        raise ValueError(s)
    y, mo, d, h, mi, se = (int(x) for x in m.groups()[:6])
    ms = int((m.group(7) or ".0")[1:4].ljust(3, "0"))
    tz = m.group(8)
    off = 0 if tz in "Zz" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 60 + int(tz[4:6]))
    dt = datetime.datetime(y, mo, d, h, mi, se, tzinfo=datetime.timezone.utc)
    return int(dt.timestamp()) * 1000 + ms - off * 60_000


def column(text, ty):
    nullable = ty.endswith("?")
    ty = ty.rstrip("?")
    if ty == "string":
        return None if (text == "" and nullable) else text
    s = text.strip()
    if s == "":
        if nullable:
            return None
        raise ValueError("empty")
    if ty == "int":
        if not INT.match(s):
            raise ValueError(s)
        return int(s)
    if ty == "float":
        f = float(s)
        if f != f or f in (float("inf"), float("-inf")):
            raise ValueError(s)
        return f
    if ty == "bool":
        if s.lower() not in ("true", "false"):
            raise ValueError(s)
        return s.lower() == "true"
    if ty == "timestamp":
        return timestamp(s)
    raise AssertionError(ty)


def decode(value, delimiter, types):
    """The columns of a csv value, or None if it does not read."""
    rows = list(csv.reader(io.StringIO(value, newline=""), delimiter=delimiter))
    if len(rows) == 0:
        rows = [[""]]
    if len(rows) != 1 or len(rows[0]) != len(types):
        return None
    try:
        return [column(t, ty) for t, ty in zip(rows[0], types)]
    except ValueError:
        return None


def text(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def write(cols, delimiter):
    out = []
    for c in cols:
        s = text(c)
        if any(x in s for x in (delimiter, '"', "\r", "\n")):
            s = '"' + s.replace('"', '""') + '"'
        out.append(s)
    return delimiter.join(out)


TRADE = ["string", "float", "int?", "string?", "bool", "timestamp"]
NAME = ["string", "string?"]


def dead(rec, topic, offset, times):
    for _ in range(times):
        dlq.append({"key": rec["key"], "value": rec["value"], "headers": {
            "streamc.source.topic": topic, "streamc.source.partition": "0",
            "streamc.source.offset": str(offset)}})


clean, volume, named, dlq = [], {}, [], []
trades = [(o, r, decode(r["value"], ",", TRADE)) for o, r in enumerate(read_input("trades"))]
for o, rec, v in trades:
    if v is None:
        dead(rec, "trades", o, 2)  # clean and volume
        continue
    ticker, price, size, venue, ok, ts = v
    if ok:
        clean.append({"key": ticker, "value": write([ticker, price, size, venue, ts], "|")})
    s = volume.setdefault(ticker, [0, 0, None])
    s[0] += 1
    s[1] += size or 0
    s[2] = price if s[2] is None else max(s[2], price)

# named: the two inputs merged by event time (a trade that does not read by its record
# timestamp), the table first on ties.
names = list(enumerate(read_input("names")))
table = {}
ni = 0
for o, rec, v in trades:
    t = v[5] if v is not None else rec["timestamp"]
    while ni < len(names) and names[ni][1]["timestamp"] <= t:
        no, nrec = names[ni]
        ni += 1
        if nrec["value"] is None:
            table.pop(nrec["key"], None)
            continue
        nv = decode(nrec["value"], "\t", NAME)
        if nv is None:
            dead(nrec, "names", no, 1)
            continue
        table[nv[0]] = nv[1]
    if v is None:
        dead(rec, "trades", o, 1)
        continue
    named.append({"key": v[0], "value": {"ticker": v[0], "name": table.get(v[0]), "price": v[1]}})

write_expected("clean", clean)
write_expected("volume", [{"key": k, "value": write([k, *s], ",")} for k, s in volume.items()])
write_expected("named", named)
write_expected(f"{APP}-dlq", dlq)
