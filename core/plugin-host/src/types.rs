//! Plain Rust types of the plugin contract, free of wasmtime: what the server passes in and
//! gets back. Field names follow the WIT records (snake_case), so the JSON of a
//! [`HookOutcome`] is the documented `woodlark plugin run-hook` output:
//! `{"build": {"repo": {...}, "pipeline": {...}, "signature_verified": true}}` or
//! `{"ignored": "reason"}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The kind of plugin, i.e. the world a component targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorldKind {
    ForgeAdapter,
    SecretBackend,
    RegistryAuth,
}

impl WorldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ForgeAdapter => "forge-adapter",
            Self::SecretBackend => "secret-backend",
            Self::RegistryAuth => "registry-auth",
        }
    }

    /// The interface a component of this world exports, without version.
    pub(crate) fn export_interface(self) -> &'static str {
        match self {
            Self::ForgeAdapter => "woodlark:forge/forge",
            Self::SecretBackend => "woodlark:secrets/secrets",
            Self::RegistryAuth => "woodlark:registry/auth",
        }
    }
}

impl std::fmt::Display for WorldKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A webhook request as received (the server fills it from its HTTP request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookRequest {
    pub method: String,
    /// Path plus query, e.g. `/api/hook?access_token=...`.
    pub path_and_query: String,
    /// Header names and raw values, in arrival order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl HookRequest {
    /// A POST with text headers, for tests and the offline bench.
    pub fn post(path_and_query: &str, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Self {
        Self {
            method: "POST".into(),
            path_and_query: path_and_query.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.into(),
        }
    }
}

/// What a forge adapter made of a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    Build(Box<HookBuild>),
    /// Recognised, nothing to run; the reason.
    Ignored(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookBuild {
    pub repo: Repo,
    pub pipeline: Pipeline,
    /// The adapter checked the forge's signature/token and it matched.
    pub signature_verified: bool,
}

/// Pipeline event, serialized as Woodpecker spells it (`pull_request_closed`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Push,
    PullRequest,
    PullRequestClosed,
    PullRequestMetadata,
    Tag,
    Release,
    Deployment,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::PullRequest => "pull_request",
            Self::PullRequestClosed => "pull_request_closed",
            Self::PullRequestMetadata => "pull_request_metadata",
            Self::Tag => "tag",
            Self::Release => "release",
            Self::Deployment => "deployment",
        }
    }
}

/// Woodpecker's `Repo` fields as a forge reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repo {
    pub forge_remote_id: String,
    pub owner: String,
    pub name: String,
    pub full_name: String,
    pub avatar_url: String,
    pub forge_url: String,
    pub clone_url: String,
    pub clone_url_ssh: String,
    pub default_branch: String,
    pub private: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseInfo {
    pub tag: String,
    pub title: String,
    pub prerelease: bool,
}

/// Woodpecker's `Pipeline` fields that come from the forge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipeline {
    pub event: Event,
    pub event_reason: Vec<String>,
    pub commit: String,
    /// `ref` in Woodpecker's JSON.
    pub git_ref: String,
    pub branch: String,
    pub refspec: String,
    pub title: String,
    pub message: String,
    pub timestamp: i64,
    pub author: String,
    pub author_email: String,
    pub author_avatar: String,
    pub sender: String,
    pub forge_url: String,
    pub pr_number: Option<u64>,
    pub pr_labels: Vec<String>,
    pub from_fork: bool,
    pub release: Option<ReleaseInfo>,
    pub deploy_to: String,
    pub deploy_task: String,
    pub changed_files: Vec<String>,
}

/// Where and as whom a forge adapter calls its forge's API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiContext {
    /// The forge's web root, e.g. `https://gitea.example.com`.
    pub forge_url: String,
    /// The user's access token; empty for anonymous calls.
    pub token: String,
    /// The forge's TLS certificate is not to be verified (self-signed forges): the host's
    /// outbound client skips certificate checks for `forge_url`'s origin during the call,
    /// and adapters of contract 0.2.0 are told.
    pub skip_verify: bool,
    /// What the forge the call is made for grants the adapter (host side only).
    pub grant: ForgeGrant,
}

/// What a forge grants the adapter serving it, for calls made on that forge's behalf: the
/// server builds it from the forge's record, so a forge works with no
/// `[plugins.instances]` table, a changed record takes effect on the next call, and a call
/// for one forge is never granted another's host or secret. Nothing of it enters the guest
/// except the config values (the secret's name, never its value).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ForgeGrant {
    /// The forge, as logs and errors name it (`forge 3`); empty: no forge.
    pub label: String,
    /// Origins calls may reach besides the instance's `allowed_hosts`: the forge's URL,
    /// OAuth host and API root.
    pub origins: Vec<crate::config::Origin>,
    /// The forge's webhook secret: `signing` may use it under its name, which the adapter
    /// reads as config `hook-secret`.
    pub hook_secret: Option<NamedSecret>,
    /// Config values read before the instance's own (e.g. `api-url`).
    pub config: BTreeMap<String, String>,
}

impl ForgeGrant {
    /// Whether any forge is named (a call made on a forge's behalf).
    pub fn is_forge(&self) -> bool {
        !self.label.is_empty()
    }
}

impl std::fmt::Debug for ForgeGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgeGrant")
            .field("label", &self.label)
            .field("origins", &self.origins)
            .field("hook_secret", &self.hook_secret.as_ref().map(|s| &s.name))
            .field("config", &self.config)
            .finish()
    }
}

/// A secret `signing` may use under `name`; its value stays in the host.
#[derive(Clone, PartialEq, Eq)]
pub struct NamedSecret {
    pub name: String,
    pub value: Vec<u8>,
}

/// A forge's OAuth application, for sign-in.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OAuthClient {
    /// The forge's web root (token endpoint, API).
    pub forge_url: String,
    /// Where browsers sign in; `""`: `forge_url`.
    pub oauth_host: String,
    pub client_id: String,
    pub client_secret: String,
    /// The server's callback URL.
    pub redirect_uri: String,
    pub skip_verify: bool,
    /// What the forge grants the adapter (host side only).
    pub grant: ForgeGrant,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("forge_url", &self.forge_url)
            .field("oauth_host", &self.oauth_host)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("redirect_uri", &self.redirect_uri)
            .field("skip_verify", &self.skip_verify)
            .field("grant", &self.grant)
            .finish()
    }
}

/// Tokens from a code exchange or refresh.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthToken {
    pub access_token: String,
    /// Empty when the forge issues none.
    pub refresh_token: String,
    /// Unix seconds; 0: does not expire.
    pub expiry: i64,
}

impl std::fmt::Debug for OAuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthToken")
            .field("access_token", &"<redacted>")
            .field("refresh_token", &"<redacted>")
            .field("expiry", &self.expiry)
            .finish()
    }
}

/// The account a token belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeUser {
    /// The forge's stable account id (numeric ids as decimal text).
    pub remote_id: String,
    pub login: String,
    /// Primary e-mail; empty when the forge does not disclose one.
    pub email: String,
    pub avatar_url: String,
}

/// A user's permissions on a repository (Woodpecker's `Perm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perm {
    pub pull: bool,
    pub push: bool,
    pub admin: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoWithPerm {
    pub repo: Repo,
    pub perm: Perm,
}

/// An organisation the user belongs to (Woodpecker's `Team`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    pub login: String,
    pub avatar_url: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgMembership {
    pub member: bool,
    pub admin: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequestInfo {
    pub number: u64,
    pub title: String,
}

/// One `.netrc` entry for cloning over HTTP(S).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetrcInfo {
    /// The clone URL's host.
    pub machine: String,
    pub login: String,
    pub password: String,
}

impl std::fmt::Debug for NetrcInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetrcInfo")
            .field("machine", &self.machine)
            .field("login", &"<redacted>")
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusState {
    #[default]
    Pending,
    Running,
    Success,
    Failure,
    Error,
    Killed,
}

/// A commit status to show on the forge: the server posts one per workflow of a pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitStatus {
    /// The workflow's state; each adapter maps it to what its forge has.
    pub state: StatusState,
    /// The status's name on the forge (`ci/woodpecker/<event>/<workflow>`).
    pub context: String,
    pub description: String,
    /// The workflow's page on the server.
    pub target_url: String,
    /// The pipeline's branch (a pull request's target branch); empty when it has none.
    pub branch: String,
    /// The pipeline's event, as Woodpecker names it (`push`, `pull_request`, `tag`, …).
    pub event: String,
    /// When the pipeline started and finished, Unix seconds; 0 until then.
    pub started: i64,
    pub finished: i64,
}

/// A commit as a forge adapter's `branch-head` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    pub sha: String,
    pub message: String,
    pub author: String,
    pub author_email: String,
    pub author_avatar: String,
    /// Unix seconds; 0 when unknown.
    pub timestamp: i64,
    pub forge_url: String,
}

/// Whose secrets a secret backend is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretScope {
    pub org: String,
    /// `owner/name`.
    pub repo: String,
    pub event: String,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secret {
    pub name: String,
    pub value: String,
    pub events: Vec<String>,
    pub images: Vec<String>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .field("events", &self.events)
            .field("images", &self.images)
            .finish()
    }
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub address: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_json_shape_is_the_documented_one() {
        let ignored = serde_json::to_value(HookOutcome::Ignored("ping event".into())).unwrap();
        assert_eq!(ignored, serde_json::json!({"ignored": "ping event"}));
        let p = Pipeline {
            event: Event::PullRequestClosed,
            event_reason: vec!["merged".into()],
            commit: "abc".into(),
            git_ref: "refs/pull/1/head".into(),
            branch: "main".into(),
            refspec: "f:main".into(),
            title: "t".into(),
            message: "m".into(),
            timestamp: 1,
            author: "a".into(),
            author_email: "a@x".into(),
            author_avatar: "".into(),
            sender: "a".into(),
            forge_url: "u".into(),
            pr_number: Some(1),
            pr_labels: vec![],
            from_fork: false,
            release: None,
            deploy_to: "".into(),
            deploy_task: "".into(),
            changed_files: vec![],
        };
        let build = HookOutcome::Build(Box::new(HookBuild {
            repo: Repo::default(),
            pipeline: p,
            signature_verified: true,
        }));
        let v = serde_json::to_value(&build).unwrap();
        assert_eq!(v["build"]["pipeline"]["event"], "pull_request_closed");
        assert_eq!(v["build"]["repo"]["forge_remote_id"], "");
        assert_eq!(v["build"]["signature_verified"], true);
        let back: HookOutcome = serde_json::from_value(v).unwrap();
        assert_eq!(back, build);
    }
}
