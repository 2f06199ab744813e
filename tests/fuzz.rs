//! Bounded random testing inside `cargo test`, against rules rather than only for panics:
//!
//! * mutation: corpus programs with random edits must never panic the front end, every
//!   diagnostic's span must lie in the text, and a mutant that checks must lower to a DAG that
//!   renders in every format with no unresolved type in it;
//! * generation: random expressions built to have a known type must check, and the checker
//!   must infer exactly that type. The expected type comes from the generator, not the checker;
//! * records: random records decode to the values they were built from, and mutated bytes never
//!   panic a decoder of the ingestion path (what decodes has the declared types).

mod common;

use streamc::explain::ExplainFormat;

/// The generator's SplitMix64, with the helpers these tests use.
struct Rng(streamc::gen::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(streamc::gen::Rng(seed))
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn corpus() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["examples", "tests/programs", "tests/errors"] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.extension().is_some_and(|e| e == "stream") {
                files.push(std::fs::read_to_string(p).unwrap());
            }
        }
    }
    files
}

const TOKENS: &[&str] = &[
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ";",
    ".",
    "=",
    "==",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<",
    ">=",
    "?",
    "`",
    "\"",
    "#",
    "\n",
    " ",
    "and",
    "or",
    "not",
    "if",
    "then",
    "else",
    "null",
    "is",
    "in",
    "from",
    "where",
    "select",
    "group by",
    "window",
    "tumbling 5s",
    "session gap 1m",
    "hopping 5s advance 1s",
    "grace 1s",
    "aggregate",
    "emit final",
    "join",
    "left join",
    "within 5s",
    "on",
    "to",
    "key by",
    "count()",
    "sum(x)",
    "avg(",
    "query q",
    "stream",
    "table",
    "é",
    "\u{1F600}",
    "0",
    "1.5",
    "99999999999999999999",
    "5s",
    "price",
    "ticker",
    "limits.max_price",
];

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn mutate(rng: &mut Rng, src: &str) -> String {
    let mut s = src.to_string();
    for _ in 0..1 + rng.below(3) {
        let bounds: Vec<usize> = (0..=s.len()).filter(|i| s.is_char_boundary(*i)).collect();
        let a = *rng.pick(&bounds);
        let b = *rng.pick(&bounds);
        let (lo, hi) = (a.min(b), a.max(b));
        match rng.below(4) {
            0 => {
                let end = floor_boundary(&s, hi.min(lo + 12));
                s.replace_range(lo..end, "");
            }
            1 => s.insert_str(a, rng.pick(TOKENS).as_ref()),
            2 => {
                let piece = s[lo..floor_boundary(&s, hi.min(lo + 40))].to_string();
                s.insert_str(hi, &piece);
            }
            _ => {
                let tok = rng.pick(TOKENS).to_string();
                let end = bounds.iter().copied().find(|i| *i > a).unwrap_or(a);
                s.replace_range(a..end, &tok);
            }
        }
    }
    s
}

#[test]
fn mutated_programs_never_break_the_rules() {
    let mut rng = Rng::new(0x5eed);
    let corpus = corpus();
    let (mut checked, mut rejected) = (0, 0);
    for round in 0..2_000 {
        let src = mutate(&mut rng, &corpus[round % corpus.len()]);
        match common::compile(&src) {
            Err(d) => {
                assert!(!d.is_empty());
                assert!(common::spans_valid(&d, &src), "bad span for:\n{src}");
                let _ = common::render(&d, "mutant.stream", &src);
                rejected += 1;
            }
            Ok(p) => {
                checked += 1;
                assert!(!p.summary().contains("<error>"), "an error type survived checking:\n{src}");
                for f in [ExplainFormat::Text, ExplainFormat::Dot, ExplainFormat::Mermaid, ExplainFormat::Json] {
                    let out = common::explain(&p, "mutant", f);
                    assert!(!out.contains("<error>"), "{out}");
                    if f == ExplainFormat::Json {
                        serde_json::from_str::<serde_json::Value>(&out).unwrap();
                    }
                }
                let topo = common::topology(&p, "mutant");
                assert!(!petgraph::algo::is_cyclic_directed(&topo.graph));
            }
        }
    }
    // Both outcomes must actually be exercised.
    assert!(checked > 50 && rejected > 500, "checked {checked}, rejected {rejected}");
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum T {
    Int,
    Float,
    Str,
    Bool,
    Ts,
    Dur,
}

impl T {
    fn name(self) -> &'static str {
        match self {
            T::Int => "int",
            T::Float => "float",
            T::Str => "string",
            T::Bool => "bool",
            T::Ts => "timestamp",
            T::Dur => "duration",
        }
    }
}

/// An expression of type `t`, by construction.
fn gen(rng: &mut Rng, t: T, depth: usize) -> String {
    let leaf = depth == 0 || rng.below(4) == 0;
    let g = |t: T, rng: &mut Rng| gen(rng, t, depth.saturating_sub(1));
    match t {
        T::Int if leaf => rng.pick(&["i", "0", "42", "coalesce(ni, 7)"]).to_string(),
        T::Int => match rng.below(7) {
            0 => format!("({} + {})", g(T::Int, rng), g(T::Int, rng)),
            1 => format!("({} * {} - {})", g(T::Int, rng), g(T::Int, rng), g(T::Int, rng)),
            2 => format!("-{}", g(T::Int, rng)),
            3 => format!("len({})", g(T::Str, rng)),
            4 => format!("(if {} then {} else {})", g(T::Bool, rng), g(T::Int, rng), g(T::Int, rng)),
            5 => format!("epoch_ms({})", g(T::Ts, rng)),
            _ => format!("({} % {})", g(T::Int, rng), g(T::Int, rng)),
        },
        T::Float if leaf => rng.pick(&["f", "1.5", "2.0e3"]).to_string(),
        T::Float => match rng.below(5) {
            0 => format!("({} + {})", g(T::Float, rng), g(T::Int, rng)),
            1 => format!("sqrt({})", g(T::Float, rng)),
            2 => format!("round({}, 2)", g(T::Float, rng)),
            3 => format!("({} / {})", g(T::Int, rng), g(T::Float, rng)),
            _ => format!("avg_of({}, {})", g(T::Float, rng), g(T::Float, rng)),
        },
        T::Str if leaf => rng.pick(&["s", "\"x\"", "\"é\\n\""]).to_string(),
        T::Str => match rng.below(5) {
            0 => format!("lower({})", g(T::Str, rng)),
            1 => format!("concat({}, {}, {})", g(T::Str, rng), g(T::Str, rng), g(T::Str, rng)),
            2 => format!("to_string({})", g(*rng.pick(&[T::Int, T::Float, T::Bool]), rng)),
            3 => format!("({} + {})", g(T::Str, rng), g(T::Str, rng)),
            _ => format!("(if {} then {} else {})", g(T::Bool, rng), g(T::Str, rng), g(T::Str, rng)),
        },
        T::Bool if leaf => rng.pick(&["b", "true", "ni is null"]).to_string(),
        T::Bool => match rng.below(7) {
            0 => format!("({} < {})", g(T::Int, rng), g(T::Int, rng)),
            1 => format!("({} >= {})", g(T::Float, rng), g(T::Int, rng)),
            2 => format!("({} == {})", g(T::Str, rng), g(T::Str, rng)),
            3 => format!("(not {})", g(T::Bool, rng)),
            4 => format!("({} and {} or {})", g(T::Bool, rng), g(T::Bool, rng), g(T::Bool, rng)),
            5 => format!("({} in [{}, {}])", g(T::Int, rng), g(T::Int, rng), g(T::Int, rng)),
            _ => format!("contains({}, {})", g(T::Str, rng), g(T::Str, rng)),
        },
        T::Ts if leaf => "t".to_string(),
        T::Ts => match rng.below(3) {
            0 => format!("({} + {})", g(T::Ts, rng), g(T::Dur, rng)),
            1 => format!("from_epoch_ms({})", g(T::Int, rng)),
            _ => format!("({} - {})", g(T::Ts, rng), g(T::Dur, rng)),
        },
        T::Dur if leaf => rng.pick(&["d", "5s", "250ms"]).to_string(),
        T::Dur => match rng.below(3) {
            0 => format!("({} + {})", g(T::Dur, rng), g(T::Dur, rng)),
            1 => format!("({} * {})", g(T::Dur, rng), g(T::Int, rng)),
            _ => format!("({} - {})", g(T::Ts, rng), g(T::Ts, rng)),
        },
    }
}

#[test]
fn generated_expressions_check_with_the_type_they_were_built_for() {
    let mut rng = Rng::new(42);
    let all = [T::Int, T::Float, T::Str, T::Bool, T::Ts, T::Dur];
    for case in 0..1_500 {
        let t = all[case % all.len()];
        let e = gen(&mut rng, t, 4);
        let src = format!(
            "function avg_of(a: float, b: float) -> float = (a + b) / 2.0\n\
             stream s from \"s\" {{ value json {{ i: int, f: float, s: string, b: bool, t: timestamp, d: duration, ni: int? }} }}\n\
             query q {{\n  from s\n  select {{ out = {e} }}\n  to \"o\"\n}}\n"
        );
        let p = match common::compile(&src) {
            Ok(p) => p,
            Err(d) => panic!("generated program rejected:\n{}", common::render(&d, "gen.stream", &src)),
        };
        let summary = p.summary();
        let want = format!("value {{out: {}}}", t.name());
        assert!(summary.contains(&want), "expected {want} for `{e}`, got:\n{summary}");
    }
}

// ------------------------------------------------------------------ records into decode

const RECORD_PROGRAM: &str = r#"
stream s from "s" {
  key   id
  value json { id: string, n: int, x: float, ok: bool, at: timestamp, d: duration,
               tags: list<string>, inner: { a: int, b: string } }
  time  at
}
query q { from s select { id, n } to "out" }
"#;

/// Whether a decoded value has the declared type (every field of a decoded record may be null).
fn conforms(v: &streamc::value::Value, t: &streamc::types::Type) -> bool {
    use streamc::types::Type as T;
    use streamc::value::Value as V;
    match (v, t) {
        (V::Null, _) => true,
        (_, T::Nullable(inner)) => conforms(v, inner),
        (V::Int(_), T::Int) | (V::Float(_), T::Float) | (V::Bool(_), T::Bool) | (V::Str(_), T::String) => true,
        (V::Ts(_), T::Timestamp) | (V::Dur(_), T::Duration) => true,
        (V::List(items), T::List(e)) => items.iter().all(|i| conforms(i, e)),
        (V::Record(fs), T::Record(rt)) => {
            fs.len() == rt.fields.len() && fs.iter().zip(&rt.fields).all(|(f, (_, t))| conforms(f, t))
        }
        _ => false,
    }
}

/// A random string with the characters producers trip over: quotes, backslashes, controls,
/// non-ASCII and astral characters.
fn random_text(rng: &mut Rng) -> String {
    const PARTS: &[&str] = &["a", "Z", "9", " ", "\"", "\\", "\n", "\t", "\u{0}", "é", "\u{1F600}", "/", "{", "]"];
    (0..rng.below(12)).map(|_| *rng.pick(PARTS)).collect()
}

const JUNK: &[&[u8]] = &[
    b"\\u0000",
    b"\\ud800",
    b"1e400",
    b"-",
    b"null",
    b"[",
    b"{",
    b"\"",
    b"99999999999999999999",
    b"\xff\xfe",
    b",\"n\":2",
    b"true",
    b"1.5",
    b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
];

fn mutate_bytes(rng: &mut Rng, b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(v.len() + 1);
        match rng.below(4) {
            0 => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at..end);
            }
            1 => {
                let junk = rng.pick(JUNK);
                v.splice(at..at, junk.iter().copied());
            }
            2 => v.truncate(at),
            _ => {
                if let Some(x) = v.get_mut(at) {
                    *x ^= 1 << rng.below(8);
                }
            }
        }
    }
    v
}

/// Random records feed the decoders of the runtime's ingestion path. A record built from
/// random values decodes to exactly those values (the expectation comes from the generator);
/// a mutated one never panics any decoder, and what decodes has the declared types.
#[test]
fn random_records_decode_as_built_or_are_refused() {
    use streamc::value::Value;
    let program = common::compile(RECORD_PROGRAM).unwrap();
    let src = program.sources.iter().find(|s| s.name == "s").unwrap().clone();
    let mut rng = Rng::new(0xdec0de);
    let (mut decoded, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let id = random_text(&mut rng);
        let n = match rng.below(4) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.0.next_u64() as i64 >> rng.below(60),
        };
        let x = (rng.0.next_u64() as i64 >> rng.below(60)) as f64 / 7.0;
        let ok = rng.below(2) == 1;
        let at = (rng.0.next_u64() >> 22) as i64;
        let d = rng.below(1 << 30) as i64;
        let tags: Vec<String> = (0..rng.below(4)).map(|_| random_text(&mut rng)).collect();
        let a = rng.0.next_u64() as i64 >> 1;
        let b = random_text(&mut rng);
        let json = serde_json::json!({
            "id": id, "n": n, "x": x, "ok": ok, "at": at, "d": d, "tags": tags, "inner": {"a": a, "b": b}
        });
        let bytes = serde_json::to_vec(&json).unwrap();
        let want = vec![
            Value::str(&id),
            Value::Int(n),
            Value::Float(x),
            Value::Bool(ok),
            Value::Ts(at),
            Value::Dur(d),
            Value::List(std::sync::Arc::new(tags.iter().map(|t| Value::str(t)).collect())),
            Value::Record(std::sync::Arc::new(vec![Value::Int(a), Value::str(&b)])),
        ];
        let got = streamc::format::decode_visible(&src, &bytes).unwrap_or_else(|e| panic!("{e}: {json}"));
        assert_eq!(got, want, "{json}");
        let rec = streamc::runtime::value_record(Some(&src), &bytes, 0);
        assert_eq!(rec.key.as_deref(), Some(id.as_bytes()), "the key is the id field");
        assert_eq!(rec.timestamp, at, "the timestamp is the time field");

        let bad = mutate_bytes(&mut rng, &bytes);
        let _ = streamc::runtime::value_record(Some(&src), &bad, 0);
        for ty in [streamc::types::Type::Int, streamc::types::Type::String, streamc::types::Type::Timestamp] {
            let _ = streamc::runtime::task::decode_key(Some(&bad), &ty);
        }
        match streamc::format::decode_visible(&src, &bad) {
            Ok(fields) => {
                decoded += 1;
                assert_eq!(fields.len(), src.value.fields.len());
                for (f, (name, t)) in fields.iter().zip(&src.value.fields) {
                    assert!(conforms(f, t), "field {name}: {f:?} is not a {t}: {}", String::from_utf8_lossy(&bad));
                }
            }
            Err(e) => {
                refused += 1;
                assert!(!e.is_empty());
            }
        }
    }
    assert!(decoded > 1_000 && refused > 1_000, "decoded {decoded}, refused {refused}");
}
