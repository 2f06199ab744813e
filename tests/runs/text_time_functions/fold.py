#!/usr/bin/env python3
"""text_time_functions: each event's fields computed with Python's own re, json, datetime and
zoneinfo (the system's IANA database): regexp_matches is re.search, regexp_extract the first
match's group, regexp_replace re.sub, split str.split, json_extract a walk of json.loads,
format_timestamp strftime in the zone, parse_timestamp a naive time localized in New York,
greatest/least over the non-null values, sign and trunc."""
import datetime
import json
import math
import re
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

UTC = datetime.timezone.utc
PARIS = ZoneInfo("Europe/Paris")
NY = ZoneInfo("America/New_York")


def extract(text, path):
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    for step in path:
        if isinstance(step, int):
            doc = doc[step] if isinstance(doc, list) and step < len(doc) else None
        else:
            doc = doc.get(step) if isinstance(doc, dict) else None
        if doc is None:
            return None
    return doc if isinstance(doc, str) else json.dumps(doc, separators=(",", ":"))


out = []
for r in read_input("events"):
    v = r["value"]
    at = datetime.datetime.fromtimestamp(v["at"] / 1000, UTC)
    m = re.search(r"order-([0-9]+)", v["line"])
    naive = datetime.datetime.strptime(v["local"], "%Y-%m-%d %H:%M:%S")
    # A wall-clock time that does not exist (in the spring gap) or exists twice (in autumn):
    # the earlier offset, as jiff's default ("compatible") disambiguation does.
    local = naive.replace(tzinfo=NY, fold=0)
    if local.astimezone(UTC).astimezone(NY).replace(tzinfo=None) != naive:
        local = naive.replace(tzinfo=NY, fold=1)
    present = [x for x in (v["bonus"], 10) if x is not None]
    out.append({"key": v["id"], "value": {
        "id": v["id"],
        "has_order": m is not None,
        "order_no": m.group(1) if m else None,
        "masked": re.sub(r"[0-9]", "#", v["line"]),
        "words": v["line"].split(" "),
        "user": extract(v["payload"], ["user", "name"]),
        "first_tag": extract(v["payload"], ["tags", 0]),
        "paris": at.astimezone(PARIS).strftime("%Y-%m-%d %H:%M %Z"),
        "utc_day": at.strftime("%A %d %B %Y"),
        "local_ms": int(local.timestamp() * 1000),
        "best": max(present),
        "worst": min(present),
        "direction": (v["delta"] > 0) - (v["delta"] < 0),
        "whole": float(math.trunc(v["delta"])),
    }})
write_expected("parsed", out)
