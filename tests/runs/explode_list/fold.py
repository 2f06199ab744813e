#!/usr/bin/env python3
"""explode_list: a plain loop over each post's list - one record per item (none for an empty or
null list), the item counts per tag as a final table, and the non-empty parts of `csv` split at
`;`."""
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

tags_out, csv_out, counts = [], [], Counter()
for r in read_input("posts"):
    v = r["value"]
    for t in v["tags"] or []:
        tags_out.append({"key": v["id"], "value": {"id": v["id"], "tag": t, "n": len(v["tags"])}})
        counts[t] += 1
    for item in v["csv"].split(";"):
        if item != "":
            csv_out.append({"key": v["id"], "value": {"id": v["id"], "item": item}})
write_expected("post-tags", tags_out)
write_expected("tag-counts", [{"key": t, "value": {"tag": t, "posts": n}} for t, n in counts.items()])
write_expected("csv-items", csv_out)
