#!/usr/bin/env python3
"""group_by_declared_key: per (v0, v1) count, sum of v0 + v1, max of v0 * x; per v1 count, sum of
v0, latest v0; per region of the accounts' final rows count, sum of ids, sum of balance + id (a
region left without rows is deleted); no dead letters."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
pairs, fields = {}, {}
for rec in read_input("events"):
    k, v = rec["key"], rec["value"]
    pairs.setdefault((k, v["v1"]), []).append((k, v))
    fields.setdefault(v["v1"], []).append(k)
write_expected("by-key-and-field", [
    {"key": [k, v1], "value": {"v0": k, "v1": v1, "n": len(rs), "t": sum(k + v1 for k, _ in rs),
                               "top": max(k * v["x"] for k, v in rs)}}
    for (k, v1), rs in pairs.items()])
write_expected("by-field", [
    {"key": v1, "value": {"v1": v1, "n": len(ks), "keys": sum(ks), "last_key": ks[-1]}}
    for v1, ks in fields.items()])
rows = {}
for rec in read_input("accounts"):
    if rec["value"] is None:
        rows.pop(rec["key"], None)
    else:
        rows[rec["key"]] = rec["value"]
regions = {}
for k, v in rows.items():
    regions.setdefault(v["region"], []).append((k, v))
write_expected("by-region", [
    {"key": r, "value": {"region": r, "n": len(rs), "ids": sum(k for k, _ in rs),
                         "balance": sum(v["balance"] + k for k, v in rs)}}
    for r, rs in regions.items()])
write_expected(f"{HERE.name}-dlq", [])
