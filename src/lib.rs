//! streamc: a stream processor for a small declarative language.
//!
//! The stages, each a plain function over an owned type (see ARCHITECTURE.md):
//! text → [`syntax::parse`] → [`ast::Program`] → [`check::check`] → [`hir::Program`]
//! → [`plan::lower`] → [`plan::Topology`] → explain / runtime.

pub mod aggregate;
pub mod ast;
pub mod check;
pub mod codec;
pub mod config;
pub mod control;
pub mod diag;
pub mod eval;
pub mod explain;
pub mod fmt;
pub mod function;
pub mod gen;
pub mod hir;
pub mod kafka;
pub mod log;
pub mod plan;
pub mod runtime;
pub mod stdlib;
pub mod syntax;
pub mod types;
pub mod value;

use diag::Diagnostics;

/// Parse and check a program with the standard library in scope.
pub fn compile(source: &str) -> Result<hir::Program, Diagnostics> {
    let lib = stdlib::load().map_err(|d| d.clone())?;
    let (ast, diags) = syntax::parse(source);
    if !diags.is_empty() {
        // The items that parsed are still checked, so that a syntax error hides no other
        // mistake; what the checker says of the items that did not parse (by name) would only
        // repeat the syntax errors.
        let broken = syntax::broken_names(source, &diags);
        let mut all = diags;
        if let Err(more) = check::check(&ast, source, lib) {
            // Only "unknown …" diagnostics naming a broken item are the syntax error's echo.
            all.extend(more.into_iter().filter(|d| {
                !(d.message.starts_with("unknown ") && broken.iter().any(|n| d.message.ends_with(&format!("`{n}`"))))
            }));
        }
        all.sort_by_key(|d| d.span.start);
        return Err(all);
    }
    check::check(&ast, source, lib)
}
