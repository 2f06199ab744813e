//! What a run is asked to do: the options both backends take from the CLI (or a test).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
    /// The restores in progress (reported to `<app>-metrics` on Kafka).
    pub restores: Arc<RestoreBoard>,
}

/// The restores of one run as they happen: per task, per store, the records replayed so far,
/// the records expected, and whether it ended. The Kafka driver reports it to `<app>-metrics`
/// from a thread of its own while its driver thread is busy restoring, so that `streamc status`
/// shows a restore as it happens; an ended restore stays until it is taken ([`RestoreBoard::take`]),
/// so that even one shorter than a report's period is reported.
#[derive(Debug, Default)]
pub struct RestoreBoard(Mutex<BTreeMap<String, BTreeMap<String, Progress>>>);

/// One store's restore.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub restored: u64,
    pub total: u64,
    pub ended: bool,
}

impl RestoreBoard {
    fn with(&self, f: impl FnOnce(&mut BTreeMap<String, BTreeMap<String, Progress>>)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub(crate) fn start(&self, task: &str, store: &str, total: u64) {
        self.with(|m| {
            let p = Progress { restored: 0, total, ended: false };
            m.entry(task.to_string()).or_default().insert(store.to_string(), p);
        });
    }

    pub(crate) fn advance(&self, task: &str, store: &str, n: u64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(task).and_then(|s| s.get_mut(store)) {
                p.restored += n;
            }
        });
    }

    /// A store's restore ended (one that never started, having nothing to replay, is not on
    /// the board).
    pub(crate) fn end(&self, task: &str, store: &str) {
        self.with(|m| {
            if let Some(p) = m.get_mut(task).and_then(|s| s.get_mut(store)) {
                p.ended = true;
            }
        });
    }

    /// The restores now, by task and store; the tasks whose every store's restore ended are
    /// taken off the board.
    pub fn take(&self) -> BTreeMap<String, BTreeMap<String, Progress>> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = m.clone();
        m.retain(|_, stores| stores.values().any(|p| !p.ended));
        now
    }
}
