//! The runtime corpus (`tests/runs/<case>/`, see `tests/common/runs.rs`) on the embedded default.

mod common;

use common::runs::{run_all, Backend};

#[test]
fn runtime_corpus_on_the_embedded_default() {
    let base = common::embedded::temp_dir("runs");
    run_all("embedded", &|case| (Backend::Embedded, base.join(&case.name)));
}
