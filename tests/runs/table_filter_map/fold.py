#!/usr/bin/env python3
"""table_filter_map: fold the levels topic into its final table (a null value deletes the key),
then keep the rows with severity >= 3 and map them. The expected output is that final table."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

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
