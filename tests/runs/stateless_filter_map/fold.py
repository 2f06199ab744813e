#!/usr/bin/env python3
"""stateless_filter_map: keep ok readings at 20 °C or more and map each to Fahrenheit; and
flag the others (or those below 0 °C) keeping all their fields.

The record key is not declared, so it passes through as the record carries it. A missing
nullable field reads as null."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

out = []
for rec in read_input("readings"):
    v = rec["value"]
    celsius = float(v["celsius"])
    if not (v["ok"] and celsius >= 20.0):
        continue
    site = v.get("site")
    out.append({
        "key": rec["key"],
        "value": {
            "sensor": v["sensor"],
            "fahrenheit": celsius * 9.0 / 5.0 + 32.0,
            "site": site if site is not None else "unknown",
            "hot": celsius > 30.0,
        },
    })
write_expected("warm-readings", out)

# flagged: `*` keeps every field of the schema (unknown fields such as "extra" were never part of
# the record), `site` is replaced in place, `flagged` is added.
flagged = []
for rec in read_input("readings"):
    v = rec["value"]
    celsius = float(v["celsius"])
    if not (not v["ok"] or celsius < 0.0):
        continue
    site = v.get("site")
    flagged.append({"key": rec["key"], "value": {"sensor": v["sensor"], "celsius": celsius, "ok": v["ok"],
                                                 "site": site if site is not None else "none", "flagged": True}})
write_expected("flagged-readings", flagged)
