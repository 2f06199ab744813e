//! Before a grouped table's aggregate (`from T … group by … aggregate`, Kafka Streams'
//! KGroupedTable): each key's row as it was last grouped, in a store of its own. A new row for
//! a key first sends the old one down taken back (`Row::retract`: its contribution leaves its
//! group), then itself; a row taken back (the key deleted in the input, or dropped by a filter
//! or an inner lookup before the grouping) sends the old row taken back, and the key is
//! forgotten. The rows go on to the aggregate, or to the repartition topic by group first. A new
//! row whose group key is null is bad input and changes nothing.

use rustc_hash::FxHashMap;

use crate::eval::{eval, Row};
use crate::hir;
use crate::runtime::bin;
use crate::runtime::lineage;
use crate::runtime::op::{scoped, Change, RecordError, Stateful};
use crate::runtime::ops::{Ctx, Down, InPlace, Operator};
use crate::runtime::tenant;
use crate::types::Type;
use crate::value::Value;

/// The first byte of a stored row (version 1): then its value fields, then its joined sides.
const ROW_V1: u8 = 1;

pub(crate) struct GroupTable {
    stores: [usize; 1],
    /// The grouping: a row whose group key is null is bad input, refused before it is kept
    /// (unless `nulls`).
    group: Vec<hir::Expr>,
    /// A foreign-key join's subscriptions: a null foreign key is a key like another; a row
    /// whose foreign key stays the same is not taken back first (its new row replaces it where
    /// it is); a deletion's row taken back says so (`FkMarks::deleted`).
    nulls: bool,
    /// The table's key type (its rows are stored under the key's bytes).
    key_ty: Type,
    tenant_scoped: bool,
    /// Rows changed since the last flush (None: forgotten), which the store does not hold yet.
    pending: FxHashMap<Vec<u8>, Option<Row>>,
}

impl GroupTable {
    pub(crate) fn new(
        store: usize,
        group: Vec<hir::Expr>,
        nulls: bool,
        key_ty: Type,
        tenant_scoped: bool,
    ) -> GroupTable {
        GroupTable { stores: [store], group, nulls, key_ty, tenant_scoped, pending: FxHashMap::default() }
    }

    /// Whether two rows have the same group key (a row that cannot be evaluated: no).
    fn same_group(&self, a: &Row, b: &Row) -> bool {
        self.group.iter().all(|g| match (eval(g, a, &[]), eval(g, b, &[])) {
            (Ok(x), Ok(y)) => x.equals(&y),
            _ => false,
        })
    }

    /// The key's row as last grouped.
    fn old(&self, kb: &[u8], row: &Row, cx: &Ctx) -> Result<Option<Row>, RecordError> {
        if let Some(r) = self.pending.get(kb) {
            return Ok(r.clone());
        }
        match cx.stores.get(self.stores[0], kb) {
            None => Ok(None),
            Some(b) => decode_row(&b, row).map(Some).map_err(|e| RecordError(format!("damaged grouped row: {e}"))),
        }
    }

    /// Record the key's row (None: forgotten) for the store and its changelog.
    fn set(&mut self, kb: Vec<u8>, row: Option<Row>, ts: i64, existed: bool, cx: &mut Ctx) {
        crate::runtime::lineage::put(self.stores[0], &kb);
        cx.changes.push(Change {
            store: self.stores[0],
            key: kb.clone(),
            value: row.as_ref().map(encode_row),
            timestamp: ts,
            existed,
        });
        self.pending.insert(kb, row);
    }
}

impl Stateful for GroupTable {
    fn stores(&self) -> &[usize] {
        &self.stores
    }

    fn restore(&mut self, _stores: &dyn crate::runtime::op::StoreRead) {
        self.pending.clear();
    }

    /// Keyed by the scoped key bytes themselves.
    fn key_tenant<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        tenant::split(key).map(|(t, _)| t)
    }
}

impl Operator for GroupTable {
    fn on_row(&mut self, row: Row, ts: i64, cx: &mut Ctx, down: &mut Down) -> Result<(), RecordError> {
        if row.key.is_null() {
            return Err(RecordError("a row of a grouped table has no key".into()));
        }
        // A new row with a null group key is bad input, refused before anything changes (as a
        // row that does not decode, or whose `where` or `select` fails, is).
        if !row.retract {
            for g in &self.group {
                // (A foreign key that cannot be evaluated is bad input too; a null one is none.)
                if eval(g, &row, &[]).map_err(RecordError)?.is_null() && !self.nulls {
                    return Err(RecordError("the group key is null".into()));
                }
            }
        }
        let kb = scoped(self.tenant_scoped, row.tenant.as_ref(), row.key.key_bytes(&self.key_ty))?;
        let old = self.old(&kb, &row, cx)?;
        let existed = old.is_some();
        // What the key's row is changes here whatever happens after the grouping: across a
        // repartition the group's task works on its own, later, and both plans must behave
        // alike. An aggregate that refuses a row remembers it, so that taking it back later
        // takes nothing (`Aggregate::refusals`).
        let mut result = Ok(());
        // A row updated within its group: taken back and added as one change.
        let mut in_place = false;
        if let Some(mut old) = old {
            let same = !row.retract && self.same_group(&old, &row);
            // The old row leaves its group first (a subscription that stays where it is is
            // replaced there by the new row).
            if !(self.nulls && same) {
                old.retract = true;
                in_place = same;
                cx.fk.deleted = self.nulls && row.retract;
                cx.fk.in_place = if same { InPlace::Old } else { InPlace::No };
                // `streamc trace`: the old row goes with the lineage it was grouped with.
                let own = lineage::on().then(lineage::current);
                lineage::result_of(self.stores[0], &kb);
                result = down.emit(old, ts, cx);
                if let Some(own) = own {
                    lineage::reset(own);
                }
                cx.fk.deleted = false;
            }
        }
        if row.retract {
            if existed {
                self.set(kb, None, ts, true, cx);
            }
            return result;
        }
        cx.fk.in_place = if in_place { InPlace::New } else { InPlace::No };
        let added = down.emit(row.clone(), ts, cx);
        cx.fk.in_place = InPlace::No;
        self.set(kb, Some(row), ts, existed, cx);
        result.and(added)
    }

    /// The store holds what the commit wrote: the pending rows are read from it from now on.
    fn flush(&mut self, _cx: &mut Ctx, _down: &mut Down) {
        self.pending.clear();
    }
}

/// A row as stored: [`ROW_V1`], its value fields, then a count of joined sides and each: 0 (no
/// match) or 1, its key and its fields ([`bin`]'s encoding).
pub(crate) fn encode_row(row: &Row) -> Vec<u8> {
    let mut o = Vec::with_capacity(64);
    o.push(ROW_V1);
    bin::write_values(&row.value, &mut o);
    bin::write_len(&mut o, row.joined.len());
    for j in &row.joined {
        match j {
            None => o.push(0),
            Some((k, v)) => {
                o.push(1);
                bin::write_value(k, &mut o);
                bin::write_values(v, &mut o);
            }
        }
    }
    o
}

/// A stored row of the key `like.key` (and its tenant).
pub(crate) fn decode_row(b: &[u8], like: &Row) -> Result<Row, String> {
    let Some((&ROW_V1, rest)) = b.split_first() else { return Err("unknown row version".into()) };
    let mut r = bin::Reader { b: rest };
    let value = r.values()?;
    let n = r.len()?;
    let mut joined = Vec::with_capacity(n);
    for _ in 0..n {
        joined.push(match r.u8()? {
            0 => None,
            1 => {
                let k: Value = r.value()?;
                Some((k, std::sync::Arc::new(r.values()?)))
            }
            t => return Err(format!("joined side tag {t}")),
        });
    }
    if !r.is_empty() {
        return Err("bytes after the row".into());
    }
    Ok(Row { key: like.key.clone(), value, joined, tenant: like.tenant.clone(), retract: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ops::testing::{row, Harness};
    use std::sync::Arc;

    /// Each key's row as last grouped: a new row goes down as it is; an update first sends the
    /// old row taken back (within its group or out of it), a deletion only that; a deletion of
    /// a key with no row sends nothing; a null group key is bad input and changes nothing.
    #[test]
    fn an_update_takes_the_old_row_back_before_the_new_one_goes_on() {
        let program = r#"
table accounts from "accounts" {
  key    id: int
  value  json { region: string?, balance: int }
}
query by_region { from accounts group by region aggregate { n = count(), total = sum(balance) } to "r" }
"#;
        let mut h = Harness::new(program, 0);
        let mut chain = h.chain();
        let at = h.spec.table_group.expect("a grouped table");
        let group = chain[at].as_mut();
        let acct = |region: Value, balance: i64| row(Value::Int(1), vec![region, Value::Int(balance)]);
        let seen = |rows: Vec<(Row, i64)>| -> Vec<(bool, Vec<Value>)> {
            rows.into_iter().map(|(r, _)| (r.retract, r.value)).collect()
        };
        let got = seen(h.send(group, acct(Value::str("north"), 10), 1).unwrap());
        assert_eq!(got, [(false, vec![Value::str("north"), Value::Int(10)])]);
        let got = seen(h.send(group, acct(Value::str("north"), 25), 2).unwrap());
        assert_eq!(
            got,
            [(true, vec![Value::str("north"), Value::Int(10)]), (false, vec![Value::str("north"), Value::Int(25)])]
        );
        let got = seen(h.send(group, acct(Value::str("south"), 25), 3).unwrap());
        assert_eq!(
            got,
            [(true, vec![Value::str("north"), Value::Int(25)]), (false, vec![Value::str("south"), Value::Int(25)])]
        );
        assert!(h.send(group, acct(Value::Null, 5), 4).is_err(), "a null group key");
        let mut gone = acct(Value::Null, 0);
        gone.retract = true;
        let got = seen(h.send(group, gone.clone(), 5).unwrap());
        assert_eq!(got, [(true, vec![Value::str("south"), Value::Int(25)])], "the row as last grouped leaves");
        assert!(h.send(group, gone, 6).unwrap().is_empty(), "a key with no row");
        // Every change of the key's row is a change of the store: set, set, set, forgotten.
        let stored: Vec<bool> = h.changes.iter().map(|c| c.value.is_some()).collect();
        assert_eq!(stored, [true, true, true, false]);
    }

    #[test]
    fn rows_round_trip_and_damage_is_an_error() {
        let row = Row {
            key: Value::str("k"),
            value: vec![Value::Int(3), Value::Null, Value::str("é")],
            joined: vec![None, Some((Value::Int(1), Arc::new(vec![Value::Float(1.5)])))],
            tenant: None,
            retract: false,
        };
        let b = encode_row(&row);
        let back = decode_row(&b, &row).unwrap();
        assert_eq!(format!("{:?}", back.value), format!("{:?}", row.value));
        assert_eq!(format!("{:?}", back.joined), format!("{:?}", row.joined));
        for cut in 0..b.len() {
            assert!(decode_row(&b[..cut], &row).is_err(), "a row cut at {cut} decoded");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(decode_row(&longer, &row).is_err());
    }
}
