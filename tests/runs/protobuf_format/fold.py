#!/usr/bin/env python3
"""protobuf_format: one partition, records in file order. An object value is an order (streamc
produce wrote it as Protobuf; reading it gives the same fields: an unset optional field is
null, an empty list or map empty); a string value not in the Confluent wire format or framed
with a schema id the registry does not know, and a null value, go to <app>-dlq once per query.
enriched: orders over 20.0 with the customer's name and tier, the skus, the summed quantities,
the attributes (consume prints a Protobuf map's keys sorted), amount, coupon and the event time
as epoch ms. per-customer (final): per customer name, the number of orders, the sum of amounts
and the number with a coupon.

The same fold as ../avro_format/fold.py (run here, on this case's input)."""
import os
import runpy
from pathlib import Path

os.environ["STREAMC_FOLD_CASE"] = str(Path(__file__).resolve().parent)
runpy.run_path(str(Path(__file__).resolve().parent.parent / "avro_format" / "fold.py"), run_name="__main__")
