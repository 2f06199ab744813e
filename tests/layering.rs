//! The layering rules of ARCHITECTURE.md, enforced: every `crate::` path in the library's code
//! (comments aside) names a module of the same layer or a lower one, and no two files import each
//! other, directly or through others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers, lowest first. A module may use modules of its own layer and of layers before it.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["ast", "types", "diag", "config", "gen", "value", "memory", "record"]),
    ("language", &["syntax", "aggregate", "function", "hir", "check", "stdlib", "eval", "format", "fmt", "lsp"]),
    ("plan", &["plan", "explain"]),
    ("io", &["log", "kafka", "registry", "topics"]),
    ("control", &["control", "dlq"]),
    ("runtime", &["runtime"]),
];

/// The module path of a source file: `src/runtime/task.rs` → `runtime::task`,
/// `src/plan/mod.rs` → `plan`, `src/lib.rs` → ``.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

fn layer_of(module: &str) -> Option<usize> {
    let top = module.split("::").next()?;
    LAYERS.iter().position(|(_, ms)| ms.contains(&top))
}

/// Every module path a file refers to through `crate::`, outside comments.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // The code of every line, comments cut, as one text (a `use` group may span lines).
    let code: String = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    {
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}`: each item's first segment.
                let inner = group.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
                continue;
            }
            let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            if path.ends_with("::") && rest[path.len()..].starts_with('{') {
                // `use crate::a::b::{c, d::{e, f}}`: `a::b::c` and `a::b::d` (each resolves to
                // its longest prefix that is a module).
                for item in group_items(&rest[path.len() + 1..]) {
                    out.insert(format!("{path}{item}").trim_end_matches(':').to_string());
                }
            }
            out.insert(path.trim_end_matches(':').to_string());
        }
    }
    out
}

/// The leading path of each item of a `{…}` group (its text after the `{`), up to its own
/// nested group: `c, d::{e, f}}` → `c`, `d::`.
fn group_items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let (mut depth, mut item, mut taking) = (0usize, String::new(), true);
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                taking = false;
            }
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                taking = true;
            }
            c if taking && (c.is_alphanumeric() || c == '_' || c == ':') => item.push(c),
            c if !c.is_whitespace() => taking = false,
            _ => {}
        }
    }
    items.push(item);
    items.into_iter().map(|i| i.trim().to_string()).filter(|i| !i.is_empty()).collect()
}

fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&root).unwrap().to_path_buf();
                // The binary's files use the library through `streamc::`, from above every layer.
                if ["main.rs", "control_cli.rs", "dlq_cli.rs", "test_cli.rs", "trace_cli.rs", "fmt_cli.rs"]
                    .iter()
                    .any(|f| rel == Path::new(f))
                {
                    continue;
                }
                files.insert(module_of(&rel), std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    files
}

/// The module a referenced path lands in: its longest prefix that is a module of the crate.
fn resolve<'a>(path: &str, modules: &'a BTreeSet<String>) -> Option<&'a String> {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len()).rev().find_map(|n| modules.get(&segs[..n].join("::")))
}

#[test]
fn every_module_uses_only_its_own_layer_and_lower_ones() {
    let files = sources();
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut bad = Vec::new();
    for (m, text) in &files {
        if m.is_empty() {
            continue; // lib.rs: declares the modules and `compile`, which chains the stages.
        }
        let Some(own) = layer_of(m) else {
            bad.push(format!("{m} is in no layer: add it to LAYERS and to ARCHITECTURE.md"));
            continue;
        };
        for r in references(text) {
            let Some(target) = resolve(&r, &modules) else { continue };
            if target.is_empty() {
                continue;
            }
            match layer_of(target) {
                Some(l) if l <= own => {}
                Some(l) => bad.push(format!("{m} ({}) uses {target} ({})", LAYERS[own].0, LAYERS[l].0)),
                None => bad.push(format!("{target} is in no layer")),
            }
        }
    }
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

#[test]
fn no_two_files_import_each_other() {
    let files = sources();
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (m, text) in &files {
        for r in references(text) {
            if let Some(t) = resolve(&r, &modules) {
                if t != m && !t.is_empty() && !m.is_empty() {
                    edges.entry(m.as_str()).or_default().insert(t.as_str());
                }
            }
        }
    }
    // A module's `mod.rs` declaring its children is not an import; a child using its parent is.
    // Depth-first search for a cycle, reporting its path.
    fn visit<'a>(
        n: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|p| *p == n).unwrap_or(0);
                let mut cycle = path[at..].to_vec();
                cycle.push(n);
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n, 1);
        path.push(n);
        for t in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(t, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in files.keys() {
        if let Some(cycle) = visit(m, &edges, &mut state, &mut Vec::new()) {
            panic!("import cycle: {}", cycle.join(" → "));
        }
    }
}

/// The two backends of the runtime, each in a folder of its own.
const BACKENDS: &[&str] = &["runtime::embedded", "runtime::kafka"];

fn backend_of(module: &str) -> Option<&'static str> {
    BACKENDS.iter().copied().find(|b| module == *b || module.starts_with(&format!("{b}::")))
}

#[test]
fn the_runtime_core_uses_no_backend_and_no_backend_uses_the_other() {
    let files = sources();
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut bad = Vec::new();
    for (m, text) in files.iter().filter(|(m, _)| m.starts_with("runtime")) {
        let own = backend_of(m);
        for r in references(text) {
            let Some(target) = resolve(&r, &modules) else { continue };
            match (own, backend_of(target)) {
                (_, None) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, Some(b)) if m == "runtime" => {
                    // runtime/mod.rs declares the backends; it may not use them otherwise.
                    bad.push(format!("runtime/mod.rs uses {b}"));
                }
                (None, Some(b)) => bad.push(format!("{m} (the core) uses the backend {b}")),
                (Some(a), Some(b)) => bad.push(format!("{m} (backend {a}) uses the backend {b}")),
            }
        }
    }
    assert!(bad.is_empty(), "core/backend violations:\n{}", bad.join("\n"));
}
