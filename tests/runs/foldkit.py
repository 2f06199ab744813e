"""What every case's fold.py shares: reading the case's input records and writing its expected
outputs. The case directory is the one of the fold.py being run (or $STREAMC_FOLD_CASE, set by a
fold.py that runs another case's fold on its own input); the outputs go to its
`expected/`, or to $STREAMC_FOLD_OUT when set (tests/runs.rs checks that the folds still compute
the `expected/` that is checked in)."""
import json
import os
import sys
from pathlib import Path

CASE = Path(os.environ.get("STREAMC_FOLD_CASE") or Path(sys.argv[0]).resolve().parent)


def read_input(topic):
    with open(CASE / "in" / f"{topic}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_expected(topic, records):
    out = Path(os.environ.get("STREAMC_FOLD_OUT") or CASE / "expected")
    out.mkdir(parents=True, exist_ok=True)
    lines = sorted(json.dumps(r, ensure_ascii=False) for r in records)
    (out / f"{topic}.jsonl").write_text("".join(line + "\n" for line in lines))
