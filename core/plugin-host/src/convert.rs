//! Conversions between the generated WIT types and the crate's plain types. Forge records go
//! through the 0.2.0 types for adapters of every contract version (see `bindings.rs`); only
//! `api-context` has a 0.1.0 form.

use crate::bindings::caps::woodlark::host::types::{Header, PluginError as WitError};
use crate::bindings::forge_v0_1::exports::woodlark::forge0_1_0::forge as f01;
use crate::bindings::forge_v0_2::exports::woodlark::forge0_2_0::forge as f;
use crate::bindings::registry_v0_1::exports::woodlark::registry::auth as r;
use crate::bindings::secrets_v0_1::exports::woodlark::secrets::secrets as s;
use crate::error::{ErrorKind, PluginError};
use crate::types::*;

pub(crate) fn plugin_error(plugin: &str, e: WitError) -> PluginError {
    let (kind, message) = match e {
        WitError::InvalidInput(m) => (ErrorKind::InvalidInput, m),
        WitError::Denied(m) => (ErrorKind::Denied, m),
        WitError::Unavailable(m) => (ErrorKind::Unavailable, m),
        WitError::Internal(m) => (ErrorKind::Internal, m),
    };
    PluginError::Plugin {
        plugin: plugin.to_string(),
        kind,
        message,
    }
}

pub(crate) fn headers(hs: &[(String, Vec<u8>)]) -> Vec<Header> {
    hs.iter()
        .map(|(name, value)| Header {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

pub(crate) fn hook_request(req: HookRequest) -> f::HookRequest {
    f::HookRequest {
        method: req.method,
        path_and_query: req.path_and_query,
        headers: headers(&req.headers),
        body: req.body,
    }
}

pub(crate) fn outcome(o: f::Outcome) -> HookOutcome {
    match o {
        f::Outcome::Build(b) => HookOutcome::Build(Box::new(HookBuild {
            repo: repo(b.repo),
            pipeline: pipeline(b.pipeline),
            signature_verified: b.signature_verified,
        })),
        f::Outcome::Ignored(reason) => HookOutcome::Ignored(reason),
    }
}

pub(crate) fn repo(r: f::Repo) -> Repo {
    Repo {
        forge_remote_id: r.forge_remote_id,
        owner: r.owner,
        name: r.name,
        full_name: r.full_name,
        avatar_url: r.avatar_url,
        forge_url: r.forge_url,
        clone_url: r.clone_url,
        clone_url_ssh: r.clone_url_ssh,
        default_branch: r.default_branch,
        private: r.private,
    }
}

fn event(e: f::Event) -> Event {
    match e {
        f::Event::Push => Event::Push,
        f::Event::PullRequest => Event::PullRequest,
        f::Event::PullRequestClosed => Event::PullRequestClosed,
        f::Event::PullRequestMetadata => Event::PullRequestMetadata,
        f::Event::Tag => Event::Tag,
        f::Event::Release => Event::Release,
        f::Event::Deployment => Event::Deployment,
    }
}

fn pipeline(p: f::Pipeline) -> Pipeline {
    Pipeline {
        event: event(p.event),
        event_reason: p.event_reason,
        commit: p.commit,
        git_ref: p.git_ref,
        branch: p.branch,
        refspec: p.refspec,
        title: p.title,
        message: p.message,
        timestamp: p.timestamp,
        author: p.author,
        author_email: p.author_email,
        author_avatar: p.author_avatar,
        sender: p.sender,
        forge_url: p.forge_url,
        pr_number: p.pr_number,
        pr_labels: p.pr_labels,
        from_fork: p.from_fork,
        release: p.release.map(|r| ReleaseInfo {
            tag: r.tag,
            title: r.title,
            prerelease: r.prerelease,
        }),
        deploy_to: p.deploy_to,
        deploy_task: p.deploy_task,
        changed_files: p.changed_files,
    }
}

pub(crate) fn api_context(c: ApiContext) -> f::ApiContext {
    f::ApiContext {
        forge_url: c.forge_url,
        token: c.token,
        skip_verify: c.skip_verify,
    }
}

/// The 0.1.0 record, which has no `skip-verify`.
pub(crate) fn api_context_v0_1(c: ApiContext) -> f01::ApiContext {
    f01::ApiContext {
        forge_url: c.forge_url,
        token: c.token,
    }
}

pub(crate) fn oauth_client(c: OAuthClient) -> f::OauthClient {
    f::OauthClient {
        forge_url: c.forge_url,
        oauth_host: c.oauth_host,
        client_id: c.client_id,
        client_secret: c.client_secret,
        redirect_uri: c.redirect_uri,
        skip_verify: c.skip_verify,
    }
}

pub(crate) fn oauth_token(t: f::OauthToken) -> OAuthToken {
    OAuthToken {
        access_token: t.access_token,
        refresh_token: t.refresh_token,
        expiry: t.expiry,
    }
}

pub(crate) fn forge_user(u: f::ForgeUser) -> ForgeUser {
    ForgeUser {
        remote_id: u.remote_id,
        login: u.login,
        email: u.email,
        avatar_url: u.avatar_url,
    }
}

pub(crate) fn perm(p: f::Perm) -> Perm {
    Perm {
        pull: p.pull,
        push: p.push,
        admin: p.admin,
    }
}

pub(crate) fn repo_with_perm(r: f::RepoWithPerm) -> RepoWithPerm {
    RepoWithPerm {
        repo: repo(r.repo),
        perm: perm(r.perm),
    }
}

pub(crate) fn team(t: f::Team) -> Team {
    Team {
        login: t.login,
        avatar_url: t.avatar_url,
    }
}

pub(crate) fn org_membership(m: f::OrgPerm) -> OrgMembership {
    OrgMembership {
        member: m.member,
        admin: m.admin,
    }
}

pub(crate) fn pull_request(p: f::PullRequestInfo) -> PullRequestInfo {
    PullRequestInfo {
        number: p.number,
        title: p.title,
    }
}

pub(crate) fn netrc(n: f::NetrcInfo) -> NetrcInfo {
    NetrcInfo {
        machine: n.machine,
        login: n.login,
        password: n.password,
    }
}

pub(crate) fn commit_info(c: f::CommitInfo) -> CommitInfo {
    CommitInfo {
        sha: c.sha,
        message: c.message,
        author: c.author,
        author_email: c.author_email,
        author_avatar: c.author_avatar,
        timestamp: c.timestamp,
        forge_url: c.forge_url,
    }
}

pub(crate) fn commit_status(c: CommitStatus) -> f::CommitStatus {
    f::CommitStatus {
        state: match c.state {
            StatusState::Pending => f::StatusState::Pending,
            StatusState::Running => f::StatusState::Running,
            StatusState::Success => f::StatusState::Success,
            StatusState::Failure => f::StatusState::Failure,
            StatusState::Error => f::StatusState::Error,
            StatusState::Killed => f::StatusState::Killed,
        },
        context: c.context,
        description: c.description,
        target_url: c.target_url,
        branch: c.branch,
        event: c.event,
        started: c.started,
        finished: c.finished,
    }
}

/// The 0.1.0 record, which has no branch, event or times.
pub(crate) fn commit_status_v0_1(c: CommitStatus) -> f01::CommitStatus {
    f01::CommitStatus {
        state: match c.state {
            StatusState::Pending => f01::StatusState::Pending,
            StatusState::Running => f01::StatusState::Running,
            StatusState::Success => f01::StatusState::Success,
            StatusState::Failure => f01::StatusState::Failure,
            StatusState::Error => f01::StatusState::Error,
            StatusState::Killed => f01::StatusState::Killed,
        },
        context: c.context,
        description: c.description,
        target_url: c.target_url,
    }
}

pub(crate) fn scope(sc: SecretScope) -> s::Scope {
    s::Scope {
        org: sc.org,
        repo: sc.repo,
        event: sc.event,
    }
}

pub(crate) fn secret(x: s::Secret) -> Secret {
    Secret {
        name: x.name,
        value: x.value,
        events: x.events,
        images: x.images,
    }
}

pub(crate) fn credential(c: r::Credential) -> Credential {
    Credential {
        address: c.address,
        username: c.username,
        password: c.password,
    }
}
