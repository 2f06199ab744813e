//! The standard library: `stdlib/*.stream`, compiled into the binary and checked once, before
//! every program. Its aggregates and functions are in scope in every program.

use std::sync::OnceLock;

use crate::diag::{Diagnostic, Diagnostics};
use crate::{check, hir, syntax};

/// The library's files, in load order (a file may use what an earlier one defines).
pub const FILES: &[(&str, &str)] = &[
    ("stdlib/functions.stream", include_str!("../stdlib/functions.stream")),
    ("stdlib/stats.stream", include_str!("../stdlib/stats.stream")),
];

static LIB: OnceLock<Result<hir::Program, Diagnostics>> = OnceLock::new();

/// The checked standard library. An error here is a bug in streamc, reported as a diagnostic
/// naming the library file rather than a panic.
pub fn load() -> Result<&'static hir::Program, &'static Diagnostics> {
    LIB.get_or_init(build).as_ref()
}

/// Check every library file; on failure, the diagnostics of the first file that failed, with
/// the file named in each message.
pub fn build() -> Result<hir::Program, Diagnostics> {
    let mut lib = hir::Program::default();
    for (name, text) in FILES {
        let (ast, mut diags) = syntax::parse(text);
        if diags.is_empty() {
            match check::check_stdlib(&ast, text, &lib) {
                Ok(p) => {
                    lib = p;
                    continue;
                }
                Err(d) => diags = d,
            }
        }
        return Err(diags
            .into_iter()
            .map(|d| {
                let msg = format!("in the standard library ({name}): {}", d.message);
                Diagnostic { message: msg, ..d }
            })
            .collect());
    }
    Ok(lib)
}
