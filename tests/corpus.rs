//! The snapshot corpus. Every `tests/programs/*.stream` and `examples/*.stream` is snapshotted
//! at parse (an outline of the AST), check (what the checker resolved) and explain (text, and
//! the JSON form parsed back); every `tests/errors/*.stream` must fail, and its rendered
//! diagnostics are snapshotted; every `tests/control/*.ctl` (a first line
//! `# program: PATH` names the program it runs against) is checked as a control statement.
//! Adding a case is adding a file.

mod common;

use std::path::Path;

use streamc::explain::ExplainFormat;

fn good_program(path: &Path) {
    let src = std::fs::read_to_string(path).unwrap();
    let (outline, diags) = common::outline(&src);
    assert!(diags.is_empty(), "{}", common::render(&diags, &path.display().to_string(), &src));
    insta::assert_snapshot!("parse", outline);
    let program = match common::compile(&src) {
        Ok(p) => p,
        Err(d) => panic!("{}", common::render(&d, &path.display().to_string(), &src)),
    };
    insta::assert_snapshot!("check", program.summary());
    let app = common::app_of(path);
    insta::assert_snapshot!("explain", common::explain(&program, &app, ExplainFormat::Text));
    let json: serde_json::Value = serde_json::from_str(&common::explain(&program, &app, ExplainFormat::Json)).unwrap();
    assert_eq!(json["application"], app.as_str());
    // The other renderings exist and name every node.
    let topo = common::topology(&program, &app);
    let dot = common::explain(&program, &app, ExplainFormat::Dot);
    let mermaid = common::explain(&program, &app, ExplainFormat::Mermaid);
    let svg = common::explain(&program, &app, ExplainFormat::Svg);
    assert!(svg.starts_with("<?xml") && svg.contains("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
    for n in topo.graph.node_weights() {
        assert!(dot.contains(&format!("\"{}\"", n.name)), "dot lacks {}", n.name);
        assert!(mermaid.contains(&n.name), "mermaid lacks {}", n.name);
        assert!(svg.contains(&format!(">{}<", n.name)), "the picture lacks {}", n.name);
    }
}

#[test]
fn programs() {
    insta::glob!("programs/*.stream", good_program);
}

#[test]
fn examples() {
    // Their own snapshot folder, so an example and a test program may share a file name.
    insta::with_settings!({ snapshot_path => "snapshots/examples" }, {
        insta::glob!("../examples", "*.stream", good_program);
    });
}

#[test]
fn errors() {
    insta::glob!("errors/*.stream", |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let diags = match common::compile(&src) {
            Ok(_) => panic!("{} should not compile", path.display()),
            Err(d) => d,
        };
        assert!(common::spans_valid(&diags, &src));
        let name = format!("tests/errors/{}", path.file_name().unwrap().to_string_lossy());
        insta::assert_snapshot!(common::render(&diags, &name, &src));
    });
}

#[test]
fn control_statements() {
    insta::glob!("control/*.ctl", |path| {
        let text = std::fs::read_to_string(path).unwrap();
        let (header, stmt) = text.split_once('\n').unwrap();
        let program_path = header.strip_prefix("# program: ").expect("first line: # program: PATH");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(root.join(program_path.trim())).unwrap();
        let program = common::compile(&src).unwrap();
        let stmt = stmt.trim_end();
        let out = match common::statement(&program, stmt) {
            Ok((tenant, ctl)) => format!("accepted (tenant {tenant:?}): {}", describe(&ctl)),
            Err(d) => {
                assert!(common::spans_valid(&d, stmt));
                format!("rejected\n{}", common::render(&d, "<statement>", stmt))
            }
        };
        insta::assert_snapshot!(out);
    });
}

fn describe(c: &streamc::check::Control) -> String {
    use streamc::check::Control;
    match c {
        Control::Update { table, value, .. } => format!("update table #{table} with a {}", value.ty),
        Control::Delete { table, .. } => format!("delete from table #{table}"),
        Control::Purge => "purge".into(),
        Control::NewQuery(q) => format!("new query {} ({} steps)", q.name, q.steps.len()),
        Control::Replace { query, mode } => format!("replace query {} ({mode:?})", query.name),
        Control::Drop(q) => format!("drop query {q}"),
    }
}
