#!/usr/bin/env python3
"""sliding_near_epoch: the windows as ../sliding_window/fold.py enumerates them (run here, on
this case's input without the record before the epoch), and that record in the dead-letter
topic."""
import json
import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import foldkit  # noqa: E402

records = foldkit.read_input("stocks")
bad = [(i, r) for i, r in enumerate(records) if r["value"]["ts"] < 0]
good = [r for r in records if r["value"]["ts"] >= 0]
foldkit.read_input = lambda topic: good
os.environ["STREAMC_FOLD_CASE"] = str(HERE)
runpy.run_path(str(HERE.parent / "sliding_window" / "fold.py"), run_name="__main__")
foldkit.write_expected(f"{HERE.name}-dlq", [
    {"key": r["key"], "value": r["value"],
     "headers": {"streamc.source.topic": "stocks", "streamc.source.partition": "0", "streamc.source.offset": str(i)}}
    for i, r in bad])
