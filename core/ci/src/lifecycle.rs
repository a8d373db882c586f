//! The pipeline lifecycle's state transitions, each inside the caller's write transaction:
//! a workflow ends (its unfinished steps with it), waiting workflows whose dependencies are
//! done are released or skipped, a pipeline with nothing left to run takes the merge of its
//! workflows' states, a pipeline is canceled, lost leases are re-queued.
//!
//! No I/O but the store, no clock but `now_unix`, so every rule here is tested below on an
//! in-memory database.

use std::collections::HashMap;

use crate::pipeline::status::{self, Status};
use crate::store::pipelines::{self, CancelInfo, PipelineRow};
use crate::store::tasks::{self, Task, TaskState};
use crate::store::{StoreError, StoreResult, WriteTx, now_unix};

/// What a step's record says when the workflow ended before the step's own end was
/// reported: the report was lost, and the record says so rather than guess.
pub const REPORT_LOST: &str =
    "no report of this step's end reached the server (the agent's report was lost)";

/// Marks a workflow ended with `state`; its unfinished steps end too. Returns its pipeline.
///
/// Step records are never invented. A killed or canceled workflow's steps were stopped
/// (`killed`) or never ran (`canceled`); a skipped one's never ran. A runner reports every
/// step's end before the workflow's, so a step still unfinished when a runner ends the
/// workflow `success` or `failure` lost its report: it is stored as an `error` saying so,
/// never as `skipped` with exit code 0. On an `error` end (the runner could not run the
/// workflow) a step that never started is skipped, one that started lost its report.
pub(crate) fn end_workflow(c: &WriteTx, id: i64, state: Status, error: &str) -> StoreResult<i64> {
    let now = now_unix();
    let wf = pipelines::workflow(c, id)?;
    for s in &wf.children {
        if !status::is_done(s.state) {
            let started = s.state == Status::Running;
            let (step_state, lost) = match state {
                Status::Killed | Status::Canceled if started => (Status::Killed, false),
                Status::Killed | Status::Canceled => (Status::Canceled, false),
                Status::Success | Status::Failure => (Status::Error, true),
                Status::Error if started => (Status::Error, true),
                _ => (Status::Skipped, false),
            };
            pipelines::update_step(c, s.id, |s| {
                s.state = step_state;
                if lost {
                    s.error = REPORT_LOST.into();
                }
                if s.finished == 0 && s.started > 0 {
                    s.finished = now;
                }
            })?;
        }
    }
    pipelines::update_workflow(c, id, |w| {
        w.state = state;
        w.error = error.into();
        w.finished = now;
        if w.started == 0 {
            w.started = now;
        }
    })?;
    tasks::remove(c, id)?;
    Ok(wf.pipeline_id)
}

/// Waiting tasks whose dependencies have all ended become pending, or are skipped when the
/// dependencies did not end the way `runs_on` asks.
pub(crate) fn release_dependents(c: &WriteTx, pipeline_id: i64) -> StoreResult<()> {
    loop {
        let mut changed = false;
        let wfs = pipelines::workflows(c, pipeline_id)?;
        let state_of: HashMap<i64, Status> = wfs.iter().map(|w| (w.id, w.state)).collect();
        for task in tasks::of_pipeline(c, pipeline_id)? {
            if task.state != TaskState::Waiting {
                continue;
            }
            let deps: Vec<Status> = task
                .dependencies
                .iter()
                .filter_map(|d| state_of.get(d).copied())
                .collect();
            if !deps.iter().all(|s| status::is_done(*s)) {
                continue;
            }
            if status::runs_after(&task.run_on, &deps) {
                tasks::set_state(c, task.id, TaskState::Pending)?;
            } else {
                end_workflow(c, task.id, Status::Skipped, "")?;
            }
            changed = true;
        }
        if !changed {
            return Ok(());
        }
    }
}

/// When no workflow of the pipeline is left to run, the pipeline takes the merged state.
pub(crate) fn roll_up(c: &WriteTx, pipeline_id: i64) -> StoreResult<()> {
    let wfs = pipelines::workflows(c, pipeline_id)?;
    if wfs.iter().any(|w| !status::is_done(w.state)) {
        return Ok(());
    }
    let merged = status::merge(wfs.iter().map(|w| w.state));
    let now = now_unix();
    pipelines::update(c, pipeline_id, |p| {
        // A canceled pipeline keeps the state the cancel gave it.
        if !matches!(
            p.status,
            Status::Killed | Status::Canceled | Status::Declined
        ) {
            p.status = merged;
        }
        if p.finished == 0 {
            p.finished = now;
        }
    })?;
    Ok(())
}

pub(crate) fn cancel_in(c: &WriteTx, pipeline_id: i64, user: &str) -> StoreResult<PipelineRow> {
    let row = pipelines::by_id(c, pipeline_id)?;
    if !matches!(
        row.pipeline.status,
        Status::Pending | Status::Running | Status::Blocked
    ) {
        return Err(StoreError::Conflict(format!(
            "pipeline {} is {} and cannot be canceled",
            row.pipeline.number, row.pipeline.status
        )));
    }
    let wfs = pipelines::workflows(c, pipeline_id)?;
    let started = wfs
        .iter()
        .any(|w| w.state == Status::Running || w.started > 0);
    let now = now_unix();
    for task in tasks::of_pipeline(c, pipeline_id)? {
        if task.state != TaskState::Running {
            end_workflow(c, task.id, Status::Skipped, "")?;
        }
    }
    // Blocked pipelines have workflows but no tasks.
    for wf in &wfs {
        if wf.state == Status::Blocked {
            end_workflow(c, wf.id, Status::Skipped, "")?;
        }
    }
    let user = user.to_string();
    let row = pipelines::update(c, pipeline_id, |p| {
        p.status = if started {
            Status::Killed
        } else {
            Status::Canceled
        };
        p.cancel_info = Some(CancelInfo {
            canceled_by_user: user,
            ..CancelInfo::default()
        });
        if p.finished == 0 {
            p.finished = now;
        }
    })?;
    Ok(row)
}

/// Puts the tasks of `only_agent` (or, without one, every task whose lease ran out) back in
/// the queue: their unfinished steps start again, their logs continue where they were. A task
/// whose pipeline was canceled meanwhile ends instead. Returns the tasks it handled.
pub(crate) fn requeue_in(c: &WriteTx, only_agent: Option<i64>) -> StoreResult<Vec<Task>> {
    let stale = match only_agent {
        Some(agent) => tasks::of_agent(c, agent)?,
        None => tasks::expired(c, now_unix())?,
    };
    for task in &stale {
        if requeue_task(c, task)? {
            tracing::warn!(
                workflow = task.id,
                agent = task.agent_id,
                "lease lost; workflow re-queued"
            );
        }
    }
    Ok(stale)
}

/// Puts one task back in the queue, its unfinished steps pending again; a task whose
/// pipeline was canceled meanwhile ends instead. Whether it was queued again.
pub(crate) fn requeue_task(c: &WriteTx, task: &Task) -> StoreResult<bool> {
    let pipeline = pipelines::by_id(c, task.pipeline_id)?;
    if matches!(
        pipeline.pipeline.status,
        Status::Killed | Status::Canceled | Status::Declined
    ) {
        // Canceled while its agent was gone: end it instead of running it again.
        end_workflow(c, task.id, Status::Killed, "")?;
        roll_up(c, task.pipeline_id)?;
        return Ok(false);
    }
    tasks::set_state(c, task.id, TaskState::Pending)?;
    let wf = pipelines::workflow(c, task.id)?;
    for s in &wf.children {
        if !status::is_done(s.state) || s.state == Status::Running {
            pipelines::update_step(c, s.id, |s| {
                s.state = Status::Pending;
                s.started = 0;
                s.finished = 0;
                s.exit_code = 0;
            })?;
        }
    }
    pipelines::update_workflow(c, task.id, |w| {
        w.state = Status::Pending;
        w.agent_id = 0;
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::store::pipelines::{NewWorkflow, Pipeline};
    use crate::store::repos;

    /// Stands for a workflow whose task waits for the first workflow (its state: created).
    const WAITING: Status = Status::Created;

    /// A pipeline in `status` with one workflow per `(name, state, steps' states)`, and a
    /// task for each workflow that is still to run ([`WAITING`] ones wait for the first).
    struct Fixture {
        db: WriteTx<'static>,
        pipeline: i64,
        workflows: Vec<i64>,
    }

    fn fixture(status: Status, workflows: &[(&str, Status, &[Status])]) -> Fixture {
        let db = WriteTx::in_memory_for_tests();
        let repo = repos::insert_bare(&db, 1, 1, "alice/app").unwrap();
        let new: Vec<NewWorkflow> = workflows
            .iter()
            .map(|(name, state, steps)| NewWorkflow {
                name: name.to_string(),
                state: *state,
                environ: BTreeMap::new(),
                sealed_payload: String::new(),
                steps: (0..steps.len())
                    .map(|i| (format!("{name}-{i}"), "commands".into()))
                    .collect(),
            })
            .collect();
        let pipeline = Pipeline {
            status,
            ..Pipeline::default()
        };
        let number = pipelines::take_next_number(&db, repo).unwrap();
        let row = pipelines::create(&db, repo, number, &pipeline, &new, &[]).unwrap();
        let ids: Vec<i64> = row
            .pipeline
            .workflows
            .unwrap_or_default()
            .iter()
            .map(|w| w.id)
            .collect();
        for ((_, state, steps), id) in workflows.iter().zip(&ids) {
            let wf = pipelines::workflow(&db, *id).unwrap();
            for (step, s) in wf.children.iter().zip(steps.iter()) {
                pipelines::update_step(&db, step.id, |st| {
                    st.state = *s;
                    st.started = if *s == Status::Pending { 0 } else { 10 };
                })
                .unwrap();
            }
            let task_state = match *state {
                Status::Running => TaskState::Running,
                Status::Pending => TaskState::Pending,
                WAITING => TaskState::Waiting,
                _ => continue,
            };
            // A running task is a pending one an agent (7) leased.
            let queued = if task_state == TaskState::Running {
                TaskState::Pending
            } else {
                task_state
            };
            let run_on = if name_says_failure(workflows, *id, &ids) {
                "failure"
            } else {
                "success"
            };
            tasks::insert(
                &db,
                &Task {
                    id: *id,
                    pipeline_id: row.pipeline.id,
                    repo_id: repo,
                    state: queued,
                    labels: BTreeMap::new(),
                    dependencies: if queued == TaskState::Waiting {
                        vec![ids[0]]
                    } else {
                        Vec::new()
                    },
                    run_on: vec![run_on.into()],
                    agent_id: 0,
                    lease_until: 0,
                    created: 0,
                    concurrency_limit: 0,
                    concurrency_group: String::new(),
                },
            )
            .unwrap();
            if task_state == TaskState::Running {
                assert!(tasks::lease(&db, *id, 7, 100).unwrap());
            }
        }
        Fixture {
            db,
            pipeline: row.pipeline.id,
            workflows: ids,
        }
    }

    /// Workflows named `on-failure…` run only when their dependency failed.
    fn name_says_failure(workflows: &[(&str, Status, &[Status])], id: i64, ids: &[i64]) -> bool {
        let i = ids.iter().position(|x| *x == id).unwrap_or(0);
        workflows[i].0.starts_with("on-failure")
    }

    impl Fixture {
        fn workflow(&self, i: usize) -> pipelines::Workflow {
            pipelines::workflow(&self.db, self.workflows[i]).unwrap()
        }
        fn step_states(&self, i: usize) -> Vec<Status> {
            self.workflow(i).children.iter().map(|s| s.state).collect()
        }
        fn task_state(&self, i: usize) -> Option<TaskState> {
            tasks::get(&self.db, self.workflows[i])
                .unwrap()
                .map(|t| t.state)
        }
        fn status(&self) -> Status {
            pipelines::by_id(&self.db, self.pipeline)
                .unwrap()
                .pipeline
                .status
        }
    }

    #[test]
    fn an_ended_workflow_ends_its_unfinished_steps_and_leaves_the_queue() {
        let f = fixture(
            Status::Running,
            &[(
                "build",
                Status::Running,
                &[Status::Success, Status::Running, Status::Pending],
            )],
        );
        assert_eq!(
            end_workflow(&f.db, f.workflows[0], Status::Killed, "").unwrap(),
            f.pipeline
        );
        assert_eq!(
            f.step_states(0),
            [Status::Success, Status::Killed, Status::Canceled]
        );
        let wf = f.workflow(0);
        assert_eq!((wf.state, wf.finished > 0), (Status::Killed, true));
        assert_eq!(f.task_state(0), None);

        // A runner's end with steps unreported: their reports were lost, and the records
        // say so instead of inventing a skip.
        let f = fixture(
            Status::Running,
            &[(
                "build",
                Status::Running,
                &[Status::Running, Status::Pending],
            )],
        );
        end_workflow(&f.db, f.workflows[0], Status::Failure, "exit 1").unwrap();
        assert_eq!(f.step_states(0), [Status::Error, Status::Error]);
        assert!(
            f.workflow(0)
                .children
                .iter()
                .all(|s| s.error == REPORT_LOST && s.exit_code == 0)
        );
        assert_eq!(f.workflow(0).error, "exit 1");

        // A workflow that could not run: what never started is skipped.
        let f = fixture(
            Status::Running,
            &[(
                "build",
                Status::Running,
                &[Status::Running, Status::Pending],
            )],
        );
        end_workflow(&f.db, f.workflows[0], Status::Error, "no engine").unwrap();
        assert_eq!(f.step_states(0), [Status::Error, Status::Skipped]);
        // One whose dependencies ended the wrong way never ran at all.
        let f = fixture(
            Status::Running,
            &[("deploy", Status::Pending, &[Status::Pending])],
        );
        end_workflow(&f.db, f.workflows[0], Status::Skipped, "").unwrap();
        assert_eq!(f.step_states(0), [Status::Skipped]);
    }

    #[test]
    fn dependents_run_when_their_dependency_ended_the_way_they_ask() {
        let f = fixture(
            Status::Running,
            &[
                ("build", Status::Running, &[Status::Running]),
                ("deploy", WAITING, &[Status::Pending]),
                ("on-failure-notify", WAITING, &[Status::Pending]),
            ],
        );
        release_dependents(&f.db, f.pipeline).unwrap();
        assert_eq!(
            f.task_state(1),
            Some(TaskState::Waiting),
            "build still runs"
        );

        end_workflow(&f.db, f.workflows[0], Status::Success, "").unwrap();
        release_dependents(&f.db, f.pipeline).unwrap();
        assert_eq!(f.task_state(1), Some(TaskState::Pending));
        assert_eq!(f.task_state(2), None, "runs only on failure: skipped");
        assert_eq!(f.workflow(2).state, Status::Skipped);

        let f = fixture(
            Status::Running,
            &[
                ("build", Status::Running, &[Status::Running]),
                ("deploy", WAITING, &[Status::Pending]),
                ("on-failure-notify", WAITING, &[Status::Pending]),
            ],
        );
        end_workflow(&f.db, f.workflows[0], Status::Failure, "").unwrap();
        release_dependents(&f.db, f.pipeline).unwrap();
        assert_eq!(f.workflow(1).state, Status::Skipped);
        assert_eq!(f.task_state(2), Some(TaskState::Pending));
    }

    #[test]
    fn the_pipeline_takes_the_merged_state_once_nothing_is_left_to_run() {
        let f = fixture(
            Status::Running,
            &[
                ("a", Status::Running, &[Status::Running]),
                ("b", Status::Running, &[Status::Running]),
            ],
        );
        end_workflow(&f.db, f.workflows[0], Status::Success, "").unwrap();
        roll_up(&f.db, f.pipeline).unwrap();
        assert_eq!(f.status(), Status::Running, "b still runs");
        end_workflow(&f.db, f.workflows[1], Status::Failure, "").unwrap();
        roll_up(&f.db, f.pipeline).unwrap();
        let p = pipelines::by_id(&f.db, f.pipeline).unwrap().pipeline;
        assert_eq!((p.status, p.finished > 0), (Status::Failure, true));
    }

    #[test]
    fn cancel_skips_queued_work_kills_a_started_pipeline_and_refuses_a_finished_one() {
        let f = fixture(
            Status::Running,
            &[
                ("a", Status::Running, &[Status::Running]),
                ("b", Status::Pending, &[Status::Pending]),
            ],
        );
        let row = cancel_in(&f.db, f.pipeline, "alice").unwrap();
        assert_eq!(row.pipeline.status, Status::Killed);
        assert_eq!(
            row.pipeline.cancel_info.map(|i| i.canceled_by_user),
            Some("alice".into())
        );
        assert_eq!(f.workflow(1).state, Status::Skipped);
        assert_eq!(
            f.task_state(0),
            Some(TaskState::Running),
            "its agent sees the cancel and reports"
        );
        // The running workflow's end then rolls up without overriding the cancel.
        end_workflow(&f.db, f.workflows[0], Status::Killed, "").unwrap();
        roll_up(&f.db, f.pipeline).unwrap();
        assert_eq!(f.status(), Status::Killed);

        let queued = fixture(
            Status::Pending,
            &[("a", Status::Pending, &[Status::Pending])],
        );
        assert_eq!(
            cancel_in(&queued.db, queued.pipeline, "")
                .unwrap()
                .pipeline
                .status,
            Status::Canceled
        );

        let blocked = fixture(
            Status::Blocked,
            &[("a", Status::Blocked, &[Status::Pending])],
        );
        cancel_in(&blocked.db, blocked.pipeline, "").unwrap();
        assert_eq!(blocked.workflow(0).state, Status::Skipped);

        let done = fixture(
            Status::Success,
            &[("a", Status::Success, &[Status::Success])],
        );
        assert!(matches!(
            cancel_in(&done.db, done.pipeline, ""),
            Err(StoreError::Conflict(_))
        ));
    }

    #[test]
    fn lost_leases_go_back_to_the_queue_unless_the_pipeline_was_canceled() {
        let f = fixture(
            Status::Running,
            &[(
                "a",
                Status::Running,
                &[Status::Success, Status::Running, Status::Pending],
            )],
        );
        let stale = requeue_in(&f.db, Some(7)).unwrap();
        assert_eq!(stale.len(), 1);
        assert_eq!(f.task_state(0), Some(TaskState::Pending));
        assert_eq!(
            f.step_states(0),
            [Status::Success, Status::Pending, Status::Pending]
        );
        let wf = f.workflow(0);
        assert_eq!((wf.state, wf.agent_id), (Status::Pending, 0));
        assert!(
            requeue_in(&f.db, Some(8)).unwrap().is_empty(),
            "another agent's"
        );

        let f = fixture(
            Status::Running,
            &[("a", Status::Running, &[Status::Running])],
        );
        pipelines::update(&f.db, f.pipeline, |p| p.status = Status::Canceled).unwrap();
        requeue_in(&f.db, Some(7)).unwrap();
        assert_eq!(f.task_state(0), None);
        assert_eq!(f.workflow(0).state, Status::Killed);
    }
}
