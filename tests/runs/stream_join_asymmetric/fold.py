#!/usr/bin/env python3
"""stream_join_asymmetric: ../stream_join_outer/fold.py (Kafka Streams' outer join simulated
record by record) run on this case's input with asymmetric bounds, `within (1s, 3s)`: an order
at t matches the payments in [t - 1 s, t + 3 s]."""
import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ["STREAMC_FOLD_CASE"] = str(HERE)
runpy.run_path(str(HERE.parent / "stream_join_outer" / "fold.py"), init_globals={"B": 1_000, "A": 3_000}, run_name="__main__")
