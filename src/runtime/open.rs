//! Opening a task, written once for both backends: its stores restored from their changelogs,
//! changelog records past its last commit corrected, input resumed at its committed positions,
//! and the task brought up to the program as of the control log ([`Stage`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::control::Stage;
use crate::log::Pos;
use crate::plan::physical::TaskSpec;
use crate::runtime::backend::Backend;
use crate::runtime::error::RunError;
use crate::runtime::options::RunOptions;
use crate::runtime::restore::{correct_stale, log_restore, restore_store, RestoreWatch};
use crate::runtime::run::{check_tenant_layout, TaskRun};
use crate::runtime::state::open_tree;

/// A task as its last commit left it, with the changelog position each store's local state
/// reflects.
pub(crate) struct Opened<F: crate::runtime::run::Feed> {
    pub(crate) run: TaskRun<F>,
    pub(crate) checkpoints: Vec<Pos>,
}

/// Open a task from its commit record `meta` (Null: it never committed) and input `positions`:
/// restore every store, correct changelog records written after the commit, resume input.
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
) -> Result<Opened<B::Feed>, RunError> {
    check_tenant_layout(&spec, meta)?;
    let feed = b.feed(&spec, p, &positions)?;
    let started = Instant::now();
    let task_id = format!("{}_{p}", spec.sub);
    let ends = committed_ends(b, &spec, meta);
    let mut trees = Vec::new();
    let mut checkpoints = Vec::new();
    let mut stale = Vec::new();
    let mut restored = 0;
    for (st, end) in spec.stores.iter().zip(ends) {
        let tree = open_tree(db, &st.name, p)?;
        let watch = RestoreWatch::new(opts, &task_id, &st.name, p);
        let r = restore_store(b, &tree, &st.changelog, p, end, &watch)?;
        restored += r.records;
        checkpoints.push(r.checkpoint);
        stale.push(r.stale);
        trees.push(tree);
    }
    log_restore(&spec.name, p, restored, started);
    let changelogs: Vec<String> = spec.stores.iter().map(|s| s.changelog.clone()).collect();
    correct_stale(b, &spec.name, &changelogs, p, &trees, stale, &mut checkpoints)?;
    let run = TaskRun::new(spec, p, group, feed, trees, meta, positions, restored, opts);
    Ok(Opened { run, checkpoints })
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
