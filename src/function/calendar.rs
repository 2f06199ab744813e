//! Timestamps as calendar text, in a time zone: strftime-style patterns (`%Y-%m-%d %H:%M:%S`,
//! `%z`, `%Z`, …, as the jiff crate implements them) and IANA zone names (`Europe/Paris`) from
//! the database bundled with streamc, not the machine's, so results do not depend on where a
//! program runs. A zone or pattern that is not valid, or text that does not match its pattern,
//! is an evaluation error.

use std::collections::BTreeSet;
use std::sync::Mutex;

use jiff::fmt::strtime;
use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::{is_string, text, Args, Doc, Function};
use crate::types::Type;
use crate::value::Value;

/// The name of a zone of the bundled database, interned: a `&'static str`, so that a window
/// spec that names it stays `Copy` (one allocation per zone of the database, at most).
pub fn zone_name(name: &str) -> Result<&'static str, String> {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let tz = TimeZone::get(name).map_err(|e| format!("unknown time zone {name:?}: {e}"))?;
    let canonical = tz.iana_name().unwrap_or(name);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(canonical) {
        return Ok(n);
    }
    let n: &'static str = Box::leak(canonical.to_string().into_boxed_str());
    names.insert(n);
    Ok(n)
}

fn zone(v: Option<&Value>) -> Result<TimeZone, String> {
    match v {
        None => Ok(TimeZone::UTC),
        Some(z) => TimeZone::get(text(z)).map_err(|e| format!("unknown time zone {:?}: {e}", text(z))),
    }
}

/// The arguments after the first: a pattern, then an optional zone; both strings.
fn check_pattern_zone(a: &Args, first: &dyn Fn(&Type) -> bool, what: &str) -> Result<(), String> {
    if !(2..=3).contains(&a.len()) {
        return Err(format!("takes 2 or 3 arguments, not {}", a.len()));
    }
    let ok = |t: &Type| *t == Type::Null;
    if !(first(a.types[0].base()) || ok(a.types[0])) || !a.types[1..].iter().all(|t| is_string(t.base()) || ok(t)) {
        return Err(format!("takes ({what}, string pattern[, string zone])"));
    }
    Ok(())
}

pub struct FormatTimestamp;

impl Function for FormatTimestamp {
    fn name(&self) -> &'static str {
        "format_timestamp"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "format_timestamp(timestamp, pattern: string[, zone: string]) -> string",
            summary: "the timestamp as text by a strftime pattern, in an IANA time zone (default UTC)",
            examples: &[
                ("format_timestamp(from_epoch_ms(1700000000000), \"%Y-%m-%d %H:%M:%S\")", "\"2023-11-14 22:13:20\""),
                (
                    "format_timestamp(from_epoch_ms(1700000000000), \"%Y-%m-%d %H:%M %Z\", \"Europe/Paris\")",
                    "\"2023-11-14 23:13 CET\"",
                ),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        check_pattern_zone(a, &|t| *t == Type::Timestamp, "timestamp")?;
        Ok(Type::String.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let Value::Ts(ms) = v[0] else { return Ok(Value::Null) };
        let ts = Timestamp::from_millisecond(ms).map_err(|e| format!("timestamp {ms} out of range: {e}"))?;
        let zoned = ts.to_zoned(zone(v.get(2))?);
        strtime::format(text(&v[1]), &zoned)
            .map(|s| Value::str(&s))
            .map_err(|e| format!("cannot format with {:?}: {e}", text(&v[1])))
    }
}

pub struct ParseTimestamp;

impl Function for ParseTimestamp {
    fn name(&self) -> &'static str {
        "parse_timestamp"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "parse_timestamp(string, pattern: string[, zone: string]) -> timestamp",
            summary: "the text read by a strftime pattern; a time without an offset (`%z`) is in the zone given (default UTC)",
            examples: &[
                ("epoch_ms(parse_timestamp(\"2023-11-14 22:13:20\", \"%Y-%m-%d %H:%M:%S\"))", "1700000000000"),
                ("epoch_ms(parse_timestamp(\"2023-11-14 23:13:20\", \"%Y-%m-%d %H:%M:%S\", \"Europe/Paris\"))", "1700000000000"),
                ("epoch_ms(parse_timestamp(\"14/11/2023 22:13 +0000\", \"%d/%m/%Y %H:%M %z\"))", "1699999980000"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        check_pattern_zone(a, &is_string, "string")?;
        Ok(Type::Timestamp.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let (input, pattern) = (text(&v[0]), text(&v[1]));
        let bad = |e: jiff::Error| format!("{input:?} does not match {pattern:?}: {e}");
        let parsed = strtime::parse(pattern, input).map_err(bad)?;
        let ts = match parsed.to_timestamp() {
            Ok(ts) => ts,
            // No offset in the text: a civil time in the zone given.
            Err(_) => {
                let tz = zone(v.get(2))?;
                parsed.to_datetime().and_then(|dt| dt.to_zoned(tz)).map_err(bad)?.timestamp()
            }
        };
        Ok(Value::Ts(ts.as_millisecond()))
    }
}

pub struct ConvertTz;

impl Function for ConvertTz {
    fn name(&self) -> &'static str {
        "convert_tz"
    }
    fn doc(&self) -> &'static Doc {
        &Doc {
            signature: "convert_tz(timestamp, from: string, to: string) -> timestamp",
            summary: "the timestamp moved by the difference between the two IANA zones' UTC offsets at that instant: a wall-clock time of `from` as the same wall-clock time of `to` (ksqlDB's CONVERT_TZ)",
            examples: &[
                ("convert_tz(from_epoch_ms(1700000000000), \"UTC\", \"Europe/Paris\")", "1700003600000"),
                ("convert_tz(from_epoch_ms(1720000000000), \"America/New_York\", \"UTC\")", "1720014400000"),
            ],
        }
    }
    fn check(&self, a: &Args) -> Result<Type, String> {
        a.count(3)?;
        let ok = |i: usize, p: &dyn Fn(&Type) -> bool| p(a.types[i].base()) || *a.types[i] == Type::Null;
        if !(ok(0, &|t| *t == Type::Timestamp) && ok(1, &is_string) && ok(2, &is_string)) {
            return Err("takes (timestamp, string zone, string zone)".into());
        }
        Ok(Type::Timestamp.nullable_if(a.nullable()))
    }
    fn eval(&self, v: Vec<Value>) -> Result<Value, String> {
        let Value::Ts(ms) = v[0] else { return Ok(Value::Null) };
        let ts = Timestamp::from_millisecond(ms).map_err(|e| format!("timestamp {ms} out of range: {e}"))?;
        let (from, to) = (zone(v.get(1))?, zone(v.get(2))?);
        let shift = i64::from(to.to_offset(ts).seconds()) - i64::from(from.to_offset(ts).seconds());
        ms.checked_add(shift * 1000).map(Value::Ts).ok_or_else(|| format!("timestamp {ms} moved out of range"))
    }
}
