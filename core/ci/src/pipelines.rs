//! Pipeline lifecycle actions taken by users: approve, decline, delete, and removing logs.
//! (Creating, restarting and canceling are `create` and `queue`; the transitions the queue
//! makes on its own are `lifecycle`.)
//!
//! Every action re-checks the pipeline's state inside its write: the caller's earlier read
//! may be stale, and two clicks must not approve twice.

use super::{Error, Services, create, queue::SEAL_PAYLOAD};
use crate::pipeline::status::{self, Status};
use crate::pipeline::types::CompiledWorkflow;
use crate::store::pipelines::{self, PipelineRow, Step};
use crate::store::repos::RepoRow;
use crate::store::{StoreError, logs, now_unix};

fn not_blocked(row: &PipelineRow) -> Result<(), Error> {
    if row.pipeline.status != Status::Blocked {
        return Err(Error::Invalid(format!(
            "pipeline is {}, not blocked",
            row.pipeline.status
        )));
    }
    Ok(())
}

/// A blocked pipeline goes to the queue, reviewed by `login`.
pub async fn approve(
    ci: &Services,
    repo: &RepoRow,
    row: &PipelineRow,
    login: String,
) -> Result<PipelineRow, Error> {
    not_blocked(row)?;
    // Open the compiled workflows to queue them with their dependencies and labels.
    let wf_ids: Vec<i64> = row
        .pipeline
        .workflows
        .iter()
        .flatten()
        .map(|w| w.id)
        .collect();
    let sealed = ci
        .store
        .read(move |c| {
            wf_ids
                .iter()
                .map(|id| pipelines::workflow_payload(c, *id))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    let mut compiled: Vec<CompiledWorkflow> = Vec::new();
    for s in sealed {
        let bytes = ci
            .seal
            .open(SEAL_PAYLOAD, &s)
            .map_err(|e| Error::Internal(format!("compiled workflow: {e}")))?;
        compiled.push(
            serde_json::from_slice(&bytes)
                .map_err(|e| Error::Internal(format!("compiled workflow: {e}")))?,
        );
    }
    let repo = repo.clone();
    let id = row.pipeline.id;
    let updated = ci
        .store
        .write(move |c| {
            let now = now_unix();
            let current = pipelines::by_id(c, id)?;
            if current.pipeline.status != Status::Blocked {
                return Err(StoreError::Conflict("pipeline is no longer blocked".into()));
            }
            for wf in pipelines::workflows(c, id)? {
                pipelines::update_workflow(c, wf.id, |w| w.state = Status::Pending)?;
                for s in &wf.children {
                    pipelines::update_step(c, s.id, |s| s.state = Status::Pending)?;
                }
            }
            pipelines::update(c, id, |p| {
                p.status = Status::Pending;
                p.reviewed_by = login.clone();
                p.reviewed = now;
            })?;
            let row = pipelines::full(c, repo.repo.id, current.pipeline.number)?;
            create::enqueue(c, &row, &compiled, &repo)?;
            Ok(row)
        })
        .await
        .map_err(|e| match e {
            // Approved (or declined) meanwhile: as upstream, a bad request.
            StoreError::Conflict(m) => Error::Invalid(m),
            other => other.into(),
        })?;
    ci.queue.wake();
    Ok(updated)
}

/// A blocked pipeline, its workflows and steps become `declined`, reviewed by `login`.
pub async fn decline(
    ci: &Services,
    repo_id: i64,
    row: &PipelineRow,
    login: String,
) -> Result<PipelineRow, Error> {
    not_blocked(row)?;
    let (id, number) = (row.pipeline.id, row.pipeline.number);
    let updated = ci
        .store
        .write(move |c| {
            let now = now_unix();
            for wf in pipelines::workflows(c, id)? {
                for s in &wf.children {
                    pipelines::update_step(c, s.id, |s| s.state = Status::Declined)?;
                }
                pipelines::update_workflow(c, wf.id, |w| {
                    w.state = Status::Declined;
                    w.finished = now;
                })?;
            }
            pipelines::update(c, id, |p| {
                p.status = Status::Declined;
                p.reviewed_by = login.clone();
                p.reviewed = now;
                p.finished = now;
            })?;
            pipelines::full(c, repo_id, number)
        })
        .await?;
    ci.queue.wake();
    Ok(updated)
}

/// Removes a pipeline that is not active, then its steps' log lines (a crash between the two
/// leaves lines the orphan sweep in `jobs` removes).
pub async fn delete(ci: &Services, row: &PipelineRow) -> Result<(), Error> {
    if status::is_active(row.pipeline.status) {
        return Err(Error::Unprocessable(format!(
            "cannot delete a pipeline that is {}",
            row.pipeline.status
        )));
    }
    let id = row.pipeline.id;
    let step_ids = ci.store.write(move |c| pipelines::delete(c, id)).await?;
    ci.logs
        .write(move |c| logs::delete_steps(c, &step_ids))
        .await?;
    Ok(())
}

/// Removes one step's log, once the step has ended (or never ran).
pub async fn delete_step_log(ci: &Services, step: &Step) -> Result<(), Error> {
    if !status::is_done(step.state) && step.state != Status::Blocked {
        return Err(Error::Unprocessable(format!(
            "cannot delete the log of a step that is {}",
            step.state
        )));
    }
    let id = step.id;
    ci.logs.write(move |c| logs::delete_steps(c, &[id])).await?;
    Ok(())
}

/// Removes every step's log of a pipeline that is not active.
pub async fn delete_logs(ci: &Services, row: &PipelineRow) -> Result<(), Error> {
    if status::is_active(row.pipeline.status) {
        return Err(Error::Unprocessable(format!(
            "cannot delete the logs of a pipeline that is {}",
            row.pipeline.status
        )));
    }
    let ids: Vec<i64> = row
        .pipeline
        .workflows
        .iter()
        .flatten()
        .flat_map(|w| w.children.iter().map(|s| s.id))
        .collect();
    ci.logs.write(move |c| logs::delete_steps(c, &ids)).await?;
    Ok(())
}
