#!/usr/bin/env python3
"""Local state benchmark, embedded default: bench/keys.stream (one table row per ticker: count and
summed size) over K distinct keys, one record each, already loaded in the embedded log.

For each binary given (default: this repository's release build), in one run:
  first run     run --drain over the K records: records/s (wall), CPU seconds, peak RSS
  restart       one more record, state intact: the run's wall time (start to exit)
  restore       local state deleted (<state-dir>/apps removed, log kept), run --drain: the
                restore's own records/s (its log line), wall time, peak RSS
  state on disk local state (sled) against the changelog's files (a record per key: about the
                rows' encoded size, plus the log's framing)
and the final per-key outputs of the binaries compared (they must be equal).

Several --exe give columns side by side, with the ratio of the last to the first: before/after
figures measured in one run on the same machine. --set passes settings to every run.

--shuffle writes the keys in a random order (fixed seed) instead of key order: every flight of
local state then lands all over the store's pages, the worst case for writing it.

Usage: bench/state.py [--keys K] [--shuffle] [--exe PATH]... [--set KEY=VALUE]... [--keep]"""
import argparse, json, os, random, re, shutil, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--keys", type=int, default=1_000_000)
ap.add_argument("--exe", action="append", default=[], help="a streamc binary (repeatable); default: target/release/streamc, built")
ap.add_argument("--set", action="append", default=[], dest="sets", help="KEY=VALUE for every run (repeatable)")
ap.add_argument("--keep", action="store_true", help="keep the work directory")
ap.add_argument("--shuffle", action="store_true", help="write the keys in a random order")
a = ap.parse_args()

if not a.exe:
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
    a.exe = [os.path.join(root, "target", "release", "streamc")]
work = tempfile.mkdtemp(prefix="streamc-state-bench-")
prog = os.path.join(root, "bench", "keys.stream")
data = os.path.join(work, "keys.jsonl")
with open(data, "w") as f:
    order = list(range(a.keys))
    if a.shuffle:
        random.Random(1).shuffle(order)
    for n, i in enumerate(order):
        f.write(json.dumps({"ticker": f"K{i:08d}", "price": 1.0, "size": i % 1000, "ts": 1_700_000_000_000 + n}) + "\n")
extra = os.path.join(work, "extra.jsonl")
with open(extra, "w") as f:
    f.write(json.dumps({"ticker": "K00000000", "price": 1.0, "size": 5, "ts": 1_700_000_000_000 + a.keys}) + "\n")


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for fn in files:
            try:
                total += os.path.getsize(os.path.join(d, fn))
            except OSError:
                pass
    return total


def timed(cmd):
    """(wall s, CPU s, peak RSS MB, stderr) of one command, measured by /usr/bin/time."""
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M"] + cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    tm = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", r.stderr)
    return wall, float(tm.group(2)) + float(tm.group(3)), int(tm.group(4)) / 1024, r.stderr


def bench(exe, n):
    state = os.path.join(work, f"state-{n}")
    sets = []
    for s in a.sets:
        sets += ["--set", s]
    subprocess.run([exe, "--state-dir", state, "produce", "stocks", data, "--program", prog], check=True, stderr=subprocess.DEVNULL)
    run = [exe, "--state-dir", state, "run", prog, "--drain"] + sets
    first = timed(run)
    # The rows as the changelog holds them: its files (one record per key here, so about the
    # live keys and values, plus the log's framing of each record).
    rows = sum(du(os.path.join(state, "log", "topics", t)) for t in os.listdir(os.path.join(state, "log", "topics")) if t.endswith("-changelog"))
    disk = du(os.path.join(state, "apps"))
    subprocess.run([exe, "--state-dir", state, "produce", "stocks", extra, "--program", prog], check=True, stderr=subprocess.DEVNULL)
    restart = timed(run)
    shutil.rmtree(os.path.join(state, "apps"))
    restore = timed(run)
    m = re.findall(r"restored (\d+) records into .*? in ([\d.]+)s", restore[3])
    restored = sum(int(x) for x, _ in m)
    restore_s = max((float(s) for _, s in m), default=0.0)
    out = subprocess.run([exe, "--state-dir", state, "consume", "per-key", "--from-beginning", "--exit-at-end"], capture_output=True, text=True, check=True).stdout
    finals = {}
    for line in out.splitlines():
        r = json.loads(line)
        finals[r["key"]] = r["value"]
    return {
        "first run records/s (wall)": a.keys / first[0],
        "first run wall s": first[0],
        "first run CPU s": first[1],
        "first run peak RSS MB": first[2],
        "restart wall s (state intact)": restart[0],
        "restart peak RSS MB": restart[2],
        "restored records": restored,
        "restore records/s (its log line)": restored / restore_s if restore_s else 0,
        "restore run wall s": restore[0],
        "restore run peak RSS MB": restore[2],
        "local state on disk MB": disk / 1e6,
        "changelog on disk MB": rows / 1e6,
        "local state / changelog": disk / max(rows, 1),
    }, finals


try:
    results = [bench(exe, n) for n, exe in enumerate(a.exe)]
    print(f"-- bench/state.py: {a.keys:,} distinct keys{' in random order' if a.shuffle else ''}, bench/keys.stream, embedded, settings {a.sets or 'default'}")
    names = [os.path.basename(os.path.dirname(os.path.dirname(e))) + "/" + os.path.basename(e) if len(a.exe) == 1 else e for e in a.exe]
    print(f"{'':34}" + "".join(f"{n[-22:]:>24}" for n in names) + ("   last/first" if len(a.exe) > 1 else ""))
    for k in results[0][0]:
        vals = [r[0][k] for r in results]
        line = f"{k:34}" + "".join(f"{v:>24,.2f}" if isinstance(v, float) else f"{v:>24,}" for v in vals)
        if len(vals) > 1 and vals[0]:
            line += f"{vals[-1] / vals[0]:>14.2f}x"
        print(line)
    same = all(r[1] == results[0][1] for r in results)
    print(f"final per-key outputs: {len(results[0][1]):,} keys, {'identical across binaries' if same else 'DIFFERENT'}")
    if not same:
        sys.exit(1)
finally:
    if a.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
