//! streamc: a stream processor for a small declarative language.
//!
//! The stages, each a plain function over an owned type (see ARCHITECTURE.md):
//! text → [`syntax::parse`] → [`ast::Program`] → [`check::check`] → [`hir::Program`]
//! → [`plan::lower`] → [`plan::Topology`] → explain / runtime.

pub mod aggregate;
pub mod ast;
pub mod avro;
pub mod check;
pub mod codec;
pub mod config;
pub mod control;
pub mod delimited;
pub mod diag;
pub mod eval;
pub mod explain;
pub mod fmt;
pub mod function;
pub mod gen;
pub mod hir;
pub mod kafka;
pub mod log;
pub mod lsp;
pub mod plan;
pub mod registry;
pub mod runtime;
pub mod stdlib;
pub mod syntax;
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
