//! The control log as both backends see it: an [`Evaluator`] fed with the records of
//! `<app>-control` in order, and the status records still to write to `<app>-control-status`.
//! A backend supplies only the reading and the writing ([`ControlLog`]); [`Hub::poll`] is
//! written once.

use crate::control::{self, ControlRecord, Evaluator, Status};
use crate::hir;
use crate::record::Record;
use crate::runtime::error::RunError;
use crate::runtime::options::RunOptions;

/// A backend's access to the control topic and the status topic.
pub(crate) trait ControlLog {
    /// The control records after those read so far (`next`: the offset after the last record
    /// the hub evaluated). With `to_end`, every record up to the topic's end as of now;
    /// otherwise what is at hand.
    fn read(&mut self, next: u64, to_end: bool) -> Result<Vec<ControlRecord>, RunError>;
    /// Append status records; `next`: every status of a control record before it is written.
    fn write_statuses(&mut self, records: Vec<Record>, next: u64) -> Result<(), RunError>;
}

pub(crate) struct Hub {
    pub ev: Evaluator,
    /// Statuses of statements evaluated at or after this offset are not in the status topic yet.
    pub written: u64,
    unwritten: Vec<Status>,
    /// Show verdicts on stderr (not while the start-up backlog is read).
    pub verbose: bool,
    /// Where the web console hears of verdicts and of the running program.
    metrics: Option<std::sync::Arc<crate::runtime::metrics::Metrics>>,
}

impl Hub {
    pub fn new(program: &hir::Program, opts: &RunOptions) -> Result<Hub, RunError> {
        let trusted = control::trusted_keys(&opts.config.control.trusted_keys)?;
        let ev = Evaluator::new(&opts.app, program.clone(), &opts.program_text, trusted)?
            .allow_sinks(&opts.config.topics.allow_internal_sinks);
        if let Some(m) = &opts.metrics {
            m.console.stage(ev.latest());
        }
        Ok(Hub { ev, written: 0, unwritten: Vec::new(), verbose: false, metrics: opts.metrics.clone() })
    }

    /// Read the control records that arrived, evaluate them and write their statuses. True if
    /// the program or a table changed.
    pub fn poll(&mut self, log: &mut dyn ControlLog, to_end: bool) -> Result<bool, RunError> {
        let records = log.read(self.ev.next, to_end)?;
        let changed = self.feed(&records);
        let statuses = self.status_records();
        if !statuses.is_empty() {
            log.write_statuses(statuses, self.ev.next)?;
            self.written_up_to();
        }
        Ok(changed)
    }

    /// Evaluate control records (in offset order); true if the program or a table changed.
    pub fn feed(&mut self, records: &[ControlRecord]) -> bool {
        let before = self.ev.latest().next;
        for r in records {
            let Some(st) = self.ev.apply(r) else { continue };
            if self.verbose || st.offset >= self.written {
                eprintln!("control {}", st.describe());
            }
            if let Some(m) = &self.metrics {
                m.console.control(&st);
            }
            if st.offset >= self.written {
                self.unwritten.push(st);
            }
        }
        let changed = self.ev.latest().next != before;
        if let (true, Some(m)) = (changed, &self.metrics) {
            m.console.stage(self.ev.latest());
        }
        changed
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
