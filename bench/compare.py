#!/usr/bin/env python3
"""streamc against Kafka Streams on the same broker and the same data.

Generates N trades (streamc gen, deterministic), loads them into one topic of a broker this
script starts (dev/kafka/broker), then runs, one after the other, each reading the whole topic
from the start with a fresh group and one processing thread, commits every second:
  - `streamc run examples/stats.stream --drain` (release build), and
  - bench/kstreams (Kafka Streams of the broker's version, Jackson, RocksDB, default cache), the
    same computation, on a JVM with a fixed -Xmx;
each once as a warm-up (discarded) and once measured, under /usr/bin/time. Prints one table:
wall seconds and events/s (process start to exit, output complete), CPU seconds, events per
CPU-second, peak RSS, output and changelog records, and the ratios; then compares every final
(ticker, window) of the two outputs (integers exactly, floats within 1e-9 relative). The same
trades also run on streamc's embedded default (no broker), in a column of their own.

Avro (--avro, the default; --no-avro skips it): the same trades as Avro values in the Confluent
wire format through a schema registry this script starts (dev/registry/registry, Apicurio
Registry), at_least_once: streamc with `value avro` and `to … avro`, against Kafka Streams with
Apicurio's Avro serde (generic records, the same wire format and schema ids); a row of its own,
its final windows compared like the JSON ones.

Restore (--restore-keys K, 0 skips it): bench/keys.stream (per ticker: count and summed size,
a key-value store) over K records with K distinct tickers, in both, then each restarted with
its local state directory deleted, so that it restores the K-key changelog before it can go
on: a warm-up restore (discarded), then a measured one. Both final per-ticker outputs are
compared, and the restored record counts reported. The embedded default restores from its
own log's changelog the same way. Two rates: over the whole process (start, group join,
restore, local state written, exit), and to ready, when the restore has ended and the task can
process again (streamc's last "restored ... records into" line, timed from the process's spawn;
Kafka Streams' restore end, timed from its main(), so after the JVM has started).

--xmx-search 128m,192m,... first runs Kafka Streams alone (at_least_once) at each heap size
and prints its events/s, to find the smallest -Xmx at full speed; then --xmx is used as given.

Usage: bench/compare.py [--trades N] [--tickers K] [--partitions P] [--restore-keys K] [--no-avro]
                        [--guarantee at_least_once|exactly_once|both] [--xmx 192m]
                        [--xmx-search 128m,256m,512m]"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--trades", type=int, default=1_000_000)
ap.add_argument("--tickers", type=int, default=1000)
ap.add_argument("--partitions", type=int, default=1)
ap.add_argument("--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once", "both"])
ap.add_argument("--xmx", default="192m", help="Kafka Streams' JVM heap (-Xmx); 192m: the smallest at full speed here (--xmx-search)")
ap.add_argument("--xmx-search", default="", help="heap sizes to try first, comma-separated")
ap.add_argument("--restore-keys", type=int, default=1_000_000)
ap.add_argument("--avro", action=argparse.BooleanOptionalAction, default=True, help="the Avro row (a schema registry)")
a = ap.parse_args()

subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "release", "streamc")
ks_dir = os.path.join(root, "bench", "kstreams")
subprocess.run(["mvn", "-q", "-B", "package"], cwd=ks_dir, check=True, stdout=subprocess.DEVNULL)
ks_cp = os.path.join(ks_dir, "target", "classes") + ":" + os.path.join(ks_dir, "target", "lib", "*")
def jvm(xmx):
    return [f"-Xmx{xmx}", f"-Xms{xmx}", "-XX:+UseG1GC"]


jvm_flags = jvm(a.xmx)
work = tempfile.mkdtemp(prefix="streamc-compare-")
env = subprocess.run([os.path.join(root, "dev/kafka/broker"), "start"], check=True, capture_output=True, text=True).stdout
vars = dict(re.findall(r"export (\w+)=(\S+)", env))
bootstrap, broker_dir = vars["STREAMC_KAFKA_BOOTSTRAP"].strip("'\""), vars["STREAMC_KAFKA_DIR"].strip("'\"")


def timed(cmd, mark=None):
    """Run under /usr/bin/time: (wall s, CPU s, peak RSS MB, stdout, stderr, s from start to the
    last stderr line holding `mark`, or None)."""
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(["/usr/bin/time", "-f", "TIME %e %U %S %M"] + cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        err, marked = [], None
        for line in p.stderr:
            err.append(line)
            if mark and mark in line:
                marked = time.time() - t0
        p.wait()
        wall = time.time() - t0
        out.seek(0)
        stdout, stderr = out.read(), "".join(err)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{stderr[-4000:]}")
    tm = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", stderr)
    return wall, float(tm.group(2)) + float(tm.group(3)), int(tm.group(4)) / 1024, stdout, stderr, marked


def consume(topic, *extra):
    r = subprocess.run([exe, "--state-dir", os.path.join(work, "c"), "consume", topic, "--from-beginning", "--exit-at-end", "--bootstrap-servers", bootstrap, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"cannot read {topic}: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return [json.loads(l) for l in r.stdout.splitlines()]


def finals(records):
    """The last value of every (ticker, window_start)."""
    out = {}
    for r in records:
        v = r["value"]
        if isinstance(v, dict):
            out[(v["ticker"], v["window_start"])] = v
    return out


def same(x, y):
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    return abs(float(x) - float(y)) <= 1e-9 * max(abs(float(x)), abs(float(y)), 1e-300)


def ks(xmx, app, inp, out, g, state, *mode):
    return timed(["java"] + jvm(xmx) + ["-cp", ks_cp, "dev.streamc.bench.StockStats", bootstrap, app, inp, out, g, state] + list(mode))


def topic(name):
    """Create an output topic with the input's partition count (Kafka Streams does not)."""
    subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", name, "/dev/null", "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)


def count(topic):
    # Records written (end offsets): Kafka Streams' window changelogs carry a retention
    # that deletes these event-time-2023 records, so consuming them would undercount.
    r = subprocess.run(["java", "-cp", ks_cp, "dev.streamc.bench.StockStats", "--end-offsets", bootstrap, topic], capture_output=True, text=True)
    m = re.search(r"END (\d+)", r.stdout)
    return int(m.group(1)) if m else "?"


def restored(stderr):
    return sum(int(x) for x in re.findall(r"(\d+) restored", stderr))


rows, embedded, search, restore = [], None, [], None
registry_dir = None
try:
    data = os.path.join(work, "trades.jsonl")
    with open(data, "w") as f:
        subprocess.run([exe, "gen", "trades", "--count", str(a.trades), "--tickers", str(a.tickers)], stdout=f, check=True)
    with open(os.path.join(root, "examples", "stats.stream")) as f:
        stats = f.read()
    program = os.path.join(work, "cmp.stream")
    with open(program, "w") as f:
        f.write(stats.replace('from "stocks"', 'from "cmp.stocks"').replace('to "stock-stats"', 'to "cmp.stock-stats"'))
    if a.trades:
        subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", "cmp.stocks", data, "--program", program, "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)

    # The smallest heap at full speed: Kafka Streams alone at each size.
    for i, xmx in enumerate(x for x in a.xmx_search.split(",") if x):
        out_k = f"cmp.xmx{i}.kstreams"
        topic(out_k)
        k = ks(xmx, f"cmp-xmx{i}-ks", "cmp.stocks", out_k, "at_least_once", os.path.join(work, f"xmx{i}"))
        search.append((xmx, a.trades / k[0], a.trades / k[1], k[2]))

    # streamc on its embedded default: the same trades in the local log, no broker.
    if a.trades:
        emb = os.path.join(work, "embedded")
        subprocess.run([exe, "--state-dir", emb, "produce", "cmp.stocks", data, "--program", program, "--partitions", str(a.partitions)], check=True, stderr=subprocess.DEVNULL)
        for run in ["warmup", "measured"]:
            shutil.rmtree(os.path.join(emb, "apps"), ignore_errors=True)
            e = timed([exe, "--state-dir", emb, "run", program, "--drain", "--set", f"application.id=cmp-{run}", "--set", "commit.interval_ms=1000"])
        m = re.search(r": (\d+) out", e[4])
        embedded = (e, int(m.group(1)) if m else "?")

    guarantees = ["at_least_once", "exactly_once"] if a.guarantee == "both" else [a.guarantee]
    for g in guarantees if a.trades else []:
        res = {}
        for run in ["warmup", "measured"]:
            app = f"cmp-{g}-{run}"
            # streamc
            out_s = f"cmp.{app}.streamc"
            prog = os.path.join(work, f"{app}.stream")
            with open(prog, "w") as f:
                f.write(stats.replace('from "stocks"', 'from "cmp.stocks"').replace('to "stock-stats"', f'to "{out_s}"'))
            s = timed([exe, "--state-dir", os.path.join(work, app), "run", prog, "--drain", "--bootstrap-servers", bootstrap,
                       "--set", f"application.id={app}", "--set", f"processing.guarantee={g}", "--set", "commit.interval_ms=1000"])
            # Kafka Streams
            out_k = f"cmp.{app}.kstreams"
            topic(out_k)
            k = ks(a.xmx, f"{app}-ks", "cmp.stocks", out_k, g, os.path.join(work, app + "-ks"))
            res[run] = (s, k, out_s, out_k, app)
        (s, k, out_s, out_k, app) = res["measured"]
        so, ko = consume(out_s) or [], consume(out_k) or []
        sc = count(f"{app}-stock_stats-aggregate-changelog")
        kc = count(f"{app}-ks-stats-store-changelog")
        fs, fk = finals(so), finals(ko)
        diffs = [key for key in set(fs) | set(fk) if key not in fs or key not in fk or not all(same(fs[key][f], fk[key][f]) for f in ["trades", "volume", "avg_price", "low", "high", "window_end"])]
        rows.append((g, s, k, len(so), len(ko), sc, kc, len(fs), diffs))

    # Avro values through a schema registry, at_least_once.
    if a.avro and a.trades:
        renv = subprocess.run([os.path.join(root, "dev/registry/registry"), "start"], check=True, capture_output=True, text=True).stdout
        rvars = dict(re.findall(r"export (\w+)=(\S+)", renv))
        registry_url, registry_dir = rvars["STREAMC_REGISTRY_URL"].strip("'\""), rvars["STREAMC_REGISTRY_DIR"].strip("'\"")
        # Apicurio's serde speaks the registry's own API; the ids are the Confluent-compatible API's.
        registry_v2 = registry_url.replace("/apis/ccompat/v7", "/apis/registry/v2")
        reg = ["--set", f"schema.registry.url={registry_url}"]
        avro_stats = stats.replace("value  json {", "value  avro {").replace('from "stocks"', 'from "cmp.stocks.avro"')
        aprog = os.path.join(work, "avro-in.stream")
        with open(aprog, "w") as f:
            f.write(avro_stats)
        subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", "cmp.stocks.avro", data, "--program", aprog, "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap] + reg, check=True, stderr=subprocess.DEVNULL)
        res = {}
        for run in ["warmup", "measured"]:
            app = f"cmp-avro-{run}"
            out_s, out_k = f"cmp.{app}.streamc", f"cmp.{app}.kstreams"
            prog = os.path.join(work, f"{app}.stream")
            with open(prog, "w") as f:
                f.write(avro_stats.replace('to "stock-stats" json', f'to "{out_s}" avro'))
            s = timed([exe, "--state-dir", os.path.join(work, app), "run", prog, "--drain", "--bootstrap-servers", bootstrap,
                       "--set", f"application.id={app}", "--set", "commit.interval_ms=1000"] + reg)
            topic(out_k)
            k = ks(a.xmx, f"{app}-ks", "cmp.stocks.avro", out_k, "at_least_once", os.path.join(work, app + "-ks"), "avro", registry_v2)
            res[run] = (s, k, out_s, out_k, app)
        (s, k, out_s, out_k, app) = res["measured"]
        so, ko = consume(out_s, *reg) or [], consume(out_k, *reg) or []
        sc = count(f"{app}-stock_stats-aggregate-changelog")
        kc = count(f"{app}-ks-stats-store-changelog")
        fs, fk = finals(so), finals(ko)
        diffs = [key for key in set(fs) | set(fk) if key not in fs or key not in fk or not all(same(fs[key][f], fk[key][f]) for f in ["trades", "volume", "avg_price", "low", "high", "window_end"])]
        rows.append(("at_least_once, Avro values (schema registry)", s, k, len(so), len(ko), sc, kc, len(fs), diffs))
    os.remove(data)

    # Restore of K keys after the local state directory is deleted.
    if a.restore_keys:
        K = a.restore_keys
        data = os.path.join(work, "keys.jsonl")
        with open(data, "w") as f:
            for i in range(K):
                f.write(json.dumps({"ticker": f"K{i:08d}", "price": 1.0, "size": i % 1000, "ts": 1_700_000_000_000 + i}) + "\n")
        with open(os.path.join(root, "bench", "keys.stream")) as f:
            keys = f.read().replace('from "stocks"', 'from "cmp.keys"').replace('to "per-key"', 'to "cmp.keys.streamc"')
        kprog = os.path.join(work, "keys.stream")
        with open(kprog, "w") as f:
            f.write(keys)
        subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", "cmp.keys", data, "--program", kprog, "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)
        sargs = ["run", kprog, "--drain", "--bootstrap-servers", bootstrap, "--set", "application.id=cmp-keys", "--set", "commit.interval_ms=1000"]
        first_s = timed([exe, "--state-dir", os.path.join(work, "keys-first")] + sargs)
        topic("cmp.keys.kstreams")
        first_k = ks(a.xmx, "cmp-keys-ks", "cmp.keys", "cmp.keys.kstreams", "at_least_once", os.path.join(work, "keys-first-ks"), "keys")
        for run in ["warmup", "measured"]:
            # A fresh (empty) state directory each time: the whole changelog is restored.
            s = timed([exe, "--state-dir", os.path.join(work, f"keys-{run}")] + sargs, "records into")
            k = ks(a.xmx, "cmp-keys-ks", "cmp.keys", "cmp.keys.kstreams", "at_least_once", os.path.join(work, f"keys-{run}-ks"), "keys", "restore")
        km = re.search(r"RESTORED (\d+) ([\d.]+)", k[3])
        # The embedded default: the changelog in its own log, the local state deleted.
        emb = os.path.join(work, "keys-embedded")
        subprocess.run([exe, "--state-dir", emb, "produce", "cmp.keys", data, "--program", kprog, "--partitions", str(a.partitions)], check=True, stderr=subprocess.DEVNULL)
        eargs = ["run", kprog, "--drain", "--set", "application.id=cmp-keys", "--set", "commit.interval_ms=1000"]
        timed([exe, "--state-dir", emb] + eargs)
        for run in ["warmup", "measured"]:
            shutil.rmtree(os.path.join(emb, "apps"))
            e = timed([exe, "--state-dir", emb] + eargs, "records into")
        os.remove(data)
        per = lambda recs, key: {r["key"]: (r["value"]["trades"], r["value"]["volume"]) for r in recs if isinstance(r.get("value"), dict)}
        ps, pk = per(consume("cmp.keys.streamc") or [], "ticker"), per(consume("cmp.keys.kstreams") or [], "ticker")
        kdiff = sum(1 for x in set(ps) | set(pk) if ps.get(x) != pk.get(x))
        restore = (K, first_s, first_k, s, k, restored(s[4]), int(km.group(1)) if km else "?", float(km.group(2)) if km else 0, e, restored(e[4]), len(ps), kdiff)
finally:
    if registry_dir:
        subprocess.run([os.path.join(root, "dev/registry/registry"), "stop", registry_dir], check=False)
    subprocess.run([os.path.join(root, "dev/kafka/broker"), "stop", broker_dir], check=False)
    shutil.rmtree(work, ignore_errors=True)

n = a.trades
if search:
    print(f"\nKafka Streams alone, at_least_once, {n:,} trades, by heap size (-Xms = -Xmx, G1):")
    for xmx, evs, evcpu, rss in search:
        print(f"  -Xmx{xmx:>6}: {evs:>10,.0f} events/s {evcpu:>10,.0f} events/CPU-s  peak RSS {rss:,.0f} MB")
print(f"\n{n:,} trades, {a.tickers} tickers, {a.partitions} partition(s); Kafka Streams 4.4.0 on java {' '.join(jvm_flags)}; one processing thread each, commits every 1 s")
print(f"{'':34}{'streamc':>14}{'Kafka Streams':>16}{'ratio':>10}{'streamc embedded':>20}")
for g, s, k, so, ko, sc, kc, nfin, diffs in rows:
    print(f"-- {g}")
    emb = embedded if g == "at_least_once" and embedded else None

    def line(name, x, y, fmt, better_high=True, z=None):
        r = (x / y if better_high else y / x) if x and y else 0
        print(f"{name:34}{fmt(x):>14}{fmt(y):>16}{r:>9.1f}x" + (f"{fmt(z):>20}" if z is not None else ""))

    line("wall seconds (process)", s[0], k[0], lambda v: f"{v:.2f}", False, emb and emb[0][0])
    line("events/s", n / s[0], n / k[0], lambda v: f"{v:,.0f}", True, emb and n / emb[0][0])
    line("CPU seconds", s[1], k[1], lambda v: f"{v:.2f}", False, emb and emb[0][1])
    line("events per CPU-second", n / s[1], n / k[1], lambda v: f"{v:,.0f}", True, emb and n / emb[0][1])
    line("peak RSS MB", s[2], k[2], lambda v: f"{v:.0f}", False, emb and emb[0][2])
    print(f"{'output records':34}{so:>14,}{ko:>16,}" + (f"{emb[1]:>30,}" if emb and isinstance(emb[1], int) else ""))
    print(f"{'changelog records (written)':34}{sc:>14,}{kc:>16,}" if isinstance(sc, int) and isinstance(kc, int) else f"{'changelog records (written)':34}{sc!s:>14}{kc!s:>16}")
    print(f"final (ticker, window) results: {nfin:,}; " + ("identical (integers exactly, floats within 1e-9)" if not diffs else f"{len(diffs)} DIFFER, e.g. {sorted(diffs)[:3]}"))
if restore:
    K, fs, fk, s, k, sn, kn, ksecs, e, en, nkeys, kdiff = restore
    print(f"-- restore of {K:,} keys (bench/keys.stream), local state directory deleted")
    print(f"{'first run: wall seconds':34}{fs[0]:>14.2f}{fk[0]:>16.2f}{fk[0] / fs[0]:>9.1f}x")
    print(f"{'changelog records restored':34}{sn:>14,}{kn!s:>16}")
    print(f"{'restart: wall seconds (process)':34}{s[0]:>14.2f}{k[0]:>16.2f}{k[0] / s[0]:>9.1f}x{e[0]:>20.2f}")
    print(f"{'restored records/s (process)':34}{sn / s[0]:>14,.0f}{(kn / k[0] if isinstance(kn, int) else 0):>16,.0f}{(sn / s[0]) / (kn / k[0]) if isinstance(kn, int) and kn else 0:>9.1f}x{en / e[0]:>20,.0f}")
    # Ready to process: streamc's last "restored ... records into" line, counted from the spawn
    # of the process; Kafka Streams' restore end, counted from its main() (after the JVM's start).
    if s[5] and ksecs:
        print(f"{'restore ended, s from start':34}{s[5]:>13.2f}s{ksecs:>15.2f}s{ksecs / s[5]:>9.1f}x" + (f"{e[5]:>19.2f}s" if e[5] else ""))
        print(f"{'restored records/s (to ready)':34}{sn / s[5]:>14,.0f}{(kn / ksecs if isinstance(kn, int) else 0):>16,.0f}{(sn / s[5]) / (kn / ksecs) if isinstance(kn, int) and kn else 0:>9.1f}x" + (f"{en / e[5]:>20,.0f}" if e[5] else ""))
    print(f"{'restart: CPU seconds':34}{s[1]:>14.2f}{k[1]:>16.2f}{k[1] / s[1]:>9.1f}x{e[1]:>20.2f}")
    print(f"{'restart: peak RSS MB':34}{s[2]:>14.0f}{k[2]:>16.0f}{k[2] / s[2]:>9.1f}x{e[2]:>20.0f}")
    print(f"final per-ticker results: {nkeys:,}; " + ("identical" if not kdiff else f"{kdiff} DIFFER"))
