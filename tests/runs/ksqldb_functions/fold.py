#!/usr/bin/env python3
"""ksqldb_functions: each function as ksqlDB's documentation defines it, written plainly.

shaped, per event: concat skips null arguments; array_join of a null list is null, a null item is
written `null`, a float as Java's Double.toString writes it; instr is 1-based (0: not found;
position -1: searching backwards from the last character); lpad/rpad pad with the padding repeated
or cut to the length; initcap capitalizes each whitespace-separated word; regexp_split_to_array
keeps empty parts; regexp_extract_all gives every match; array_min/array_max of the non-null items
(null if none); array_except/intersect/union keep distinct items in first-list-then-second order;
reduce of a null list is its start value; as_map pairs items up to the shorter list (a repeated
key: the last value); map_union with a null map is the other map; convert_tz adds the difference of
the zones' offsets at that instant.
zipped, per event: one record per position up to the longer of nums and extra, each field null
past its list's end (none when both are empty).
collected, per user (final): collect_list of word in event-time order (ties: arrival), nulls
kept; collect_set of the non-null words in the order of their first occurrence by event time
(ties: arrival). No dead letters."""
import datetime
import sys
import zoneinfo
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from foldkit import read_input, write_expected  # noqa: E402

HERE = Path(__file__).resolve().parent


def java_double(x):
    if x == 0:
        return "0.0"
    if 1e-3 <= abs(x) < 1e7:
        s = repr(float(x))
        return s if "." in s else s + ".0"
    m, e = f"{x:e}".split("e")
    m = m.rstrip("0").rstrip(".")
    m = m if "." in m else m + ".0"
    return f"{m}E{int(e)}"


def distinct(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def initcap(s):
    out, start = [], True
    for c in s:
        if c.isspace():
            start = True
            out.append(c)
        elif start:
            out.append(c.upper())
            start = False
        else:
            out.append(c.lower())
    return "".join(out)


def as_map(ks, vs):
    m = {}
    for k, v in zip(ks, vs):
        m[str(k)] = v
    return m


def paris_ms(at):
    t = datetime.datetime.fromtimestamp(at / 1000, tz=datetime.timezone.utc)
    off = zoneinfo.ZoneInfo("Europe/Paris").utcoffset(t.replace(tzinfo=None))
    return at + int(off.total_seconds()) * 1000


shaped, zipped, groups = [], [], {}
import re  # noqa: E402

for i, rec in enumerate(read_input("events")):
    v = rec["value"]
    user, word, tags, nums, extra = v["user"], v["word"], v["tags"], v["nums"], v["extra"]
    row = {
        "id": v["id"],
        "joined": user + ":" + (word or ""),
        "tag_text": None if tags is None else "|".join("null" if t is None else t for t in tags),
        "ratio": java_double(float(len(nums))) + "," + java_double(0.5),
        "pos": user.find("a") + 1,
        "last_a": user.rfind("a") + 1,
        "padded": user[:6] if len(user) >= 6 else "*" * (6 - len(user)) + user,
        "cut": user[:3] if len(user) >= 3 else user + "-" * (3 - len(user)),
        "title": initcap(word if word is not None else "no word here"),
        "parts": re.split("[aeiou]", user),
        "digits": re.findall("[0-9]+", user + "12x345"),
        "low": min(nums) if nums else None,
        "high": max(nums) if nums else None,
        "only": distinct([n for n in nums if n not in extra]),
        "both": distinct([n for n in nums if n in extra]),
        "all_nums": distinct(nums + extra),
        "counted": 0 if tags is None else sum(len(t or "") for t in tags),
        "paired": as_map(nums, extra),
        "merged": as_map(nums, extra),
        "paris": paris_ms(v["at"]),
    }
    shaped.append({"key": v["id"], "value": row})
    for j in range(max(len(nums), len(extra))):
        zipped.append({"key": v["id"], "value": {"id": v["id"], "n": nums[j] if j < len(nums) else None,
                                                 "x": extra[j] if j < len(extra) else None}})
    groups.setdefault(user, []).append((v["at"], i, word))
write_expected("shaped", shaped)
write_expected("zipped", zipped)

collected = []
for user, rows in groups.items():
    words = [w for _, _, w in sorted(rows)]
    first = distinct([w for _, _, w in sorted(rows) if w is not None])
    collected.append({"key": user, "value": {"user": user, "words": words, "distinct_words": first}})
write_expected("collected", collected)
write_expected(f"{HERE.name}-dlq", [])
