#!/usr/bin/env python3
"""Sessions folded plainly (from tests/embedded.rs sessions_reference): per user, the clicks with
dwell_ms >= 0 sorted by time; a click more than 30 minutes after the previous one starts a new
session. Each session: window_start/window_end (first and last click, inclusive), clicks,
checkouts (pages ending in /checkout), avg_dwell, last_page (the greatest page). The disorder
(2 min) is within the grace (5 min), so nothing is late.

The same fold as ../session_emit_changes/fold.py (run here, on this case's input)."""
import os
import runpy
from pathlib import Path

os.environ["STREAMC_FOLD_CASE"] = str(Path(__file__).resolve().parent)
runpy.run_path(str(Path(__file__).resolve().parent.parent / "session_emit_changes" / "fold.py"), run_name="__main__")
