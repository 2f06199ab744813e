//! Opening a task, written once for both backends: its stores restored from their changelogs,
//! changelog records past its last commit corrected, input resumed at its committed positions,
//! and the task brought up to the program as of the control log ([`Stage`]); and bringing a
//! running task up to a newer stage ([`apply_stage`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::control::Stage;
use crate::plan::physical::TaskSpec;
use crate::record::Pos;
use crate::runtime::backend::Backend;
use crate::runtime::error::RunError;
use crate::runtime::options::RunOptions;
use crate::runtime::restore::{correct_stale, log_restore, restore_store, RestoreWatch};
use crate::runtime::run::{check_tenant_layout, Feed, TaskRun};
use crate::runtime::state::open_tree;

/// Open a task from its commit record `meta` (Null: it never committed) and input `positions`:
/// restore every store, correct changelog records written after the commit, resume input. The
/// task's changelog ends (`TaskRun::ends`) are where each store's restored state reaches.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_task<B: Backend + ?Sized>(
    b: &B,
    db: &sled::Db,
    spec: Arc<TaskSpec>,
    p: u32,
    group: String,
    meta: &serde_json::Value,
    positions: BTreeMap<String, Pos>,
    opts: &RunOptions,
) -> Result<TaskRun<B::Feed>, RunError> {
    check_tenant_layout(&spec, meta)?;
    let feed = b.feed(&spec, p, &positions)?;
    let started = Instant::now();
    let task_id = format!("{}_{p}", spec.sub);
    let ends = committed_ends(b, &spec, meta);
    let mut trees = Vec::new();
    let mut restores = Vec::new();
    let mut checkpoints = Vec::new();
    let mut stale = Vec::new();
    let mut restored = 0;
    let mut into = Vec::new();
    for (st, end) in spec.stores.iter().zip(ends) {
        let tree = open_tree(db, &st.name, p)?;
        let watch = RestoreWatch::new(opts, &task_id, &st.name, p);
        let mut r = restore_store(b, &tree, &st.changelog, p, end, &watch)?;
        restored += r.records;
        if r.records > 0 {
            into.push(st.name.as_str());
        }
        checkpoints.push(r.checkpoint);
        stale.push(std::mem::take(&mut r.stale));
        restores.push(r);
        trees.push(tree);
    }
    log_restore(&into.join(", "), p, restored, started);
    let changelogs: Vec<String> = spec.stores.iter().map(|s| s.changelog.clone()).collect();
    let layers: Vec<_> = trees.iter().zip(&restores).map(|(t, r)| (t, &r.pending, &r.flights)).collect();
    correct_stale(b, &spec.name, &changelogs, p, &layers, stale, &mut checkpoints)?;
    let limits = b.timestamp_limits(&spec);
    let stores = trees.into_iter().zip(restores).map(|(tree, r)| (tree, r.pending, r.keys, r.flights)).collect();
    let mut run = TaskRun::new(spec, p, group, feed, stores, meta, positions, restored, opts);
    if restored > 0 {
        // (Written behind from now on: a 4-partition restore on one instance wrote each task's
        // rows after the others had restored, 0.5 s of a 1.3 s run with 1 M keys.)
        run.trees.hand_over(&checkpoints);
    }
    run.ends = checkpoints;
    let sizes = b.size_limits(&run.task.spec, &opts.config);
    run.set_limits(limits, sizes);
    // Rows of avro values restored into join stores need their writer schemas: a registry that
    // could not be asked stops the run here, rather than leave rows out of the joins.
    if let Some(why) = crate::format::schema_tables::take_failure() {
        return Err(RunError::Registry(format!(
            "the schema registry, while opening task {}: {why}",
            run.task.spec.name
        )));
    }
    Ok(run)
}

/// Per store: the changelog end as of the task's last commit, where the backend's changelog may
/// hold records past it (None: the changelog's end as of now).
fn committed_ends<B: Backend + ?Sized>(b: &B, spec: &TaskSpec, meta: &serde_json::Value) -> Vec<Option<u64>> {
    (0..spec.stores.len())
        .map(|i| {
            if !b.changelog_may_pass_commit() {
                return None;
            }
            if meta.is_null() {
                // Never committed: nothing of its changelog is.
                return Some(0);
            }
            // By store name: the task may have committed with another list of stores (a
            // statement applied since). An older commit record has them in store order.
            match meta.get("changelogs") {
                Some(serde_json::Value::Object(m)) => m.get(&spec.stores[i].name).and_then(|v| v.as_u64()),
                Some(serde_json::Value::Array(a)) => a.get(i).and_then(|v| v.as_u64()),
                _ => None,
            }
        })
        .collect()
}

/// Bring a task just opened up to `stage`: its last commit (`meta_version`: the query version it
/// ran, None if it never committed) may have run an older form of its query. A task with no
/// commit record of a query defined or reprocessed by a statement starts empty, whatever a
/// store of the same name held before (a dropped query's name reused).
pub(crate) fn catch_up<B: Backend + ?Sized>(
    b: &B,
    db: &sled::Db,
    run: &mut TaskRun<B::Feed>,
    stage: &Stage,
    meta_version: Option<u64>,
    opts: &RunOptions,
) -> Result<(), RunError> {
    let spec = run.task.spec.clone();
    let p = run.task.partition;
    run.task.globals = stage.tables.clone();
    run.purge_since(stage)?;
    let fresh_task = meta_version.is_none() && stage.queries.get(&spec.query).is_some_and(|q| q.epoch > 0);
    let catch_up = if fresh_task {
        // Every store emptied; input positions kept (on Kafka, an offset another tool committed).
        Some((false, spec.stores.iter().map(|s| s.name.clone()).collect()))
    } else {
        meta_version.filter(|v| *v != spec.version).and_then(|v| stage.catch_up(&spec.query, v))
    };
    if let Some((restart, fresh)) = catch_up {
        if run.upgrade(spec, stage, restart, &fresh, &|name| open_tree(db, name, p), opts)? {
            let feed = b.feed(&run.task.spec, p, &run.positions)?;
            run.set_feed(feed);
        }
    }
    if run.control != stage.next {
        run.control = stage.next;
        run.meta_changed = true;
    }
    Ok(())
}

/// What bringing a running task up to a stage did.
#[derive(Debug, PartialEq)]
pub(crate) enum Applied {
    /// Its query was dropped: the deletion of its state is queued; the task must be committed,
    /// then forgotten.
    Retired,
    /// The task runs the stage's form of its query. `gone`: the stores of its old form that
    /// the new one does not have, (store, changelog), for the backend to sweep
    /// ([`crate::runtime::restore::sweep`]).
    Running { gone: Vec<(String, String)> },
}

/// A new feed of a task's inputs (its spec, partition, positions).
pub(crate) type MakeFeed<'a, F> = dyn Fn(&TaskSpec, u32, &BTreeMap<String, Pos>) -> Result<F, RunError> + 'a;

/// Bring a running task, at a commit boundary (nothing uncommitted), up to `stage`; `feed` gives
/// it a new feed when its inputs changed. The next commit records the control offset applied.
pub(crate) fn apply_stage<F: Feed>(
    run: &mut TaskRun<F>,
    stage: &Stage,
    db: &sled::Db,
    opts: &RunOptions,
    feed: &MakeFeed<'_, F>,
) -> Result<Applied, RunError> {
    let p = run.task.partition;
    let Some(spec) = stage.spec(&run.task.spec.name).cloned() else {
        run.retire()?;
        run.control = stage.next;
        return Ok(Applied::Retired);
    };
    run.purge_since(stage)?;
    let cur = &run.task.spec;
    if spec.version == cur.version && spec.epoch == cur.epoch {
        // Only the control-managed tables changed (or a tenant was purged).
        run.task.globals = stage.tables.clone();
        run.control = stage.next;
        run.meta_changed = true;
        return Ok(Applied::Running { gone: Vec::new() });
    }
    let (restart, fresh) = stage.catch_up(&spec.query, cur.version).unwrap_or_default();
    let gone = stage.gone_since(&cur.name, cur.version);
    if run.upgrade(spec, stage, restart, &fresh, &|name| open_tree(db, name, p), opts)? {
        let f = feed(&run.task.spec, p, &run.positions)?;
        run.set_feed(f);
    }
    Ok(Applied::Running { gone })
}
