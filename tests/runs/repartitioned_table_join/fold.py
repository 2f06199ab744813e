#!/usr/bin/env python3
"""repartitioned_table_join: merge customers and orders by time (the table first on ties), keeping the
current row per customer (null deletes); every order is emitted, keyed by its customer id (the
join key it was repartitioned by), with the row's fields or nulls.

The same fold as ../left_table_join/fold.py (run here, on this case's input)."""
import os
import runpy
from pathlib import Path

os.environ["STREAMC_FOLD_CASE"] = str(Path(__file__).resolve().parent)
runpy.run_path(str(Path(__file__).resolve().parent.parent / "left_table_join" / "fold.py"), run_name="__main__")
