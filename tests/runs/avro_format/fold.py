#!/usr/bin/env python3
"""avro_format: one partition, records in file order. An object value is an order (streamc
produce wrote it as Avro; reading it gives the same fields); a string value is raw bytes, not in
the Avro wire format or framed with a schema id the registry does not know, and a null value is
no value: each of those goes to <app>-dlq once per query (two), as it came in. enriched: orders
over 20.0 with the customer's name and tier, the items' skus in order, the sum of their
quantities, the attributes (an Avro map: consume prints its keys sorted), amount, coupon and the
event time as epoch ms. per-customer (final): per customer name, the number of orders, the sum
of amounts (floats added in record order) and the number with a coupon.

../protobuf_format/fold.py runs this on its own input: the topic is the case's one input file's
name, the application the case's directory name."""
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import CASE, read_input, write_expected  # noqa: E402

APP = CASE.name
TOPIC = next((CASE / "in").glob("*.jsonl")).stem


def ms(at):
    if isinstance(at, int):
        return at
    dt = datetime.datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp()) * 1000 + dt.microsecond // 1000


enriched, per, dlq = [], {}, []
for offset, rec in enumerate(read_input(TOPIC)):
    v = rec["value"]
    if not isinstance(v, dict):
        for _query in ("enriched", "per_customer"):
            dlq.append({"key": rec["key"], "value": v, "headers": {
                "streamc.source.topic": TOPIC, "streamc.source.partition": "0",
                "streamc.source.offset": str(offset)}})
        continue
    name = v["customer"]["name"]
    if v["amount"] > 20.0:
        enriched.append({"key": v["id"], "value": {
            "id": v["id"], "name": name, "tier": v["customer"]["tier"],
            "skus": [i["sku"] for i in v["items"]], "qty": sum(i["qty"] for i in v["items"]),
            "attrs": dict(sorted(v["attrs"].items())), "amount": float(v["amount"]),
            "coupon": v["coupon"], "at": ms(v["at"]),
        }})
    p = per.setdefault(name, {"name": name, "orders": 0, "total": 0.0, "coupons": 0})
    p["orders"] += 1
    p["total"] += float(v["amount"])
    p["coupons"] += v["coupon"] is not None

write_expected("enriched", enriched)
write_expected("per-customer", [{"key": k, "value": p} for k, p in per.items()])
write_expected(f"{APP}-dlq", dlq)
