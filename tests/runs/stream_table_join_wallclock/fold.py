#!/usr/bin/env python3
"""stream_table_join_wallclock: merge the two inputs, each in its own order, taking the earlier head next
(the table first on ties), keeping the table's current value per key (a null value deletes
it); a trade whose ticker has a limit and whose price is above it is an alert (the reference of
tests/embedded.rs alerts_example_joins_trades_with_the_limits_table_in_timestamp_order).

The same fold as ../stream_table_join/fold.py (run here, on this case's input)."""
import os
import runpy
from pathlib import Path

os.environ["STREAMC_FOLD_CASE"] = str(Path(__file__).resolve().parent)
runpy.run_path(str(Path(__file__).resolve().parent.parent / "stream_table_join" / "fold.py"), run_name="__main__")
