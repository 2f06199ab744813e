//! No window: one entry per group key, read from the store when not cached.

use super::{Cx, Windowing};
use crate::runtime::agg::AggArgs;
use crate::runtime::op::RecordError;
use crate::value::Value;

pub(crate) struct Unwindowed;

impl Windowing for Unwindowed {
    fn add(&mut self, cx: &mut Cx, group: &[Value], kb: &[u8], ts: i64, args: &AggArgs) -> Result<(), RecordError> {
        cx.update_windows(&[(0, 0)], group, kb, ts, args)
    }
}
