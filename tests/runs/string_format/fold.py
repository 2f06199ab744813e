#!/usr/bin/env python3
"""string_format: each raw value is the string field `line`. error-lines: upper(line) of the
lines containing "ERROR", as text; line-lengths: len(line) as text (its digits, which consume
prints as a JSON number); info-lines: lines starting with "INFO" as JSON objects. Keys pass
through. (The lines are ASCII: character and byte lengths agree.)"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

def printed(text):
    """A value as `streamc consume` prints it: JSON-decoded when it parses, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text

errors, lengths, info = [], [], []
for rec in read_input("log-lines"):
    line = rec["value"]
    if "ERROR" in line:
        errors.append({"key": rec["key"], "value": printed(line.upper())})
    lengths.append({"key": rec["key"], "value": printed(str(len(line)))})
    if line.startswith("INFO"):
        info.append({"key": rec["key"], "value": {"line": line, "chars": len(line), "quoted": '"' in line}})
write_expected("error-lines", errors)
write_expected("line-lengths", lengths)
write_expected("info-lines", info)
