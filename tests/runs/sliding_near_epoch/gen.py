#!/usr/bin/env python3
"""sliding_near_epoch: two tickers' trades at event times 0 to 9 s (seeded), in time order but
for a little disorder within the grace, with record timestamps that are not the event times,
and one trade at a negative event time."""
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
rng = random.Random(7)
recs = []
for ticker in ["A", "B"]:
    t = rng.randrange(0, 400)
    while t < 9_000:
        recs.append({"key": ticker, "value": {"ticker": ticker, "price": rng.randrange(400, 420) / 4,
                                               "size": rng.randrange(1, 20), "ts": t},
                     "timestamp": 1_700_000_000_000 + t})
        t += rng.choice([0, 250, 700, 1_200, 2_900, 3_000, 3_001])
recs.sort(key=lambda r: (r["value"]["ts"] + rng.randrange(0, 1_500), r["key"]))
recs.insert(5, {"key": "A", "value": {"ticker": "A", "price": 100.0, "size": 1, "ts": -1_000}, "timestamp": 5})
(HERE / "in").mkdir(exist_ok=True)
(HERE / "in" / "stocks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
