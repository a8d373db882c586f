//! Webhooks in: what a forge's delivery means for pipelines.
//!
//! The HTTP handler (`modules::ci::hook`) authenticates the delivery (hook token or a
//! plugin's signature check) and renders the outcome; this module turns the delivery into
//! pipelines. The built-in `git` forge posts what git gives a `post-receive` hook, one
//! `<old-sha> <new-sha> <ref>` line per updated ref ([`parse_ref_updates`], [`git_push`]);
//! forge-adapter plugins parse every other forge's webhooks ([`from_plugin`]).
//!
//! A plugin's delivery is known by its id header and by the SHA-256 of its body (which the
//! forge signed), so neither a redelivery nor a replay under another id makes a second
//! pipeline. Git's hook bodies are not: they carry a hook token rather than a signature (whoever
//! holds it can post any body), and the same ref update can legitimately come twice (a branch
//! moved A→B, back to A, and to B again).

use std::sync::Arc;

use woodlark_plugin_host::{ForgeGrant, HookOutcome, HookRequest, PluginError, WorldKind};

use sha2::{Digest, Sha256};

use super::create::{self, Created, Delivery, Trigger};
use super::forge::drivers::ForgeHandle;
use super::forge::plugin::plugin_among;
use super::forge::{self, ForgeDriver, ForgeError};
use super::{Error, Services};
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::types::{Commit, ConfigFile};
use crate::store::forges;
use crate::store::repos::{self, Repo, RepoRow};

/// One ref update from a `post-receive` hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub git_ref: String,
}

impl RefUpdate {
    /// A deleted ref (new sha all zeros) starts nothing.
    pub fn is_delete(&self) -> bool {
        self.new.bytes().all(|b| b == b'0')
    }
}

/// Parses git's `<old> <new> <ref>` lines; anything else is an error naming the line.
pub fn parse_ref_updates(body: &[u8]) -> Result<Vec<RefUpdate>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())?;
    let is_sha =
        |s: &str| (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            [old, new, r] if is_sha(old) && is_sha(new) && r.starts_with("refs/") => {
                out.push(RefUpdate {
                    old: old.to_string(),
                    new: new.to_string(),
                    git_ref: r.to_string(),
                })
            }
            _ => {
                return Err(format!(
                    "line {}: expected '<old-sha> <new-sha> <ref>'",
                    n + 1
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("no ref updates in the body".into());
    }
    Ok(out)
}

/// What the pushed refs of a git hook made: the outcome of the last pushed ref, `None` when
/// every update deleted a ref (which starts nothing).
pub async fn git_push(
    ci: &Services,
    row: &RepoRow,
    forge: &ForgeHandle,
    updates: &[RefUpdate],
) -> Result<Option<Created>, Error> {
    let pushed: Vec<&RefUpdate> = updates.iter().filter(|u| !u.is_delete()).collect();
    tracing::info!(
        repo = row.repo.full_name,
        refs = updates.len(),
        "push received from git hook"
    );
    if pushed.is_empty() {
        return Ok(None);
    }
    let mut last = None;
    for update in pushed {
        let (trigger, config) = push_trigger(forge.driver.as_ref(), &row.repo, update).await?;
        last = Some(create::with_config(ci, row, forge.kind(), trigger, config).await?);
    }
    Ok(last)
}

/// What a forge-adapter plugin's reading of a webhook came to.
#[derive(Debug)]
pub enum PluginHook {
    /// The plugin recognised the delivery and says why it starts nothing.
    Ignored(String),
    /// About no active repository here (or a pull request where they are not allowed):
    /// why, for the forge's delivery log.
    NotOurs(String),
    Created(Created),
}

/// What a plugin webhook is known to be about before the plugin parses it.
#[derive(Clone)]
pub enum HookScope {
    /// The repository (and its forge) a hook token named: the hook must be about it.
    Repo(Box<RepoRow>, Arc<ForgeHandle>),
    /// The forge the webhook's URL names (`/api/hook?forge=<id>`, as activation registers
    /// it): the plugin must have verified the signature, and the repository is looked up in
    /// that forge alone.
    Forge(Arc<ForgeHandle>),
    /// Nothing (the adapter recognised the request): the plugin must have verified the
    /// signature, and the repository is found among the forges the plugin serves.
    Any,
}

/// Hands a webhook to forge-adapter `plugin` and creates what it asks for, within `scope`.
pub async fn from_plugin(
    ci: &Services,
    plugin: &str,
    request: HookRequest,
    scope: HookScope,
) -> Result<PluginHook, Error> {
    let delivery = Delivery {
        id: delivery_key(&request.headers),
        body_sha256: Some(Sha256::digest(&request.body).into()),
    };
    let grant = match &scope {
        HookScope::Repo(_, forge) | HookScope::Forge(forge) => forge.grant().clone(),
        HookScope::Any => ForgeGrant::default(),
    };
    let outcome = ci
        .plugins
        .parse_hook_for(plugin, request, grant)
        .await
        .map_err(|e| match e {
            PluginError::NotLoaded(_) => Error::Forge(ForgeError::NoDriver(plugin.to_string())),
            e if e.is_fault() => Error::Forge(ForgeError::AdapterFailed(e.to_string())),
            e => Error::Invalid(format!("failure to parse hook: {e}")),
        })?;
    let build = match outcome {
        HookOutcome::Ignored(reason) => return Ok(PluginHook::Ignored(reason)),
        HookOutcome::Build(build) => build,
    };
    let remote_id = build.repo.forge_remote_id.clone();
    let unsigned = || {
        Error::Invalid(
            "failure to parse hook: no hook token and no verified signature (grant the plugin the forge's webhook secret)".into(),
        )
    };
    let found = match scope {
        HookScope::Repo(row, forge) => {
            let row = *row;
            if row.repo.forge_remote_id != remote_id {
                return Err(Error::Invalid(
                    "failure to parse hook: the hook is about another repository".into(),
                ));
            }
            Some((row, forge))
        }
        HookScope::Forge(forge) => {
            if !build.signature_verified {
                return Err(unsigned());
            }
            let forge_id = forge.row.forge.id;
            ci.store
                .read_one(move |c| repos::by_remote_id(c, forge_id, &remote_id))
                .await?
                .map(|row| (row, forge))
        }
        HookScope::Any => {
            if !build.signature_verified {
                return Err(unsigned());
            }
            let loaded = ci.plugins.names(WorldKind::ForgeAdapter);
            let plugin = plugin.to_string();
            let found = ci
                .store
                .read(move |c| {
                    const PAGE: u32 = 50;
                    for page in 1.. {
                        let forges = forges::list(c, page, PAGE)?;
                        for f in &forges {
                            if plugin_among(&loaded, f).as_deref() == Some(plugin.as_str())
                                && let Some(row) = repos::by_remote_id(c, f.id, &remote_id)?
                            {
                                return Ok(Some((row, f.id)));
                            }
                        }
                        if forges.len() < PAGE as usize {
                            break;
                        }
                    }
                    Ok(None)
                })
                .await?;
            match found {
                Some((row, forge_id)) => Some((row, ci.drivers.get(forge_id).await?)),
                None => None,
            }
        }
    };
    let Some((row, forge)) = found else {
        let why = format!(
            "repository {} is not activated on this server",
            build.repo.full_name
        );
        tracing::info!(
            plugin,
            remote_id = build.repo.forge_remote_id,
            "ignoring hook: {why}"
        );
        return Ok(PluginHook::NotOurs(why));
    };
    if !row.repo.active {
        let why = format!("repository {} is not active", row.repo.full_name);
        tracing::info!(plugin, "ignoring hook: {why}");
        return Ok(PluginHook::NotOurs(why));
    }
    let p = &build.pipeline;
    let event = webhook_event(p.event);
    if event.is_pull_request() && !row.repo.allow_pr {
        let why = format!(
            "repository {} does not allow pull requests",
            row.repo.full_name
        );
        tracing::info!(plugin, "ignoring hook: {why}");
        return Ok(PluginHook::NotOurs(why));
    }
    // The plugin's record crosses the WIT boundary as its own type; from here on it is the
    // pipeline's commit record.
    let mut trigger = Trigger {
        event,
        event_reason: p.event_reason.clone(),
        commit: Commit {
            sha: p.commit.clone(),
            branch: p.branch.clone(),
            git_ref: p.git_ref.clone(),
            refspec: p.refspec.clone(),
            message: p.message.clone(),
            author: p.author.clone(),
            author_email: p.author_email.clone(),
            author_avatar: p.author_avatar.clone(),
            sender: p.sender.clone(),
            forge_url: p.forge_url.clone(),
            timestamp: p.timestamp,
            changed_files: p.changed_files.clone(),
        },
        deploy_to: p.deploy_to.clone(),
        deploy_task: p.deploy_task.clone(),
        title: match &p.release {
            Some(release) if !release.title.is_empty() => release.title.clone(),
            _ => p.title.clone(),
        },
        pr_labels: p.pr_labels.clone(),
        prerelease: p.release.as_ref().is_some_and(|r| r.prerelease),
        from_fork: p.from_fork,
        // The delivery was authenticated (signature or hook token): its sender is the forge's.
        verified_sender: p.sender.clone(),
        delivery,
        ..Trigger::default()
    };
    // A redelivery or a replay: what it made already, before asking the forge for anything.
    if let Some(before) = create::delivered(ci, row.repo.id, &trigger.delivery).await? {
        let pipeline = match &before {
            Created::Pipeline(p) => p.number,
            _ => 0,
        };
        tracing::info!(
            repo = row.repo.full_name,
            pipeline,
            delivery = trigger.delivery.id,
            "webhook delivered again; no new pipeline"
        );
        return Ok(PluginHook::Created(before));
    }
    if trigger.commit.changed_files.is_empty()
        && trigger.event.is_pull_request()
        && let Some(number) = p.pr_number
    {
        trigger.commit.changed_files = pr_changed_files(ci, &row, &forge, plugin, number).await;
    }
    tracing::info!(
        repo = row.repo.full_name,
        plugin,
        event = %trigger.event,
        "hook parsed by plugin"
    );
    let created = create::from_forge_at(ci, &row, &forge, trigger).await?;
    Ok(PluginHook::Created(created))
}

/// Headers forges put the id of a webhook delivery in (kept across their retries and
/// "redeliver"), most specific first: GitHub (and Gitea, which sends it too), Gitea, Forgejo,
/// GitLab (`Idempotency-Key` since 17.4, else the event UUID), Bitbucket Cloud, Bitbucket
/// Data Center.
const DELIVERY_HEADERS: &[&str] = &[
    "x-github-delivery",
    "x-gitea-delivery",
    "x-forgejo-delivery",
    "idempotency-key",
    "x-gitlab-event-uuid",
    "x-request-uuid",
    "x-request-id",
];

/// `<header>:<value>` of the first delivery-id header present (at most 200 bytes of value),
/// or empty.
fn delivery_key(headers: &[(String, Vec<u8>)]) -> String {
    DELIVERY_HEADERS
        .iter()
        .find_map(|name| {
            let (_, value) = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name))?;
            let value = std::str::from_utf8(value).ok()?.trim();
            (!value.is_empty() && value.len() <= 200).then(|| format!("{name}:{value}"))
        })
        .unwrap_or_default()
}

/// A plugin's event (the WIT enum) as the pipeline's.
fn webhook_event(event: woodlark_plugin_host::Event) -> WebhookEvent {
    use woodlark_plugin_host::Event;
    match event {
        Event::Push => WebhookEvent::Push,
        Event::PullRequest => WebhookEvent::PullRequest,
        Event::PullRequestClosed => WebhookEvent::PullRequestClosed,
        Event::PullRequestMetadata => WebhookEvent::PullRequestMetadata,
        Event::Tag => WebhookEvent::Tag,
        Event::Release => WebhookEvent::Release,
        Event::Deployment => WebhookEvent::Deployment,
    }
}

/// The files pull request `number` changes, asked of the forge because the hook did not list
/// them. A failure costs only `when: path` precision, never the hook: it is logged and the
/// list stays empty (as upstream does).
async fn pr_changed_files(
    ci: &Services,
    row: &RepoRow,
    forge: &ForgeHandle,
    plugin: &str,
    number: u64,
) -> Vec<String> {
    let driver = ci.tokens.for_repo(forge, row).await;
    let asked = driver.pr_changed_files(&row.repo, number).await;
    asked.unwrap_or_else(|err| {
        tracing::warn!(
            repo = row.repo.full_name,
            plugin,
            pr = number,
            error = %err,
            "changed files of the pull request not fetched; going on without them"
        );
        Vec::new()
    })
}

/// The pipeline trigger of one pushed ref (a branch push or a tag), with the commit's details
/// and changed files asked of the forge, and the config files at the commit.
async fn push_trigger(
    driver: &dyn ForgeDriver,
    repo: &Repo,
    update: &RefUpdate,
) -> Result<(Trigger, Vec<ConfigFile>), ForgeError> {
    let forge::Pushed {
        commit,
        changed,
        config,
    } = driver.pushed(repo, &update.old, &update.new).await?;
    let (event, branch) = match update.git_ref.strip_prefix("refs/tags/") {
        Some(_) => (WebhookEvent::Tag, repo.default_branch.clone()),
        None => (
            WebhookEvent::Push,
            update
                .git_ref
                .strip_prefix("refs/heads/")
                .unwrap_or(&update.git_ref)
                .to_string(),
        ),
    };
    let trigger = Trigger {
        event,
        // The commit's author, which whoever pushes writes: shown as the sender, never
        // `verified_sender` (it must not pass `approval_allowed_users`).
        commit: Commit {
            branch,
            git_ref: update.git_ref.clone(),
            sender: commit.author.clone(),
            forge_url: repo.forge_url.clone(),
            changed_files: changed,
            ..commit
        },
        ..Trigger::default()
    };
    Ok((trigger, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_known_by_the_most_specific_id_header() {
        let headers = |list: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
            list.iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect()
        };
        // Gitea sends GitHub's header too, with the same id.
        let gitea = headers(&[
            ("X-Gitea-Delivery", "6d1c"),
            ("X-GitHub-Delivery", "6d1c"),
            ("X-Request-Id", "proxy-1"),
        ]);
        assert_eq!(delivery_key(&gitea), "x-github-delivery:6d1c");
        let gitlab = headers(&[("X-Gitlab-Event-UUID", "e1"), ("Idempotency-Key", "k1")]);
        assert_eq!(delivery_key(&gitlab), "idempotency-key:k1");
        assert_eq!(
            delivery_key(&headers(&[("x-request-uuid", " u ")])),
            "x-request-uuid:u"
        );
        assert_eq!(delivery_key(&headers(&[("x-github-delivery", "")])), "");
        let long = "x".repeat(201);
        assert_eq!(delivery_key(&headers(&[("x-github-delivery", &long)])), "");
        assert_eq!(delivery_key(&[]), "");
    }

    #[test]
    fn parses_post_receive_lines() {
        let a = "a".repeat(40);
        let z = "0".repeat(40);
        let body = format!("{z} {a} refs/heads/main\n{a} {z} refs/tags/v1\n");
        let updates = parse_ref_updates(body.as_bytes()).unwrap();
        assert_eq!(updates.len(), 2);
        assert!(!updates[0].is_delete());
        assert!(updates[1].is_delete());
        assert!(parse_ref_updates(b"").is_err());
        assert!(parse_ref_updates(b"x y z").is_err());
        assert!(parse_ref_updates(format!("{a} {a} main").as_bytes()).is_err());
    }
}
