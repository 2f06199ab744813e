#!/usr/bin/env python3
"""select_functions: each output field computed from the documented meaning of its expression.

Undocumented details this fold assumes: substr(s, start, length) takes a 0-based start, counted
in characters; round(x, d) rounds to d decimals (no ties occur in the data); to_string of an int
or bool is its JSON text."""
import sys
import math
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

def ts_ms(x):
    """A `timestamp` in JSON: epoch ms, or an RFC 3339 string."""
    if isinstance(x, int):
        return x
    return round(datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp() * 1000)

H, MS = 3_600_000, 1
out = []
for rec in read_input("items"):
    v = rec["value"]
    qty, price, name, note = v["qty"], float(v["price"]), v["name"], v.get("note")
    at = ts_ms(v["at"])
    if not qty >= 0:
        continue
    t = name.strip()
    out.append({
        "key": rec["key"],
        "value": {
            "id": v["id"],
            "shout": t.upper(),
            "quiet": name.lower(),
            "name_len": len(t),
            "label": t.lower() + "#" + str(qty) + "/" + ("true" if qty > 5 else "false"),
            "bang": t + "!",
            "total": price * qty,
            "half": qty // 2,  # qty >= 0 here: floor and truncation agree
            "rem": qty % 3,
            "dist": abs(qty - 10),
            "third": round(price / 3.0, 2),
            "whole": float(round(price)),
            "down": float(math.floor(price)),
            "up": float(math.ceil(price)),
            "root": math.sqrt(qty),
            "square": price * price,
            "note_text": note if note is not None else "none",
            "capped": min(qty, 10),
            "at_least": max(qty, 3, 1),
            "has_an": "an" in name.lower(),
            "starts_b": t.startswith("B"),
            "ends_s": name.endswith("s"),
            "size": "big" if qty > 10 else ("mid" if qty > 3 else "small"),
            "small_set": qty in [1, 2, 3],
            "not_small": qty not in [1, 2, 3],
            "no_note": note is None,
            "at_ms": at,
            "due_ms": at + 1 * H - 250 * MS,
            "age_ms": at - 1700000000000,
            "quarter": float(qty) / 4,
            "parsed": 42 + qty,
            "prefix": t[0:3],
        },
    })
write_expected("items-derived", out)
