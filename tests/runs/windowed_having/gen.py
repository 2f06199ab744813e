#!/usr/bin/env python3
"""windowed_having: per ticker and 10 s window a chosen number of trades (AAA: 3 then 1,
BBB: 2 then 4, CCC: 5), interleaved, with record timestamps that are not the event times."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = 1_700_000_000_000
counts = {("AAA", 0): 3, ("AAA", 1): 1, ("BBB", 0): 2, ("BBB", 1): 4, ("CCC", 0): 5}
recs = []
for (ticker, w), n in counts.items():
    for i in range(n):
        ts = T0 + w * 10_000 + 1_000 * i + len(ticker) * 7 + ord(ticker[0])
        recs.append({"key": ticker, "value": {"ticker": ticker, "size": 10 + i, "ts": ts}, "timestamp": T0 + 999_999})
recs.sort(key=lambda r: (r["value"]["ts"], r["key"]))
(HERE / "in").mkdir(exist_ok=True)
(HERE / "in" / "trades.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
