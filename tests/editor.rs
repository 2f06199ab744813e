//! The editor support in `editor/`: the TextMate grammar knows every keyword of `grammar/stream.pest`,
//! and the VS Code extension's manifest uses it for `.stream` files.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn json(rel: &str) -> Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not valid JSON: {e}"))
}

/// The words of the keyword rules, `kw_NAME = @{ "WORD" ~ !ident_char }`.
fn keywords(pest: &str) -> BTreeSet<String> {
    let word = |line: &str| {
        let rest = &line[line.find("@{")? + 2..];
        let start = rest.find('"')? + 1;
        Some(rest[start..start + rest[start..].find('"')?].to_string())
    };
    pest.lines().map(str::trim_start).filter(|line| line.starts_with("kw_")).filter_map(word).collect()
}

/// Every `match` pattern under `value`.
fn match_patterns<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(key, item)| match item {
            Value::String(pattern) if key == "match" => out.push(pattern),
            _ => match_patterns(item, out),
        }),
        Value::Array(items) => items.iter().for_each(|item| match_patterns(item, out)),
        _ => {}
    }
}

/// `pattern` with each regex escape (`\b`, `\s`, …) made a space, so that none joins the word after it.
fn without_escapes(pattern: &str) -> String {
    let (mut out, mut chars) = (String::new(), pattern.chars());
    while let Some(c) = chars.next() {
        out.push(if c == '\\' && chars.next().is_some() { ' ' } else { c });
    }
    out
}

/// Whether `word` occurs in `text` with no identifier character right before or after it.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word)
        .any(|(at, _)| !ident(text[..at].chars().next_back()) && !ident(text[at + word.len()..].chars().next()))
}

#[test]
fn the_textmate_grammar_matches_every_keyword() {
    let words = keywords(&read("grammar/stream.pest"));
    assert!(words.len() >= 60, "grammar/stream.pest: found only {} kw_ rules: {words:?}", words.len());
    let grammar = json("editor/streamc.tmLanguage.json");
    assert_eq!(grammar["scopeName"].as_str(), Some("source.streamc"), "editor/streamc.tmLanguage.json: scopeName");
    let mut patterns = Vec::new();
    match_patterns(&grammar, &mut patterns);
    let patterns: Vec<String> = patterns.into_iter().map(without_escapes).collect();
    let patterns = patterns.join(" ");
    let missing: Vec<&String> = words.iter().filter(|word| !has_word(&patterns, word)).collect();
    assert!(
        missing.is_empty(),
        "keywords of grammar/stream.pest in no `match` of editor/streamc.tmLanguage.json: {missing:?}"
    );
}

#[test]
fn the_vscode_extension_uses_the_grammar_for_stream_files() {
    let manifest = json("editor/vscode/package.json");
    let contributes = &manifest["contributes"];
    let extensions = contributes["languages"][0]["extensions"].as_array().map(Vec::as_slice).unwrap_or_default();
    assert!(
        extensions.iter().any(|e| e.as_str() == Some(".stream")),
        "editor/vscode/package.json: contributes.languages[0].extensions lacks \".stream\": {extensions:?}"
    );
    let path = contributes["grammars"][0]["path"].as_str();
    assert_eq!(
        path,
        Some("./syntaxes/streamc.tmLanguage.json"),
        "editor/vscode/package.json: contributes.grammars[0].path"
    );
}
