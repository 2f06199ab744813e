//! The one place the tests touch streamc's front-end API, so an API change is one edit here.
#![allow(dead_code)]

use std::path::Path;

use streamc::diag::{self, Diagnostics, RenderOptions};
use streamc::{ast, check, explain, hir, plan, syntax};

pub mod cli;
pub mod console;
pub mod control;
pub mod data;
pub mod dlq;
pub mod embedded;
pub mod kafka;
pub mod runs;
pub mod tenants;
pub mod trace;

/// Parse and check; diagnostics rendered plainly (no colour, fixed width) on failure.
pub fn compile(src: &str) -> Result<hir::Program, Diagnostics> {
    streamc::compile(src)
}

pub fn render(diags: &Diagnostics, name: &str, src: &str) -> String {
    diag::render(diags, name, src, RenderOptions::plain())
}

pub fn outline(src: &str) -> (String, Diagnostics) {
    let (p, d) = syntax::parse(src);
    (ast::outline(&p), d)
}

pub fn explain(p: &hir::Program, app: &str, format: explain::ExplainFormat) -> String {
    explain::render(&plan::lower(p, app), None, format)
}

pub fn topology(p: &hir::Program, app: &str) -> plan::Topology {
    plan::lower(p, app)
}

/// Check a control statement against a program.
pub fn statement(p: &hir::Program, text: &str) -> Result<(Option<String>, check::Control), Diagnostics> {
    syntax::parse_statement(text).and_then(|s| check::check_statement(p, &s, text))
}

pub fn app_of(path: &Path) -> String {
    path.file_stem().and_then(|s| s.to_str()).unwrap_or("app").to_string()
}

pub fn codes(d: &Diagnostics) -> Vec<String> {
    d.iter().map(|d| d.code.to_string()).collect()
}

/// Every span is inside the source and on character boundaries.
pub fn spans_valid(d: &Diagnostics, src: &str) -> bool {
    d.iter().all(|d| {
        std::iter::once(d.span).chain(d.related.iter().map(|(s, _)| *s)).all(|s| {
            s.start <= s.end && s.end <= src.len() && src.is_char_boundary(s.start) && src.is_char_boundary(s.end)
        })
    })
}
