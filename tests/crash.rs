//! Crashes and live input, with real `streamc` processes.
//!
//! * SIGKILL a `streamc run --drain` at random moments, at least 20 times, restarting it each
//!   time: its committed input offsets advance between kills, and the output topic ends up
//!   byte-for-byte equal to that of an uninterrupted run — no duplicate, no loss, because an
//!   embedded commit is atomic and commit points are fixed by record counts.
//! * `streamc produce` appends input while `streamc run` is running, and the results show up
//!   before the input ends.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::embedded::{read_topic, temp_dir, topic_bytes, write_trades};

fn streamc(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_streamc"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn committed_input(state: &Path) -> u64 {
    let log = streamc::log::EmbeddedLog::open(state, false).unwrap();
    let c = log.committed().unwrap();
    c.groups
        .iter()
        .filter(|(g, _)| g.starts_with("stats#stock_stats-from#"))
        .map(|(_, v)| v["inputs"]["stocks/0"]["offset"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn sigkill_at_random_moments_loses_nothing_and_duplicates_nothing() {
    let dir = temp_dir("crash");
    let input = dir.join("trades.jsonl");
    const CHUNK: usize = 20_000;
    write_trades(&input, (CHUNK * 60) as u64, 50, 99, 800);
    let all = std::fs::read_to_string(&input).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let chunk_file = |i: usize| -> std::path::PathBuf {
        let f = dir.join(format!("chunk{i}.jsonl"));
        std::fs::write(&f, lines[i * CHUNK..(i + 1) * CHUNK].join("\n") + "\n").unwrap();
        f
    };
    let produce = |state: &Path, f: &Path| {
        assert!(streamc(state, &["produce", "stocks", f.to_str().unwrap(), "--program", "examples/stats.stream"])
            .status()
            .unwrap()
            .success());
    };
    let run_args = ["run", "examples/stats.stream", "--drain", "--set", "commit.records=1000"];
    let (reference, crashed) = (dir.join("reference"), dir.join("crashed"));

    // Input arrives in chunks. Each chunk is run to its end once without a crash (the
    // reference, which also times the run) and once with SIGKILLs at random moments within
    // that time, restarting until a run completes.
    let mut rng = 0x2545F4914F6CDD1Du64;
    let (mut kills, mut advanced, mut chunks) = (0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(400);
    while kills < 20 && chunks < 60 {
        let f = chunk_file(chunks);
        chunks += 1;
        produce(&reference, &f);
        let t0 = Instant::now();
        assert!(streamc(&reference, &run_args).status().unwrap().success());
        let full = t0.elapsed().as_millis() as u64;
        produce(&crashed, &f);
        let mut last = committed_input(&crashed);
        loop {
            let mut child: Child = streamc(&crashed, &run_args).spawn().unwrap();
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            std::thread::sleep(Duration::from_millis(full / 5 + rng % (full + 1)));
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "run failed: {status}");
                break;
            }
            child.kill().unwrap();
            child.wait().unwrap();
            kills += 1;
            let now = committed_input(&crashed);
            assert!(now >= last, "committed offsets went back: {last} -> {now}");
            if now > last {
                advanced += 1;
            }
            last = now;
            assert!(Instant::now() < deadline, "crash test too slow: {kills} kills");
        }
    }
    assert!(kills >= 20, "only {kills} kills in {chunks} chunks");
    assert!(advanced * 2 >= kills, "committed offsets advanced between only {advanced} of {kills} kills");
    let (a, b) = (topic_bytes(&reference, "stock-stats"), topic_bytes(&crashed, "stock-stats"));
    assert!(!a[0].is_empty());
    assert!(a == b, "the output after {kills} kills differs from an uninterrupted run");
    assert_eq!(read_topic(&reference, "stock-stats").len(), read_topic(&crashed, "stock-stats").len());
}

#[test]
fn live_input_is_processed_while_it_arrives() {
    let dir = temp_dir("live");
    let state = dir.join("state");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 40_000, 10, 4, 500);
    let all = std::fs::read_to_string(&input).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let chunk = |i: usize| -> String { lines[i * 10_000..(i + 1) * 10_000].join("\n") + "\n" };
    let produce = |text: String| {
        let mut c = streamc(&state, &["produce", "stocks", "-", "--program", "examples/stats.stream"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success());
    };
    produce(chunk(0));
    let mut run = streamc(&state, &["run", "examples/stats.stream"]).spawn().unwrap();
    let wait_for = |pred: &dyn Fn(&[common::embedded::Out]) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if pred(&read_topic(&state, "stock-stats")) {
                return;
            }
            assert!(Instant::now() < deadline, "no live output");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Results for the first chunk appear while the run waits for more.
    let first_end = 1_700_000_000_000 + 10_000;
    wait_for(&|o| o.iter().any(|r| r.value["window_start"].as_i64().unwrap_or(0) >= first_end - 6_000));
    for i in 1..4 {
        produce(chunk(i));
        let end = 1_700_000_000_000 + (i as i64 + 1) * 10_000;
        // The windows of the chunk just produced show up: the input has not ended.
        wait_for(&|o| o.iter().any(|r| r.value["window_start"].as_i64().unwrap_or(0) >= end - 6_000));
    }
    run.kill().unwrap();
    run.wait().unwrap();
}

/// SIGKILL while the local-state writer is behind: a table of many distinct keys (each record a
/// new row) makes every flight large, so sled's checkpoint trails the committed changelog; each
/// kill comes right after the committed input is seen to advance. Every restart restores the
/// tail sled had not written (seen in its `restored` count), and the final rows equal a fold of
/// the input.
#[test]
fn sigkill_while_the_state_writer_is_behind_restores_the_tail_exactly() {
    let dir = temp_dir("crash-writer");
    let input = dir.join("trades.jsonl");
    write_trades(&input, 240_000, 120_000, 5, 0);
    let state = dir.join("state");
    let program = "bench/keys.stream";
    assert!(streamc(&state, &["produce", "stocks", input.to_str().unwrap(), "--program", program])
        .status()
        .unwrap()
        .success());
    let committed = |state: &Path| -> u64 {
        let log = streamc::log::EmbeddedLog::open(state, false).unwrap();
        let c = log.committed().unwrap();
        c.groups.values().map(|v| v["inputs"]["stocks/0"]["offset"].as_u64().unwrap_or(0)).sum()
    };
    let run_args = ["run", program, "--drain", "--set", "commit.records=2000"];
    let (mut kills, mut restored_after_kill) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let before = committed(&state);
        let log = dir.join(format!("run{kills}.log"));
        let mut child: Child = streamc(&state, &run_args).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        // Kill once the run is seen to commit something new (not after some time).
        let finished = loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "run failed: {status}: {}", std::fs::read_to_string(&log).unwrap());
                break true;
            }
            if kills < 4 && committed(&state) > before + 40_000 {
                child.kill().unwrap();
                child.wait().unwrap();
                break false;
            }
            assert!(Instant::now() < deadline, "crash test too slow: {kills} kills");
            std::thread::sleep(Duration::from_millis(5));
        };
        let text = std::fs::read_to_string(&log).unwrap();
        if kills > 0 && text.contains(" records into ") && !text.contains("restored 0 records") {
            restored_after_kill += 1;
        }
        if finished {
            break;
        }
        kills += 1;
    }
    eprintln!("{kills} kills, {restored_after_kill} restarts restored a tail");
    assert!(kills >= 1, "the run ended before it could be killed");
    assert!(restored_after_kill >= 1, "no restart after a kill restored a changelog tail");
    // The fold: per ticker, the trades and their volume; the output's last row per key.
    let mut expected: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for line in std::fs::read_to_string(&input).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let e = expected.entry(v["ticker"].as_str().unwrap().to_string()).or_default();
        e.0 += 1;
        e.1 += v["size"].as_i64().unwrap();
    }
    let mut got: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for r in read_topic(&state, "per-key") {
        let v = &r.value;
        got.insert(r.key.clone().unwrap(), (v["trades"].as_i64().unwrap(), v["volume"].as_i64().unwrap()));
    }
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the rows after {kills} kills differ from the fold");
}

/// A restore from scratch larger than the task's share of `statestore.cache.max.bytes` hands
/// its changes to the state writer as it reads them (it spills), and the run is ready before
/// sled holds them. A SIGKILL while sled is seen filling (after the local state was deleted)
/// leaves sled with part of the rows, and a checkpoint of the last flight that landed, if any:
/// the restart restores what sled lacks, and more input then folds onto every key's full
/// history.
#[test]
fn sigkill_while_a_restore_spills_to_sled_loses_no_row() {
    let dir = temp_dir("crash-restore-spill");
    let state = dir.join("state");
    let program = "bench/keys.stream";
    // One record for each of 300,000 keys, then the same keys again with other sizes.
    let write = |path: &Path, size: u64| {
        let mut s = String::new();
        for i in 0..300_000u64 {
            s.push_str(&format!(
                "{{\"ticker\":\"K{i:06}\",\"price\":1.0,\"size\":{},\"ts\":{}}}\n",
                (i * size) % 997,
                1_700_000_000_000u64 + i
            ));
        }
        std::fs::write(path, s).unwrap();
    };
    let (first, second) = (dir.join("first.jsonl"), dir.join("second.jsonl"));
    write(&first, 3);
    write(&second, 7);
    let produce = |path: &Path| {
        assert!(streamc(&state, &["produce", "stocks", path.to_str().unwrap(), "--program", program])
            .status()
            .unwrap()
            .success());
    };
    // A 2 MiB cache: the task's share holds a few thousand rows of the 300,000.
    let run_args = ["run", program, "--drain", "--set", "statestore.cache.max.bytes=2097152"];
    let run = |name: &str| -> String {
        let log = dir.join(name);
        let status = streamc(&state, &run_args).stderr(std::fs::File::create(&log).unwrap()).status().unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(status.success(), "run failed: {status}: {text}");
        text
    };
    produce(&first);
    run("first.log");
    let local = streamc::runtime::local_state_path(&state, "keys");
    // The bytes of sled's files.
    fn size(p: &Path) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else { return 0 };
        rd.flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => size(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }
    let full = size(&local);
    // Delete the local state and restore it, killing the run once sled is seen filling (a
    // third of its full size, short of all of it); a run that finishes first is tried again.
    let mut killed = 0;
    for attempt in 0..10 {
        std::fs::remove_dir_all(state.join("apps")).unwrap();
        let log = dir.join(format!("restore{attempt}.log"));
        let mut child = streamc(&state, &run_args).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let sent_kill = loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "restore run failed: {status}: {}", std::fs::read_to_string(&log).unwrap());
                break false;
            }
            let now = size(&local);
            if now > full / 3 && now < full {
                child.kill().unwrap();
                let status = child.wait().unwrap();
                // (Killed, unless it exited in between: then it must have succeeded.)
                assert!(status.code().is_none() || status.success(), "restore run failed: {status}");
                break status.code().is_none();
            }
            assert!(Instant::now() < deadline, "restore run too slow");
            std::thread::sleep(Duration::from_millis(2));
        };
        if sent_kill {
            killed += 1;
            break;
        }
    }
    assert_eq!(killed, 1, "no restore run was caught while sled filled");
    // (Usually a restore of the rows sled lacked; none if the kill came after its last flight.)
    let text = run("after-kill.log");
    let restored = text.lines().find(|l| l.contains(" records into ")).unwrap_or("restored nothing");
    eprintln!("killed at a third of sled's size or more; the restart: {restored}");
    produce(&second);
    run("second.log");
    // The fold: per key, two records and their sizes.
    let mut expected: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for path in [&first, &second] {
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let e = expected.entry(v["ticker"].as_str().unwrap().to_string()).or_default();
            e.0 += 1;
            e.1 += v["size"].as_i64().unwrap();
        }
    }
    let mut got: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for r in read_topic(&state, "per-key") {
        let v = &r.value;
        got.insert(r.key.clone().unwrap(), (v["trades"].as_i64().unwrap(), v["volume"].as_i64().unwrap()));
    }
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the rows after a kill mid-restore differ from the fold");
}
