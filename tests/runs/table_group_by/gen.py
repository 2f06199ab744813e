#!/usr/bin/env python3
"""A table of 30 accounts (a00 .. a29): 400 updates and deletions (an LCG, seed 19), every record
timestamp distinct. Accounts move between regions and tiers, balances go below zero and back;
the rare region `polar` empties and fills again. Some deletions are of keys the table does not
hold. Scores are multiples of 0.5, so that sums are exact in binary floating point whatever the
order of additions and subtractions."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(19)

regions = ["north", "south", "east", "west"]
tiers = ["gold", "silver", "basic"]
clock = 1_700_000_000_000
held = set()
lines = []
for i in range(400):
    clock += 1 + nxt(1_000)
    key = f"a{nxt(30):02}"
    if nxt(6) == 0:
        value = None  # a deletion (of a key the table may not hold)
        held.discard(key)
    else:
        held.add(key)
        region = "polar" if nxt(25) == 0 else regions[nxt(len(regions))]
        value = {
            "id": key,
            "region": region,
            "tier": tiers[nxt(len(tiers))],
            "balance": nxt(400) - 100,
            "score": nxt(200) / 2,
        }
    lines.append({"key": key, "value": value, "timestamp": clock})
# Last, every account still in `polar` moves out of it, so that its group ends deleted.
final = {}
for rec in lines:
    final[rec["key"]] = rec["value"]
for key, value in sorted(final.items()):
    if value is not None and value["region"] == "polar":
        clock += 1 + nxt(1_000)
        lines.append({"key": key, "value": dict(value, region="north"), "timestamp": clock})
here = Path(__file__).resolve().parent
(here / "in" / "accounts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
