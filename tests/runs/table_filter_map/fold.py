#!/usr/bin/env python3
"""table_filter_map: fold the levels topic into its final table (a null value deletes the key),
then keep the rows with severity >= 3 and map them. The expected output is that final table."""
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


table = {}
for rec in read_input("levels"):
    if rec["value"] is None:
        table.pop(rec["key"], None)
    else:
        table[rec["key"]] = rec["value"]
rows = []
for k, v in table.items():
    if v["severity"] >= 3:
        label = v.get("label")
        rows.append({"key": k, "value": {"level": v["level"], "severity": v["severity"],
                                         "loud": (label if label is not None else v["level"]).upper(),
                                         "double": v["severity"] * 2}})
write_expected("severe-levels", rows)
