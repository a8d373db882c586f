//! Commit statuses: each workflow's state, shown on the forge's commit as upstream does.
//!
//! The poster follows the pipeline feed (every recorded pipeline change) and, per changed
//! pipeline, posts the workflows whose state differs from what it posted last, named
//! `<status_context>/<event>/<workflow>` (`pr` for pull requests) and linking to the
//! workflow's page here. It acts as the repository's owner when they signed in through the
//! forge (else as the forge). Posting is off the pipeline's path: a slow or failing forge
//! only delays statuses; each post is retried with backoff, and one that keeps failing is
//! logged and counted (`woodlark_forge_status_failures_total`), never failing the pipeline.
//! Posts for one pipeline are made one at a time, from its state as read just before, so a
//! late `running` never lands after `success`.
//!
//! The poster follows the feed only while some stored forge can show statuses ([`Targets`]):
//! the feed rebuilds pipelines only for subscribers, so a server with only the built-in git
//! forge pays nothing for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, Semaphore, broadcast, watch};

use super::Services;
use super::forge::{CommitStatus, ForgeDriver, ForgeError, StatusState};
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::status::{self, Status};
use crate::store::pipelines::{self, Pipeline, Workflow};
use crate::store::repos::{self, RepoRow};

/// Pipelines whose statuses are being posted at once.
const PARALLEL: usize = 8;
/// Tries per status before it is given up.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long what was posted for a finished pipeline is remembered: the feed's messages for
/// the changes that ended it can still be on their way, and one read afresh would post the
/// end a second time.
const FINISHED_KEPT: Duration = Duration::from_secs(60);

/// How posting went, for `/metrics`.
#[derive(Default)]
pub struct StatusCounts {
    pub posted: AtomicU64,
    /// Given up after every retry.
    pub failed: AtomicU64,
}

/// What was last posted for each workflow of a pipeline.
type Posted = HashMap<i64, Status>;

/// Whether any stored forge is served by an adapter (the built-in git forge has nowhere to
/// show a status). Refreshed after every forge change.
pub struct Targets(watch::Sender<bool>);

impl Default for Targets {
    fn default() -> Targets {
        Targets(watch::Sender::new(false))
    }
}

impl Targets {
    /// Reads from the store whether a forge can show statuses now.
    pub async fn refresh(&self, store: &crate::store::Store) {
        match store
            .read(crate::store::forges::any_served_by_adapters)
            .await
        {
            Ok(any) => {
                self.0.send_replace(any);
            }
            Err(err) => tracing::warn!(error = %err, "forges not read; status poster unchanged"),
        }
    }
}

/// Posts statuses while this server leads its replicas and some forge can show them, until
/// the feed ends.
///
/// Only the leader posts ([`crate::store::Store::leadership`]; always this server on
/// SQLite): every replica follows the same feed, and two posting one pipeline could land
/// its states on the forge out of order. A new leader follows the feed from when it took
/// over; a pipeline that changed in the moment between has its statuses posted at its next
/// change.
pub async fn run(ci: Services) {
    ci.status_targets.refresh(&ci.store).await;
    if ci.store.is_shared() {
        tokio::spawn(refresh_after_other_replicas(ci.clone()));
    }
    let mut targets = ci.status_targets.0.subscribe();
    let mut leading = ci.store.leadership();
    loop {
        if leading.wait_for(|l| *l).await.is_err() || targets.wait_for(|any| *any).await.is_err() {
            return;
        }
        if !*leading.borrow_and_update() {
            continue;
        }
        if follow(&ci, &mut targets, &mut leading).await.is_none() {
            return;
        }
    }
}

/// Another replica may add or change forges: [`Targets`] is read again whenever the
/// identity tables (forges among them) change, until the store closes.
async fn refresh_after_other_replicas(ci: Services) {
    let mut commits = ci.store.commits();
    let mut seen = ci.store.identity_generation();
    while commits.changed().await.is_ok() {
        let now = ci.store.identity_generation();
        if now != seen {
            seen = now;
            ci.status_targets.refresh(&ci.store).await;
        }
    }
}

/// Follows the pipeline feed and posts statuses until no forge can show them or this
/// server no longer leads (`Some`), or the feed ends (`None`).
async fn follow(
    ci: &Services,
    targets: &mut watch::Receiver<bool>,
    leading: &mut watch::Receiver<bool>,
) -> Option<()> {
    let mut changes = ci.feed.subscribe();
    let posted: Arc<std::sync::Mutex<HashMap<i64, Arc<Mutex<Posted>>>>> = Arc::default();
    let slots = Arc::new(Semaphore::new(PARALLEL));
    loop {
        let received = tokio::select! {
            received = changes.recv() => received,
            changed = targets.changed() => {
                if changed.is_err() || !*targets.borrow_and_update() {
                    return Some(());
                }
                continue;
            }
            changed = leading.changed() => {
                if changed.is_err() || !*leading.borrow_and_update() {
                    tracing::info!("another replica leads now; it posts commit statuses");
                    return Some(());
                }
                continue;
            }
        };
        let message = match received {
            Ok(message) => message,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "commit statuses fell behind the pipeline feed; some states were not posted"
                );
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        let pipeline_id = message.pipeline_id;
        let state = posted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(pipeline_id)
            .or_default()
            .clone();
        let (ci, posted, slots) = (ci.clone(), posted.clone(), slots.clone());
        tokio::spawn(async move {
            let Ok(slot) = slots.acquire().await else {
                return;
            };
            let mut last = state.lock().await;
            let finished = post_pipeline(&ci, message.repo_id, pipeline_id, &mut last).await;
            drop(last);
            drop(slot);
            if finished {
                // Forgotten a while later (unless another entry took its place meanwhile).
                tokio::time::sleep(FINISHED_KEPT).await;
                let mut map = posted.lock().unwrap_or_else(|p| p.into_inner());
                if map
                    .get(&pipeline_id)
                    .is_some_and(|kept| Arc::ptr_eq(kept, &state))
                {
                    map.remove(&pipeline_id);
                }
            }
        });
    }
}

/// Posts the workflows of pipeline `pipeline_id` that changed since `last`; true when the
/// pipeline is over and every state of it was dealt with.
async fn post_pipeline(ci: &Services, repo_id: i64, pipeline_id: i64, last: &mut Posted) -> bool {
    // The repository's forge first: a change on the built-in git forge (most of them on a
    // server without plugin forges) costs one cached lookup, not a read of the pipeline.
    let Ok(repo) = ci.store.read(move |c| repos::by_id(c, repo_id)).await else {
        // Deleted meanwhile: nothing left to show.
        return true;
    };
    let forge = match ci.drivers.get(repo.repo.forge_id).await {
        Ok(forge) if !forge.kind().is_builtin() => forge,
        // The built-in git forge has nowhere to show a status; a forge without a driver now
        // is logged where its hooks fail.
        _ => return true,
    };
    let read = ci
        .store
        .read(move |c| {
            let pipeline = pipelines::by_id(c, pipeline_id)?.pipeline;
            let workflows = pipelines::workflows(c, pipeline_id)?;
            Ok((pipeline, workflows))
        })
        .await;
    let Ok((pipeline, workflows)) = read else {
        return true;
    };
    let over = status::is_done(pipeline.status);
    let changed: Vec<&Workflow> = workflows
        .iter()
        .filter(|w| last.get(&w.id) != Some(&w.state))
        .collect();
    if changed.is_empty() {
        return over;
    }
    let driver = ci.tokens.for_repo(&forge, &repo).await;
    for workflow in changed {
        let status = commit_status(ci, &repo, &pipeline, workflow);
        match post_with_retries(driver.as_ref(), &repo, &pipeline.commit.sha, &status).await {
            Ok(()) => {
                ci.status_counts.posted.fetch_add(1, Ordering::Relaxed);
            }
            Err(ForgeError::Unsupported(_)) => return true,
            Err(err) => {
                ci.status_counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    repo = repo.repo.full_name,
                    pipeline = pipeline.number,
                    context = status.context,
                    state = %workflow.state,
                    error = %err,
                    "commit status not posted"
                );
            }
        }
        last.insert(workflow.id, workflow.state);
    }
    over
}

/// Posts `status`, retrying failures with a growing pause.
async fn post_with_retries(
    driver: &dyn ForgeDriver,
    repo: &RepoRow,
    commit: &str,
    status: &CommitStatus,
) -> Result<(), ForgeError> {
    let mut pause = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        match driver.post_status(&repo.repo, commit, status).await {
            Ok(()) => return Ok(()),
            // Retrying helps neither an adapter without statuses nor a refused token.
            Err(err @ (ForgeError::Unsupported(_) | ForgeError::Refused(_))) => return Err(err),
            Err(err) if attempt >= ATTEMPTS => return Err(err),
            Err(err) => {
                tracing::debug!(repo = repo.repo.full_name, attempt, error = %err, "commit status failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_BACKOFF);
                attempt += 1;
            }
        }
    }
}

/// The status of one workflow as upstream shows it.
fn commit_status(
    ci: &Services,
    repo: &RepoRow,
    pipeline: &Pipeline,
    workflow: &Workflow,
) -> CommitStatus {
    let event = match pipeline.event {
        WebhookEvent::PullRequest => "pr",
        other => other.as_str(),
    };
    CommitStatus {
        state: status_state(workflow.state),
        context: format!(
            "{}/{event}/{}",
            ci.settings.pipeline.status_context, workflow.name
        ),
        description: description(workflow.state).to_string(),
        target_url: format!(
            "{}{}/repos/{}/pipeline/{}/{}",
            ci.settings.public_url.get(),
            ci.settings.web_root,
            repo.repo.id,
            pipeline.number,
            workflow.pid
        ),
        branch: pipeline.commit.branch.clone(),
        event: pipeline.event.as_str().to_string(),
        started: pipeline.started,
        finished: pipeline.finished,
    }
}

/// A pipeline state as the contract's status states name it (each adapter maps them to its
/// forge's, as upstream does).
fn status_state(state: Status) -> StatusState {
    match state {
        Status::Pending | Status::Blocked | Status::Created => StatusState::Pending,
        Status::Running => StatusState::Running,
        Status::Success | Status::Skipped => StatusState::Success,
        Status::Failure => StatusState::Failure,
        Status::Killed | Status::Canceled | Status::Declined => StatusState::Killed,
        _ => StatusState::Error,
    }
}

/// Upstream's description of a state.
fn description(state: Status) -> &'static str {
    match state {
        Status::Pending => "Pipeline is pending",
        Status::Running => "Pipeline is running",
        Status::Success => "Pipeline was successful",
        Status::Failure | Status::Error => "Pipeline failed",
        Status::Killed => "Pipeline was canceled",
        Status::Blocked => "Pipeline is pending approval",
        Status::Declined => "Pipeline was rejected",
        _ => "unknown status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_upstreams() {
        assert_eq!(description(Status::Success), "Pipeline was successful");
        assert_eq!(description(Status::Error), "Pipeline failed");
        assert_eq!(description(Status::Killed), "Pipeline was canceled");
        assert_eq!(description(Status::Blocked), "Pipeline is pending approval");
    }

    #[test]
    fn states_map_to_the_contracts() {
        assert_eq!(status_state(Status::Blocked), StatusState::Pending);
        assert_eq!(status_state(Status::Skipped), StatusState::Success);
        assert_eq!(status_state(Status::Declined), StatusState::Killed);
        assert_eq!(status_state(Status::Error), StatusState::Error);
    }
}
