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
(ticker, window) of the two outputs (integers exactly, floats within 1e-9 relative).

Usage: bench/compare.py [--trades N] [--tickers K] [--partitions P]
                        [--guarantee at_least_once|exactly_once|both] [--xmx 512m]"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--trades", type=int, default=1_000_000)
ap.add_argument("--tickers", type=int, default=1000)
ap.add_argument("--partitions", type=int, default=1)
ap.add_argument("--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once", "both"])
ap.add_argument("--xmx", default="512m", help="Kafka Streams' JVM heap (-Xmx)")
a = ap.parse_args()

subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "release", "streamc")
ks_dir = os.path.join(root, "bench", "kstreams")
subprocess.run(["mvn", "-q", "-B", "package"], cwd=ks_dir, check=True, stdout=subprocess.DEVNULL)
ks_cp = os.path.join(ks_dir, "target", "classes") + ":" + os.path.join(ks_dir, "target", "lib", "*")
jvm_flags = [f"-Xmx{a.xmx}", f"-Xms{a.xmx}", "-XX:+UseG1GC"]
work = tempfile.mkdtemp(prefix="streamc-compare-")
env = subprocess.run([os.path.join(root, "dev/kafka/broker"), "start"], check=True, capture_output=True, text=True).stdout
vars = dict(re.findall(r"export (\w+)=(\S+)", env))
bootstrap, broker_dir = vars["STREAMC_KAFKA_BOOTSTRAP"].strip("'\""), vars["STREAMC_KAFKA_DIR"].strip("'\"")


def timed(cmd):
    """Run under /usr/bin/time: (wall s, CPU s, peak RSS MB, stdout, stderr)."""
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M"] + cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}")
    tm = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", r.stderr)
    return wall, float(tm.group(2)) + float(tm.group(3)), int(tm.group(4)) / 1024, r.stdout, r.stderr


def consume(topic):
    r = subprocess.run([exe, "--state-dir", os.path.join(work, "c"), "consume", topic, "--from-beginning", "--bootstrap-servers", bootstrap], capture_output=True, text=True)
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


try:
    data = os.path.join(work, "trades.jsonl")
    with open(data, "w") as f:
        subprocess.run([exe, "gen", "trades", "--count", str(a.trades), "--tickers", str(a.tickers)], stdout=f, check=True)
    with open(os.path.join(root, "examples", "stats.stream")) as f:
        stats = f.read()
    program = os.path.join(work, "cmp.stream")
    with open(program, "w") as f:
        f.write(stats.replace('from "stocks"', 'from "cmp.stocks"').replace('to "stock-stats"', 'to "cmp.stock-stats"'))
    subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", "cmp.stocks", data, "--program", program, "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)

    rows = []
    guarantees = ["at_least_once", "exactly_once"] if a.guarantee == "both" else [a.guarantee]
    for g in guarantees:
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
            subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", out_k, "/dev/null", "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)
            k = timed(["java"] + jvm_flags + ["-cp", ks_cp, "dev.streamc.bench.StockStats", bootstrap, f"{app}-ks", "cmp.stocks", out_k, g, os.path.join(work, app + "-ks")])
            res[run] = (s, k, out_s, out_k, app)
        (s, k, out_s, out_k, app) = res["measured"]
        so, ko = consume(out_s) or [], consume(out_k) or []
        def count(topic):
            # Records written (end offsets): Kafka Streams' window changelogs carry a retention
            # that deletes these event-time-2023 records, so consuming them would undercount.
            r = subprocess.run(["java", "-cp", ks_cp, "dev.streamc.bench.StockStats", "--end-offsets", bootstrap, topic], capture_output=True, text=True)
            m = re.search(r"END (\d+)", r.stdout)
            return int(m.group(1)) if m else "?"

        sc = count(f"{app}-stock_stats-aggregate-changelog")
        kc = count(f"{app}-ks-stats-store-changelog")
        fs, fk = finals(so), finals(ko)
        diffs = [key for key in set(fs) | set(fk) if key not in fs or key not in fk or not all(same(fs[key][f], fk[key][f]) for f in ["trades", "volume", "avg_price", "low", "high", "window_end"])]
        rows.append((g, s, k, len(so), len(ko), sc, kc, len(fs), diffs))
finally:
    subprocess.run([os.path.join(root, "dev/kafka/broker"), "stop", broker_dir], check=False)
    shutil.rmtree(work, ignore_errors=True)

n = a.trades
print(f"\n{n:,} trades, {a.tickers} tickers, {a.partitions} partition(s); Kafka Streams 4.4.0 on java {' '.join(jvm_flags)}; one processing thread each, commits every 1 s")
print(f"{'':34}{'streamc':>14}{'Kafka Streams':>16}{'ratio':>10}")
for g, s, k, so, ko, sc, kc, nfin, diffs in rows:
    print(f"-- {g}")
    line = lambda name, x, y, fmt, better_high=True: print(f"{name:34}{fmt(x):>14}{fmt(y):>16}{(x / y if better_high else y / x) if x and y else 0:>9.1f}x")
    line("wall seconds (process)", s[0], k[0], lambda v: f"{v:.2f}", False)
    line("events/s", n / s[0], n / k[0], lambda v: f"{v:,.0f}")
    line("CPU seconds", s[1], k[1], lambda v: f"{v:.2f}", False)
    line("events per CPU-second", n / s[1], n / k[1], lambda v: f"{v:,.0f}")
    line("peak RSS MB", s[2], k[2], lambda v: f"{v:.0f}", False)
    print(f"{'output records':34}{so:>14,}{ko:>16,}")
    print(f"{'changelog records (written)':34}{sc:>14,}{kc:>16,}" if isinstance(sc, int) and isinstance(kc, int) else f"{'changelog records (written)':34}{sc!s:>14}{kc!s:>16}")
    print(f"final (ticker, window) results: {nfin:,}; " + ("identical (integers exactly, floats within 1e-9)" if not diffs else f"{len(diffs)} DIFFER, e.g. {sorted(diffs)[:3]}"))
