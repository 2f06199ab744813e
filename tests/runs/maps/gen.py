#!/usr/bin/env python3
"""Events of four users (90, an LCG, seed 47): tags from three keys (some absent, some empty
maps), hours keyed by int hour (JSON member names "0".."23", values multiples of 0.25), counts
null, absent or a small map; then records as other producers write them: a member name repeated
(the last value counts), a name with an escaped quote, an hour key written "07", and bad input (an
hour key that is not an int, a tag value that is not a string, a map that is a list, a count
that is a string)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import lcg  # noqa: E402

nxt = lcg(47)
TAGS = {"env": ["prod", "dev", "test"], "team": ["ops", "web", "dev"], "zone": ["eu", "us"]}
lines = []
T0 = 1_700_000_000_000
for i in range(90):
    u = f"u{nxt(4)}"
    tags = {k: vs[nxt(len(vs))] for k, vs in TAGS.items() if nxt(3) > 0}
    hours = {str(nxt(24)): nxt(12) / 4 for _ in range(nxt(4))}
    value = {"user": u, "tags": tags, "hours": hours}
    c = nxt(3)
    if c == 1:
        value["counts"] = None
    elif c == 2:
        value["counts"] = {f"k{nxt(3)}": nxt(50) for _ in range(1 + nxt(3))}
    lines.append({"key": u, "value": value, "timestamp": T0 + 1000 * i})


def raw(u, text, i):
    lines.append({"key": u, "value": text, "timestamp": T0 + 1000 * i})


raw("u1", '{"user": "u1", "tags": {"env": "dev", "env": "prod"}, "hours": {"23": 1.5, "23": 2.5}}', 90)
raw("u2", '{"user": "u2", "tags": {"q\\"uote": "x", "zone": "x"}, "hours": {"07": 1.25}}', 91)
raw("u3", '{"user": "u3", "tags": {"env": "dev"}, "hours": {"x": 1.0}}', 92)
raw("u3", '{"user": "u3", "tags": {"env": 7}, "hours": {}}', 93)
raw("u0", '{"user": "u0", "tags": ["env", "dev"], "hours": {}}', 94)
raw("u0", '{"user": "u0", "tags": {"env": "test"}, "hours": {}, "counts": {"a": "1"}}', 95)
raw("u0", '{"user": "u0", "tags": {"env": "test"}, "hours": {"-1": 0.5}, "counts": {}}', 96)
here = Path(__file__).resolve().parent
(here / "in" / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
