//! Tumbling and hopping windows: `[start, start + size)` for every start that is a multiple of
//! `advance` (tumbling: `advance` = `size`), aligned to the epoch; with `tz "ZONE"`, whole days
//! aligned on that zone's midnights ([`Zoned`]).

use jiff::tz::TimeZone;
use jiff::Timestamp;

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

/// Windows of `size` starting every `advance` that one instant falls in.
fn overlapping(size: i64, advance: i64) -> usize {
    let advance = advance.max(1);
    usize::try_from(size.saturating_add(advance - 1) / advance).unwrap_or(usize::MAX)
}

impl Windowing for Fixed {
    fn windows_per_record(&self) -> usize {
        overlapping(self.size, self.advance)
    }

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

/// Tumbling and hopping windows of whole days aligned on a time zone's midnights (`tz "ZONE"`):
/// a window starts at the start of a day (in that zone) whose number since 1970-01-01 is a
/// multiple of the advance in days, and ends at the start of the day `size` days later, so a
/// window over a daylight-saving change is an hour shorter or longer than its size says.
pub(crate) struct Zoned {
    size_days: i64,
    advance_days: i64,
    grace: Duration,
    tz: TimeZone,
    /// Day starts looked up, by day number modulo [`DAYS_CACHED`]: a record's windows need a few
    /// consecutive days, and the next record mostly the same ones.
    starts: [(i64, i64); DAYS_CACHED],
    /// The day of the last record: its number and the instants it starts and ends at, so that
    /// a record of the same day needs no conversion.
    today: (i64, i64, i64),
    windows: Vec<(i64, i64)>,
}

const DAY_MS: i64 = 86_400_000;
const DAYS_CACHED: usize = 8;

impl Zoned {
    pub(crate) fn new(size: i64, advance: i64, grace: Duration, zone: &str) -> Zoned {
        // (The checker accepted the name from the same database; UTC if it ever were not there.)
        let tz = TimeZone::get(zone).unwrap_or(TimeZone::UTC);
        Zoned {
            size_days: (size / DAY_MS).max(1),
            advance_days: (advance / DAY_MS).max(1),
            grace,
            tz,
            starts: [(i64::MIN, 0); DAYS_CACHED],
            today: (0, 0, 0),
            windows: Vec::new(),
        }
    }

    /// The number (since 1970-01-01) of the day, in the zone, at event time `ts`.
    fn day_of(&self, ts: i64) -> Result<i64, RecordError> {
        let t = Timestamp::from_millisecond(ts)
            .map_err(|_| RecordError(format!("event time {ts} is outside the calendar's years (-9999 to 9999)")))?;
        let date = t.to_zoned(self.tz.clone()).date();
        Ok(i64::from((date - EPOCH).get_days()))
    }

    /// When day `day` starts in the zone (ms): its first instant, past a gap if midnight is in one.
    fn day_start(&mut self, day: i64) -> Result<i64, RecordError> {
        let slot = day.rem_euclid(DAYS_CACHED as i64) as usize;
        if self.starts[slot].0 == day {
            return Ok(self.starts[slot].1);
        }
        let out_of_range = || RecordError(format!("day {day} since 1970 is outside the calendar's years"));
        let days = i32::try_from(day).map_err(|_| out_of_range())?;
        let date = EPOCH
            .checked_add(jiff::Span::new().try_days(days).map_err(|_| out_of_range())?)
            .map_err(|_| out_of_range())?;
        let start = date.to_zoned(self.tz.clone()).map_err(|_| out_of_range())?.timestamp().as_millisecond();
        self.starts[slot] = (day, start);
        Ok(start)
    }
}

const EPOCH: jiff::civil::Date = jiff::civil::date(1970, 1, 1);

impl Windowing for Zoned {
    fn windows_per_record(&self) -> usize {
        overlapping(self.size_days, self.advance_days)
    }

    fn add(&mut self, cx: &mut Cx, group: &[Value], kb: &[u8], ts: i64, args: &AggArgs) -> Result<(), RecordError> {
        let (size, advance) = (self.size_days, self.advance_days);
        let day = if self.today.1 <= ts && ts < self.today.2 {
            self.today.0
        } else {
            let d = self.day_of(ts)?;
            self.today = (d, self.day_start(d)?, self.day_start(d + 1)?);
            d
        };
        let close = cx.stream_time.saturating_sub(self.grace.0);
        // The first start (a multiple of the advance) of a window that holds `day`.
        let lowest = day - size + 1;
        let mut s = lowest + (advance - lowest.rem_euclid(advance)) % advance;
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        while s <= day {
            let (start, end) = (self.day_start(s)?, self.day_start(s + size)?);
            if end > close {
                windows.push((start, end));
            } else {
                let (stream_time, grace) = (cx.stream_time, self.grace);
                cx.late(|| {
                    format!("late: window [{start}, {end}) closed at stream time {stream_time} (grace {grace})")
                });
            }
            s += advance;
        }
        let r = cx.update_windows(&windows, group, kb, ts, args);
        self.windows = windows;
        r
    }
}
