#!/usr/bin/env python3
"""stateless_filter_map: keep ok readings at 20 °C or more and map each to Fahrenheit; and
flag the others (or those below 0 °C) keeping all their fields.

The record key is not declared, so it passes through as the record carries it. A missing
nullable field reads as null."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read_input(topic):
    with open(HERE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    (HERE / "expected").mkdir(exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (HERE / "expected" / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))


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
