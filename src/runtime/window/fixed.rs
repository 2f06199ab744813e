//! Tumbling and hopping windows: `[start, start + size)` for every start that is a multiple of
//! `advance` (tumbling: `advance` = `size`), aligned to the epoch.

use super::{Cx, Windowing};
use crate::ast::Duration;
use crate::runtime::agg::AggArgs;
use crate::runtime::op::RecordError;
use crate::value::Value;

pub(crate) struct Fixed {
    size: i64,
    advance: i64,
    grace: Duration,
    /// The windows of the record being added (reused: no allocation per record).
    windows: Vec<(i64, i64)>,
}

impl Fixed {
    pub(crate) fn new(size: i64, advance: i64, grace: Duration) -> Fixed {
        Fixed { size, advance, grace, windows: Vec::new() }
    }
}

impl Windowing for Fixed {
    fn add(&mut self, cx: &mut Cx, group: &[Value], kb: &[u8], ts: i64, args: &AggArgs) -> Result<(), RecordError> {
        let (size, advance) = (self.size, self.advance);
        let close = cx.stream_time.saturating_sub(self.grace.0);
        let first = (ts - size + advance).max(0);
        let first = first - first.rem_euclid(advance);
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        let mut s = first;
        while s <= ts {
            let end = s.saturating_add(size);
            if ts >= s && ts < end {
                if end > close {
                    windows.push((s, end));
                } else {
                    let (stream_time, grace) = (cx.stream_time, self.grace);
                    cx.late(|| {
                        format!("late: window [{s}, {end}) closed at stream time {stream_time} (grace {grace})")
                    });
                }
            }
            s += advance;
        }
        let r = cx.update_windows(&windows, group, kb, ts, args);
        self.windows = windows;
        r
    }
}
