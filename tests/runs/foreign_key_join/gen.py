#!/usr/bin/env python3
"""Orders o00..o29 naming customers c00..c13 (c12 and c13 never exist; one order in ten has no
customer), and customers c00..c11 with a name and a tier (some "blocked"): 400 updates and
deletions (an LCG, seed 17) on the two topics, every timestamp distinct. Orders change customer
often, so that a row's foreign key moves between partitions while results of its old one are
still on their way."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(17)
names = ["Ann", "Bob", "Cyd", "Dee", "Eve", "Fay"]
tiers = ["gold", "silver", "blocked"]
clock = 1_700_000_000_000
held = {"orders": set(), "customers": set()}
out = {"orders": [], "customers": []}
for _ in range(400):
    clock += 1 + nxt(1_000)
    topic = ["orders", "orders", "customers"][nxt(3)]
    if topic == "orders":
        key = f"o{nxt(30):02}"
        if key in held[topic] and nxt(8) == 0:
            value = None
            held[topic].discard(key)
        else:
            held[topic].add(key)
            customer = None if nxt(10) == 0 else f"c{nxt(14):02}"
            value = {"id": key, "customer": customer, "amount": nxt(100)}
    else:
        key = f"c{nxt(12):02}"
        if key in held[topic] and nxt(6) == 0:
            value = None
            held[topic].discard(key)
        else:
            held[topic].add(key)
            value = {"name": names[nxt(len(names))], "tier": tiers[nxt(len(tiers))]}
    out[topic].append({"key": key, "value": value, "timestamp": clock})
here = Path(__file__).resolve().parent
for topic, lines in out.items():
    (here / "in" / f"{topic}.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
