#!/usr/bin/env python3
"""Kafka benchmark on a real broker that this script starts (dev/kafka/broker) and stops.

1. examples/stats.stream over N generated trades already in Kafka, one instance, `--drain`:
   events/s and peak RSS under at_least_once and under exactly_once.
2. For each K in --keys: bench/keys.stream (one row per key) over K records with K distinct
   keys; then a full restore of its changelog into an empty state directory (records/s), and a
   restart with that state directory intact (records restored, which should not grow with K,
   and the wall time until the drained run ends).

Prints one table. Usage: bench/kafka.py [--trades N] [--keys 1000000,5000000] [--partitions P]"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--trades", type=int, default=5_000_000)
ap.add_argument("--tickers", type=int, default=1000)
ap.add_argument("--keys", default="1000000,5000000")
ap.add_argument("--partitions", type=int, default=2)
a = ap.parse_args()

subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "release", "streamc")
work = tempfile.mkdtemp(prefix="streamc-kbench-")
env = subprocess.run([os.path.join(root, "dev/kafka/broker"), "start"], check=True, capture_output=True, text=True).stdout
vars = dict(re.findall(r"export (\w+)=(\S+)", env))
bootstrap, broker_dir = vars["STREAMC_KAFKA_BOOTSTRAP"].strip("'\""), vars["STREAMC_KAFKA_DIR"].strip("'\"")
rows = []


def timed(args, state):
    """Run streamc under /usr/bin/time: (wall s, CPU s, peak RSS MB, stderr)."""
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", exe, "--state-dir", state] + args, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit(f"streamc {' '.join(args)} failed:\n{r.stderr}")
    tm = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", r.stderr)
    return wall, float(tm.group(2)) + float(tm.group(3)), int(tm.group(4)) / 1024, r.stderr


def restored(stderr):
    m = re.search(r"(\d+) restored", stderr)
    return int(m.group(1)) if m else 0


def isolate(program, pfx):
    with open(os.path.join(root, program)) as f:
        text = f.read().replace('from "', f'from "{pfx}.').replace(' to "', f' to "{pfx}.')
    path = os.path.join(work, f"{pfx}.stream")
    with open(path, "w") as f:
        f.write(text)
    return path


def produce(topic, path, program):
    t0 = time.time()
    subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", topic, path, "--program", program, "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)
    return time.time() - t0


try:
    # 1. stats.stream under both guarantees (--trades 0 skips it).
    data = os.path.join(work, "trades.jsonl")
    if a.trades == 0:
        open(data, "w").close()
    with open(data, "wb") as f:
        subprocess.run([exe, "gen", "trades", "--count", str(a.trades), "--tickers", str(a.tickers), "--seed", "1", "--rate", "1000"], stdout=f, check=True)
    prog = isolate("examples/stats.stream", "stats")
    secs = produce("stats.stocks", data, prog)
    rows.append(("produce trades to Kafka", f"{a.trades:,} in {secs:.1f} s ({a.trades / secs:,.0f} records/s), {a.partitions} partitions"))
    for g in ["at_least_once", "exactly_once"] if a.trades else []:
        wall, cpu, rss, err = timed(["run", prog, "--drain", "--bootstrap-servers", bootstrap, "--set", f"application.id=stats-{g}", "--set", f"processing.guarantee={g}"], os.path.join(work, g))
        m = re.search(r"processed (\d+) records .*?: (\d+) out", err)
        n = int(m.group(1))
        rows.append((f"stats.stream, {g}", f"{n:,} events in {wall:.1f} s: {n / wall:,.0f} events/s, {n / cpu:,.0f} per CPU-second, peak RSS {rss:,.0f} MB, {int(m.group(2)):,} out"))
    os.remove(data)

    # 2. Restore and restart with K keys.
    for k in [int(x) for x in a.keys.split(",") if x]:
        pfx = f"keys{k}"
        prog = isolate("bench/keys.stream", pfx)
        data = os.path.join(work, f"{pfx}.jsonl")
        with open(data, "w") as f:
            for i in range(k):
                f.write(json.dumps({"ticker": f"K{i:08d}", "price": 1.0, "size": i % 1000, "ts": 1_700_000_000_000 + i}) + "\n")
        produce(f"{pfx}.stocks", data, prog)
        os.remove(data)
        args = ["run", prog, "--drain", "--bootstrap-servers", bootstrap, "--set", f"application.id={pfx}"]
        wall, cpu, rss, err = timed(args, os.path.join(work, f"{pfx}-first"))
        rows.append((f"{k:,} keys: first run", f"{wall:.1f} s, peak RSS {rss:,.0f} MB"))
        fresh = os.path.join(work, f"{pfx}-fresh")
        wall, cpu, rss, err = timed(args, fresh)
        n = restored(err)
        rates = [float(x) for x in re.findall(r"restored \d+ records .*?\(([\d.]+) records/s\)", err)]
        rows.append((f"{k:,} keys: full restore", f"{n:,} changelog records, run {wall:.1f} s, per store {', '.join(f'{r:,.0f}' for r in rates)} records/s, total {n / max(wall, 1e-9):,.0f} records/s of wall time, peak RSS {rss:,.0f} MB"))
        wall, cpu, rss, err = timed(args, fresh)
        rows.append((f"{k:,} keys: clean restart", f"{restored(err):,} records restored, resumed and drained in {wall:.1f} s"))
        shutil.rmtree(os.path.join(work, f"{pfx}-first"), ignore_errors=True)
finally:
    subprocess.run([os.path.join(root, "dev/kafka/broker"), "stop", broker_dir])

w = max(len(r[0]) for r in rows)
print(f"{'measure'.ljust(w)} | result")
print(f"{'-' * w}-|-------")
for name, value in rows:
    print(f"{name.ljust(w)} | {value}")
shutil.rmtree(work, ignore_errors=True)
