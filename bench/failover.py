#!/usr/bin/env python3
"""Failover time on Kafka, with and without a standby replica.

For each state size K (--keys, e.g. 1000000,10000000) and each of num.standby.replicas 0 and 1:

  1. bench/keys.stream (per key: a count and a sum, a key-value store) over K records with K
     distinct keys, in a topic of --partitions partitions on a broker this script starts
     (dev/kafka/broker), unless STREAMC_KAFKA_BOOTSTRAP is set;
  2. two instances, A and B (release build, at_least_once, session.timeout.ms 6000, commits
     every second), process all of it (their committed records_in add up to K); with a standby,
     A's copies of B's tasks are caught up (streamc_standby_lag_records all 0);
  3. B is SIGKILLed; at once one new record per partition is produced; the failover time is
     from the kill to A's first committed output of a task it took over from B (its
     streamc_records_out_total for that task, polled every 50 ms). It includes the group's
     failure detection (the session timeout, 6 s here), which does not depend on the state.
     A's log gives the records it restored for B's tasks and how long that took.

Prints one table: keys, standby, failover seconds, restored records, restore seconds. Not part
of the test command (it takes minutes); the README gives its figures.

Usage: bench/failover.py [--keys 1000000,10000000] [--partitions 4] [--standby 0,1]"""
import argparse, json, os, re, shutil, signal, subprocess, sys, tempfile, time, urllib.request, socket

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--keys", default="1000000,10000000")
ap.add_argument("--partitions", type=int, default=4)
ap.add_argument("--standby", default="0,1", help="the num.standby.replicas values to run")
a = ap.parse_args()

subprocess.run(["cargo", "build", "--release", "-q"], cwd=root, check=True)
exe = os.path.join(root, "target", "release", "streamc")
work = tempfile.mkdtemp(prefix="streamc-failover-")
started_broker = None
bootstrap = os.environ.get("STREAMC_KAFKA_BOOTSTRAP")
if not bootstrap:
    env = subprocess.run([os.path.join(root, "dev/kafka/broker"), "start"], check=True, capture_output=True, text=True).stdout
    vars = dict(re.findall(r"export (\w+)=(\S+)", env))
    bootstrap = vars["STREAMC_KAFKA_BOOTSTRAP"].strip("'\"")
    started_broker = vars["STREAMC_KAFKA_DIR"].strip("'\"")


def free_addr():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


def scrape(addr):
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            return r.read().decode()
    except Exception:
        return ""


def series(text, name):
    """{labels: value} of one metric."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            out[labels] = float(value)
    return out


def by_task(s):
    out = {}
    for labels, v in s.items():
        m = re.search(r'task="([^"]+)"', labels)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + v
    return out


def wait(what, cond, secs=1800):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > secs:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.2)


rows = []
try:
    with open(os.path.join(root, "bench", "keys.stream")) as f:
        keys_text = f.read()
    for K in [int(k) for k in a.keys.split(",") if k]:
        topic = f"fo{K}.keys"
        prog = os.path.join(work, f"keys{K}.stream")
        with open(prog, "w") as f:
            f.write(keys_text.replace('from "stocks"', f'from "{topic}"').replace('to "per-key"', f'to "fo{K}.out"'))
        data = os.path.join(work, "keys.jsonl")
        with open(data, "w") as f:
            for i in range(K):
                f.write(json.dumps({"ticker": f"K{i:08d}", "price": 1.0, "size": i % 1000, "ts": 1_700_000_000_000 + i}) + "\n")
        subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", topic, data, "--program", prog, "--partitions", str(a.partitions), "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)
        os.remove(data)
        # One new record per partition, produced right after the kill (keys found by the
        # partitioner: K-prefixed keys spread over the partitions).
        extra = os.path.join(work, "extra.jsonl")
        with open(extra, "w") as f:
            for i in range(64):
                f.write(json.dumps({"ticker": f"X{i:04d}", "price": 1.0, "size": 1, "ts": 1_800_000_000_000 + i}) + "\n")
        for standby in [int(x) for x in a.standby.split(",") if x]:
            app = f"fo{K}-s{standby}"
            addrs = {n: free_addr() for n in "ab"}
            procs, logs = {}, {}
            t_start = time.time()
            # B first, then A: A gets partitions only from B, so the tasks B keeps were never
            # A's (A has no local state of them but its standby copies).
            for n in "ba":
                logs[n] = os.path.join(work, f"{app}-{n}.log")
                args = [exe, "--state-dir", os.path.join(work, f"{app}-{n}"), "run", prog, "--bootstrap-servers", bootstrap, "--http-addr", addrs[n]]
                for s in [f"application.id={app}", f"instance.id={n}", "commit.interval_ms=1000", "kafka.session.timeout.ms=6000", "kafka.heartbeat.interval.ms=500", "metrics.interval_ms=1000", f"num.standby.replicas={standby}"]:
                    args += ["--set", s]
                procs[n] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(logs[n], "w"))
                if n == "b":
                    wait("B to process records", lambda: sum(series(scrape(addrs["b"]), "streamc_records_in_total").values()) > 0)
            wait("both instances to process every record", lambda: sum(sum(series(scrape(x), "streamc_records_in_total").values()) for x in addrs.values()) >= K)
            processed = time.time() - t_start
            # B's tasks now: the partitions the group assigns to B (A's /metadata).
            def b_owns():
                try:
                    with urllib.request.urlopen(f"http://{addrs['a']}/metadata", timeout=15) as r:
                        md = json.loads(r.read().decode())
                except Exception:
                    return None
                parts = md["stores"][0]["partitions"]
                if len(parts) != a.partitions or any(p["instance"] is None for p in parts):
                    return None
                return {f"0_{p['partition']}" for p in parts if p["instance"] == "b"}

            wait("the group to settle", lambda: b_owns())
            b_tasks = b_owns()
            if standby:
                wait("A's standby replicas to catch up", lambda: (lambda s: s and all(v == 0 for v in s.values()))(series(scrape(addrs["a"]), "streamc_standby_lag_records")))
                time.sleep(4)  # one more lag reading (every 3 s) after the last commit
                wait("A's standby replicas to catch up", lambda: (lambda s: s and all(v == 0 for v in s.values()))(series(scrape(addrs["a"]), "streamc_standby_lag_records")))
            before = by_task(series(scrape(addrs["a"]), "streamc_records_out_total"))
            log_len = os.path.getsize(logs["a"])
            procs["b"].send_signal(signal.SIGKILL)
            t_kill = time.time()
            procs["b"].wait()
            subprocess.run([exe, "--state-dir", os.path.join(work, "p"), "produce", topic, extra, "--program", prog, "--bootstrap-servers", bootstrap], check=True, stderr=subprocess.DEVNULL)

            def took_over():
                now = by_task(series(scrape(addrs["a"]), "streamc_records_out_total"))
                return any(now.get(t, 0) > before.get(t, 0) for t in b_tasks)

            wait("A's first output of a task it took over", took_over, secs=3600)
            failover = time.time() - t_kill
            procs["a"].send_signal(signal.SIGKILL)
            procs["a"].wait()
            with open(logs["a"]) as f:
                f.seek(log_len)
                tail = f.read()
            rest = [(int(n), float(s)) for n, s in re.findall(r"restored (\d+) records into .* in ([\d.]+)s", tail)]
            restored, restore_s = sum(n for n, _ in rest), sum(s for _, s in rest)
            rows.append((K, standby, failover, restored, restore_s, processed))
            print(f"keys {K:,} standby {standby}: failover {failover:.2f} s, restored {restored:,} records in {restore_s:.2f} s (processing took {processed:.0f} s)", flush=True)
finally:
    shutil.rmtree(work, ignore_errors=True)
    if started_broker:
        subprocess.run([os.path.join(root, "dev/kafka/broker"), "stop", started_broker], capture_output=True)

print()
print("| keys in state | standby replicas | failover (kill → first output of a moved task) | records restored | restore time |")
print("|---|---|---|---|---|")
for K, standby, failover, restored, restore_s, _ in rows:
    print(f"| {K:,} | {standby} | {failover:.2f} s | {restored:,} | {restore_s:.2f} s |")
