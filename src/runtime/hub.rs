//! The control log as both drivers see it: an [`Evaluator`] fed with the records of
//! `<app>-control` in order, and the status records still to write to `<app>-control-status`.

use crate::control::{self, ControlRecord, Evaluator, Status};
use crate::hir;
use crate::log::Record;
use crate::runtime::options::RunOptions;

pub(crate) struct Hub {
    pub ev: Evaluator,
    /// Statuses of statements evaluated at or after this offset are not in the status topic yet.
    pub written: u64,
    unwritten: Vec<Status>,
    /// Show verdicts on stderr (not while the start-up backlog is read).
    pub verbose: bool,
}

impl Hub {
    pub fn new(program: &hir::Program, opts: &RunOptions) -> Result<Hub, String> {
        let trusted = control::trusted_keys(&opts.config.control.trusted_keys)?;
        let ev = Evaluator::new(&opts.app, program.clone(), &opts.program_text, trusted)?;
        Ok(Hub { ev, written: 0, unwritten: Vec::new(), verbose: false })
    }

    /// Evaluate control records (in offset order); true if the program or a table changed.
    pub fn feed(&mut self, records: &[ControlRecord]) -> bool {
        let before = self.ev.latest().next;
        for r in records {
            let Some(st) = self.ev.apply(r) else { continue };
            if self.verbose || st.offset >= self.written {
                eprintln!("control {}", st.describe());
            }
            if st.offset >= self.written {
                self.unwritten.push(st);
            }
        }
        self.ev.latest().next != before
    }

    /// The status records to write, keyed by control offset; the caller writes them and then
    /// calls [`Hub::written_up_to`].
    pub fn status_records(&self) -> Vec<Record> {
        self.unwritten
            .iter()
            .map(|st| Record {
                key: Some(st.offset.to_string().into_bytes()),
                value: Some(serde_json::to_vec(st).unwrap_or_default()),
                timestamp: st.timestamp,
                headers: vec![],
            })
            .collect()
    }

    pub fn written_up_to(&mut self) {
        self.unwritten.clear();
        self.written = self.written.max(self.ev.next);
    }
}
