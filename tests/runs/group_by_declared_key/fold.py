#!/usr/bin/env python3
"""group_by_declared_key: per (v0, v1) count, sum of v0 + v1, max of v0 * x; per v1 count, sum of
v0, latest v0; per (v0, region of the account v0 names as of the event's time: events joined
with the accounts' rows in timestamp order, the table's records first on ties) count and sum of
v0 + v1, an event whose account is missing then dropped; per region of the accounts' final rows count, sum of ids, sum of balance + id (a
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
timeline = sorted([(r["timestamp"], 0, r) for r in read_input("accounts")] + [(r["timestamp"], 1, r) for r in read_input("events")],
                  key=lambda t: (t[0], t[1]))
held, joined = {}, {}
for _, side, rec in timeline:
    if side == 0:
        if rec["value"] is None:
            held.pop(rec["key"], None)
        else:
            held[rec["key"]] = rec["value"]
    elif rec["key"] in held:
        k, region = rec["key"], held[rec["key"]]["region"]
        joined.setdefault((k, region), []).append(k + rec["value"]["v1"])
write_expected("joined-by-key-and-region", [
    {"key": [k, region], "value": {"v0": k, "region": region, "n": len(ts), "t": sum(ts)}}
    for (k, region), ts in joined.items()])
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
