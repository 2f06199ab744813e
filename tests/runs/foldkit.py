"""What every case's fold.py shares: reading the case's input records and writing its expected
outputs; and the seeded generator the gen.py scripts draw from (`lcg`). The case directory is the one of the fold.py being run (or $STREAMC_FOLD_CASE, set by a
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


def lcg(seed):
    """A 64-bit linear congruential generator: `nxt = lcg(seed)`, then `nxt(m)` is a number from 0
    to m - 1. The same seed gives the same sequence on any Python (unlike `random` across
    versions)."""
    x = seed

    def nxt(m):
        nonlocal x
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        return (x >> 33) % m

    return nxt
