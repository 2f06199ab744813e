//! Multi-tenancy in tests: adversarial tenant ids, random operations over them, folds that say
//! what each tenant must see, and raw reads of changelogs (to check a purge) on either backend.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use streamc::log::EmbeddedLog;
use streamc::record::{Pos, Record};

use super::control::{Env, Lcg as Rng};

/// Tenant from a header (so any bytes can be a tenant), a windowed aggregate (reads, writes and
/// scans of a windowed store) and a join with a tenant-scoped table (reads of another store).
pub const PROGRAM: &str = r#"
stream events from "events" {
  key    user
  value  json { user: string, amount: int, at: timestamp }
  time   at
  tenant header "x-tenant"
}
table caps from "caps" {
  key    user: string
  value  json { cap: int }
  tenant header "x-tenant"
}
query totals {
  from events
  group by user
  window tumbling 1h
  aggregate { n = count(), total = sum(amount) }
  to "totals"
}
query capped {
  from events
  join caps on user
  select { user, amount, cap = caps.cap }
  to "capped"
}
"#;

/// At least 50 tenant ids that a careless encoding would confuse: empty, prefixes of each
/// other, separators, NUL, bytes that look like a length prefix, invalid UTF-8 (possible only
/// through a header), JSON look-alikes of the non-UTF-8 form, and one of 64 KiB.
pub fn adversarial_tenants() -> Vec<Vec<u8>> {
    let mut t: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"a".to_vec(),
        b"a:".to_vec(),
        b"a\0".to_vec(),
        b"a:b".to_vec(),
        b"ab".to_vec(),
        b"b".to_vec(),
        b":".to_vec(),
        b"::".to_vec(),
        b"\0".to_vec(),
        b"\0\0".to_vec(),
        b"\0\0\0\x01a".to_vec(),
        b"\0\0\0\x01".to_vec(),
        b"\x01".to_vec(),
        b"/".to_vec(),
        b"a/".to_vec(),
        b"|".to_vec(),
        b"a|b".to_vec(),
        b"\t".to_vec(),
        b" ".to_vec(),
        b"\"".to_vec(),
        b"\\".to_vec(),
        b"[255]".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        b"acme".to_vec(),
        b"ACME".to_vec(),
        "é".as_bytes().to_vec(),
        b"e\xcc\x81".to_vec(),
        vec![0xff],
        vec![0xff, 0xfe],
        vec![0xc3],
        vec![0xc3, 0x28],
        vec![0x80, 0x00],
        vec![0xfe, 0xff, 0x00, 0x00],
        vec![0xed, 0xa0, 0x80],
        vec![b'a', 0xff],
        vec![b'a', b':', 0xff],
        "t".repeat(65536).into_bytes(),
        "t".repeat(65535).into_bytes(),
    ];
    // Prefix chains: x, xx, xxx, …
    for n in 1..=6 {
        t.push("x".repeat(n).into_bytes());
    }
    for i in 0..8 {
        t.push(format!("tenant-{i}").into_bytes());
    }
    t.push(b"tenant-1\0".to_vec());
    t.push(b"tenant-10".to_vec());
    let distinct: BTreeSet<&Vec<u8>> = t.iter().collect();
    assert_eq!(distinct.len(), t.len(), "tenant ids must be distinct");
    assert_eq!(t.len(), 56, "README.md gives the count");
    t
}

/// Users (keys) shared by every tenant, chosen so that tenant + key concatenations collide.
pub const USERS: [&str; 8] = ["", ":", ":b", "b", "a", "\u{0}", "0", "k"];

/// A tenant in a header of the envelope format: text when UTF-8, else `{"hex": …}`.
fn header_value(t: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(t) {
        Ok(s) => serde_json::Value::String(s.to_string()),
        Err(_) => serde_json::json!({ "hex": t.iter().map(|b| format!("{b:02x}")).collect::<String>() }),
    }
}

/// A tenant as streamc prints it in JSON: a string when UTF-8, else the array of its bytes.
pub fn tenant_json(t: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(t) {
        Ok(s) => serde_json::Value::String(s.to_string()),
        Err(_) => serde_json::Value::Array(t.iter().map(|b| serde_json::Value::from(*b)).collect()),
    }
}

/// One event: tenant index, user index, amount, time (ms).
pub type Event = (usize, usize, i64, i64);

/// `n` random events from time `t0`, one ms apart; the 64 KiB tenants get few of them (their
/// every record carries the id).
pub fn events(rng: &mut Rng, tenants: &[Vec<u8>], n: usize, t0: i64) -> Vec<Event> {
    let big: Vec<usize> = (0..tenants.len()).filter(|&i| tenants[i].len() > 1024).collect();
    (0..n)
        .map(|i| {
            let mut t = rng.below(tenants.len() as u64) as usize;
            while big.contains(&t) && rng.below(40) != 0 {
                t = rng.below(tenants.len() as u64) as usize;
            }
            (t, rng.below(USERS.len() as u64) as usize, rng.below(1000) as i64 + 1, t0 + i as i64 * 37)
        })
        .collect()
}

/// Write events as envelope lines (the tenant in the `x-tenant` header).
pub fn write_events(path: &Path, tenants: &[Vec<u8>], evs: &[Event]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for (t, u, amount, at) in evs {
        let line = serde_json::json!({
            "key": USERS[*u],
            "value": { "user": USERS[*u], "amount": amount, "at": at },
            "timestamp": at,
            "headers": { "x-tenant": header_value(&tenants[*t]) },
        });
        writeln!(f, "{line}").unwrap();
    }
}

/// Write caps (tenant, user) → cap as envelope lines.
pub fn write_caps(path: &Path, tenants: &[Vec<u8>], caps: &BTreeMap<(usize, usize), i64>) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for ((t, u), cap) in caps {
        let line = serde_json::json!({
            "key": USERS[*u],
            "value": { "cap": cap },
            "timestamp": 0,
            "headers": { "x-tenant": header_value(&tenants[*t]) },
        });
        writeln!(f, "{line}").unwrap();
    }
}

/// What `totals` must end with: (tenant, user, window start) → (count, sum), folded over each
/// tenant's own events only.
pub fn fold_totals(evs: &[Event]) -> BTreeMap<(usize, usize, i64), (i64, i64)> {
    let mut m = BTreeMap::new();
    for (t, u, amount, at) in evs {
        let w = at - at.rem_euclid(3_600_000);
        let e = m.entry((*t, *u, w)).or_insert((0, 0));
        e.0 += 1;
        e.1 += amount;
    }
    m
}

/// What `capped` must hold: every event whose tenant set a cap for its user, with that cap.
pub fn fold_capped(evs: &[Event], caps: &BTreeMap<(usize, usize), i64>) -> BTreeMap<(usize, usize, i64, i64), usize> {
    let mut m = BTreeMap::new();
    for (t, u, amount, _) in evs {
        if let Some(cap) = caps.get(&(*t, *u)) {
            *m.entry((*t, *u, *amount, *cap)).or_default() += 1;
        }
    }
    m
}

/// The tenant index of an output record, from its key `[tenant, user]` and its `tenant` field
/// (which must agree), with its user.
pub fn output_tenant(tenants: &[Vec<u8>], key: &serde_json::Value, value: &serde_json::Value) -> (usize, usize) {
    let t = tenants
        .iter()
        .position(|t| tenant_json(t) == key[0])
        .unwrap_or_else(|| panic!("an output of an unknown tenant: key {key}"));
    assert_eq!(value["tenant"], key[0], "the tenant field and the key's tenant differ");
    let user = key[1].as_str().unwrap_or_else(|| panic!("key {key}"));
    assert_eq!(value["user"].as_str(), Some(user));
    (t, USERS.iter().position(|u| *u == user).unwrap())
}

/// The last (count, sum) of every (tenant, user, window) in `totals`.
pub fn read_totals(env: &Env, tenants: &[Vec<u8>]) -> BTreeMap<(usize, usize, i64), (i64, i64)> {
    let mut m = BTreeMap::new();
    for (k, v, _) in env.consume_versions("totals") {
        let (t, u) = output_tenant(tenants, &k, &v);
        m.insert((t, u, v["window_start"].as_i64().unwrap()), (v["n"].as_i64().unwrap(), v["total"].as_i64().unwrap()));
    }
    m
}

/// Every record of `capped`, counted.
pub fn read_capped(env: &Env, tenants: &[Vec<u8>]) -> BTreeMap<(usize, usize, i64, i64), usize> {
    let mut m = BTreeMap::new();
    for (k, v, _) in env.consume_versions("capped") {
        let (t, u) = output_tenant(tenants, &k, &v);
        *m.entry((t, u, v["amount"].as_i64().unwrap(), v["cap"].as_i64().unwrap())).or_default() += 1;
    }
    m
}

/// Every raw record of a topic, partition by partition, from the backend `env` runs on.
pub fn raw_records(env: &Env, topic: &str) -> Vec<(u32, Record)> {
    match env.extra.iter().position(|a| a == "--bootstrap-servers") {
        Some(i) => {
            let props: BTreeMap<String, String> = [("bootstrap.servers".to_string(), env.extra[i + 1].clone())].into();
            let k = streamc::kafka::Kafka::new(&props);
            let (recs, _) = k.read_to_ends(topic, &streamc::record::Start::Beginning).unwrap();
            recs.into_iter().map(|(p, s)| (p, s.record)).collect()
        }
        None => {
            let log = EmbeddedLog::open(&env.state, false).unwrap();
            let Some(meta) = log.topic(topic).unwrap() else { return vec![] };
            let c = log.committed().unwrap();
            let mut out = Vec::new();
            for p in 0..meta.partitions {
                let mut r = log.reader(topic, p, Pos::default());
                out.extend(r.read(c.end(topic, p), usize::MAX).unwrap().into_iter().map(|s| (p, s.record)));
            }
            out
        }
    }
}

/// A changelog as a store: (partition, key) → value, tombstones removing keys.
pub fn changelog_state(env: &Env, topic: &str) -> BTreeMap<(u32, Vec<u8>), Vec<u8>> {
    let mut m = BTreeMap::new();
    for (p, r) in raw_records(env, topic) {
        let Some(k) = r.key else { continue };
        match r.value {
            Some(v) => m.insert((p, k), v),
            None => m.remove(&(p, k)),
        };
    }
    m
}

/// The tenant of a store key, read from the layout ARCHITECTURE.md documents: table stores
/// hold the scoped key itself (`len` u32 BE, tenant, key); aggregate and join stores hold it
/// length-prefixed (u32 BE), then the window start.
pub fn key_tenant(key: &[u8], table: bool) -> Vec<u8> {
    let scoped = if table {
        key
    } else {
        let n = u32::from_be_bytes(key[..4].try_into().unwrap()) as usize;
        &key[4..4 + n]
    };
    let n = u32::from_be_bytes(scoped[..4].try_into().unwrap()) as usize;
    scoped[4..4 + n].to_vec()
}

/// The property test, on the backend `env` runs on: `n` random events over the adversarial
/// tenants (and their caps) in two runs with the local state deleted between them (the second
/// restores every store from its changelog); every tenant's results must be the fold of its own
/// events. Then `for tenant "a" purge`: the changelogs lose exactly tenant `a`'s keys (every
/// other key keeps its value byte for byte), and events after it start `a` from nothing while
/// its neighbours (`a:`, `a\0`, `ab`, …) carry on. `purge_flags`: extra flags of the run that
/// applies the purge (fault injection, where the backend has it).
pub fn property(env: &Env, n: usize, purge_flags: &[&str]) {
    let tenants = adversarial_tenants();
    assert!(tenants.len() >= 50);
    let mut rng = Rng(0x5eed);
    let mut caps = BTreeMap::new();
    for t in 0..tenants.len() {
        for u in 0..USERS.len() {
            if rng.below(2) == 0 {
                caps.insert((t, u), rng.below(100) as i64);
            }
        }
    }
    let program = env.program.to_str().unwrap().to_string();
    let produce = |topic: &str, file: &Path| {
        env.run(&["produce", &env.topic(topic), file.to_str().unwrap(), "--envelope", "--partitions", "2"]);
    };
    let caps_file = env.dir.join("caps.jsonl");
    write_caps(&caps_file, &tenants, &caps);
    produce("caps", &caps_file);
    let t0 = 1_700_000_000_000;
    let first = events(&mut rng, &tenants, n / 2, t0);
    let second = events(&mut rng, &tenants, n - n / 2, t0 + (n / 2) as i64 * 37);
    let (f1, f2) = (env.dir.join("events1.jsonl"), env.dir.join("events2.jsonl"));
    write_events(&f1, &tenants, &first);
    write_events(&f2, &tenants, &second);
    // The table first, so every event meets its tenant's caps.
    let none = env.dir.join("none.jsonl");
    std::fs::write(&none, "").unwrap();
    produce("events", &none);
    env.run(&["run", &program, "--drain"]);
    produce("events", &f1);
    env.run(&["run", &program, "--drain"]);
    // Local state deleted: the next run restores every store from its changelog.
    std::fs::remove_dir_all(env.state.join("apps")).unwrap();
    produce("events", &f2);
    let log = env.run(&["run", &program, "--drain"]);
    assert!(log.contains("restored"), "the second run restores from the changelogs:\n{log}");
    let all: Vec<Event> = first.iter().chain(&second).copied().collect();
    let expected = fold_totals(&all);
    let got = read_totals(env, &tenants);
    let wrong: Vec<_> = expected.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
    assert!(
        wrong.is_empty(),
        "totals differ from each tenant's own fold (expected, got): {:?}",
        wrong.iter().map(|(k, v)| (k, v, got.get(k))).collect::<Vec<_>>()
    );
    assert_eq!(got.len(), expected.len(), "a (tenant, user, window) no tenant's events made");
    assert_eq!(read_capped(env, &tenants), fold_capped(&all, &caps), "joins saw another tenant's caps");

    // Purge tenant "a".
    let a = tenants.iter().position(|t| t == b"a").unwrap();
    let stores = [
        (format!("{}-totals-aggregate-changelog", env.app), false),
        (format!("{}-capped-join-caps-changelog", env.app), true),
    ];
    let before: Vec<_> = stores.iter().map(|(s, _)| changelog_state(env, s)).collect();
    for ((_, table), b) in stores.iter().zip(&before) {
        assert!(b.keys().any(|(_, k)| key_tenant(k, *table) == b"a"), "tenant a has state before the purge");
        let tenants_seen: BTreeSet<Vec<u8>> = b.keys().map(|(_, k)| key_tenant(k, *table)).collect();
        assert!(tenants_seen.iter().all(|t| tenants.contains(t)), "every key decodes to a known tenant");
    }
    let (out, ok) = env.control("for tenant \"a\" purge", &[]);
    assert!(ok, "{out}");
    let log = env.run(&[&["run", program.as_str(), "--drain"][..], purge_flags].concat());
    assert!(log.contains("purged tenant a"), "{log}");
    if purge_flags.contains(&"--chaos") {
        let faults: u64 =
            log.split("chaos: ").nth(1).and_then(|r| r.split_whitespace().next()?.parse().ok()).unwrap_or(0);
        assert!(faults > 0, "faults were injected while the purge was applied:\n{log}");
    }
    for (((s, table), b), after) in stores.iter().zip(&before).zip(stores.iter().map(|(s, _)| changelog_state(env, s)))
    {
        let kept: BTreeMap<_, _> =
            b.iter().filter(|((_, k), _)| key_tenant(k, *table) != b"a").map(|(k, v)| (k.clone(), v.clone())).collect();
        // Summarised: a 64 KiB tenant's keys would make the full maps megabytes long.
        let differ: Vec<(u32, String)> = kept
            .keys()
            .chain(after.keys())
            .filter(|k| kept.get(*k) != after.get(*k))
            .map(|(p, k)| (*p, String::from_utf8_lossy(&k[..k.len().min(40)]).into_owned()))
            .collect();
        assert!(
            differ.is_empty(),
            "{s}: the purge must delete exactly tenant a's keys and change no other key; {} keys differ, e.g. {:?}",
            differ.len(),
            &differ[..differ.len().min(5)]
        );
    }
    let statuses = env.statuses();
    assert!(
        statuses.values().any(|s| s["kind"] == "purge" && s["accepted"] == true && s["tenant"] == "a"),
        "{statuses:?}"
    );

    // After the purge: `a` starts from nothing, its neighbours carry on, in the same window.
    let last = all.last().unwrap().3;
    let window_end = last - last.rem_euclid(3_600_000) + 3_600_000;
    let neighbours: Vec<usize> =
        [&b"a:"[..], b"a\0", b"ab", b"a:b", b""].iter().map(|n| tenants.iter().position(|t| t == n).unwrap()).collect();
    let third: Vec<Event> = (0..40)
        .map(|i| {
            (
                if i % 2 == 0 { a } else { neighbours[i % neighbours.len()] },
                i % USERS.len(),
                5,
                (last + 1 + i as i64).min(window_end - 1),
            )
        })
        .collect();
    let f3 = env.dir.join("events3.jsonl");
    write_events(&f3, &tenants, &third);
    produce("events", &f3);
    env.run(&["run", &program, "--drain"]);
    let got = read_totals(env, &tenants);
    let kept: Vec<Event> = all.iter().filter(|e| e.0 != a).chain(&third).copied().collect();
    let expected = fold_totals(&kept);
    for (k, v) in expected
        .iter()
        .filter(|(k, _)| k.0 == a || neighbours.contains(&k.0))
        .filter(|(k, _)| third.iter().any(|e| (e.0, e.1) == (k.0, k.1) && e.3 - e.3.rem_euclid(3_600_000) == k.2))
    {
        assert_eq!(got.get(k), Some(v), "{k:?} after the purge of tenant a");
    }
    // `capped` holds every earlier event with the caps as they were, then the later events with
    // tenant a's caps gone.
    let caps_after: BTreeMap<(usize, usize), i64> =
        caps.iter().filter(|((t, _), _)| *t != a).map(|(k, v)| (*k, *v)).collect();
    let mut expected_capped = fold_capped(&all, &caps);
    for (k, v) in fold_capped(&third, &caps_after) {
        *expected_capped.entry(k).or_default() += v;
    }
    assert_eq!(
        read_capped(env, &tenants),
        expected_capped,
        "after the purge, tenant a's events meet no caps (they were purged); the others' still do"
    );
}

/// examples/tenants.stream over examples/data/events.jsonl (two tenants, the same user names)
/// plus one event with no tenant: each tenant's results equal those of a run over its events
/// alone, every output carries its tenant (key, field, header), and the event with no tenant is
/// a dead letter that says why. `env(dir, app)` makes a test environment on one backend.
pub fn example_alone(dir: &Path, env: impl Fn(&Path, &str) -> Env) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/data/events.jsonl")).unwrap();
    let tenant_of =
        |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap()["tenant"].as_str().unwrap().to_string();
    let tenants: BTreeSet<String> = text.lines().map(tenant_of).collect();
    assert_eq!(tenants.len(), 2, "the example has two tenants");
    let run = |name: &str, lines: Vec<&str>| -> (Env, Vec<(serde_json::Value, serde_json::Value, Option<String>)>) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let e = env(&d, name);
        let input = d.join("events.jsonl");
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();
        let program = e.program.to_str().unwrap().to_string();
        // One input partition: records reach the `group by` repartition in time order, so no
        // record is late (the window has no grace) whichever tenants share the input.
        e.run(&["produce", &e.topic("events"), input.to_str().unwrap(), "--program", &program, "--partitions", "1"]);
        e.run(&["run", &program, "--drain", "--close-windows-at-end"]);
        let out = super::control::consume_headers(&e, &e.topic("spend-per-user"), "streamc.tenant");
        (e, out)
    };
    let mut mixed_lines: Vec<&str> = text.lines().collect();
    let untenanted = r#"{"user": "mallory", "amount": 1.0, "at": "2026-01-01T10:30:00Z"}"#;
    mixed_lines.insert(5, untenanted);
    let (mixed_env, mixed) = run("tmixed", mixed_lines);
    for (k, v, h) in &mixed {
        assert_eq!(
            Some(v["tenant"].as_str().unwrap()),
            h.as_deref(),
            "the streamc.tenant header names the record's tenant"
        );
        assert_eq!(k[0], v["tenant"], "the key is [tenant, user]");
        assert_eq!(k[1], v["user"]);
    }
    for t in &tenants {
        let alone_lines: Vec<&str> = text.lines().filter(|l| tenant_of(l) == *t).collect();
        let (_, alone) = run(&format!("talone-{t}"), alone_lines);
        let mut of_t: Vec<String> =
            mixed.iter().filter(|(_, v, _)| v["tenant"] == t.as_str()).map(|(k, v, _)| format!("{k} {v}")).collect();
        let mut expect: Vec<String> = alone.iter().map(|(k, v, _)| format!("{k} {v}")).collect();
        of_t.sort();
        expect.sort();
        assert!(!expect.is_empty());
        assert_eq!(of_t, expect, "tenant {t}: the results of the shared run and of a run of its events alone");
    }
    // And both are the fold of each tenant's own events: (tenant, user, hour) → purchases,
    // total, largest.
    let mut fold: BTreeMap<(String, String, i64), (i64, f64, f64)> = BTreeMap::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let at = streamc::value::parse_rfc3339(v["at"].as_str().unwrap()).unwrap();
        let amount = v["amount"].as_f64().unwrap();
        let e = fold
            .entry((tenant_of(l), v["user"].as_str().unwrap().to_string(), at - at.rem_euclid(3_600_000)))
            .or_insert((0, 0.0, f64::MIN));
        e.0 += 1;
        e.1 += amount;
        e.2 = e.2.max(amount);
    }
    let got: BTreeMap<(String, String, i64), (i64, f64, f64)> = mixed
        .iter()
        .map(|(_, v, _)| {
            (
                (
                    v["tenant"].as_str().unwrap().to_string(),
                    v["user"].as_str().unwrap().to_string(),
                    v["window_start"].as_i64().unwrap(),
                ),
                (v["purchases"].as_i64().unwrap(), v["total"].as_f64().unwrap(), v["largest"].as_f64().unwrap()),
            )
        })
        .collect();
    assert_eq!(got.keys().collect::<Vec<_>>(), fold.keys().collect::<Vec<_>>());
    for (k, (n, total, largest)) in &fold {
        let (gn, gt, gl) = got[k];
        assert!(
            gn == *n && (gt - total).abs() <= 1e-9 * total.abs() && gl == *largest,
            "{k:?}: expected ({n}, {total}, {largest}), got ({gn}, {gt}, {gl})"
        );
    }
    let dlq = super::control::consume_headers(&mixed_env, &format!("{}-dlq", mixed_env.app), "streamc.error");
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!(dlq[0].1["user"], "mallory");
    assert!(dlq[0].2.as_deref().unwrap_or_default().contains("no tenant"), "{dlq:?}");
}
