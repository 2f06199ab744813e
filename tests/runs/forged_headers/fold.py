#!/usr/bin/env python3
"""forged_headers: `warm` keeps readings above 20 °C (outputs carry streamc's own headers only);
a reading whose celsius is not a number is a dead letter whose input headers named `streamc.*`
are renamed `original.streamc.*`, beside streamc's reason and position (one partition: the
offset is the line)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

APP = Path(__file__).resolve().parent.name

warm, dlq = [], []
for offset, rec in enumerate(read_input("readings")):
    v = rec["value"]
    if not isinstance(v["celsius"], (int, float)):
        headers = {("original." + k if k.startswith("streamc.") else k): h for k, h in rec.get("headers", {}).items()}
        # A value of the wrong type: the reason names its field (docs/conventions.md).
        reason = "celsius: expected float, found a string"
        headers.update({"streamc.error": reason, "streamc.source.topic": "readings",
                        "streamc.source.partition": "0", "streamc.source.offset": str(offset)})
        dlq.append({"key": rec["key"], "value": v, "headers": headers})
        continue
    if v["celsius"] > 20.0:
        warm.append({"key": rec["key"], "value": v})
write_expected("warm", warm)
write_expected(f"{APP}-dlq", dlq)
