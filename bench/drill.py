#!/usr/bin/env python3
"""The kill drill: SIGKILLs at random points of a run, compared with an uninterrupted run.

For each backend (the embedded default, and Apache Kafka under exactly_once on a broker this
script starts with dev/kafka/broker unless STREAMC_KAFKA_BOOTSTRAP is set):

  1. N trades (streamc gen, deterministic) and examples/stats.stream;
  2. the reference: one application that reads all of them in one uninterrupted `run --drain`;
  3. the drill: another application over the same input, which arrives in K+1 parts (one before
     each start, so that most kills fall while there is input to process). K times: start
     `run`, wait a random time (0 to --max-delay seconds once the process is up: on Kafka, once
     it has its partitions), SIGKILL it. Then one `run --drain` to the end;
  4. both outputs are read (committed records only) and compared final window for final window:
     the last value of every (ticker, window) must be equal, and no window may be missing or
     extra.

Prints, per backend: kills, kills that landed while the instance held its partitions, records,
windows compared, differences, and wall time. Exit status 1 if any backend differs.

Not part of the test command (it takes minutes); the README gives its figures.

Usage: bench/drill.py [--trades 1000000] [--kills 100] [--backend embedded|kafka|both]
                      [--max-delay 2.0] [--seed 7]"""
import argparse, json, os, random, re, shutil, signal, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--trades", type=int, default=1_000_000)
ap.add_argument("--tickers", type=int, default=1000)
ap.add_argument("--kills", type=int, default=100)
ap.add_argument("--backend", default="both", choices=["embedded", "kafka", "both"])
ap.add_argument("--partitions", type=int, default=4)
ap.add_argument("--max-delay", type=float, default=2.0, help="longest wait before a kill, in seconds")
ap.add_argument("--seed", type=int, default=7)
a = ap.parse_args()
rng = random.Random(a.seed)

subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "release", "streamc")
work = tempfile.mkdtemp(prefix="streamc-drill-")
trades = os.path.join(work, "trades.jsonl")
with open(trades, "w") as f:
    subprocess.run([exe, "gen", "trades", "--count", str(a.trades), "--tickers", str(a.tickers), "--seed", "11"],
                   stdout=f, check=True)
lines = open(trades).read().splitlines(keepends=True)
source = open(os.path.join(root, "examples", "stats.stream")).read()


def program(app, topic_prefix):
    """examples/stats.stream with its source under `topic_prefix` and its sink under `app`."""
    text = source.replace('from "', f'from "{topic_prefix}').replace(' to "', f' to "{app}.')
    path = os.path.join(work, f"{app}.stream")
    open(path, "w").write(text)
    return path


def parts(k):
    """The input in k parts of (nearly) equal size, as files."""
    per = -(-len(lines) // k)
    out = []
    for i in range(k):
        p = os.path.join(work, f"part{i}.jsonl")
        open(p, "w").writelines(lines[i * per:(i + 1) * per])
        out.append(p)
    return out


def finals(state, topic, backend_args):
    """(key, window_start) → last value, from the committed records of `topic`."""
    out = subprocess.run([exe, "--state-dir", state, "consume", topic, "--from-beginning", "--exit-at-end", *backend_args],
                         check=True, capture_output=True, text=True).stdout
    last = {}
    for l in out.splitlines():
        r = json.loads(l)
        last[(json.dumps(r["key"]), r["value"]["window_start"])] = r["value"]
    return last


def compare(ref, got):
    missing = [k for k in ref if k not in got]
    extra = [k for k in got if k not in ref]
    differ = [k for k in ref if k in got and ref[k] != got[k]]
    return missing, extra, differ


def drill(name, backend_args, produce_args, wait_joined):
    """Reference run and drilled run on one backend; returns a result row."""
    t0 = time.time()
    base = os.path.join(work, name)
    os.makedirs(base)
    src_prefix = f"drill{os.getpid()}{name}."
    topic = src_prefix + "stocks"
    ref_app, drill_app = f"ref{os.getpid()}{name}", f"drill{os.getpid()}{name}"
    ref_prog, drill_prog = program(ref_app, src_prefix), program(drill_app, src_prefix)
    # On the embedded log every run shares one state directory (the log); on Kafka each run has its own.
    p_state = os.path.join(base, "p")
    sets = lambda app: ["--set", f"application.id={app}", "--set", "commit.interval_ms=200"] + backend_args
    pieces = parts(a.kills + 1)
    # Reference: all the input, one run.
    for p in pieces:
        subprocess.run([exe, "--state-dir", p_state, "produce", topic, p, "--program", ref_prog,
                        "--partitions", str(a.partitions), *produce_args], check=True, capture_output=True)
    ref_state = p_state if not wait_joined else os.path.join(base, "ref")
    subprocess.run([exe, "--state-dir", ref_state, "run", ref_prog, "--drain", *sets(ref_app)], check=True,
                   capture_output=True)
    ref = finals(p_state if not wait_joined else ref_state, f"{ref_app}.stock-stats", backend_args)
    # The drill: the same input again, under another topic, in parts.
    topic2 = src_prefix + "stocks2"
    drill_prog_text = open(drill_prog).read().replace(f'"{topic}"', f'"{topic2}"')
    open(drill_prog, "w").write(drill_prog_text)
    d_state = p_state if not wait_joined else os.path.join(base, "drill")
    log = os.path.join(base, "drill.log")
    landed = 0
    for i in range(a.kills):
        subprocess.run([exe, "--state-dir", p_state, "produce", topic2, pieces[i], "--program", drill_prog,
                        "--partitions", str(a.partitions), *produce_args], check=True, capture_output=True)
        with open(log, "a") as lf:
            lf.write(f"--- start {i}\n")
            lf.flush()
            proc = subprocess.Popen([exe, "--state-dir", d_state, "run", drill_prog, *sets(drill_app)],
                                    stdout=subprocess.DEVNULL, stderr=lf)
        start = time.time()
        if wait_joined:
            # On Kafka: once this process holds its partitions (or after 60 s).
            while time.time() - start < 60 and proc.poll() is None:
                text = open(log).read()
                if text.rsplit(f"--- start {i}\n", 1)[-1].count("assigned"):
                    landed += 1
                    break
                time.sleep(0.05)
        else:
            landed += 1
        time.sleep(rng.uniform(0, a.max_delay))
        if proc.poll() is not None:
            sys.exit(f"the drilled run exited by itself (status {proc.returncode}); see {log}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    subprocess.run([exe, "--state-dir", p_state, "produce", topic2, pieces[a.kills], "--program", drill_prog,
                    "--partitions", str(a.partitions), *produce_args], check=True, capture_output=True)
    with open(log, "a") as lf:
        subprocess.run([exe, "--state-dir", d_state, "run", drill_prog, "--drain", *sets(drill_app)], check=True,
                       stdout=subprocess.DEVNULL, stderr=lf)
    got = finals(p_state if not wait_joined else d_state, f"{drill_app}.stock-stats", backend_args)
    missing, extra, differ = compare(ref, got)
    return {
        "backend": name, "kills": a.kills, "landed": landed, "records": len(lines), "windows": len(ref),
        "missing": len(missing), "extra": len(extra), "differ": len(differ), "wall_s": round(time.time() - t0),
        "examples": [str(k) for k in (missing + extra + differ)[:5]],
    }


rows = []
broker = None
try:
    if a.backend in ("embedded", "both"):
        rows.append(drill("embedded", [], [], wait_joined=False))
    if a.backend in ("kafka", "both"):
        bootstrap = os.environ.get("STREAMC_KAFKA_BOOTSTRAP", "")
        if not bootstrap:
            env = subprocess.run([os.path.join(root, "dev/kafka/broker"), "start"], check=True, capture_output=True,
                                 text=True).stdout
            found = dict(re.findall(r"export (\w+)=(\S+)", env))
            bootstrap = found["STREAMC_KAFKA_BOOTSTRAP"].strip("'\"")
            broker = found["STREAMC_KAFKA_DIR"].strip("'\"")
        kafka = ["--bootstrap-servers", bootstrap]
        # A killed member leaves the group after its session timeout; its open transaction is
        # fenced by the restarted instance (same state directory, same transactional id).
        fast = ["--set", "processing.guarantee=exactly_once", "--set", "kafka.session.timeout.ms=6000",
                "--set", "kafka.heartbeat.interval.ms=500", "--set", "kafka.transaction.timeout.ms=10000"]
        rows.append(drill("kafka", kafka + fast, kafka, wait_joined=True))
finally:
    if broker:
        subprocess.run([os.path.join(root, "dev/kafka/broker"), "stop", broker], capture_output=True)

print(f"{'backend':<10}{'kills':>7}{'landed':>8}{'records':>10}{'windows':>10}{'missing':>9}{'extra':>7}"
      f"{'differ':>8}{'wall s':>8}")
for r in rows:
    print(f"{r['backend']:<10}{r['kills']:>7}{r['landed']:>8}{r['records']:>10}{r['windows']:>10}{r['missing']:>9}"
          f"{r['extra']:>7}{r['differ']:>8}{r['wall_s']:>8}")
    if r["examples"]:
        print("  e.g.", ", ".join(r["examples"]))
bad = any(r["missing"] or r["extra"] or r["differ"] for r in rows)
shutil.rmtree(work, ignore_errors=True) if not bad else print(f"kept {work}")
sys.exit(1 if bad else 0)
