//! `streamc fmt`: the layout, and what formatting must never change (the program, its
//! comments), checked on every program in the repository, on hand-written cases and on
//! whitespace-scrambled copies.

use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use streamc::fmt::format;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.stream` file of the repository that parses (tests/errors holds some that do not).
fn programs() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for dir in ["examples", "stdlib", "tests/programs", "tests/errors"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "stream"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            if streamc::syntax::parse(&text).1.is_empty() {
                out.push((f, text));
            }
        }
    }
    assert!(out.len() >= 20, "only {} programs found", out.len());
    out
}

/// The program as the parser sees it, without positions: equal for two texts that differ only
/// in layout.
fn meaning(text: &str) -> String {
    let (ast, diags) = streamc::syntax::parse(text);
    assert!(diags.is_empty(), "{diags:?}");
    let spans = regex::Regex::new(r"Span \{ start: \d+, end: \d+ \}").unwrap();
    spans.replace_all(&format!("{ast:?}"), "Span").into_owned()
}

/// What a character of a program's text is part of.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Code,
    /// A string literal or backquoted name (its quotes included).
    Literal,
    /// A `#` comment, to the end of its line.
    Comment,
}

/// Each character of `text` with its byte offset and what it is part of (a plain scan,
/// independent of the parser).
fn parts(text: &str) -> Vec<(usize, char, Part)> {
    let (mut in_str, mut in_tick, mut in_comment, mut escaped) = (false, false, false, false);
    let mut out = Vec::new();
    for (i, c) in text.char_indices() {
        if in_comment && c == '\n' {
            in_comment = false;
        }
        if !in_comment && !in_str && !in_tick && c == '#' {
            in_comment = true;
        }
        let part = if in_comment {
            Part::Comment
        } else if in_str || in_tick || c == '"' || c == '`' {
            Part::Literal
        } else {
            Part::Code
        };
        out.push((i, c, part));
        if in_comment {
            continue;
        }
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if in_str => escaped = true,
            '"' if !in_tick => in_str = !in_str,
            '`' if !in_str => in_tick = !in_tick,
            _ => {}
        }
    }
    out
}

/// The byte ranges of the maximal runs of characters that `pick` takes.
fn runs(text: &str, pick: impl Fn(char, Part) -> bool) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, c, part) in parts(text) {
        if pick(c, part) {
            match out.last_mut() {
                Some(run) if run.1 == i => run.1 = i + c.len_utf8(),
                _ => out.push((i, i + c.len_utf8())),
            }
        }
    }
    out
}

/// The comments of a text, in order.
fn comments(text: &str) -> Vec<String> {
    runs(text, |c, part| part == Part::Comment && c != '\n')
        .into_iter()
        .map(|(s, e)| text[s..e].trim_end().to_string())
        .collect()
}

#[test]
fn formatting_keeps_every_program_and_its_comments_and_is_idempotent() {
    for (path, text) in programs() {
        let once = format(&text).unwrap_or_else(|d| panic!("{}: {d:?}", path.display()));
        let twice = format(&once).unwrap();
        assert_eq!(once, twice, "{}: formatting the formatted text changed it", path.display());
        assert_eq!(meaning(&text), meaning(&once), "{}: the program changed", path.display());
        assert_eq!(comments(&text), comments(&once), "{}: the comments changed", path.display());
        for (n, line) in once.lines().enumerate() {
            assert!(!line.ends_with(' '), "{}:{}: trailing space", path.display(), n + 1);
        }
    }
}

#[test]
fn the_repositorys_own_programs_are_formatted() {
    for (path, text) in programs() {
        if path.starts_with(root().join("tests/errors")) {
            continue; // (their diagnostics' snapshots point into them as written)
        }
        assert_eq!(format(&text).unwrap(), text, "{} is not formatted: run `streamc fmt` on it", path.display());
    }
}

#[test]
fn a_messy_program_gets_the_canonical_layout() {
    let messy = r#"# header

# about trades
stream trades from "stocks" { key ticker; value json { ticker: string, price: float, size: int, ts: timestamp }
time ts }
query q { from trades   where price>0 and size  >=  -1   # positive
  select {ticker,price,   doubled=price*2,  tag = if(size>10)then"big"else"small", t = [1,2,], r = {a=1,b=2}}
  to "out" }


function twice(x: int)->int=x*2
"#;
    let expected = r#"# header

# about trades
stream trades from "stocks" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}

query q {
  from trades
  where price > 0 and size >= -1  # positive
  select {
    ticker, price
    doubled = price * 2
    tag     = if (size > 10) then "big" else "small"
    t       = [1, 2]
    r       = { a = 1, b = 2 }
  }
  to "out"
}

function twice(x: int) -> int = x * 2
"#;
    assert_eq!(format(messy).unwrap(), expected);
    assert_eq!(format(expected).unwrap(), expected);
}

#[test]
fn comments_stay_where_they_were_written() {
    let text = r#"query q { # opening
  from a

  # before the filter, after a blank line
  where x > 1 # trailing
    # inside the condition
    and y < 2
  aggregate { n = count() # how many
  }
  # before the closing brace
}
# at the end"#;
    let expected = r#"query q {  # opening
  from a

  # before the filter, after a blank line
  where x > 1  # trailing
      # inside the condition
      and y < 2
  aggregate {
    n = count()  # how many
  }
  # before the closing brace
}
# at the end
"#;
    let out = format(text).unwrap();
    assert_eq!(out, expected);
    assert_eq!(format(&out).unwrap(), out);
}

#[test]
fn long_lines_are_broken_where_the_layout_allows() {
    let text = "query q { from a where aaaaaaaaaaaaaaaaaaaa > 1 and bbbbbbbbbbbbbbbbbbbbbbbbb < 2 or cccccccccccccccccccccccccc == 3 or not d to \"o\" }\n\
                function f(x: float) -> float = if x > 100000000000.0 then x * 200000000000.0 else x / 300000000000.0 + 1.0\n";
    let expected = "query q {\n  from a\n  where aaaaaaaaaaaaaaaaaaaa > 1\n      and bbbbbbbbbbbbbbbbbbbbbbbbb < 2\n      or cccccccccccccccccccccccccc == 3\n      or not d\n  to \"o\"\n}\n\n\
                    function f(x: float) -> float =\n    if x > 100000000000.0 then x * 200000000000.0 else x / 300000000000.0 + 1.0\n";
    assert_eq!(format(text).unwrap(), expected);
    for line in expected.lines() {
        assert!(line.len() <= streamc::fmt::WIDTH, "{line}");
    }
}

#[test]
fn a_program_that_does_not_parse_is_not_formatted() {
    let d = format("query q { from a where }").unwrap_err();
    assert!(!d.is_empty());
    assert_eq!(format("").unwrap(), "");
    assert_eq!(format("# only a comment").unwrap(), "# only a comment\n");
}

/// The text with its comments removed.
fn without_comments(text: &str) -> String {
    let kept: String =
        parts(text).into_iter().filter(|(_, c, p)| *p != Part::Comment || *c == '\n').map(|(_, c, _)| c).collect();
    kept.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

/// The text's runs of whitespace outside strings, backquoted names and comments, as byte ranges.
fn whitespace_runs(text: &str) -> Vec<(usize, usize)> {
    runs(text, |c, part| part == Part::Code && c.is_whitespace())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the spacing and line breaks (no blank lines, which the layout keeps), the
    /// formatted text is the same.
    #[test]
    fn the_layout_does_not_depend_on_the_input_whitespace(pick in 0usize..1000, seed in any::<u64>()) {
        let all = programs();
        let (_, text) = &all[pick % all.len()];
        let plain = without_comments(text);
        let runs = whitespace_runs(&plain);
        let mut scrambled = String::new();
        let mut state = seed | 1;
        let mut last = 0;
        for (s, e) in &runs {
            scrambled.push_str(&plain[last..*s]);
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            scrambled.push_str(["  ", "\n", " \n\t ", "\t"][(state % 4) as usize]);
            last = *e;
        }
        scrambled.push_str(&plain[last..]);
        // The reference: the same text with every whitespace run a single space.
        let mut single = String::new();
        let mut last = 0;
        for (s, e) in &runs {
            single.push_str(&plain[last..*s]);
            single.push(' ');
            last = *e;
        }
        single.push_str(&plain[last..]);
        prop_assert_eq!(format(&scrambled).unwrap(), format(&single).unwrap());
    }
}

/// A comment in every gap between tokens, on its own line or at a line's end, one at a time:
/// the formatted program is the same program, with the same comments, and formatting it again
/// changes nothing.
#[test]
fn a_comment_anywhere_is_kept_and_formatting_stays_idempotent() {
    for rel in ["examples/orders.stream", "tests/programs/udf.stream", "tests/programs/joins.stream"] {
        let text = without_comments(&std::fs::read_to_string(root().join(rel)).unwrap());
        for (k, (s, _)) in whitespace_runs(&text).into_iter().enumerate() {
            for comment in [format!(" # c{k}\n"), format!("\n# c{k}\n")] {
                let with = format!("{}{comment}{}", &text[..s], &text[s + 1..]);
                let once = format(&with).unwrap_or_else(|d| panic!("{rel}, gap {k}: {d:?}\n{with}"));
                assert_eq!(format(&once).unwrap(), once, "{rel}, gap {k}: not idempotent\n{with}");
                assert_eq!(comments(&once), comments(&with), "{rel}, gap {k}:\n{once}");
                assert_eq!(meaning(&once), meaning(&with), "{rel}, gap {k}:\n{once}");
            }
        }
    }
}

#[test]
fn cases_found_in_review_stay_fixed() {
    // Nested record types: formatting time grows with the depth, not exponentially.
    let deep = format!("stream s from \"t\" {{ value json {}int{} }}", "{ a: ".repeat(60), " }".repeat(60));
    assert!(format(&deep).unwrap().lines().count() > 60);
    // A comment before a block's `{` stays before it.
    let out = format("function f(x: int)\n# c\n-> { a: int }? = { a = x % 2 }").unwrap();
    assert_eq!(out, "function f(x: int) ->\n    # c\n    { a: int }? = { a = x % 2 }\n");
    // Two comments at line ends stay two, each after its code.
    let out = format("query q { from a to \"y\" # a\n json # b\n }").unwrap();
    assert_eq!(out, "query q {\n  from a\n  to \"y\"  # a\n      json  # b\n}\n");
    // A comment on its own line before a block's `}` is indented as the block's items.
    let out = format("query q { from a select {\n x = 1\n # c\n } to \"o\" }").unwrap();
    assert_eq!(out, "query q {\n  from a\n  select {\n    x = 1\n    # c\n  }\n  to \"o\"\n}\n");
    // Alignment counts columns, not bytes.
    let out = format("query q { from a select { éé = 1 # a\n ab = 2 # b\n abc = 3 } to \"o\" }").unwrap();
    assert!(out.contains("    éé  = 1  # a\n    ab  = 2  # b\n    abc = 3\n"), "{out}");
    // A record type in a list type.
    let out = format("stream s from \"t\" { value json { d: list < { x: int } > } }").unwrap();
    assert!(out.contains("d: list<{ x: int }>"), "{out}");
}

fn streamc(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_streamc")).args(args).current_dir(dir).env("NO_COLOR", "1").output().unwrap()
}

#[test]
fn the_command_checks_rewrites_and_reports_files_that_do_not_parse() {
    let dir = std::env::temp_dir().join(format!("streamc-fmt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let messy = "query q { from a  to \"o\" }\n";
    std::fs::write(dir.join("q.stream"), messy).unwrap();
    std::fs::write(dir.join("bad.stream"), "query q { from }\n").unwrap();

    let o = streamc(&["fmt", "--check", "q.stream"], &dir);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("-query q { from a  to \"o\" }") && out.contains("+query q {"), "{out}");
    assert_eq!(std::fs::read_to_string(dir.join("q.stream")).unwrap(), messy, "--check changed the file");

    let o = streamc(&["fmt", "q.stream"], &dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("q.stream")).unwrap(), "query q {\n  from a\n  to \"o\"\n}\n");
    assert!(streamc(&["fmt", "--check", "q.stream"], &dir).status.success());

    // Through a symbolic link: the file it names is rewritten, keeping its permissions.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(dir.join("real.stream"), messy).unwrap();
        std::fs::set_permissions(dir.join("real.stream"), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::symlink("real.stream", dir.join("link.stream")).unwrap();
        assert!(streamc(&["fmt", "link.stream"], &dir).status.success());
        assert!(std::fs::symlink_metadata(dir.join("link.stream")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(dir.join("real.stream")).unwrap(), "query q {\n  from a\n  to \"o\"\n}\n");
        let mode = std::fs::metadata(dir.join("real.stream")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    let o = streamc(&["fmt", "bad.stream"], &dir);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("E0100") && err.contains("bad.stream is not formatted"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("bad.stream")).unwrap(), "query q { from }\n");
    std::fs::remove_dir_all(&dir).unwrap();
}
