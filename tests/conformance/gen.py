#!/usr/bin/env python3
"""Writes every conformance case's input (cases/<case>/in/<topic>.jsonl), deterministically.

Each line is one record as a plain producer writes it: {"key": text | null, "value": object |
null}, plus "timestamp" (epoch ms) only for a table's deletion, whose record timestamp is the only
time it has. Every other record is stamped by the producer with the wall clock, so record
timestamps are never the event times: both engines must take event time from the value.
Run: python3 gen.py (standard library only).
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = 1_700_000_000_000


def write(case, topic, records):
    d = os.path.join(HERE, "cases", case, "in")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{topic}.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def trades(seed, n, late_share, late_ms, tickers=20, avoid_half_second=False):
    """Trades in roughly increasing event time; a share of them delayed by up to late_ms."""
    rng = random.Random(seed)
    t = BASE
    out = []
    for _ in range(n):
        t += rng.randint(0, 40)
        ts = t - rng.randint(0, late_ms) if rng.random() < late_share else t
        if avoid_half_second and ts % 1000 == 500:
            ts += 1  # never the instant of a table update: the order of ties is not compared
        k = f"T{rng.randrange(tickers):02d}"
        out.append({"key": k, "value": {"ticker": k, "price": round(rng.uniform(90, 110), 2), "size": rng.randint(1, 100), "ts": ts}})
    return out


def clicks(seed, n):
    """Clicks of 12 users; gaps around the 30 s session gap, a share delayed beyond grace."""
    rng = random.Random(seed)
    t = BASE
    out = []
    pages = ["/home", "/search", "/cart", "/checkout", "/help"]
    for _ in range(n):
        t += rng.randint(0, 5000)
        at = t - rng.randint(0, 60_000) if rng.random() < 0.15 else t
        u = f"u{rng.randrange(12)}"
        out.append({"key": u, "value": {"user": u, "page": rng.choice(pages), "dwell_ms": rng.randint(0, 60_000), "at": at}})
    return out


def limits(seed, n, tickers=20, span_ms=60_000):
    """Limit updates at whole seconds plus 500 ms, in event-time order; every tenth a deletion."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        at = BASE + 500 + 1000 * (i * span_ms // 1000 // n)
        k = f"T{rng.randrange(tickers):02d}"
        if i % 10 == 9:
            out.append({"key": k, "value": None, "timestamp": at})
        else:
            out.append({"key": k, "value": {"max_price": round(rng.uniform(95, 108), 1), "at": at}})
    return out


def orders_payments(seed, n):
    """Orders and payments over 150 ids: a payment follows its order by -3..+5 s (so some fall
    outside the 2 s window), each topic in roughly increasing time with up to 3 s of disorder."""
    rng = random.Random(seed)
    orders, payments = [], []
    t = BASE
    for _ in range(n):
        t += rng.randint(0, 400)
        i = f"o{rng.randrange(150):03d}"
        orders.append((t - rng.randint(0, 3000) if rng.random() < 0.2 else t, {"id": i, "amount": rng.randint(1, 500)}))
        if rng.random() < 0.7:
            pt = t + rng.randint(-3000, 5000)
            payments.append((pt, {"id": i, "paid": rng.randint(1, 500)}))
        if rng.random() < 0.15:  # a payment of some other id: unmatched unless an order comes
            j = f"o{rng.randrange(150):03d}"
            payments.append((t + rng.randint(0, 2000), {"id": j, "paid": rng.randint(1, 500)}))

    def in_order(rows):
        # Roughly in time order: sort by a jittered time, so each topic is out of order a little.
        rows = sorted(rows, key=lambda r: r[0] + rng.randint(0, 3000))
        return [{"key": v["id"], "value": {**v, "at": at}} for at, v in rows]

    return in_order(orders), in_order(payments)


def accounts(seed, n, keys=40):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = f"a{rng.randrange(keys):02d}"
        if rng.random() < 0.1:
            out.append({"key": k, "value": None})
        else:
            out.append({"key": k, "value": {"balance": rng.randint(0, 250), "tier": rng.choice(["gold", "silver", "basic"])}})
    return out


def keyed_rows(seed, n, keys, value):
    """Updates of a table keyed u00..: a fifth of the updates of a key the table holds delete it."""
    rng = random.Random(seed)
    held = set()
    out = []
    for _ in range(n):
        k = f"u{rng.randrange(keys):02d}"
        if k in held and rng.random() < 0.2:
            held.discard(k)
            out.append({"key": k, "value": None})
        else:
            held.add(k)
            out.append({"key": k, "value": value(rng)})
    return out


def fk_orders(seed, n):
    """Orders o00..o39, each naming a customer c00..c13 (c12 and c13 never exist) or none (one
    in ten); they change customer often; a fifth of the updates of an order held delete it."""
    rng = random.Random(seed)
    held = set()
    out = []
    for _ in range(n):
        k = f"o{rng.randrange(40):02d}"
        if k in held and rng.random() < 0.2:
            held.discard(k)
            out.append({"key": k, "value": None})
        else:
            held.add(k)
            customer = None if rng.random() < 0.1 else f"c{rng.randrange(14):02d}"
            out.append({"key": k, "value": {"customer": customer, "amount": rng.randint(1, 99)}})
    return out


def views(seed, n):
    rng = random.Random(seed)
    return [
        {"key": f"p{rng.randrange(10)}", "value": {"user": f"u{rng.randrange(15):02d}", "region": rng.choice(["eu", "us", "apac"]), "ms": rng.randint(1, 9000)}}
        for _ in range(n)
    ]


def merge_clicks(seed, n):
    """Clicks of 8 users on two topics, web and app (their sum is what the merge counts); up to 4 s
    of disorder, within the 5 s grace, so that the results do not depend on how the engines
    interleave the two topics."""
    rng = random.Random(seed)
    t = BASE
    web, app = [], []
    for _ in range(n):
        t += rng.randint(0, 300)
        u = f"u{rng.randrange(8)}"
        rec = {"key": u, "value": {"user": u, "page": rng.choice(["/home", "/cart", "/item"]), "ms": rng.randint(0, 9_000), "at": t - rng.randint(0, 4_000)}}
        (web if rng.random() < 0.5 else app).append(rec)
    return web, app


def region_orders(seed, n):
    """Orders in six regions (one, zz, that no branch takes), amounts from -50 to 2,000."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        oid = f"o{i:04d}"
        region = rng.choice(["fr", "de", "es", "us", "jp", "zz"])
        out.append({"key": oid, "value": {"id": oid, "region": region, "amount": rng.randint(-5_000, 200_000) / 100, "at": BASE + i * 50}})
    return out


def main():
    write("hopping_final", "stocks", trades(1, 3000, 0.1, 4000))
    write("tumbling_changes", "stocks", trades(2, 3000, 0.1, 6000))
    write("sliding_final", "stocks", trades(3, 1500, 0.1, 4000, tickers=8))
    write("session_final", "clicks", clicks(4, 1500))
    write("session_changes", "clicks", clicks(5, 1500))
    write("stream_table_join", "stocks", trades(6, 3000, 0.1, 2000, avoid_half_second=True))
    write("stream_table_join", "limits", limits(7, 240))
    for case, seed in [("stream_join_inner", 8), ("stream_join_left", 9), ("stream_join_outer", 10), ("stream_join_asymmetric", 13)]:
        o, p = orders_payments(seed, 600)
        write(case, "orders", o)
        write(case, "payments", p)
    write("table_filter_map", "accounts", accounts(11, 800))
    write("group_by_repartition", "views", views(12, 1500))
    rng = random.Random(26)
    votes = [f"n{i:02d}" for i in range(60) for _ in range(1 + i % 4)]
    rng.shuffle(votes)
    write("aggregate_having", "votes", [{"key": n, "value": {"name": n, "n": rng.randint(1, 9)}} for n in votes])
    rng = random.Random(25)
    write("group_by_declared_key", "events", [
        {"key": rng.randrange(7), "value": {"v1": rng.choice([10, 20, 30]), "x": rng.randint(-50, 50)}} for _ in range(900)
    ])
    web, app = merge_clicks(14, 2000)
    write("merge_windows", "web", web)
    write("merge_windows", "app", app)
    write("branch_routes", "orders", region_orders(15, 1500))
    names, cities = ["Ann", "Bob", "Cyd", "Dee", "Eve"], ["Oslo", "Rome", "Kyiv", "Lima"]
    write("table_table_join", "users", keyed_rows(16, 400, 30, lambda r: {"name": r.choice(names), "city": r.choice(cities)}))
    write("table_table_join", "scores", keyed_rows(17, 400, 30, lambda r: {"points": r.randint(0, 9)}))
    write("table_nway_join", "users", keyed_rows(22, 300, 20, lambda r: {"name": r.choice(names), "city": r.choice(cities)}))
    # u16..u19 never have scores (levels alone gives the outer join's row), u10..u13 never a level.
    write("table_nway_join", "scores", keyed_rows(23, 300, 16, lambda r: {"points": r.randint(0, 9)}))
    write("table_nway_join", "levels", [
        r for r in keyed_rows(24, 300, 20, lambda r: {"level": r.randint(1, 3)}) if not "u10" <= r["key"] <= "u13"
    ])
    write("stream_self_join", "stocks", trades(19, 1200, 0.1, 1000, tickers=10))
    write("foreign_key_join", "orders", fk_orders(20, 600))
    write("foreign_key_join", "customers", [
        dict(r, key=r["key"].replace("u", "c"))
        for r in keyed_rows(21, 200, 12, lambda r: {"name": r.choice(names), "tier": r.choice(["gold", "silver"])})
    ])
    regions = ["north", "south", "east", "west", "polar"]
    grouped = keyed_rows(18, 800, 30, lambda r: {
        "region": r.choice(regions), "balance": r.randint(-50, 250), "score": r.randint(0, 199) / 2})
    # Then every row of "polar" is deleted: the region is left without rows (it stays, count 0).
    last = {}
    for rec in grouped:
        last[rec["key"]] = rec["value"]
    grouped += [{"key": k, "value": None} for k, v in sorted(last.items()) if v and v["region"] == "polar"]
    write("table_group_by", "accounts", grouped)


if __name__ == "__main__":
    main()
