#!/usr/bin/env python3
"""Orders of four customers (60, an LCG, seed 61) as JSON objects that `streamc produce` writes
as Avro: a customer record with an optional tier, one to three items, a string map of
attributes, an amount, an optional coupon, an event time (epoch ms or RFC 3339) with record
timestamps off by up to 5 s; then bad input: a value not in the Avro wire format, one framed
with schema id 999999 (unknown to the registry), and a record with no value.

../protobuf_format/gen.py runs this for its case: $STREAMC_FOLD_CASE names the case directory,
$STREAMC_GEN_TOPIC the topic (its input file's name), $STREAMC_GEN_BAD the value that is not in
the wire format."""
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(61)
T0 = 1_700_000_000_000
NAMES = ["ann", "bob", "cyd", "dee"]
TIERS = [None, "gold", "silver"]
records = []
for i in range(60):
    at = T0 + 1000 * i + nxt(900)
    at_text = at if nxt(2) else datetime.datetime.fromtimestamp(at / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at % 1000:03d}Z"
    value = {
        "id": f"o{i:03d}",
        "customer": {"name": NAMES[nxt(4)], "tier": TIERS[nxt(3)]},
        "items": [{"sku": f"s{nxt(9)}", "qty": 1 + nxt(5)} for _ in range(1 + nxt(3))],
        "attrs": {k: v for k, v in [("channel", ["web", "app"][nxt(2)]), ("note", "gift, \"wrapped\""), ("zone", "eu")] if nxt(2)},
        "amount": round(5 + nxt(5000) / 100, 2),
        "coupon": None if nxt(3) else f"C{nxt(10)}",
        "at": at_text,
    }
    records.append({"key": value["id"], "value": value, "timestamp": at - 5000 + nxt(10000)})
records.append({"key": "o900", "value": os.environ.get("STREAMC_GEN_BAD", "not avro"), "timestamp": T0 + 61_000})
records.append({"key": "o901", "value": "\u0000\u0000\u000f\u0042\u003f\u0002", "timestamp": T0 + 62_000})
records.append({"key": "o902", "value": None, "timestamp": T0 + 63_000})
here = Path(os.environ.get("STREAMC_FOLD_CASE") or Path(__file__).resolve().parent)
(here / "in" / f"{os.environ.get('STREAMC_GEN_TOPIC', 'orders')}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
