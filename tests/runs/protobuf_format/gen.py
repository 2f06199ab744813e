#!/usr/bin/env python3
"""The orders of ../avro_format/gen.py (60, seed 61, then the same bad input) for the topic
pb-orders, as JSON objects that `streamc produce` writes as Protobuf; the value not in the wire
format is "not protobuf"."""
import os
import runpy
from pathlib import Path

os.environ["STREAMC_FOLD_CASE"] = str(Path(__file__).resolve().parent)
os.environ["STREAMC_GEN_TOPIC"] = "pb-orders"
os.environ["STREAMC_GEN_BAD"] = "not protobuf"
runpy.run_path(str(Path(__file__).resolve().parent.parent / "avro_format" / "gen.py"), run_name="__main__")
