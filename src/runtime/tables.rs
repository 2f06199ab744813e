//! The table inputs of a task (`join <table>` on a co-partitioned table topic): each table's
//! store holds its latest row per key, updated in timestamp order with the stream; joins read
//! decoded rows from a bounded cache in front of the store.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::eval::Tenant;
use crate::format::{decode_tenanted, decode_visible};
use crate::plan::physical::{TableInput, TaskSpec};
use crate::record::Record;
use crate::runtime::op::{scoped, Change, Counters, RecordError, Stateful, StoreRead};
use crate::runtime::tenant;
use crate::runtime::wire::decode_source_key;
use crate::value::Value;

/// A record of a table input, decoded and checked: its key, its row (None: a deletion) and,
/// for a tenant-scoped table, its tenant.
pub(crate) struct TableRecord {
    pub(crate) key: Value,
    pub(crate) row: Option<Vec<Value>>,
    pub(crate) tenant: Option<Tenant>,
}

/// A decoded row of a table input.
pub(crate) type TableRow = Arc<Vec<Value>>;

/// Decoded rows kept in memory before the cache is dropped at a flush (then every row is in the
/// store).
const CACHED_ROWS: usize = 200_000;

/// Every table input of a task.
pub(crate) struct TableInputs {
    spec: Arc<TaskSpec>,
    stores: Vec<usize>,
    /// Decoded rows by (table input, key as the store holds it): each row is decoded once,
    /// when it arrives or is first read from the store.
    rows: FxHashMap<(usize, Vec<u8>), Option<TableRow>>,
}

impl TableInputs {
    pub(crate) fn new(spec: Arc<TaskSpec>) -> TableInputs {
        let stores = spec.tables.iter().chain(&spec.left).map(|t| t.store).collect();
        TableInputs { spec, stores, rows: FxHashMap::default() }
    }

    /// Table input `table`: one of the task's `tables`, or, numbered after them, the query's own
    /// table in a table–table join (`left`).
    fn input(spec: &TaskSpec, table: usize) -> Result<&TableInput, RecordError> {
        spec.tables
            .get(table)
            .or(spec.left.as_ref().filter(|_| table == spec.tables.len()))
            .ok_or_else(|| RecordError(format!("internal: no table input {table}")))
    }

    /// Apply one record of table input `table`: [`TableInputs::decode`], then
    /// [`TableInputs::store`].
    pub(crate) fn apply(
        &mut self,
        table: usize,
        rec: &Record,
        counters: &mut Counters,
        changes: &mut Vec<Change>,
    ) -> Result<(), RecordError> {
        let r = self.decode(table, rec)?;
        self.store(table, r, rec, counters, changes)
    }

    /// Decode a record of table input `table` (a record without a value deletes its key) now,
    /// so that a bad row goes to the dead-letter topic and a join never meets one. A key that is
    /// not of the key's type is bad input.
    pub(crate) fn decode(&self, table: usize, rec: &Record) -> Result<TableRecord, RecordError> {
        let ti = Self::input(&self.spec, table)?;
        let raw = rec.key.as_deref();
        let raw = raw.ok_or_else(|| RecordError(format!("a record of table `{}` has no key", ti.source.name)))?;
        let key = decode_source_key(&ti.source, Some(raw), &ti.source.key_type())?;
        let (row, field) = match &rec.value {
            None => (None, None),
            Some(v) => {
                let (row, field) = decode_tenanted(&ti.source, v).map_err(RecordError)?;
                (Some(row), field)
            }
        };
        let tenant = match ti.source.tenant {
            None => None,
            Some(_) => Some(tenant::of_record(&ti.source, field.as_ref(), rec).map_err(RecordError)?),
        };
        Ok(TableRecord { key, row, tenant })
    }

    /// Store a decoded record `r` of table input `table` (`rec` as it came in, for the
    /// changelog). The row goes under its key as [`Value::key_bytes`] writes it — the bytes
    /// lookups make — not as the producer wrote it: `" 2"` and `2` are one int key.
    pub(crate) fn store(
        &mut self,
        table: usize,
        r: TableRecord,
        rec: &Record,
        counters: &mut Counters,
        changes: &mut Vec<Change>,
    ) -> Result<(), RecordError> {
        let ti = Self::input(&self.spec, table)?;
        let key = r.key.key_bytes(&ti.source.key_type());
        let key = match &r.tenant {
            None => key,
            Some(t) => {
                counters.tenant(t).records_in += 1;
                tenant::scope(t, &key)
            }
        };
        crate::runtime::lineage::put(ti.store, &key);
        self.rows.insert((table, key.clone()), r.row.map(Arc::new));
        changes.push(Change {
            store: ti.store,
            key,
            value: rec.value.clone(),
            timestamp: rec.timestamp,
            existed: true,
        });
        Ok(())
    }

    /// The current row of table input `table` for a key: from the decoded rows, else from the
    /// store.
    pub(crate) fn row(
        &mut self,
        table: usize,
        key: &Value,
        tenant: Option<&Tenant>,
        stores: &dyn StoreRead,
    ) -> Result<Option<TableRow>, RecordError> {
        let ti = Self::input(&self.spec, table)?;
        let kb = scoped(self.spec.tenant, tenant, key.key_bytes(&ti.source.key_type()))?;
        if let Some(r) = self.rows.get(&(table, kb.clone())) {
            return Ok(r.clone());
        }
        let row = match stores.get(ti.store, &kb) {
            Some(b) => Some(Arc::new(decode_visible(&ti.source, &b).map_err(RecordError)?)),
            None => None,
        };
        self.rows.insert((table, kb), row.clone());
        Ok(row)
    }
}

impl TableInputs {
    /// `streamc trace`: the row of `key` in table input `table` joins the row being processed.
    pub(crate) fn trace_join(&self, table: usize, key: &Value, tenant: Option<&Tenant>) {
        let Ok(ti) = Self::input(&self.spec, table) else { return };
        if let Ok(kb) = scoped(self.spec.tenant, tenant, key.key_bytes(&ti.source.key_type())) {
            crate::runtime::lineage::join(ti.store, &kb);
        }
    }

    /// After a flush: rows changed since the last one are now in the store (read back from it),
    /// so the cache may be dropped if it grew past its bound. (Dropped before, it would lose
    /// rows the store does not hold yet.)
    pub(crate) fn flushed(&mut self) {
        if self.rows.len() >= CACHED_ROWS {
            self.rows.clear();
        }
    }
}

impl Stateful for TableInputs {
    fn stores(&self) -> &[usize] {
        &self.stores
    }

    /// Rows are read from the stores on demand: nothing to rebuild but the cache to drop.
    fn restore(&mut self, _stores: &dyn StoreRead) {
        self.rows.clear();
    }

    /// Table stores are keyed by the scoped key bytes themselves.
    fn key_tenant<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        tenant::split(key).map(|(t, _)| t)
    }
}
