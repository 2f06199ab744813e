#!/usr/bin/env python3
"""Instructions per event by component (callgrind): examples/stats.stream over N generated trades
already loaded in the embedded log, one thread, `run --drain`, counted by valgrind's callgrind
(instructions, not seconds: the same count for the same binary and input whatever else the
machine does). Prints one table: each component's inclusive instructions per event and its share.

Usage: bench/profile.py [--count N] [--tickers K] [--program FILE] [--keep]
Builds `cargo build --profile profiling` (release with symbols) first."""
import argparse, os, re, shutil, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--count", type=int, default=100_000)
ap.add_argument("--tickers", type=int, default=1000)
ap.add_argument("--program", default=os.path.join(root, "examples/stats.stream"))
ap.add_argument("--keep", action="store_true", help="keep the work directory (callgrind.out included)")
a = ap.parse_args()

# Components, by the functions whose inclusive counts they are (the first pattern that names a
# function in the profile). Parts of one run: they do not overlap, except as noted.
COMPONENTS = [
    ("whole run", [r"PROGRAM TOTALS"]),
    ("  decoding the input records", [r"Task::decode_main\b"]),
    ("  the aggregate's update", [r"ops::aggregate::Aggregate as streamc::runtime::ops::Operator>::on_row"]),
    ("  flush: changelog entries and results, emitted", [r"flush_for_commit"]),
    ("    of which: the sink (encoding records)", [r"ops::sink::Sink as streamc::runtime::ops::Operator>::on_row"]),
    ("  the log commit (outputs and changelogs)", [r"LogCommit as streamc::runtime::run::commit::Commit>::commit"]),
    ("  local state written to sled (the writer thread)", [r"streamc::runtime::writer::write\b", r"state::Trees::write\b"]),
    ("  sled's own threads", [r"sled::threadpool::perform_work"]),
    ("  reading the input log", [r"EmbeddedFeed as streamc::runtime::run::Feed>::peek"]),
    ("  memory allocation (all of it)", [r"__rustc::__rust_alloc\b"]),
]

subprocess.run(["cargo", "build", "--profile", "profiling", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "profiling", "streamc")
work = tempfile.mkdtemp(prefix="streamc-profile-")
state = os.path.join(work, "state")
data = os.path.join(work, "trades.jsonl")
with open(data, "wb") as f:
    subprocess.run([exe, "gen", "trades", "--count", str(a.count), "--tickers", str(a.tickers), "--seed", "1"],
                   stdout=f, check=True)
subprocess.run([exe, "--state-dir", state, "produce", "stocks", data, "--program", a.program], check=True,
               stderr=subprocess.DEVNULL)
out = os.path.join(work, "callgrind.out")
r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, "--state-dir", state, "run",
                    a.program, "--drain"], stderr=subprocess.PIPE, text=True, check=True)
m = re.search(r"processed (\d+) records", r.stderr)
events = int(m.group(1)) if m else a.count
ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out], stdout=subprocess.PIPE,
                     text=True, stderr=subprocess.DEVNULL, check=True).stdout
lines = []
for line in ann.splitlines():
    m = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.*)", line)
    if m:
        lines.append((int(m.group(1).replace(",", "")), m.group(2)))
total = next(n for n, name in lines if "PROGRAM TOTALS" in name)
print(f"{events:,} events, {a.tickers:,} tickers, {os.path.basename(a.program)}: {total:,} instructions")
w = max(len(c) for c, _ in COMPONENTS)
print(f"{'component':{w}}  {'per event':>10}  {'share':>6}")
for comp, pats in COMPONENTS:
    n = 0
    for p in pats:
        found = [c for c, name in lines if re.search(p, name)]
        if found:
            n = max(found)
            break
    print(f"{comp:{w}}  {n / events:>10,.0f}  {100 * n / total:>5.1f}%")
if a.keep:
    print(f"work directory kept: {work}", file=sys.stderr)
else:
    shutil.rmtree(work, ignore_errors=True)
