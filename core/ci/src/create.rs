//! Making a pipeline: from a push, a manual run, a cron job or a restart.
//!
//! 1. `[skip ci]` in a push or pull-request message → nothing is created.
//! 2. The config files are read from the forge at the commit (or, for a restart, taken from
//!    the pipeline being restarted).
//! 3. The secrets in scope are opened, the metadata and `CI_*` variables completed and the
//!    configs compiled, with the pipeline number the repository's next write is expected to
//!    give (`numbers`); the write checks the number and compiles again if it was wrong.
//!    Compile errors give a pipeline with status `error` and `errors[]`; when every
//!    workflow is filtered out nothing is created; when the repository requires approval the
//!    pipeline is `blocked`; otherwise it is `pending` and its workflows are queued.
//!
//! Compiled workflows hold resolved secret values, so they are stored sealed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::forge::ForgeDriver;
use super::forge::drivers::ForgeHandle;
use super::numbers::Turn;
use super::queue::SEAL_PAYLOAD;
use super::{Error, Services};
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::registry;
use crate::pipeline::status::Status;
use crate::pipeline::types::{
    Commit, CompileInput, CompileResult, ConfigFile, Metadata, PipelineError, RegistryCredential,
    SecretValue,
};
use crate::store::forges::ForgeKind;
use crate::store::pipelines::{self, NewWorkflow, Pipeline, PipelineRow};
use crate::store::repos::RepoRow;
use crate::store::tasks::{self, Task, TaskState};
use crate::store::{StoreError, StoreResult, deliveries, forges, now_unix, registries, secrets};
use crate::store::{Tx, WriteTx};

/// What started a pipeline: an event about a commit, and what the run was asked for.
#[derive(Debug, Clone, Default)]
pub struct Trigger {
    pub event: WebhookEvent,
    pub event_reason: Vec<String>,
    pub commit: Commit,
    pub deploy_to: String,
    /// What a deployment is to do (a forge's deployment `task`, or a restart's
    /// `deploy_task`): `CI_PIPELINE_DEPLOY_TASK`.
    pub deploy_task: String,
    /// The forge's title of a pull request or release; empty: the message's first line.
    pub title: String,
    /// A pull request's labels (`CI_COMMIT_PULL_REQUEST_LABELS`).
    pub pr_labels: Vec<String>,
    /// A release marked as a pre-release (`CI_PIPELINE_RELEASE_PRE`).
    pub prerelease: bool,
    pub cron: String,
    pub variables: BTreeMap<String, String>,
    pub parent: i64,
    pub rerun_count: i64,
    /// Login of the user who asked (manual runs, restarts): a run a user with push access
    /// started, which never waits for approval.
    pub by_user: String,
    /// The pull request comes from another repository than its base (as the forge adapter
    /// read the signed delivery); kept by restarts.
    pub from_fork: bool,
    /// The forge login an authenticated forge delivery names as its sender, the identity
    /// `approval_allowed_users` is checked against. Empty when no forge vouches for one.
    pub verified_sender: String,
    /// The webhook delivery this came from: a redelivery or a replay makes no second
    /// pipeline.
    pub delivery: Delivery,
}

/// What a webhook delivery is known by. Both empty for anything else (manual runs, crons,
/// restarts, git's post-receive hook).
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    /// The forge's id of the delivery (`<header>:<value>`), kept across the forge's retries
    /// and "redeliver". Empty when there is none.
    pub id: String,
    /// SHA-256 of the delivery's body as the forge signed it. The id is outside the
    /// signature, so a captured delivery sent again under a new id (or none) is known by this.
    pub body_sha256: Option<[u8; 32]>,
}

impl Delivery {
    fn is_empty(&self) -> bool {
        self.id.is_empty() && self.body_sha256.is_none()
    }
}

/// What became of a trigger.
#[derive(Debug)]
pub enum Created {
    Pipeline(Box<Pipeline>),
    /// Every workflow was filtered out by `when`.
    Filtered,
    /// `[skip ci]` in the commit message.
    SkipCi,
    /// The commit has no pipeline config.
    NoConfig,
    /// The delivery's body made a pipeline before, since deleted: a replay makes no new one.
    Replayed,
}

/// Reads the config files at the trigger's commit and creates the pipeline.
pub async fn from_forge(ci: &Services, repo: &RepoRow, trigger: Trigger) -> Result<Created, Error> {
    // Known before asking the forge anything: no driver needed.
    if skips_ci(&trigger) {
        return Ok(Created::SkipCi);
    }
    let forge = ci.drivers.get(repo.repo.forge_id).await?;
    from_forge_at(ci, repo, &forge, trigger).await
}

/// [`from_forge`] for a forge already at hand (a plugin's hook).
pub async fn from_forge_at(
    ci: &Services,
    repo: &RepoRow,
    forge: &ForgeHandle,
    trigger: Trigger,
) -> Result<Created, Error> {
    let driver = ci.tokens.for_repo(forge, repo).await;
    with_driver(ci, repo, forge.kind(), driver.as_ref(), trigger).await
}

/// The pipeline of a cron job, at the head of its branch (the scheduler and
/// `POST …/cron/{id}` use it).
pub async fn from_cron(ci: &Services, cron: &crate::store::crons::Cron) -> Result<Created, Error> {
    let repo_id = cron.repo_id;
    let repo = ci
        .store
        .read(move |c| crate::store::repos::by_id(c, repo_id))
        .await?;
    let branch = if cron.branch.is_empty() {
        repo.repo.default_branch.clone()
    } else {
        cron.branch.clone()
    };
    let forge = ci.drivers.get(repo.repo.forge_id).await?;
    let head = ci
        .tokens
        .for_repo(&forge, &repo)
        .await
        .branch_head(&repo.repo, &branch)
        .await?;
    let trigger = Trigger {
        event: WebhookEvent::Cron,
        commit: Commit {
            git_ref: format!("refs/heads/{branch}"),
            branch,
            message: format!("cron task '{}'", cron.name),
            sender: "cron".into(),
            forge_url: repo.repo.forge_url.clone(),
            ..head
        },
        cron: cron.name.clone(),
        variables: cron.variables.clone(),
        ..Trigger::default()
    };
    from_forge_at(ci, &repo, &forge, trigger).await
}

/// `[skip ci]` in the message of a push or pull request.
fn skips_ci(trigger: &Trigger) -> bool {
    matches!(
        trigger.event,
        WebhookEvent::Push | WebhookEvent::PullRequest
    ) && crate::pipeline::skip_ci(&trigger.commit.message)
}

/// Creates the pipeline of a complete trigger with the config files `driver` finds at its
/// commit.
pub async fn with_driver(
    ci: &Services,
    repo: &RepoRow,
    forge_kind: ForgeKind,
    driver: &dyn ForgeDriver,
    trigger: Trigger,
) -> Result<Created, Error> {
    if skips_ci(&trigger) {
        return Ok(Created::SkipCi);
    }
    let files = driver.config_files(&repo.repo, &trigger.commit.sha).await?;
    with_config(ci, repo, forge_kind, trigger, files).await
}

/// Creates the pipeline of a complete trigger from config files read at its commit already
/// (a push hook reads them with the commit, in one trip to the forge).
pub async fn with_config(
    ci: &Services,
    repo: &RepoRow,
    forge_kind: ForgeKind,
    trigger: Trigger,
    files: Vec<ConfigFile>,
) -> Result<Created, Error> {
    if skips_ci(&trigger) {
        return Ok(Created::SkipCi);
    }
    if files.is_empty() {
        return Ok(Created::NoConfig);
    }
    create_for(ci, repo, forge_kind, trigger, files).await
}

/// The secrets and registry logins a repository's pipelines may use, opened: secrets, then
/// registries (repo > org > global by address).
async fn stored_sources(
    ci: &Services,
    repo: &RepoRow,
) -> Result<(Vec<SecretValue>, Vec<RegistryCredential>), Error> {
    let (org, id) = (repo.repo.org_id, repo.repo.id);
    // Two one-statement reads side by side (nothing ties the two lists to one snapshot).
    let (secret_rows, registry_rows) = tokio::try_join!(
        ci.store
            .read_one(move |c| secrets::for_pipeline(c, org, id)),
        ci.store
            .read_one(move |c| registries::for_pipeline(c, org, id)),
    )?;
    let mut secrets = Vec::with_capacity(secret_rows.len());
    for row in secret_rows {
        let value = ci
            .seal
            .open(secrets::SEAL_PURPOSE, &row.sealed_value)
            .map_err(|e| Error::Internal(format!("secret {}: {e}", row.secret.name)))?;
        secrets.push(SecretValue {
            name: row.secret.name,
            value: String::from_utf8_lossy(&value).into_owned(),
            events: row.secret.events,
            images: row.secret.images,
        });
    }
    let mut registries = Vec::with_capacity(registry_rows.len());
    for row in registry_rows {
        let password = ci
            .seal
            .open(registries::SEAL_PURPOSE, &row.sealed_password)
            .map_err(|e| Error::Internal(format!("registry {}: {e}", row.registry.address)))?;
        registries.push(RegistryCredential {
            address: row.registry.address,
            username: row.registry.username,
            password: String::from_utf8_lossy(&password).into_owned(),
        });
    }
    Ok((secrets, registries))
}

/// Gives each step the logins for its image's registry (API-configured first, else what a
/// registry-auth plugin returned for the image); their passwords are masked in logs.
fn attach_registries(
    workflows: &mut [crate::pipeline::types::CompiledWorkflow],
    creds: &[RegistryCredential],
    by_image: &[(String, RegistryCredential)],
) {
    for wf in workflows {
        for step in &mut wf.steps {
            let host = registry::registry_of(&step.image);
            let mut found: Vec<RegistryCredential> = creds
                .iter()
                .filter(|c| registry::normalize(&c.address) == host)
                .cloned()
                .collect();
            if found.is_empty() {
                found.extend(
                    by_image
                        .iter()
                        .filter(|(i, _)| *i == step.image)
                        .map(|(_, c)| c.clone()),
                );
            }
            for c in found {
                if !step.secrets.contains(&c.password) {
                    step.secrets.push(c.password.clone());
                }
                step.registries.push(c);
            }
        }
    }
}

/// Whether a pipeline must wait for approval: upstream's rule (`server/pipeline/gated.go`)
/// for the repository's `require_approval` mode and `approval_allowed_users`.
fn needs_approval(repo: &RepoRow, trigger: &Trigger) -> bool {
    approval_required(
        &repo.repo.require_approval,
        &repo.repo.approval_allowed_users,
        trigger,
    )
}

/// [`needs_approval`] on the repository's two settings.
fn approval_required(mode: &str, allowed_users: &[String], trigger: &Trigger) -> bool {
    // Started by the server (cron) or by a user with push access (manual runs, restarts).
    if matches!(trigger.event, WebhookEvent::Cron | WebhookEvent::Manual)
        || !trigger.by_user.is_empty()
    {
        return false;
    }
    // Only a login the forge vouches for counts: never the commit's author, which whoever
    // pushes writes as they like (the git forge's `sender` is just that).
    let sender = trigger.verified_sender.as_str();
    if !sender.is_empty() && allowed_users.iter().any(|u| u == sender) {
        return false;
    }
    let is_pr = trigger.event.is_pull_request();
    match mode {
        "none" => false,
        "forks" => is_pr && trigger.from_fork,
        "pull_requests" => is_pr,
        "all_events" => true,
        // A mode this server does not know (an old or hand-edited row): hold the run.
        _ => true,
    }
}

/// The `CI_*` variables upstream sets for a pipeline.
fn ci_env(
    url: &str,
    repo: &RepoRow,
    t: &Trigger,
    number: i64,
    forge_kind: ForgeKind,
    previous: Option<&Pipeline>,
) -> BTreeMap<String, String> {
    let r = &repo.repo;
    let c = &t.commit;
    let tag = c.git_ref.strip_prefix("refs/tags/").unwrap_or("");
    let (source, target) = pull_request_branches(t.event, &c.refspec);
    let pairs: Vec<(&str, String)> = vec![
        ("CI", "woodpecker".into()),
        ("CI_REPO", r.full_name.clone()),
        ("CI_REPO_OWNER", r.owner.clone()),
        ("CI_REPO_NAME", r.name.clone()),
        ("CI_REPO_REMOTE_ID", r.forge_remote_id.clone()),
        ("CI_REPO_URL", r.forge_url.clone()),
        ("CI_REPO_CLONE_URL", r.clone_url.clone()),
        ("CI_REPO_CLONE_SSH_URL", r.clone_url_ssh.clone()),
        ("CI_REPO_DEFAULT_BRANCH", r.default_branch.clone()),
        ("CI_REPO_PRIVATE", r.private.to_string()),
        ("CI_REPO_TRUSTED_NETWORK", r.trusted.network.to_string()),
        ("CI_REPO_TRUSTED_VOLUMES", r.trusted.volumes.to_string()),
        ("CI_REPO_TRUSTED_SECURITY", r.trusted.security.to_string()),
        ("CI_COMMIT_SHA", c.sha.clone()),
        ("CI_COMMIT_REF", c.git_ref.clone()),
        ("CI_COMMIT_REFSPEC", c.refspec.clone()),
        ("CI_COMMIT_BRANCH", c.branch.clone()),
        ("CI_COMMIT_SOURCE_BRANCH", source.to_string()),
        ("CI_COMMIT_TARGET_BRANCH", target.to_string()),
        ("CI_COMMIT_TAG", tag.to_string()),
        ("CI_COMMIT_MESSAGE", c.message.clone()),
        ("CI_COMMIT_AUTHOR", c.author.clone()),
        ("CI_COMMIT_AUTHOR_EMAIL", c.author_email.clone()),
        ("CI_COMMIT_AUTHOR_AVATAR", c.author_avatar.clone()),
        ("CI_PIPELINE_NUMBER", number.to_string()),
        ("CI_PIPELINE_PARENT", t.parent.to_string()),
        ("CI_PIPELINE_EVENT", t.event.as_str().to_string()),
        (
            "CI_PIPELINE_URL",
            format!("{url}/repos/{}/pipeline/{number}", r.id),
        ),
        ("CI_PIPELINE_FORGE_URL", c.forge_url.clone()),
        ("CI_PIPELINE_DEPLOY_TARGET", t.deploy_to.clone()),
        ("CI_PIPELINE_DEPLOY_TASK", t.deploy_task.clone()),
        ("CI_PIPELINE_CREATED", now_unix().to_string()),
        (
            "CI_PIPELINE_FILES",
            serde_json::to_string(&c.changed_files).unwrap_or_default(),
        ),
        ("CI_PIPELINE_AUTHOR", c.sender.clone()),
        ("CI_PIPELINE_CRON", t.cron.clone()),
        ("CI_SYSTEM_NAME", "woodlark".into()),
        ("CI_SYSTEM_URL", url.to_string()),
        ("CI_SYSTEM_VERSION", crate::version_string()),
        ("CI_SYSTEM_PLATFORM", platform()),
        ("CI_FORGE_TYPE", forge_kind.as_str().to_string()),
        ("CI_FORGE_URL", r.forge_url.clone()),
    ];
    let mut env: BTreeMap<String, String> =
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    // Set only when not empty, as upstream sets these.
    let mut set = |key: &str, value: String| {
        if !value.is_empty() {
            env.insert(key.to_string(), value);
        }
    };
    set("CI_SYSTEM_HOST", host_of(url).to_string());
    set(
        "CI_REPO_TRUSTED",
        (r.trusted.network && r.trusted.volumes && r.trusted.security).to_string(),
    );
    if c.timestamp != 0 {
        set("CI_COMMIT_TIMESTAMP", c.timestamp.to_string());
    }
    if t.event.is_pull_request() {
        set(
            "CI_COMMIT_PULL_REQUEST",
            pull_request_number(&c.git_ref).to_string(),
        );
        set("CI_COMMIT_PULL_REQUEST_LABELS", t.pr_labels.join(","));
    }
    set("CI_PIPELINE_EVENT_REASON", t.event_reason.join(","));
    if t.rerun_count > 0 {
        set("CI_PIPELINE_RERUNS", t.rerun_count.to_string());
    }
    if t.event == WebhookEvent::Release {
        set("CI_PIPELINE_RELEASE_TITLE", title_of(t));
        set("CI_PIPELINE_RELEASE_PRE", t.prerelease.to_string());
        // Upstream's older name for it.
        set("CI_COMMIT_PRERELEASE", t.prerelease.to_string());
    }
    if let Some(prev) = previous {
        for (key, value) in previous_env(url, r.id, prev) {
            set(key, value);
        }
    }
    env
}

/// A pipeline's title: the forge's (a pull request's, a release's), or else its message's
/// first line.
fn title_of(t: &Trigger) -> String {
    if t.title.is_empty() {
        t.commit.message.lines().next().unwrap_or("").to_string()
    } else {
        t.title.clone()
    }
}

/// The tag a tag or release pipeline is about (upstream's `tag_title`).
fn tag_of(t: &Trigger) -> &str {
    match t.event {
        WebhookEvent::Tag | WebhookEvent::Release => {
            t.commit.git_ref.strip_prefix("refs/tags/").unwrap_or("")
        }
        _ => "",
    }
}

/// The `CI_PREV_*` variables: what the previous pipeline of the branch was (upstream's
/// names and values; `CI_PREV_COMMIT_URL` is its forge URL, as upstream has it).
fn previous_env(url: &str, repo_id: i64, p: &Pipeline) -> Vec<(&'static str, String)> {
    let c = &p.commit;
    let (source, target) = pull_request_branches(p.event, &c.refspec);
    let nonzero = |n: i64| if n == 0 { String::new() } else { n.to_string() };
    vec![
        ("CI_PREV_PIPELINE_NUMBER", p.number.to_string()),
        ("CI_PREV_PIPELINE_PARENT", nonzero(p.parent)),
        ("CI_PREV_PIPELINE_EVENT", p.event.as_str().to_string()),
        ("CI_PREV_PIPELINE_EVENT_REASON", p.event_reason.join(",")),
        (
            "CI_PREV_PIPELINE_URL",
            format!("{url}/repos/{repo_id}/pipeline/{}", p.number),
        ),
        ("CI_PREV_PIPELINE_FORGE_URL", c.forge_url.clone()),
        ("CI_PREV_COMMIT_URL", c.forge_url.clone()),
        ("CI_PREV_PIPELINE_DEPLOY_TARGET", p.deploy_to.clone()),
        ("CI_PREV_PIPELINE_DEPLOY_TASK", p.deploy_task.clone()),
        ("CI_PREV_PIPELINE_STATUS", p.status.as_str().to_string()),
        ("CI_PREV_PIPELINE_CREATED", nonzero(p.created)),
        ("CI_PREV_PIPELINE_STARTED", nonzero(p.started)),
        ("CI_PREV_PIPELINE_FINISHED", nonzero(p.finished)),
        ("CI_PREV_PIPELINE_AUTHOR", c.author.clone()),
        ("CI_PREV_PIPELINE_AVATAR", c.author_avatar.clone()),
        ("CI_PREV_COMMIT_AUTHOR_AVATAR", c.author_avatar.clone()),
        ("CI_PREV_COMMIT_SHA", c.sha.clone()),
        ("CI_PREV_COMMIT_REF", c.git_ref.clone()),
        ("CI_PREV_COMMIT_REFSPEC", c.refspec.clone()),
        ("CI_PREV_COMMIT_MESSAGE", c.message.clone()),
        ("CI_PREV_COMMIT_BRANCH", c.branch.clone()),
        ("CI_PREV_COMMIT_TIMESTAMP", nonzero(c.timestamp)),
        ("CI_PREV_COMMIT_AUTHOR", c.author.clone()),
        ("CI_PREV_COMMIT_AUTHOR_EMAIL", c.author_email.clone()),
        ("CI_PREV_COMMIT_SOURCE_BRANCH", source.to_string()),
        ("CI_PREV_COMMIT_TARGET_BRANCH", target.to_string()),
    ]
}

/// A pull request's source and target branches, from its `source:target` refspec (both
/// empty for other events, or unless the refspec has exactly those two parts).
fn pull_request_branches(event: WebhookEvent, refspec: &str) -> (&str, &str) {
    if !event.is_pull_request() {
        return ("", "");
    }
    match refspec.split(':').collect::<Vec<_>>()[..] {
        [source, target] => (source, target),
        _ => ("", ""),
    }
}

/// A pull request's number: the first run of digits in its ref (`refs/pull/7/head`,
/// `refs/merge-requests/7/head`), as upstream reads it.
fn pull_request_number(git_ref: &str) -> &str {
    let Some(start) = git_ref.find(|c: char| c.is_ascii_digit()) else {
        return "";
    };
    let rest = &git_ref[start..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The host (and port) of the server's public URL: `CI_SYSTEM_HOST`.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or("")
}

/// This machine's platform in upstream's `os/arch` form.
pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// Creates the pipeline from `files` (compiling inside the write transaction).
pub async fn create(
    ci: &Services,
    repo: &RepoRow,
    trigger: Trigger,
    files: Vec<ConfigFile>,
) -> Result<Created, Error> {
    let forge_id = repo.repo.forge_id;
    let forge_kind = ci
        .store
        .read(move |c| forges::by_id(c, forge_id))
        .await?
        .forge
        .kind;
    create_for(ci, repo, forge_kind, trigger, files).await
}

/// [`create`] on a forge of kind `forge_kind`.
async fn create_for(
    ci: &Services,
    repo: &RepoRow,
    forge_kind: ForgeKind,
    trigger: Trigger,
    files: Vec<ConfigFile>,
) -> Result<Created, Error> {
    let repo_id = repo.repo.id;
    let branch = trigger.commit.branch.clone();
    // The previous pipeline (`CI_PREV_*`) is read beside the stored sources, not after them.
    let previous = async {
        ci.store
            .read_one(move |c| pipelines::newest_of_branch(c, repo_id, &branch))
            .await
            .map_err(Error::from)
    };
    let ((secrets, registries), previous) = tokio::try_join!(stored_sources(ci, repo), previous)?;
    let mut sources = Sources {
        secrets,
        registries,
        ..Sources::default()
    };
    plugin_secrets(ci, repo, trigger.event, &mut sources).await;
    let approval = needs_approval(repo, &trigger);
    let mut inputs = Inputs {
        repo: repo.clone(),
        trigger,
        files,
        sources,
        approval,
        forge_kind,
        previous,
    };
    // Compiled here, with the number the book expects, so the writer only checks it (see
    // `numbers`); the turn lasts until the write is queued.
    let mut turn = ci.numbers.turn(repo_id).await;
    let mut number = expected_number(ci, &turn, repo_id).await?;
    let mut compiled = compile(ci, &inputs, number);
    if !ci.settings.pipeline.registry_auth.is_empty() && inputs.sources.failures.is_empty() {
        // Registry-auth plugins are asked about the compiled steps' images (a number changes
        // no image) outside the turn, so a slow plugin holds up no other creation of the
        // repository; compiled again only if one took the number meanwhile or a plugin
        // failed.
        drop(turn);
        plugin_registries(ci, repo, images_of(&compiled), &mut inputs.sources).await;
        turn = ci.numbers.turn(repo_id).await;
        let now = expected_number(ci, &turn, repo_id).await?;
        if now != number || !inputs.sources.failures.is_empty() {
            number = now;
            compiled = compile(ci, &inputs, number);
        }
    }
    let inputs = Arc::new(inputs);
    // On a database other replicas share, their creations take numbers this server's book
    // does not know of: a write that finds its number taken gives it back (a few times)
    // and the config is compiled again here, not on the writer thread under the
    // repository's row lock, which the other replicas' writes wait for.
    let mut give_backs = if ci.store.is_shared() { GIVE_BACKS } else { 0 };
    let outcome = loop {
        let prepared = seal_compiled(ci, &inputs, number, compiled)?;
        let next = prepared.next_number();
        let (ci2, inputs2) = (ci.clone(), inputs.clone());
        let give_back = give_backs > 0;
        let written = ci
            .store
            .submit(move |c| create_in(c, &ci2, &inputs2, prepared, give_back));
        turn.set_next(next);
        drop(turn);
        let written = written.await;
        let actual_next = written.as_ref().ok().map(|(_, next)| *next);
        ci.numbers.settle(repo_id, next, actual_next).await;
        match written? {
            (Some(outcome), _) => break outcome,
            (None, _) => {
                give_backs -= 1;
                ci.numbers.gave_back();
                turn = ci.numbers.turn(repo_id).await;
                number = expected_number(ci, &turn, repo_id).await?;
                compiled = compile(ci, &inputs, number);
            }
        }
    };
    if let Created::Pipeline(p) = &outcome {
        tracing::info!(
            pipeline = p.id,
            number = p.number,
            status = %p.status,
            "pipeline created"
        );
        if repo_auto_cancels(repo, p.event) {
            supersede_older(ci, repo_id, p).await;
        }
        ci.queue.wake();
    }
    Ok(outcome)
}

fn repo_auto_cancels(repo: &RepoRow, event: WebhookEvent) -> bool {
    repo.repo
        .cancel_previous_pipeline_events
        .iter()
        .any(|e| e == event.as_str())
}

/// Cancels the older active pipelines of the same branch (push) or ref (other events) that
/// `newer` supersedes (`cancel_previous_pipeline_events`).
async fn supersede_older(ci: &Services, repo_id: i64, newer: &Pipeline) {
    let newer_row = newer.clone();
    let older = ci
        .store
        .read(move |c| pipelines::superseded_by(c, repo_id, &newer_row))
        .await
        .unwrap_or_else(|err| {
            tracing::warn!(repo = repo_id, error = %err, "cannot list the pipelines to supersede");
            Vec::new()
        });
    for id in older {
        match ci.queue.cancel(id, "").await {
            Ok(_) => {
                let superseded_by = newer.id;
                let _ = ci
                    .store
                    .write(move |c| {
                        pipelines::update(c, id, |p| {
                            if let Some(info) = &mut p.cancel_info {
                                info.superseded_by = superseded_by;
                            }
                        })
                    })
                    .await;
                tracing::info!(
                    pipeline = id,
                    superseded_by = newer.id,
                    "older pipeline canceled"
                );
            }
            Err(err) => tracing::debug!(pipeline = id, error = %err, "could not supersede"),
        }
    }
}

/// What a run receives from outside its config: secrets and registry logins, and why a
/// plugin source failed, if one did.
#[derive(Default)]
pub struct Sources {
    pub secrets: Vec<SecretValue>,
    pub registries: Vec<RegistryCredential>,
    /// Logins from registry-auth plugins, by image.
    pub plugin_registries: Vec<(String, RegistryCredential)>,
    pub failures: Vec<String>,
}

/// The run's metadata: what `when` filters and `CI_*` variables are computed from.
/// What the repository is trusted with, for the compiler.
fn trust_of(repo: &RepoRow) -> crate::pipeline::types::Trust {
    let t = &repo.repo.trusted;
    crate::pipeline::types::Trust {
        security: t.security,
        volumes: t.volumes,
        network: t.network,
    }
}

/// What the compiler is told about a run of `repo`, on a server whose pages are at `url`
/// (also what `woodlark exec` tells it about the local checkout).
pub fn metadata(
    url: &str,
    repo: &RepoRow,
    t: &Trigger,
    number: i64,
    forge_kind: ForgeKind,
    previous: Option<&Pipeline>,
) -> Metadata {
    Metadata {
        event: t.event,
        commit: t.commit.clone(),
        repo: repo.repo.full_name.clone(),
        repo_clone_url: repo.repo.clone_url.clone(),
        default_branch: repo.repo.default_branch.clone(),
        cron: t.cron.clone(),
        deploy_to: t.deploy_to.clone(),
        pipeline_number: number,
        platform: platform(),
        variables: t.variables.clone(),
        env: ci_env(url, repo, t, number, forge_kind, previous),
    }
}

/// Adds the secrets of `[pipeline] secret_backends`, in order, after the built-in store's:
/// a name already known is not replaced. A failing backend is recorded, never skipped.
async fn plugin_secrets(ci: &Services, repo: &RepoRow, event: WebhookEvent, sources: &mut Sources) {
    for backend in &ci.settings.pipeline.secret_backends {
        let scope = woodlark_plugin_host::SecretScope {
            org: repo.repo.owner.clone(),
            repo: repo.repo.full_name.clone(),
            event: event.to_string(),
        };
        match ci.plugins.list_secrets(backend, scope).await {
            Ok(list) => {
                for s in list {
                    if !sources
                        .secrets
                        .iter()
                        .any(|have| have.name.eq_ignore_ascii_case(&s.name))
                    {
                        sources.secrets.push(SecretValue {
                            name: s.name,
                            value: s.value,
                            events: s.events,
                            images: s.images,
                        });
                    }
                }
            }
            Err(err) => {
                tracing::warn!(backend, repo = repo.repo.full_name, error = %err, "secret backend failed");
                sources
                    .failures
                    .push(format!("secret backend {backend:?} failed: {err}"));
            }
        }
    }
}

/// Asks `[pipeline] registry_auth` plugins for the images no API-configured registry covers.
async fn plugin_registries(
    ci: &Services,
    repo: &RepoRow,
    images: Vec<String>,
    sources: &mut Sources,
) {
    for image in images {
        let host = registry::registry_of(&image);
        if sources
            .registries
            .iter()
            .any(|c| registry::normalize(&c.address) == host)
        {
            continue;
        }
        for plugin in &ci.settings.pipeline.registry_auth {
            match ci
                .plugins
                .credential_for(plugin, &image, &repo.repo.full_name)
                .await
            {
                Ok(Some(c)) => {
                    sources.plugin_registries.push((
                        image.clone(),
                        RegistryCredential {
                            address: c.address,
                            username: c.username,
                            password: c.password,
                        },
                    ));
                    break;
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(plugin, image, error = %err, "registry auth failed");
                    sources.failures.push(format!(
                        "registry auth {plugin:?} failed for {image}: {err}"
                    ));
                    break;
                }
            }
        }
    }
}

/// What a pipeline is compiled from, its sources opened.
struct Inputs {
    repo: RepoRow,
    trigger: Trigger,
    files: Vec<ConfigFile>,
    sources: Sources,
    /// The repository requires approval for this trigger.
    approval: bool,
    forge_kind: ForgeKind,
    /// The newest pipeline of the trigger's branch before this one (`CI_PREV_*`).
    previous: Option<Pipeline>,
}

/// A trigger compiled for pipeline `number`, ready to store.
struct Prepared {
    number: i64,
    /// Workflows with their registry logins attached.
    result: CompileResult,
    /// The workflows as stored: compiled payloads sealed.
    new_workflows: Vec<NewWorkflow>,
    has_errors: bool,
}

impl Prepared {
    /// False when every workflow was filtered out: nothing is stored, no number is used.
    fn stores_pipeline(&self) -> bool {
        self.has_errors || !self.result.workflows.is_empty()
    }

    /// The repository's next number once this is stored.
    fn next_number(&self) -> i64 {
        self.number + i64::from(self.stores_pipeline())
    }
}

/// The number the repository's next pipeline is expected to get, in `turn`.
async fn expected_number(ci: &Services, turn: &Turn<'_>, repo_id: i64) -> Result<i64, Error> {
    Ok(match turn.expected() {
        Some(number) => number,
        None => {
            ci.store
                .read_one(move |c| pipelines::next_number(c, repo_id))
                .await?
        }
    })
}

/// The images the compiled steps run, each once.
fn images_of(compiled: &CompileResult) -> Vec<String> {
    let mut images: Vec<String> = compiled
        .workflows
        .iter()
        .flat_map(|w| w.steps.iter().map(|s| s.image.clone()))
        .collect();
    images.sort();
    images.dedup();
    images
}

/// Compiles and seals the config for pipeline `number` (no I/O: runs inside the write when
/// the number it was compiled for before turns out wrong).
fn prepare(ci: &Services, inputs: &Inputs, number: i64) -> StoreResult<Prepared> {
    seal_compiled(ci, inputs, number, compile(ci, inputs, number))
}

/// Compiles the config for pipeline `number`; a failed secret or registry source instead
/// gives only its errors.
fn compile(ci: &Services, inputs: &Inputs, number: i64) -> CompileResult {
    let Inputs {
        repo,
        trigger: t,
        files,
        sources,
        forge_kind,
        previous,
        ..
    } = inputs;
    if sources.failures.is_empty() {
        let mut result = crate::pipeline::compile(&CompileInput {
            files: files.to_vec(),
            meta: metadata(
                &ci.settings.public_url.get(),
                repo,
                t,
                number,
                *forge_kind,
                previous.as_ref(),
            ),
            secrets: sources.secrets.clone(),
            trust: trust_of(repo),
            privileged_plugins: ci.settings.pipeline.privileged_plugins.clone(),
        });
        // Upstream's linter advice (an event filter missing, deprecated keys): warnings.
        result
            .errors
            .extend(crate::pipeline::advice::advise_files(files));
        result
    } else {
        // A secret or registry source failed: the pipeline cannot run safely without it.
        CompileResult {
            workflows: Vec::new(),
            errors: sources
                .failures
                .iter()
                .map(|m| PipelineError {
                    kind: "generic".into(),
                    message: m.clone(),
                    is_warning: false,
                    data: serde_json::Value::Null,
                })
                .collect(),
        }
    }
}

/// Gives the compiled workflows their registry logins and seals them for the store.
fn seal_compiled(
    ci: &Services,
    inputs: &Inputs,
    number: i64,
    mut result: CompileResult,
) -> StoreResult<Prepared> {
    let Inputs {
        sources, approval, ..
    } = inputs;
    let approval = *approval;
    attach_registries(
        &mut result.workflows,
        &sources.registries,
        &sources.plugin_registries,
    );
    let has_errors = result.errors.iter().any(|e| !e.is_warning);
    let mut new_workflows = Vec::new();
    if !has_errors {
        for wf in &result.workflows {
            let payload = serde_json::to_vec(wf)?;
            new_workflows.push(NewWorkflow {
                name: wf.name.clone(),
                state: if approval {
                    Status::Blocked
                } else {
                    Status::Pending
                },
                environ: wf.environ.clone(),
                sealed_payload: ci.seal.seal(SEAL_PAYLOAD, &payload),
                steps: wf
                    .steps
                    .iter()
                    .map(|s| {
                        let kind = serde_json::to_value(s.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_else(|| "commands".into());
                        (s.name.clone(), kind)
                    })
                    .collect(),
            });
        }
    }
    Ok(Prepared {
        number,
        result,
        new_workflows,
        has_errors,
    })
}

/// How often a creation on a shared database gives back a number another replica took
/// before its write compiles again itself (so a creation always ends).
const GIVE_BACKS: u32 = 3;

/// The write: stores `prepared` if it was compiled for the number the repository's next
/// pipeline gets, else compiles again for that number first, or, with `give_back`, stores
/// nothing and answers `None` with that number. Returns what was created and the
/// repository's next number after it.
fn create_in(
    c: &WriteTx,
    ci: &Services,
    inputs: &Inputs,
    prepared: Prepared,
    give_back: bool,
) -> StoreResult<(Option<Created>, i64)> {
    let Inputs {
        repo,
        trigger: t,
        files,
        approval,
        ..
    } = inputs;
    let number = pipelines::take_next_number(c, repo.repo.id)?;
    // Checked again here, in the write: two copies arriving together make one pipeline.
    if let Some(before) = delivered_in(c, repo.repo.id, &t.delivery)? {
        return Ok((Some(before), number));
    }
    let prepared = if prepared.number == number {
        prepared
    } else if give_back {
        return Ok((None, number));
    } else {
        ci.numbers.missed();
        prepare(ci, inputs, number)?
    };
    let next = prepared.next_number();
    if !prepared.stores_pipeline() {
        return Ok((Some(Created::Filtered), next));
    }
    let Prepared {
        result,
        new_workflows,
        has_errors,
        ..
    } = prepared;
    let status = if has_errors {
        Status::Error
    } else if *approval {
        Status::Blocked
    } else {
        Status::Pending
    };
    let now = now_unix();
    let pipeline = Pipeline {
        parent: t.parent,
        event: t.event,
        event_reason: t.event_reason.clone(),
        status,
        errors: result.errors.clone(),
        finished: if has_errors { now } else { 0 },
        started: if has_errors { now } else { 0 },
        deploy_to: t.deploy_to.clone(),
        deploy_task: t.deploy_task.clone(),
        commit: t.commit.clone(),
        rerun_count: t.rerun_count,
        variables: t.variables.clone(),
        cron: t.cron.clone(),
        from_fork: t.from_fork,
        title: title_of(t),
        pr_labels: t.pr_labels.clone(),
        tag_title: tag_of(t).to_string(),
        is_prerelease: t.prerelease,
        version: crate::version_string(),
        ..Pipeline::default()
    };
    let row = pipelines::create(c, repo.repo.id, number, &pipeline, &new_workflows, files)?;
    if !t.delivery.id.is_empty() {
        deliveries::record(c, repo.repo.id, &t.delivery.id, row.pipeline.id)?;
    }
    if let Some(body) = &t.delivery.body_sha256 {
        deliveries::record_body(c, repo.repo.id, body, row.pipeline.id)?;
    }
    if status == Status::Pending {
        enqueue(c, &row, &result.workflows, repo)?;
    }
    Ok((Some(Created::Pipeline(Box::new(row.pipeline))), next))
}

/// What `delivery` made for `repo_id` before, if it came before: the pipeline, or
/// [`Created::Replayed`] when its body made one that is deleted since (a body is never run
/// twice). A known id whose pipeline is gone lets it run again (a "redeliver" after a
/// delete), as before bodies were known.
fn delivered_in(c: &Tx, repo_id: i64, delivery: &Delivery) -> StoreResult<Option<Created>> {
    let existing = |id: i64| match pipelines::by_id(c, id) {
        Ok(row) => Ok(Some(row.pipeline)),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(e),
    };
    if let Some(body) = &delivery.body_sha256
        && let Some(id) = deliveries::pipeline_of_body(c, repo_id, body)?
    {
        return Ok(Some(match existing(id)? {
            Some(p) => Created::Pipeline(Box::new(p)),
            None => Created::Replayed,
        }));
    }
    if delivery.id.is_empty() {
        return Ok(None);
    }
    match deliveries::pipeline_of(c, repo_id, &delivery.id)? {
        Some(id) => Ok(existing(id)?.map(|p| Created::Pipeline(Box::new(p)))),
        None => Ok(None),
    }
}

/// [`delivered_in`] as a read, before any work is done for a delivery.
pub async fn delivered(
    ci: &Services,
    repo_id: i64,
    delivery: &Delivery,
) -> Result<Option<Created>, Error> {
    if delivery.is_empty() {
        return Ok(None);
    }
    let delivery = delivery.clone();
    Ok(ci
        .store
        .read(move |c| delivered_in(c, repo_id, &delivery))
        .await?)
}

/// Puts a pipeline's workflows in the queue (all of them `pending` or `waiting`).
pub fn enqueue(
    c: &WriteTx,
    row: &PipelineRow,
    compiled: &[crate::pipeline::types::CompiledWorkflow],
    repo: &RepoRow,
) -> StoreResult<()> {
    let wfs = row.pipeline.workflows.clone().unwrap_or_default();
    let id_of: BTreeMap<&str, Vec<i64>> = wfs.iter().fold(BTreeMap::new(), |mut m, w| {
        m.entry(w.name.as_str()).or_default().push(w.id);
        m
    });
    for (wf, comp) in wfs.iter().zip(compiled) {
        let deps: Vec<i64> = comp
            .depends_on
            .iter()
            .flat_map(|d| id_of.get(d.as_str()).cloned().unwrap_or_default())
            .collect();
        let mut labels = comp.labels.clone();
        labels.insert("repo".into(), repo.repo.full_name.clone());
        labels.insert("org-id".into(), repo.repo.org_id.to_string());
        tasks::insert(
            c,
            &Task {
                id: wf.id,
                pipeline_id: row.pipeline.id,
                repo_id: repo.repo.id,
                state: if deps.is_empty() {
                    TaskState::Pending
                } else {
                    TaskState::Waiting
                },
                labels,
                dependencies: deps,
                run_on: if comp.runs_on.is_empty() {
                    vec!["success".into()]
                } else {
                    comp.runs_on.clone()
                },
                agent_id: 0,
                lease_until: 0,
                created: now_unix(),
                concurrency_limit: comp.concurrency.as_ref().map_or(0, |c| i64::from(c.limit)),
                concurrency_group: concurrency_group(repo.repo.id, comp),
            },
        )?;
    }
    Ok(())
}

/// The queue's concurrency group of a workflow, as upstream names them: the workflow's own
/// (`<repo>/<name>/`) or the named group of its repository (`<repo>//<group>`); empty
/// without a limit.
fn concurrency_group(repo_id: i64, workflow: &crate::pipeline::types::CompiledWorkflow) -> String {
    match &workflow.concurrency {
        None => String::new(),
        Some(c) if c.group.is_empty() => format!("{repo_id}/{}/", workflow.name),
        Some(c) => format!("{repo_id}//{}", c.group),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(event: WebhookEvent, from_fork: bool, verified_sender: &str) -> Trigger {
        Trigger {
            event,
            from_fork,
            verified_sender: verified_sender.into(),
            commit: Commit {
                // The commit's author claims to be an allowed user: it must not matter.
                author: "maintainer".into(),
                sender: "maintainer".into(),
                ..Commit::default()
            },
            ..Trigger::default()
        }
    }

    #[test]
    fn approval_follows_the_mode() {
        use WebhookEvent::*;
        let fork_pr = trigger(PullRequest, true, "stranger");
        let own_pr = trigger(PullRequest, false, "stranger");
        let fork_edit = trigger(PullRequestMetadata, true, "stranger");
        let push = trigger(Push, false, "");
        let tag = trigger(Tag, false, "stranger");
        let deploy = trigger(Deployment, false, "stranger");
        let cases: &[(&str, &Trigger, bool)] = &[
            ("none", &fork_pr, false),
            ("none", &push, false),
            ("forks", &fork_pr, true),
            ("forks", &fork_edit, true),
            ("forks", &own_pr, false),
            ("forks", &push, false),
            ("pull_requests", &fork_pr, true),
            ("pull_requests", &own_pr, true),
            ("pull_requests", &push, false),
            ("all_events", &push, true),
            ("all_events", &tag, true),
            ("all_events", &deploy, true),
            ("all_events", &own_pr, true),
            // Unknown modes fail closed.
            ("", &push, true),
            ("sometimes", &own_pr, true),
            ("Forks", &push, true),
        ];
        for (mode, t, want) in cases {
            assert_eq!(
                approval_required(mode, &[], t),
                *want,
                "{mode} {:?} fork={}",
                t.event,
                t.from_fork
            );
        }
    }

    #[test]
    fn cron_manual_runs_and_restarts_never_wait() {
        for event in [WebhookEvent::Cron, WebhookEvent::Manual] {
            assert!(!approval_required(
                "all_events",
                &[],
                &trigger(event, false, "")
            ));
            assert!(!approval_required("bogus", &[], &trigger(event, false, "")));
        }
        let restart = Trigger {
            by_user: "alice".into(),
            ..trigger(WebhookEvent::PullRequest, true, "")
        };
        assert!(!approval_required("all_events", &[], &restart));
    }

    #[test]
    fn allowed_users_are_matched_on_the_forge_verified_sender_only() {
        let allowed = vec!["maintainer".to_string()];
        let by_maintainer = trigger(WebhookEvent::PullRequest, true, "maintainer");
        assert!(!approval_required("forks", &allowed, &by_maintainer));
        assert!(!approval_required("all_events", &allowed, &by_maintainer));
        // The commit says "maintainer", the forge says "stranger".
        let by_stranger = trigger(WebhookEvent::PullRequest, true, "stranger");
        assert!(approval_required("forks", &allowed, &by_stranger));
        // A git push: no forge-verified sender, whatever the commit's author claims.
        let push = trigger(WebhookEvent::Push, false, "");
        assert!(approval_required("all_events", &allowed, &push));
        // An empty entry allows nobody.
        assert!(approval_required("all_events", &[String::new()], &push));
    }

    #[test]
    fn pull_request_variables_come_from_the_ref_and_refspec() {
        assert_eq!(pull_request_number("refs/pull/17/head"), "17");
        assert_eq!(pull_request_number("refs/merge-requests/3/head"), "3");
        assert_eq!(pull_request_number("refs/heads/main"), "");
        let pr = WebhookEvent::PullRequest;
        assert_eq!(
            pull_request_branches(pr, "feature:main"),
            ("feature", "main")
        );
        assert_eq!(pull_request_branches(pr, "feature"), ("", ""));
        assert_eq!(pull_request_branches(pr, "a:b:c"), ("", ""));
        assert_eq!(pull_request_branches(WebhookEvent::Push, "a:b"), ("", ""));
        assert_eq!(
            host_of("https://ci.example.com:8443/sub"),
            "ci.example.com:8443"
        );
        assert_eq!(host_of("http://127.0.0.1:8000"), "127.0.0.1:8000");
        assert_eq!(host_of(""), "");
    }

    #[test]
    fn the_previous_pipeline_is_described_as_upstream_does() {
        let prev = Pipeline {
            number: 4,
            event: WebhookEvent::PullRequest,
            status: Status::Failure,
            created: 100,
            commit: Commit {
                sha: "abc".into(),
                refspec: "fix:main".into(),
                author: "ann".into(),
                forge_url: "https://forge/pr/4".into(),
                ..Commit::default()
            },
            ..Pipeline::default()
        };
        let env: BTreeMap<_, _> = previous_env("https://ci", 9, &prev).into_iter().collect();
        assert_eq!(env["CI_PREV_PIPELINE_NUMBER"], "4");
        assert_eq!(env["CI_PREV_PIPELINE_STATUS"], "failure");
        assert_eq!(env["CI_PREV_PIPELINE_EVENT"], "pull_request");
        assert_eq!(env["CI_PREV_PIPELINE_URL"], "https://ci/repos/9/pipeline/4");
        assert_eq!(env["CI_PREV_COMMIT_URL"], "https://forge/pr/4");
        assert_eq!(env["CI_PREV_COMMIT_SOURCE_BRANCH"], "fix");
        assert_eq!(env["CI_PREV_COMMIT_TARGET_BRANCH"], "main");
        assert_eq!(env["CI_PREV_PIPELINE_CREATED"], "100");
        // Zero times are empty, so they are not set.
        assert_eq!(env["CI_PREV_PIPELINE_FINISHED"], "");
    }

    fn env_of(t: &Trigger, previous: Option<&Pipeline>) -> BTreeMap<String, String> {
        let remote = crate::forge::RemoteRepo {
            forge_remote_id: "9".into(),
            owner: "o".into(),
            name: "app".into(),
            clone_url: String::new(),
            forge_url: String::new(),
            default_branch: "main".into(),
            private: false,
            avatar_url: String::new(),
        };
        let repo = RepoRow {
            repo: remote.new_repo(1, 1),
            user_id: 1,
            hash: String::new(),
        };
        ci_env(
            "https://ci.example.com",
            &repo,
            t,
            5,
            ForgeKind::Git,
            previous,
        )
    }

    #[test]
    fn a_pull_request_and_a_release_are_described_as_upstream_does() {
        let pr = Trigger {
            event: WebhookEvent::PullRequest,
            title: "Fix the thing".into(),
            pr_labels: vec!["bug".into(), "docs".into()],
            commit: Commit {
                git_ref: "refs/pull/7/head".into(),
                refspec: "fix:main".into(),
                message: "first line\nmore".into(),
                timestamp: 1700000000,
                ..Commit::default()
            },
            ..Trigger::default()
        };
        let env = env_of(&pr, None);
        assert_eq!(env["CI_COMMIT_PULL_REQUEST"], "7");
        assert_eq!(env["CI_COMMIT_PULL_REQUEST_LABELS"], "bug,docs");
        assert_eq!(env["CI_COMMIT_SOURCE_BRANCH"], "fix");
        assert_eq!(env["CI_COMMIT_TARGET_BRANCH"], "main");
        assert_eq!(env["CI_COMMIT_TIMESTAMP"], "1700000000");
        assert_eq!(env["CI_SYSTEM_HOST"], "ci.example.com");
        assert!(!env.contains_key("CI_PIPELINE_RELEASE_TITLE"));
        assert!(!env.contains_key("CI_PREV_PIPELINE_NUMBER"));
        assert_eq!(title_of(&pr), "Fix the thing");

        let release = Trigger {
            event: WebhookEvent::Release,
            title: "Version 2".into(),
            prerelease: true,
            commit: Commit {
                git_ref: "refs/tags/v2.0.0".into(),
                ..Commit::default()
            },
            rerun_count: 1,
            ..Trigger::default()
        };
        let env = env_of(&release, Some(&Pipeline::default()));
        assert_eq!(env["CI_PIPELINE_RELEASE_TITLE"], "Version 2");
        assert_eq!(env["CI_PIPELINE_RELEASE_PRE"], "true");
        assert_eq!(env["CI_COMMIT_TAG"], "v2.0.0");
        assert_eq!(env["CI_PIPELINE_RERUNS"], "1");
        assert!(!env.contains_key("CI_COMMIT_PULL_REQUEST"));
        assert_eq!(env["CI_PREV_PIPELINE_STATUS"], "created");
        assert_eq!(tag_of(&release), "v2.0.0");

        // Without a forge title, the message's first line.
        let push = Trigger {
            commit: Commit {
                message: "first line\nmore".into(),
                ..Commit::default()
            },
            ..Trigger::default()
        };
        assert_eq!(title_of(&push), "first line");
        assert_eq!(tag_of(&push), "");
    }
}
