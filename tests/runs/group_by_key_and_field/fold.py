#!/usr/bin/env python3
"""group_by_key_and_field: per (id, kind), count, sum of x * id, max of id + x; keyed [id, kind];
no dead letters."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent
groups = {}
for rec in read_input("events"):
    v = rec["value"]
    groups.setdefault((v["id"], v["kind"]), []).append(v)
rows = [{"key": [i, k], "value": {"id": i, "kind": k, "n": len(vs), "weighted": sum(v["x"] * i for v in vs),
                                  "top": max(i + v["x"] for v in vs), "next_id": i + 1}}
        for (i, k), vs in groups.items()]
write_expected("per-id-kind", rows)
write_expected(f"{HERE.name}-dlq", [])
