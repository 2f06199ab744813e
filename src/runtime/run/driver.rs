//! The driver loop, written once for both backends. Each [`turn`]:
//!
//! 1. the backend's membership and control log ([`Host::begin`]): tasks opened for what this
//!    worker newly runs, control statements read;
//! 2. every task steps over its inputs (in event-time order, [`TaskRun::step`]);
//! 3. a commit point, when the backend says one is due ([`Host::commit_due`]): the tasks of a
//!    commit unit commit together ([`commit::commit`] through [`Host::commit`]);
//! 4. a task a fault failed is reopened from its last commit ([`Host::reopen`]);
//! 5. at a commit boundary, the tasks behind the control log apply the latest stage
//!    ([`open::apply_stage`] through [`Host::apply_stage`]); a dropped query's tasks commit
//!    the deletion of their state and are retired;
//! 6. the backend ends the round ([`Host::end`]): whether the run goes on, waits or stops.
//!
//! What differs between the backends is the [`Host`]'s: where its feeds' inputs end, when a
//! commit is due and which tasks commit together (the embedded log commits each task alone at
//! every `commit.records` records or the end of its input; Kafka commits every task of the
//! instance in one transaction each `commit.interval_ms`), how a task reopens, and what ends a
//! run. Between turns each backend waits its own way (the embedded log sleeps, Kafka polls its
//! group consumer, whose rebalance callbacks open and close tasks).
//!
//! [`commit::commit`]: crate::runtime::run::commit::commit
//! [`open::apply_stage`]: crate::runtime::run::open::apply_stage

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::control::Stage;
use crate::runtime::error::RunError;
use crate::runtime::options::RunOptions;
use crate::runtime::run::commit::How;
use crate::runtime::run::open::Applied;
use crate::runtime::run::{Feed, Summary, TaskRun};

/// What the backend's loop does after a turn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Flow {
    /// Something was done: the next turn at once.
    Busy,
    /// Nothing to do: wait for input before the next turn.
    Idle,
    /// The run ends: [`finish`].
    Stop,
}

/// What a backend supplies to the driver loop.
pub(crate) trait Host {
    type Feed: Feed;

    fn opts(&self) -> &RunOptions;

    /// The start of a turn: membership (the tasks of what this worker newly runs opened, those
    /// it no longer runs closed) and the control log. True if that was progress.
    fn begin(&mut self, tasks: &mut Vec<TaskRun<Self::Feed>>) -> Result<bool, RunError>;

    /// The latest stage the process has read, and how many control records it has read.
    fn stage(&mut self) -> Result<(Arc<Stage>, u64), RunError>;

    /// Before a task's step: its feed's view of its inputs.
    fn prepare(&mut self, _t: &mut TaskRun<Self::Feed>) -> Result<(), RunError> {
        Ok(())
    }

    /// The records a task's step processes at most, and whether it stops once its cache is
    /// full ([`TaskRun::step`]).
    fn step_size(&self, t: &TaskRun<Self::Feed>) -> (u64, bool);

    /// Whether every task of the worker commits in one commit (true), or each task alone.
    fn together(&self) -> bool;

    /// Whether the tasks of a commit unit, just stepped, are at a commit point.
    fn commit_due(&self, unit: &[TaskRun<Self::Feed>]) -> bool;

    /// Commit the tasks of a unit in one commit (with [`commit::commit`]). True if the
    /// backend committed (a task a fault failed is then reopened by the loop).
    ///
    /// [`commit::commit`]: crate::runtime::run::commit::commit
    fn commit(&mut self, unit: &mut [TaskRun<Self::Feed>], how: How) -> Result<bool, RunError>;

    /// Bring a task a fault failed back to its last commit, running `stage`.
    fn reopen(&mut self, t: &mut TaskRun<Self::Feed>, stage: &Arc<Stage>) -> Result<(), RunError>;

    /// After a task's step, commit point and reopening: the backend's bookkeeping of it. True
    /// if that was progress.
    fn settled(&mut self, _t: &TaskRun<Self::Feed>) -> Result<bool, RunError> {
        Ok(false)
    }

    /// Whether the tasks of a unit are at a commit boundary, where a stage may apply.
    fn at_boundary(&self, unit: &[TaskRun<Self::Feed>]) -> bool {
        committed(unit)
    }

    /// Whether the backend itself (beyond its tasks) is behind `stage`.
    fn behind(&self, _stage: &Stage) -> bool {
        false
    }

    /// Before the tasks of a unit apply `stage`.
    fn stage_begin(&mut self, _stage: &Arc<Stage>) -> Result<(), RunError> {
        Ok(())
    }

    /// Bring a task at a commit boundary up to `stage` ([`open::apply_stage`]), and delete (or
    /// queue the deletion of) the stores its old form had and its new one has not.
    ///
    /// [`open::apply_stage`]: crate::runtime::run::open::apply_stage
    fn apply_stage(&mut self, t: &mut TaskRun<Self::Feed>, stage: &Arc<Stage>) -> Result<Applied, RunError>;

    /// After the tasks of a unit applied `stage` (and its dropped queries' tasks retired).
    fn stage_end(&mut self, _tasks: &mut Vec<TaskRun<Self::Feed>>, _stage: &Arc<Stage>) -> Result<(), RunError> {
        Ok(())
    }

    /// A task whose query was dropped, its state's deletion committed: forgotten.
    fn retire(&mut self, t: TaskRun<Self::Feed>) -> Result<(), RunError>;

    /// The end of a turn (`progress`: whether it did anything, which the backend may add to).
    fn end(&mut self, tasks: &mut Vec<TaskRun<Self::Feed>>, progress: &mut bool) -> Result<Flow, RunError>;

    /// The end of the run: the last commit, local state written; the counts of every task.
    fn close(&mut self, tasks: &mut Vec<TaskRun<Self::Feed>>) -> Result<Summary, RunError>;
}

/// Nothing of the tasks is uncommitted, and none needs reopening.
pub(crate) fn committed<F: Feed>(unit: &[TaskRun<F>]) -> bool {
    unit.iter().all(|t| !t.failed() && t.uncommitted() == 0)
}

/// The time of the turns that did something: what a run's rate is over.
#[derive(Debug, Default)]
pub(crate) struct Busy(Duration);

/// One turn of the loop over a worker's tasks (the steps in the module's documentation).
pub(crate) fn turn<H: Host>(
    host: &mut H,
    tasks: &mut Vec<TaskRun<H::Feed>>,
    busy: &mut Busy,
) -> Result<Flow, RunError> {
    let started = Instant::now();
    let mut progress = host.begin(tasks)?;
    let (stage, read) = host.stage()?;
    let mut start = 0;
    loop {
        let end = if host.together() { tasks.len() } else { start + 1 };
        if end > tasks.len() {
            break;
        }
        for t in &mut tasks[start..end] {
            t.set_control_seen((read, stage.next));
            host.prepare(t)?;
            let (max, until_full) = host.step_size(t);
            if t.step(host.opts(), max, until_full)? > 0 {
                progress = true;
            }
        }
        if host.commit_due(&tasks[start..end]) {
            progress |= tasks[start..end].iter().any(|t| t.has_work());
            commit_unit(host, tasks, start..end, How::default())?;
        }
        progress |= reopen_failed(host, &mut tasks[start..end])?;
        for t in &tasks[start..end] {
            progress |= host.settled(t)?;
        }
        let (applied, retired) = boundary(host, tasks, start..end)?;
        progress |= applied;
        if host.together() {
            break;
        }
        start = end - retired;
    }
    let flow = host.end(tasks, &mut progress)?;
    if progress {
        busy.0 += started.elapsed();
    }
    Ok(flow)
}

/// The end of a run: the backend's last commit and the counts, with the time spent busy.
pub(crate) fn finish<H: Host>(
    host: &mut H,
    tasks: &mut Vec<TaskRun<H::Feed>>,
    busy: Busy,
) -> Result<Summary, RunError> {
    let closing = Instant::now();
    let mut s = host.close(tasks)?;
    s.busy = busy.0 + closing.elapsed();
    Ok(s)
}

/// Commit the tasks in `unit` together, and reopen those a fault failed. True if the backend
/// committed.
pub(crate) fn commit_unit<H: Host>(
    host: &mut H,
    tasks: &mut [TaskRun<H::Feed>],
    unit: Range<usize>,
    how: How,
) -> Result<bool, RunError> {
    let committed = host.commit(&mut tasks[unit.clone()], how)?;
    reopen_failed(host, &mut tasks[unit])?;
    Ok(committed)
}

/// Reopen the tasks a fault failed; true if there was any.
fn reopen_failed<H: Host>(host: &mut H, unit: &mut [TaskRun<H::Feed>]) -> Result<bool, RunError> {
    if !unit.iter().any(|t| t.failed()) {
        return Ok(false);
    }
    let stage = host.stage()?.0;
    for t in unit.iter_mut().filter(|t| t.failed()) {
        host.reopen(t, &stage)?;
    }
    Ok(true)
}

/// Control statements apply at commit boundaries: once every task of `unit` is at one, those
/// behind the latest stage apply it; a dropped query's tasks then commit the deletion of their
/// state and are retired (removed from `tasks`). (Whether a stage was applied, how many tasks
/// were retired.)
pub(crate) fn boundary<H: Host>(
    host: &mut H,
    tasks: &mut Vec<TaskRun<H::Feed>>,
    unit: Range<usize>,
) -> Result<(bool, usize), RunError> {
    let stage = host.stage()?.0;
    let behind = host.behind(&stage) || tasks[unit.clone()].iter().any(|t| t.control() < stage.next);
    if !behind || !host.at_boundary(&tasks[unit.clone()]) {
        return Ok((false, 0));
    }
    host.stage_begin(&stage)?;
    let mut gone = Vec::new();
    for i in unit.clone() {
        if tasks[i].control() < stage.next && host.apply_stage(&mut tasks[i], &stage)? == Applied::Retired {
            gone.push(i);
        }
    }
    let mut retired = 0;
    if !gone.is_empty() {
        host.commit(&mut tasks[unit.clone()], How::default())?;
        // Forgotten once its state's deletion is committed (a task a fault failed reopens as
        // committed, and is retired again).
        gone.retain(|i| !tasks[*i].failed());
        reopen_failed(host, &mut tasks[unit])?;
        for i in gone.into_iter().rev() {
            host.retire(tasks.remove(i))?;
            retired += 1;
        }
    }
    host.stage_end(tasks, &stage)?;
    Ok((true, retired))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::run::testing::{options, task, NoFeed};

    /// A backend that commits by marking the tasks committed, and records what the loop asked.
    struct Fake {
        opts: RunOptions,
        stage: Arc<Stage>,
        together: bool,
        /// Whether a task with work is at a commit point.
        due: bool,
        /// The partitions of each commit's tasks.
        commits: Vec<Vec<u32>>,
        reopened: Vec<u32>,
        applied: Vec<u32>,
        retired: Vec<u32>,
        /// The partition whose query a stage drops.
        dropped: Option<u32>,
    }

    impl Fake {
        fn new(together: bool) -> Fake {
            let program = task(&sled::Config::new().temporary(true).open().unwrap(), 0).spec().clone();
            let stage = Stage {
                next: 0,
                version: 0,
                program: Arc::new(crate::compile("").unwrap()),
                topo: Arc::new(crate::plan::lower(&crate::compile("").unwrap(), "app")),
                specs: Arc::new(vec![program]),
                queries: Default::default(),
                tables: Default::default(),
                events: Default::default(),
                purges: Default::default(),
            };
            Fake {
                opts: options("app", Default::default()),
                stage: Arc::new(stage),
                together,
                due: true,
                commits: vec![],
                reopened: vec![],
                applied: vec![],
                retired: vec![],
                dropped: None,
            }
        }
    }

    impl Host for Fake {
        type Feed = NoFeed;
        fn opts(&self) -> &RunOptions {
            &self.opts
        }
        fn begin(&mut self, _: &mut Vec<TaskRun<NoFeed>>) -> Result<bool, RunError> {
            Ok(false)
        }
        fn stage(&mut self) -> Result<(Arc<Stage>, u64), RunError> {
            Ok((self.stage.clone(), self.stage.next))
        }
        fn step_size(&self, _: &TaskRun<NoFeed>) -> (u64, bool) {
            (10, false)
        }
        fn together(&self) -> bool {
            self.together
        }
        fn commit_due(&self, unit: &[TaskRun<NoFeed>]) -> bool {
            self.due && unit.iter().any(|t| t.has_work() && !t.failed())
        }
        fn commit(&mut self, unit: &mut [TaskRun<NoFeed>], _: How) -> Result<bool, RunError> {
            self.commits.push(unit.iter().map(|t| t.partition()).collect());
            for t in unit.iter_mut() {
                (t.uncommitted, t.meta_changed) = (0, false);
            }
            Ok(true)
        }
        fn reopen(&mut self, t: &mut TaskRun<NoFeed>, _: &Arc<Stage>) -> Result<(), RunError> {
            self.reopened.push(t.partition());
            (t.failed, t.uncommitted) = (false, 0);
            Ok(())
        }
        fn apply_stage(&mut self, t: &mut TaskRun<NoFeed>, stage: &Arc<Stage>) -> Result<Applied, RunError> {
            self.applied.push(t.partition());
            t.control = stage.next;
            if self.dropped == Some(t.partition()) {
                t.meta_changed = true;
                return Ok(Applied::Retired);
            }
            Ok(Applied::Running { gone: vec![] })
        }
        fn retire(&mut self, t: TaskRun<NoFeed>) -> Result<(), RunError> {
            self.retired.push(t.partition());
            Ok(())
        }
        fn end(&mut self, _: &mut Vec<TaskRun<NoFeed>>, progress: &mut bool) -> Result<Flow, RunError> {
            Ok(if *progress { Flow::Busy } else { Flow::Idle })
        }
        fn close(&mut self, _: &mut Vec<TaskRun<NoFeed>>) -> Result<Summary, RunError> {
            Ok(Summary::default())
        }
    }

    /// Three tasks, the first two with records processed since their last commit.
    fn tasks(db: &sled::Db) -> Vec<TaskRun<NoFeed>> {
        let mut tasks: Vec<TaskRun<NoFeed>> = (0..3).map(|p| task(db, p)).collect();
        tasks[0].uncommitted = 2;
        tasks[1].uncommitted = 1;
        tasks
    }

    #[test]
    fn tasks_commit_alone_or_together_as_the_backend_says() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let mut alone = Fake::new(false);
        let mut ts = tasks(&db);
        assert_eq!(turn(&mut alone, &mut ts, &mut Busy::default()).unwrap(), Flow::Busy);
        assert_eq!(alone.commits, vec![vec![0], vec![1]], "each task with work, alone");
        assert_eq!(turn(&mut alone, &mut ts, &mut Busy::default()).unwrap(), Flow::Idle, "nothing left");

        let mut together = Fake::new(true);
        let mut ts = tasks(&db);
        turn(&mut together, &mut ts, &mut Busy::default()).unwrap();
        assert_eq!(together.commits, vec![vec![0, 1, 2]], "every task in one commit");
    }

    #[test]
    fn a_stage_applies_at_a_commit_boundary_and_a_failed_task_reopens_first() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let mut host = Fake::new(false);
        Arc::get_mut(&mut host.stage).unwrap().next = 7;
        host.due = false;
        let mut ts = tasks(&db);
        ts[1].failed = true;
        turn(&mut host, &mut ts, &mut Busy::default()).unwrap();
        assert_eq!(host.reopened, vec![1], "the failed task, back to its last commit");
        assert!(host.commits.is_empty());
        // Task 0 holds uncommitted work: it applies the stage only after its next commit.
        assert_eq!(host.applied, vec![1, 2]);
        assert_eq!(ts.iter().map(|t| t.control()).collect::<Vec<_>>(), vec![0, 7, 7]);
        host.due = true;
        turn(&mut host, &mut ts, &mut Busy::default()).unwrap();
        assert_eq!(host.commits, vec![vec![0]]);
        assert_eq!(host.applied, vec![1, 2, 0]);
    }

    #[test]
    fn a_dropped_query_commits_its_deletion_then_retires() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        for together in [false, true] {
            let mut host = Fake::new(together);
            Arc::get_mut(&mut host.stage).unwrap().next = 3;
            host.dropped = Some(1);
            let mut ts = tasks(&db);
            turn(&mut host, &mut ts, &mut Busy::default()).unwrap();
            assert_eq!(host.retired, vec![1], "together: {together}");
            assert_eq!(ts.iter().map(|t| t.partition()).collect::<Vec<_>>(), vec![0, 2]);
            let last = host.commits.last().unwrap();
            assert!(last.contains(&1), "the deletion is committed before the task goes: {:?}", host.commits);
        }
    }
}
