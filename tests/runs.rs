//! The runtime corpus (`tests/runs/<case>/`, see `tests/common/runs.rs`) on the embedded default.

mod common;

use common::runs::{run_all, Backend};

#[test]
fn runtime_corpus_on_the_embedded_default() {
    let base = common::embedded::temp_dir("runs");
    run_all("embedded", None, &|case| (Backend::Embedded, base.join(&case.name)));
}

/// The expected outputs are the folds' (never the engine's): every case's `fold.py`, run now,
/// computes exactly the `expected/` that is checked in, file for file.
#[test]
fn every_fold_still_computes_the_expected_outputs() {
    let base = common::embedded::temp_dir("folds");
    let mut differ = Vec::new();
    for case in common::runs::cases() {
        let out = base.join(&case.name);
        let run = std::process::Command::new("python3")
            .arg("fold.py")
            .current_dir(&case.dir)
            .env("STREAMC_FOLD_OUT", &out)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap_or_else(|e| panic!("{}: cannot run python3 fold.py: {e}", case.name));
        assert!(run.status.success(), "{}: fold.py failed: {}", case.name, String::from_utf8_lossy(&run.stderr));
        let files = |dir: &std::path::Path| -> std::collections::BTreeMap<String, String> {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.map(|e| e.unwrap().path())
                        .map(|p| {
                            (
                                p.file_name().unwrap().to_string_lossy().into_owned(),
                                std::fs::read_to_string(&p).unwrap(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let (got, want) = (files(&out), files(&case.dir.join("expected")));
        assert!(!want.is_empty(), "{}: no expected outputs", case.name);
        if got != want {
            let names: Vec<&String> = got.keys().chain(want.keys()).filter(|k| got.get(*k) != want.get(*k)).collect();
            differ.push(format!("{}: {names:?}", case.name));
        }
    }
    assert!(
        differ.is_empty(),
        "fold.py no longer computes the checked-in expected/ (run `python3 fold.py` in the case, and look at why):\n{}",
        differ.join("\n")
    );
}
