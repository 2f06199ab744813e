//! What a run is asked to do: the options both backends take from the CLI (or a test).

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::runtime::chaos::ChaosSpec;
use crate::runtime::metrics::Metrics;

/// The options of one `streamc run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub state_dir: PathBuf,
    pub app: String,
    pub threads: usize,
    pub drain: bool,
    pub close_windows_at_end: bool,
    pub inputs: Vec<(String, PathBuf)>,
    pub config: Config,
    /// Where tasks report their counts at each commit (`--metrics-addr`).
    pub metrics: Option<Arc<Metrics>>,
    /// Show progress bars on stderr (the CLI sets this when stderr is a terminal).
    pub progress: bool,
    /// Fault injection (`--chaos`).
    pub chaos: Option<ChaosSpec>,
    /// The program file's text (version 0 of the running program).
    pub program_text: String,
}
