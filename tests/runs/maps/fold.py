#!/usr/bin/env python3
"""maps: records in file order (one partition). A value is decoded by its declaration: a map is
a JSON object whose member names are its keys (for map<int, V>, the decimal text of an int:
"07" is 7, "x" is bad input) and a repeated member name keeps its last value; a value that does
not decode goes to <app>-dlq once per query reading it, as it came in (printed as
JSON). tagged (records with at
least one tag): the env tag or null, the tag names in order, names upper-cased with "!" after
each value, the hours of at least 1.0, the sum of the counts (0 without), hour 23's value or
null, the counts with "events": 1 added, and each tag value mapped to its last tag name in name
order. per_user (final): per user, how many events had each env tag ("none" without one), and
the number of events."""
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name
INT = re.compile(r"^[+-]?[0-9]+$")


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def decode(v):
    """The value as the declaration reads it, or None if it does not decode."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if not isinstance(v, dict) or not isinstance(v.get("user"), str):
        return None
    tags, hours, counts = v.get("tags"), v.get("hours"), v.get("counts")
    if not isinstance(tags, dict) or not all(isinstance(x, str) for x in tags.values()):
        return None
    if not isinstance(hours, dict) or not all(INT.match(h) and number(x) for h, x in hours.items()):
        return None
    if counts is not None and not (isinstance(counts, dict) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in counts.values())):
        return None
    return {"user": v["user"], "tags": tags, "hours": {int(h): float(x) for h, x in hours.items()},
            "counts": counts}


def keyed(m):
    """A map as streamc writes it: member names are the keys' text."""
    return {str(k): x for k, x in sorted(m.items())}


def as_consumed(v):
    """A value as `streamc consume` prints it: JSON text parsed, other text as a string."""
    try:
        return json.loads(v) if isinstance(v, str) else v
    except ValueError:
        return v


tagged, per_user, dlq = [], {}, []
for offset, rec in enumerate(read_input("events")):
    v = decode(rec["value"])
    if v is None:
        for _query in ("tagged", "per_user"):
            dlq.append({"key": rec["key"], "value": as_consumed(rec["value"]), "headers": {
                "streamc.source.topic": "events", "streamc.source.partition": "0",
                "streamc.source.offset": str(offset)}})
        continue
    tags, hours, counts = v["tags"], v["hours"], v["counts"] or {}
    if tags:
        owners = {}
        for k, x in sorted(tags.items()):
            owners[x] = k
        tagged.append({"key": v["user"], "value": {
            "user": v["user"],
            "env": tags.get("env"),
            "keys": sorted(tags),
            "loud": keyed({k.upper(): x + "!" for k, x in tags.items()}),
            "busy": keyed({h: x for h, x in hours.items() if x >= 1.0}),
            "total": sum(counts.values()),
            "night": hours.get(23),
            "merged": keyed({**counts, "events": 1}),
            "owners": keyed(owners),
        }})
    p = per_user.setdefault(v["user"], {"user": v["user"], "envs": {}, "events": 0})
    env = tags.get("env", "none")
    p["envs"][env] = p["envs"].get(env, 0) + 1
    p["events"] += 1

write_expected("tagged", tagged)
write_expected("per-user", [{"key": u, "value": p} for u, p in per_user.items()])
write_expected(f"{APP}-dlq", dlq)
