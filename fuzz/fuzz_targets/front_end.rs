//! Coverage-guided fuzzing of the front end against the same rules as `tests/fuzz.rs`:
//! never panic; diagnostics point inside the text; a program that checks lowers to an acyclic
//! DAG whose every rendering is free of unresolved types.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamc::explain::{render, ExplainFormat};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    match streamc::compile(src) {
        Err(diags) => {
            for d in &diags {
                assert!(d.span.end <= src.len() && src.is_char_boundary(d.span.start) && src.is_char_boundary(d.span.end));
            }
        }
        Ok(program) => {
            assert!(!program.summary().contains("<error>"));
            let topo = streamc::plan::lower(&program, "fuzz");
            assert!(!petgraph::algo::is_cyclic_directed(&topo.graph));
            for f in [ExplainFormat::Text, ExplainFormat::Dot, ExplainFormat::Mermaid, ExplainFormat::Json] {
                assert!(!render(&topo, None, f).contains("<error>"));
            }
        }
    }
    let _ = streamc::syntax::parse_statement(src);
});
