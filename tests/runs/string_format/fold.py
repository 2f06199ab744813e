#!/usr/bin/env python3
"""string_format: each raw value is the string field `line`. error-lines: upper(line) of the
lines containing "ERROR", as text; line-lengths: len(line) as text (its digits, which consume
prints as a JSON number); info-lines: lines starting with "INFO" as JSON objects. Keys pass
through. (The lines are ASCII: character and byte lengths agree.)"""
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
