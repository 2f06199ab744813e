#!/usr/bin/env python3
"""Embedded end-to-end benchmark: examples/stats.stream over N generated trades already loaded in
the embedded log, one processing thread. Prints one table: events/s, CPU seconds, peak RSS and
state size on disk. With --partitions P the input topic has P partitions (one task each), spread
over --threads T worker threads. Usage: bench/embedded.py [--count N] [--tickers K] [--rate R]
[--threads T] [--partitions P]"""
import argparse, os, re, shutil, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--count", type=int, default=10_000_000)
ap.add_argument("--tickers", type=int, default=1000)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--partitions", type=int, default=1, help="partitions of the input topic (one task each)")
ap.add_argument("--rate", type=int, default=1000, help="trades per second of event time (streamc gen trades --rate)")
ap.add_argument("--keep", action="store_true", help="keep the state directory")
a = ap.parse_args()

subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "release", "streamc")
work = tempfile.mkdtemp(prefix="streamc-bench-")
state = os.path.join(work, "state")
data = os.path.join(work, "trades.jsonl")

def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total

with open(data, "wb") as f:
    subprocess.run([exe, "gen", "trades", "--count", str(a.count), "--tickers", str(a.tickers), "--seed", "1", "--rate", str(a.rate)], stdout=f, check=True)
t0 = time.time()
subprocess.run([exe, "--state-dir", state, "produce", "stocks", data, "--program", os.path.join(root, "examples/stats.stream"), "--partitions", str(a.partitions)], check=True, stderr=subprocess.DEVNULL)
load_s = time.time() - t0
log_bytes = du(os.path.join(state, "log"))

# /usr/bin/time reports the run's own peak RSS (getrusage over children would include cargo).
t0 = time.time()
r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", exe, "--state-dir", state, "run", os.path.join(root, "examples/stats.stream"), "--drain", "--threads", str(a.threads)],
                   stderr=subprocess.PIPE, text=True, check=True)
wall = time.time() - t0
tm = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", r.stderr)
cpu = float(tm.group(2)) + float(tm.group(3))
peak_kb = int(tm.group(4))
m = re.search(r"processed (\d+) records .*?: (\d+) out", r.stderr)
records, outs = (int(m.group(1)), int(m.group(2))) if m else (a.count, 0)
state_bytes = du(os.path.join(state, "apps"))

rows = [
    ("trades", f"{a.count:,} ({a.tickers:,} tickers, {a.rate:,} per second of event time)"),
    ("threads, partitions", f"{a.threads}, {a.partitions}"),
    ("load into embedded log", f"{load_s:.1f} s ({a.count / load_s:,.0f} records/s), {log_bytes / 1e6:,.0f} MB"),
    ("run wall time", f"{wall:.2f} s"),
    ("events/s (wall)", f"{records / wall:,.0f}"),
    ("CPU seconds", f"{cpu:.2f}"),
    ("events per CPU-second", f"{records / max(cpu, 1e-9):,.0f}"),
    ("peak RSS", f"{peak_kb / 1024:,.0f} MB"),
    ("output records", f"{outs:,}"),
    ("local state on disk", f"{state_bytes / 1e6:,.1f} MB"),
]
w = max(len(k) for k, _ in rows)
print(f"{'metric':{w}}  value")
for k, v in rows:
    print(f"{k:{w}}  {v}")
if not a.keep:
    shutil.rmtree(work, ignore_errors=True)
else:
    print(f"state kept in {state}", file=sys.stderr)
