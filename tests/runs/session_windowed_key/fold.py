#!/usr/bin/env python3
"""Sessions folded plainly, as ../session_emit_changes/fold.py does (run here, on this case's
input), each keyed by its windowed key [user, window_start, window_end]."""
import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["STREAMC_FOLD_CASE"] = str(HERE)
sys.path.insert(0, str(HERE.parent))
import foldkit  # noqa: E402

plain = foldkit.write_expected


def windowed(topic, records):
    plain(topic, [{**r, "key": [r["key"], r["value"]["window_start"], r["value"]["window_end"]]} for r in records])


foldkit.write_expected = windowed
runpy.run_path(str(HERE.parent / "session_emit_changes" / "fold.py"), run_name="__main__")
