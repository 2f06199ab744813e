//! streamc: a stream processor for a small declarative language.
//!
//! The stages, each a plain function over an owned type (see ARCHITECTURE.md):
//! text → [`syntax::parse`] → [`ast::Program`] → [`check::check`] → [`hir::Program`]
//! → [`plan::lower`] → [`plan::Topology`] → explain / runtime.

pub mod aggregate;
pub mod ast;
pub mod check;
pub mod config;
pub mod control;
pub mod diag;
pub mod dlq;
pub mod eval;
pub mod explain;
pub mod fmt;
pub mod format;
pub mod function;
pub mod gen;
pub mod hir;
pub mod kafka;
pub mod log;
pub mod lsp;
pub mod memory;
pub mod plan;
pub mod record;
pub mod registry;
pub mod runtime;
pub mod stdlib;
pub mod syntax;
pub mod topics;
pub mod types;
pub mod value;

use diag::Diagnostics;

/// Parse and check a program with the standard library in scope.
pub fn compile(source: &str) -> Result<hir::Program, Diagnostics> {
    front_end(source, |ast, lib| check::Analysis {
        result: check::check(ast, source, lib),
        types: Vec::new(),
        sources: Vec::new(),
    })
    .1
    .result
}

/// Fill in the fields of every `value avro` / `value protobuf` declared without them, from the
/// schema registry: `lookup(topic, format)` gives the fields of the latest schema of
/// `<topic>-value` as a record type's text (`{ ticker: string, price: float }`, see
/// [`format::avro::declared_fields`] and [`format::protobuf::declared_fields`]), or why it cannot. The text is
/// inserted after `value avro` / `value protobuf` on the same line, so that every other line keeps
/// its number. A run records this expanded text as its program, with the file's own text: a
/// later run of the same file reuses the recorded fields (`streamc run`), so every instance and
/// restart compiles the same ones whatever versions the subject gains. A failed lookup is a
/// diagnostic at the declaration. Programs without such declarations come back unchanged.
pub fn expand_registry_fields(
    source: &str,
    lookup: &mut dyn FnMut(&str, ast::Format) -> Result<String, String>,
) -> Result<String, Diagnostics> {
    let (ast, _) = syntax::parse(source);
    let mut inserts: Vec<(usize, String)> = Vec::new();
    let mut diags = Vec::new();
    for item in &ast.items {
        let (ast::Item::Stream(d) | ast::Item::Table(d)) = item else { continue };
        for v in &d.items {
            let ast::DeclItem::ValueRegistry { format, from_registry: true, .. } = v.node else { continue };
            // (A table without a topic is control-managed: the checker refuses its format.)
            let Some(topic) = &d.topic else { continue };
            match lookup(&topic.node, format) {
                Ok(fields) => inserts.push((v.span.end, format!(" {fields}"))),
                Err(why) => diags.push(
                    diag::Diagnostic::new(
                        diag::Code::BadFormat,
                        v.span,
                        format!("cannot take the fields of `{}` from the schema registry: {why}", d.name.node),
                    )
                    .label("fields from the registry")
                    .help(format!(
                        "with `schema.registry.url` set, the registry needs a schema under `{}-value`; or declare the fields, e.g. `value {format} {{ ticker: string }}`",
                        topic.node
                    )),
                ),
            }
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let mut out = source.to_string();
    for (at, text) in inserts.into_iter().rev() {
        out.insert_str(at, &text);
    }
    Ok(out)
}

/// Whether a program declares a `value avro` or `value protobuf` without fields (see [`expand_registry_fields`]).
pub fn has_registry_fields(source: &str) -> bool {
    !registry_field_topics(source).is_empty()
}

/// The topics of the sources that declare `value avro` or `value protobuf` without fields.
pub fn registry_field_topics(source: &str) -> Vec<String> {
    if !source.contains("avro") && !source.contains("protobuf") {
        return Vec::new();
    }
    let mut topics = Vec::new();
    for item in syntax::parse(source).0.items {
        let (ast::Item::Stream(d) | ast::Item::Table(d)) = item else { continue };
        if d.items.iter().any(|v| matches!(v.node, ast::DeclItem::ValueRegistry { from_registry: true, .. })) {
            topics.extend(d.topic.map(|t| t.node));
        }
    }
    topics
}

/// [`compile`], keeping what an editor needs besides the result: the syntax tree (of the items
/// that parsed), the types of the checked expressions and the sources.
pub fn analyze(source: &str) -> (ast::Program, check::Analysis) {
    front_end(source, |ast, lib| check::analyze(ast, source, lib))
}

fn front_end(
    source: &str,
    check_with: impl FnOnce(&ast::Program, &hir::Program) -> check::Analysis,
) -> (ast::Program, check::Analysis) {
    let (ast, diags) = syntax::parse(source);
    let lib = match stdlib::load() {
        Ok(lib) => lib,
        Err(d) => return (ast, check::Analysis { result: Err(d.clone()), types: Vec::new(), sources: Vec::new() }),
    };
    let mut analysis = check_with(&ast, lib);
    // A source whose fields come from the registry, read without them (an editor): the checker
    // says so at its declaration; that its queries then name an unknown source only echoes it.
    let unexpanded: Vec<&str> = ast
        .items
        .iter()
        .filter_map(|item| match item {
            ast::Item::Stream(d) | ast::Item::Table(d) => d
                .items
                .iter()
                .any(|v| matches!(v.node, ast::DeclItem::ValueRegistry { from_registry: true, .. }))
                .then_some(d.name.node.as_str()),
            _ => None,
        })
        .collect();
    if let (false, Err(more)) = (unexpanded.is_empty(), &mut analysis.result) {
        more.retain(|d| {
            !(d.message.starts_with("unknown ") && unexpanded.iter().any(|n| d.message.ends_with(&format!("`{n}`"))))
        });
    }
    if !diags.is_empty() {
        // The items that parsed are still checked, so that a syntax error hides no other
        // mistake; what the checker says of the items that did not parse (by name) would only
        // repeat the syntax errors.
        let broken = syntax::broken_names(source, &diags);
        let mut all = diags;
        if let Err(more) = std::mem::replace(&mut analysis.result, Ok(hir::Program::default())) {
            // Only "unknown …" diagnostics naming a broken item are the syntax error's echo.
            all.extend(more.into_iter().filter(|d| {
                !(d.message.starts_with("unknown ") && broken.iter().any(|n| d.message.ends_with(&format!("`{n}`"))))
            }));
        }
        all.sort_by_key(|d| d.span.start);
        analysis.result = Err(all);
    }
    (ast, analysis)
}
