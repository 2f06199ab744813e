//! `streamc fmt`: rewrite program files in the canonical layout ([`streamc::fmt`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use streamc::diag;

/// Format each file in place (or, with `check`, only report those not formatted, with a diff);
/// `-` reads standard input and writes standard output. Exit code 1 if a file has a syntax error
/// or, with `check`, is not formatted.
pub fn fmt(files: &[PathBuf], check: bool) -> Result<ExitCode, String> {
    let mut failed = false;
    for f in files {
        let stdin = f.as_os_str() == "-";
        let text = if stdin {
            let mut t = String::new();
            std::io::stdin().read_to_string(&mut t).map_err(|e| format!("cannot read standard input: {e}"))?;
            t
        } else {
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
        };
        let name = if stdin { "<stdin>".to_string() } else { f.display().to_string() };
        let formatted = match streamc::fmt::format(&text) {
            Ok(t) => t,
            Err(diags) => {
                eprint!("{}", diag::render(&diags, &name, &text, crate::render_options()));
                eprintln!("error: {name} is not formatted: it does not parse");
                failed = true;
                continue;
            }
        };
        if check {
            if formatted != text {
                print!("{}", diff(&name, &text, &formatted));
                failed = true;
            }
        } else if stdin {
            std::io::stdout().write_all(formatted.as_bytes()).map_err(|e| format!("cannot write: {e}"))?;
        } else if formatted != text {
            write_atomically(f, &formatted)?;
            eprintln!("formatted {name}");
        }
    }
    if check && failed {
        eprintln!("error: some files are not formatted (`streamc fmt FILE…` rewrites them)");
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// A unified diff, as `rustfmt --check` prints one.
fn diff(name: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(2)
        .header(&format!("{name} (as written)"), &format!("{name} (formatted)"))
        .to_string()
}

/// Replace the file through a temporary file beside it, so that a crash leaves the old text or
/// the new, never a mix. A symbolic link is followed (the file it names is rewritten), and the
/// file keeps its permissions.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let target = std::fs::canonicalize(path).map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
    let perms = std::fs::metadata(&target).map_err(|e| format!("cannot read {}: {e}", target.display()))?.permissions();
    let tmp = target.with_extension("stream.fmt-tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::set_permissions(&tmp, perms).map_err(|e| format!("cannot set permissions of {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &target).map_err(|e| format!("cannot replace {}: {e}", target.display()))
}
