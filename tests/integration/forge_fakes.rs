//! Fake forges on 127.0.0.1, one per forge type Woodlark's first-party adapters speak to:
//! GitHub, Gitea, Forgejo, GitLab, Bitbucket Cloud and Bitbucket Data Center. Each answers
//! the endpoints, fields, status codes and paging its real API uses (shapes taken from the
//! forges' API documentation and upstream Woodpecker's recorded fixtures), auto-approves the
//! OAuth authorize page, and records every request it receives.
//!
//! The fake holds one repository, `octo/app` (`OCTO/app` on Data Center), visible to one
//! user, `octocat`. Its access tokens expire in a minute, so the server must refresh them
//! before each use; only live tokens open the API (401 otherwise).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::plugins::FakeRequest;

pub(crate) const CLIENT_ID: &str = "woodlark-test-app";
pub(crate) const CLIENT_SECRET: &str = "oauth-app-secret";
/// The code the fake forge's authorize page hands back.
pub(crate) const GOOD_CODE: &str = "code-from-the-forge";
/// The branch every fake repository builds.
const BRANCH: &str = "main";

/// Which forge a [`Fake`] plays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Kind {
    #[default]
    GitHub,
    Gitea,
    Forgejo,
    GitLab,
    Bitbucket,
    BitbucketDc,
}

impl Kind {
    /// The forge `type` as the API takes it; also the adapter's instance name.
    pub(crate) fn forge_type(self) -> &'static str {
        match self {
            Kind::GitHub => "github",
            Kind::Gitea => "gitea",
            Kind::Forgejo => "forgejo",
            Kind::GitLab => "gitlab",
            Kind::Bitbucket => "bitbucket",
            Kind::BitbucketDc => "bitbucket-dc",
        }
    }

    /// Where the browser is sent to approve the sign-in.
    pub(crate) fn authorize_path(self) -> &'static str {
        match self {
            Kind::GitHub | Kind::Gitea | Kind::Forgejo => "/login/oauth/authorize",
            Kind::GitLab => "/oauth/authorize",
            Kind::Bitbucket => "/site/oauth2/authorize",
            Kind::BitbucketDc => "/rest/oauth2/latest/authorize",
        }
    }

    fn token_path(self) -> &'static str {
        match self {
            Kind::GitHub | Kind::Gitea | Kind::Forgejo => "/login/oauth/access_token",
            Kind::GitLab => "/oauth/token",
            Kind::Bitbucket => "/site/oauth2/access_token",
            Kind::BitbucketDc => "/rest/oauth2/latest/token",
        }
    }

    /// The adapter instance's `config` entries beyond the hook secret, for a fake at `api`.
    pub(crate) fn instance_config(self, api: std::net::SocketAddr) -> String {
        match self {
            Kind::GitHub => format!(", api-url = \"http://{api}\""),
            Kind::Bitbucket => format!(", api-url = \"http://{api}/2.0\""),
            _ => String::new(),
        }
    }

    /// Where the forge lists the user's repositories.
    pub(crate) fn repos_path(self) -> &'static str {
        match self {
            Kind::GitHub => "/user/repos",
            Kind::Gitea | Kind::Forgejo => "/api/v1/user/repos",
            Kind::GitLab => "/api/v4/projects",
            Kind::Bitbucket => "/2.0/user/permissions/repositories",
            Kind::BitbucketDc => "/rest/api/1.0/repos",
        }
    }

    /// The repository's full name on this forge.
    pub(crate) fn full_name(self) -> &'static str {
        match self {
            Kind::BitbucketDc => "OCTO/app",
            _ => "octo/app",
        }
    }

    /// octocat's id on the forge (Bitbucket Cloud names accounts by UUID).
    pub(crate) fn user_remote_id(self) -> &'static str {
        match self {
            Kind::Bitbucket => "{6d3c6c1a-0b1e-4b5c-9d8e-7f6a5b4c3d21}",
            _ => "1001",
        }
    }

    /// The login and password a clone must present with access token `token`, as each
    /// forge takes them (the netrc the server hands the runner).
    pub(crate) fn netrc(self, token: &str) -> (String, String) {
        match self {
            Kind::GitHub => (token.into(), "x-oauth-basic".into()),
            Kind::Gitea | Kind::Forgejo => (token.into(), token.into()),
            Kind::GitLab => ("oauth2".into(), token.into()),
            Kind::Bitbucket | Kind::BitbucketDc => ("x-token-auth".into(), token.into()),
        }
    }

    /// The forge's names for pending, success and failure.
    pub(crate) fn state_names(self) -> [&'static str; 3] {
        match self {
            Kind::GitHub | Kind::Gitea | Kind::Forgejo => ["pending", "success", "failure"],
            Kind::GitLab => ["pending", "success", "failed"],
            Kind::Bitbucket | Kind::BitbucketDc => ["INPROGRESS", "SUCCESSFUL", "FAILED"],
        }
    }
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    /// The `Authorization` header ("" when none).
    pub(crate) auth: String,
    pub(crate) body: String,
}

/// A commit status as the fake received it, in the forge's own terms.
#[derive(Clone, Debug)]
pub(crate) struct Posted {
    pub(crate) commit: String,
    pub(crate) state: String,
    pub(crate) context: String,
    pub(crate) link: String,
    pub(crate) description: String,
    /// The whole body, for the fields only some forges take.
    pub(crate) body: Value,
}

/// What a fake forge holds and saw.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) kind: Kind,
    pub(crate) seen: Vec<Seen>,
    pub(crate) hooks: Vec<Value>,
    pub(crate) statuses: Vec<Posted>,
    /// octocat's permissions on the repository: pull, push, admin.
    pub(crate) perm: (bool, bool, bool),
    /// octocat was removed from the (private) repository: GitHub answers 404 for it and no
    /// longer lists it.
    pub(crate) removed: bool,
    /// octocat left the `octo` organisation: GitHub answers 404 for the membership.
    pub(crate) left_org: bool,
    /// GitHub leaves the repository out of octocat's `/user/repos`, so an id given for it
    /// can only be looked up by id (`/repositories/42`).
    pub(crate) unlisted: bool,
    /// Access tokens that work, and the refresh token that gives the next one.
    pub(crate) live_tokens: Vec<String>,
    refresh_token: String,
    issued: u32,
    /// `.woodpecker.yaml` at every commit.
    pub(crate) config: String,
    /// Where the repository clones from (a `git http-backend` behind basic auth).
    pub(crate) clone_url: String,
    /// The head of `main`.
    pub(crate) head: String,
}

pub(crate) type Shared = Arc<Mutex<Fake>>;

/// A fake of `kind` holding `config` at every commit, octocat its admin.
pub(crate) fn fake(kind: Kind, config: &str) -> Shared {
    Arc::new(Mutex::new(Fake {
        kind,
        perm: (true, true, true),
        config: config.into(),
        ..Fake::default()
    }))
}

/// Access tokens the fakes issue start with this (to look for them on disk).
pub(crate) const ACCESS_PREFIX: &str = "fake-access-";
pub(crate) const REFRESH_PREFIX: &str = "fake-refresh-";

impl Fake {
    /// A new access token that expires in a minute (so the server must refresh it before
    /// using it again), with the refresh token for the next one.
    fn issue(&mut self) -> Value {
        self.issued += 1;
        let access = format!("{ACCESS_PREFIX}{}", self.issued);
        self.refresh_token = format!("{REFRESH_PREFIX}{}", self.issued);
        self.live_tokens.push(access.clone());
        let mut token = json!({"access_token": access, "token_type": "bearer",
            "expires_in": 60, "refresh_token": self.refresh_token});
        match self.kind {
            Kind::GitHub => {
                token["scope"] = json!("repo");
                token["refresh_token_expires_in"] = json!(15_000_000);
            }
            Kind::GitLab => {
                token["scope"] = json!("api");
                token["created_at"] = json!(now());
            }
            Kind::Bitbucket => token["scopes"] = json!("repository webhook account"),
            _ => {}
        }
        token
    }

    /// Revokes every token, the refresh token too (the user disconnected the app).
    pub(crate) fn revoke_all(&mut self) {
        self.live_tokens.clear();
        self.refresh_token.clear();
    }

    /// Whether a clone presenting `login`/`password` may read the repository.
    pub(crate) fn clone_allowed(&self, login: &str, password: &str) -> bool {
        self.live_tokens.iter().any(|t| {
            let (l, p) = self.kind.netrc(t);
            l == login && p == password
        })
    }

    /// Statuses posted for `commit`, oldest first.
    pub(crate) fn statuses_of(&self, commit: &str) -> Vec<Posted> {
        self.statuses
            .iter()
            .filter(|p| p.commit == commit)
            .cloned()
            .collect()
    }

    /// The hook the server created: its URL's path and query, and the secret it gave.
    pub(crate) fn hook(&self) -> Option<(String, String)> {
        let h = self.hooks.first()?;
        let (url, secret) = match self.kind {
            Kind::GitHub | Kind::Gitea | Kind::Forgejo => {
                (&h["config"]["url"], &h["config"]["secret"])
            }
            Kind::GitLab => (&h["url"], &h["token"]),
            Kind::Bitbucket => (&h["url"], &h["secret"]),
            Kind::BitbucketDc => (&h["url"], &h["configuration"]["secret"]),
        };
        let url = url.as_str()?;
        let path = &url[url.find("/api/hook")?..];
        Some((path.to_string(), secret.as_str()?.to_string()))
    }

    /// A push of `sha` to `main` as this forge delivers it to the hook, signed (or carrying
    /// the token) as it does: the body and the headers.
    pub(crate) fn push_delivery(&self, sha: &str) -> (String, Vec<(String, String)>) {
        let (_, secret) = self.hook().expect("no hook was created");
        let repo_url = format!("{}/octo/app", self.web());
        let (event, body) = match self.kind {
            Kind::GitHub => {
                let mut v: Value =
                    serde_json::from_str(include_str!("fixtures/github-push.json")).unwrap();
                let repo = &mut v["repository"];
                repo["id"] = json!(42);
                repo["name"] = json!("app");
                repo["full_name"] = json!("octo/app");
                repo["owner"]["login"] = json!("octo");
                repo["owner"]["name"] = json!("octo");
                repo["clone_url"] = json!(self.clone_url);
                v["after"] = json!(sha);
                v["head_commit"]["id"] = json!(sha);
                (("x-github-event", "push"), v)
            }
            Kind::Gitea | Kind::Forgejo => {
                let commit = json!({"id": sha, "message": "a change\n", "url": format!("{repo_url}/commit/{sha}"),
                    "author": {"name": "Octo Cat", "email": "octocat@example.com", "username": "octocat"},
                    "timestamp": "2026-11-20T10:00:00Z"});
                let v = json!({"ref": "refs/heads/main", "before": "0".repeat(40), "after": sha,
                    "compare_url": format!("{repo_url}/compare/x...{sha}"), "commits": [commit.clone()],
                    "head_commit": commit, "repository": self.gitea_repo(),
                    "pusher": {"id": 1001, "login": "octocat", "email": "octocat@example.com"},
                    "sender": {"id": 1001, "login": "octocat", "email": "octocat@example.com",
                               "avatar_url": "/avatars/octocat"}});
                let header = if self.kind == Kind::Forgejo {
                    "x-forgejo-event"
                } else {
                    "x-gitea-event"
                };
                ((header, "push"), v)
            }
            Kind::GitLab => {
                let mut project = self.gitlab_project();
                project["git_http_url"] = project["http_url_to_repo"].clone();
                project["visibility_level"] = json!(0);
                let v = json!({"object_kind": "push", "event_name": "push", "ref": "refs/heads/main",
                    "before": "0".repeat(40), "after": sha, "checkout_sha": sha,
                    "user_id": 1001, "user_username": "octocat", "user_email": "octocat@example.com",
                    "user_avatar": "", "project_id": 42, "project": project, "total_commits_count": 1,
                    "commits": [{"id": sha, "message": "a change\n", "timestamp": "2026-11-20T10:00:00+00:00",
                        "url": format!("{repo_url}/-/commit/{sha}"),
                        "author": {"name": "Octo Cat", "email": "octocat@example.com"}}]});
                (("x-gitlab-event", "Push Hook"), v)
            }
            Kind::Bitbucket => {
                let target = json!({"type": "commit", "hash": sha, "message": "a change\n",
                    "date": "2026-11-20T10:00:00+00:00", "author": {"raw": "Octo Cat <octocat@example.com>"},
                    "links": {"html": {"href": format!("{repo_url}/commits/{sha}")}}});
                let v = json!({"actor": self.bitbucket_user(), "repository": self.bitbucket_repo(),
                    "push": {"changes": [{"new": {"type": "branch", "name": BRANCH, "target": target},
                        "old": null, "created": true, "closed": false}]}});
                (("x-event-key", "repo:push"), v)
            }
            Kind::BitbucketDc => {
                let v = json!({"eventKey": "repo:refs_changed", "date": "2026-11-20T10:00:00+0000",
                    "actor": {"name": "octocat", "slug": "octocat", "id": 1001,
                              "emailAddress": "octocat@example.com", "displayName": "Octo Cat"},
                    "repository": self.dc_repo(),
                    "changes": [{"ref": {"id": "refs/heads/main", "displayId": BRANCH, "type": "BRANCH"},
                        "refId": "refs/heads/main", "fromHash": "0".repeat(40), "toHash": sha,
                        "type": "UPDATE"}]});
                (("x-event-key", "repo:refs_changed"), v)
            }
        };
        let body = body.to_string();
        let mut headers = vec![(event.0.to_string(), event.1.to_string())];
        let hex = hmac_hex(&secret, body.as_bytes());
        headers.push(match self.kind {
            Kind::GitHub => ("x-hub-signature-256".into(), format!("sha256={hex}")),
            Kind::Gitea => ("x-gitea-signature".into(), hex),
            Kind::Forgejo => ("x-forgejo-signature".into(), hex),
            Kind::GitLab => ("x-gitlab-token".into(), secret.clone()),
            Kind::Bitbucket => ("x-hub-signature".into(), format!("sha256={hex}")),
            Kind::BitbucketDc => ("x-hub-signature".into(), format!("sha256={hex}")),
        });
        if self.kind == Kind::Bitbucket {
            headers.push((
                "x-hook-uuid".into(),
                "{0c2f43a4-5b2c-4d33-8a2b-0b5e5c6d7e8f}".into(),
            ));
        }
        // The delivery's id, in each forge's own header (Gitea sends GitHub's too).
        let id = format!("delivery-{}", &sha[..12]);
        let id_headers: &[&str] = match self.kind {
            Kind::GitHub => &["x-github-delivery"],
            Kind::Gitea => &["x-gitea-delivery", "x-github-delivery"],
            Kind::Forgejo => &["x-forgejo-delivery"],
            Kind::GitLab => &["x-gitlab-event-uuid"],
            Kind::Bitbucket => &["x-request-uuid"],
            Kind::BitbucketDc => &["x-request-id"],
        };
        headers.extend(id_headers.iter().map(|h| (h.to_string(), id.clone())));
        (body, headers)
    }

    /// The forge's web root for links: the git server's (so Bitbucket Cloud, which derives
    /// the clone URL from the repository's page, clones from it).
    fn web(&self) -> String {
        self.clone_url.trim_end_matches("/octo/app.git").to_string()
    }

    fn github_repo(&self) -> Value {
        let (pull, push, admin) = self.perm;
        json!({
            "id": 42, "name": "app", "full_name": "octo/app", "private": true,
            "owner": {"login": "octo", "avatar_url": "https://avatars.example.com/octo"},
            "html_url": "https://github.com/octo/app", "clone_url": self.clone_url,
            "default_branch": BRANCH, "permissions": {"admin": admin, "push": push, "pull": pull},
        })
    }

    fn gitea_repo(&self) -> Value {
        let (pull, push, admin) = self.perm;
        json!({"id": 42, "name": "app", "full_name": "octo/app", "private": true,
            "archived": false, "empty": false,
            "owner": {"id": 3, "login": "octo", "username": "octo", "avatar_url": "/avatars/octo",
                      "visibility": "public"},
            "html_url": format!("{}/octo/app", self.web()), "clone_url": self.clone_url,
            "ssh_url": "git@gitea.example:octo/app.git", "default_branch": BRANCH,
            "permissions": {"admin": admin, "push": push, "pull": pull}})
    }

    fn gitlab_project(&self) -> Value {
        let level = match self.perm {
            (_, _, true) => 40,
            (_, true, _) => 30,
            (true, ..) => 20,
            _ => 0,
        };
        json!({"id": 42, "name": "app", "path": "app", "path_with_namespace": "octo/app",
            "namespace": {"id": 7, "name": "octo", "path": "octo", "kind": "group", "full_path": "octo"},
            "visibility": "private", "archived": false, "default_branch": BRANCH,
            "web_url": format!("{}/octo/app", self.web()), "avatar_url": null,
            "http_url_to_repo": self.clone_url, "ssh_url_to_repo": "git@gitlab.example:octo/app.git",
            "permissions": {"project_access": {"access_level": level, "notification_level": 3},
                            "group_access": null}})
    }

    fn bitbucket_user(&self) -> Value {
        json!({"type": "user", "uuid": Kind::Bitbucket.user_remote_id(), "username": "octocat",
            "nickname": "octocat", "display_name": "Octo Cat", "account_id": "557058:1001",
            "links": {"avatar": {"href": "https://avatar.example.com/octocat.png"}}})
    }

    fn bitbucket_repo(&self) -> Value {
        json!({"type": "repository", "uuid": "{1b0e8a7c-42aa-4b1f-9c3e-5d6f7a8b9c0d}",
            "full_name": "octo/app", "name": "app", "slug": "app", "is_private": true, "scm": "git",
            "mainbranch": {"type": "branch", "name": BRANCH},
            "owner": {"type": "team", "username": "octo", "display_name": "Octo",
                      "links": {"avatar": {"href": "https://avatar.example.com/octo.png"}}},
            "links": {"html": {"href": format!("{}/octo/app", self.web())},
                      "avatar": {"href": "https://avatar.example.com/app.png"}}})
    }

    fn bitbucket_permission(&self) -> &'static str {
        match self.perm {
            (_, _, true) => "admin",
            (_, true, _) => "write",
            (true, ..) => "read",
            _ => "",
        }
    }

    fn dc_repo(&self) -> Value {
        json!({"id": 42, "slug": "app", "name": "app", "scmId": "git", "state": "AVAILABLE",
            "forkable": true, "public": false,
            "project": {"key": "OCTO", "id": 21, "name": "Octo", "public": false, "type": "NORMAL"},
            "links": {"clone": [{"href": self.clone_url, "name": "http"},
                                {"href": "ssh://git@bitbucket.example:7999/octo/app.git", "name": "ssh"}],
                      "self": [{"href": format!("{}/projects/OCTO/repos/app/browse", self.web())}]}})
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The token in an `Authorization` header (`Bearer …` or Gitea's `token …`).
fn bearer(auth: &str) -> &str {
    auth.strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("token "))
        .unwrap_or("")
}

/// Hex HMAC-SHA256 of `body` under `secret`.
pub(crate) fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A form or JSON body's fields.
fn form_fields(body: &[u8]) -> HashMap<String, String> {
    if body.first() == Some(&b'{') {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        return v
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
    }
    form_urlencoded::parse(body).into_owned().collect()
}

fn query_map(query: &str) -> HashMap<String, String> {
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// The OAuth client a token request names: form fields, or HTTP Basic (Bitbucket).
fn client_of(auth: &str, form: &HashMap<String, String>) -> (String, String) {
    if let Some(basic) = auth.strip_prefix("Basic ") {
        let pair = base64::engine::general_purpose::STANDARD
            .decode(basic)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let (id, secret) = pair.split_once(':').unwrap_or(("", ""));
        return (id.into(), secret.into());
    }
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    (get("client_id"), get("client_secret"))
}

fn reply(status: u16, v: Value) -> (u16, String) {
    (status, v.to_string())
}

/// The fake forge: the OAuth pages and endpoints, and the API, at one address.
pub(crate) fn answer(state: &Shared, r: &FakeRequest) -> (u16, String) {
    let mut f = state.lock().unwrap();
    let auth = r
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    f.seen.push(Seen {
        method: r.method.clone(),
        path: r.path.clone(),
        auth: auth.clone(),
        body: String::from_utf8_lossy(&r.body).into_owned(),
    });
    let kind = f.kind;
    if r.method == "GET" && r.path == kind.authorize_path() {
        // The user approves at once: back to the server's callback with the code and state.
        let q = query_map(&r.query);
        let back = format!(
            "{}?code={GOOD_CODE}&state={}",
            q.get("redirect_uri").cloned().unwrap_or_default(),
            form_urlencoded::byte_serialize(q.get("state").cloned().unwrap_or_default().as_bytes())
                .collect::<String>()
        );
        let page = format!(
            "<!doctype html><html><body>Authorize?<script>location.replace({})</script></body></html>",
            serde_json::to_string(&back).unwrap()
        );
        return (200, page);
    }
    if r.method == "POST" && r.path == kind.token_path() {
        return token_endpoint(&mut f, &auth, &r.body);
    }
    if !f.live_tokens.iter().any(|t| t == bearer(&auth)) {
        return match kind {
            Kind::GitHub => reply(401, json!({"message": "Bad credentials"})),
            Kind::GitLab => reply(401, json!({"message": "401 Unauthorized"})),
            _ => reply(401, json!({"message": "token is required"})),
        };
    }
    let answered = match kind {
        Kind::GitHub => github(&mut f, r),
        Kind::Gitea | Kind::Forgejo => gitea(&mut f, r),
        Kind::GitLab => gitlab(&mut f, r),
        Kind::Bitbucket => bitbucket(&mut f, r),
        Kind::BitbucketDc => bitbucket_dc(&mut f, r),
    };
    answered.unwrap_or_else(|| match kind {
        Kind::GitLab => reply(404, json!({"message": "404 Not Found"})),
        Kind::Bitbucket => reply(
            404,
            json!({"type": "error", "error": {"message": "Resource not found"}}),
        ),
        Kind::BitbucketDc => reply(
            404,
            json!({"errors": [{"message": "Not found", "exceptionName": null}]}),
        ),
        _ => reply(404, json!({"message": "Not Found"})),
    })
}

/// The token endpoint: a code or refresh-token grant for the registered client.
fn token_endpoint(f: &mut Fake, auth: &str, body: &[u8]) -> (u16, String) {
    let form = form_fields(body);
    let (id, secret) = client_of(auth, &form);
    // GitHub answers errors with 200; the others with 400/401 as OAuth 2 says.
    let error_status = if f.kind == Kind::GitHub { 200 } else { 400 };
    if (id.as_str(), secret.as_str()) != (CLIENT_ID, CLIENT_SECRET) {
        return reply(
            if f.kind == Kind::GitHub { 200 } else { 401 },
            json!({"error": "invalid_client"}),
        );
    }
    let ok = match form.get("grant_type").map(String::as_str) {
        Some("refresh_token") => form.get("refresh_token") == Some(&f.refresh_token),
        // GitHub does not require grant_type for the code exchange.
        Some("authorization_code") | None => {
            form.get("code").map(String::as_str) == Some(GOOD_CODE)
        }
        Some(_) => false,
    };
    if !ok {
        return reply(error_status, json!({"error": "invalid_grant"}));
    }
    reply(200, f.issue())
}

/// A created hook: the fake keeps it with an id.
fn create_hook(f: &mut Fake, r: &FakeRequest, id_field: &str, id: Value) -> Value {
    let mut hook: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    hook[id_field] = id;
    f.hooks.push(hook.clone());
    hook
}

/// Drops the hook whose `id_field` ends the path.
fn delete_hook(f: &mut Fake, path: &str, id_field: &str) {
    let id = path
        .rsplit('/')
        .next()
        .unwrap_or("")
        .replace("%7B", "{")
        .replace("%7D", "}");
    f.hooks.retain(|h| match &h[id_field] {
        Value::String(s) => *s != id,
        other => id.parse::<u64>().ok() != other.as_u64(),
    });
}

/// Records a posted status from its JSON body (fields as the forge names them).
fn record_status(f: &mut Fake, commit: &str, body: &[u8], context: &str, link: &str) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    f.statuses.push(Posted {
        commit: commit.to_string(),
        state: s("state"),
        context: s(context),
        link: s(link),
        description: s("description"),
        body: v.clone(),
    });
    v
}

fn first_page(q: &HashMap<String, String>) -> bool {
    q.get("page").is_none_or(|p| p == "1")
}

/// The webhook and commit-status endpoints GitHub, Gitea and Forgejo share, under `repo`
/// (`/repos/octo/app`, below each forge's API root).
fn github_style_hooks_and_statuses(
    f: &mut Fake,
    r: &FakeRequest,
    path: &str,
    repo: &str,
) -> Option<(u16, String)> {
    let hooks = format!("{repo}/hooks");
    match (r.method.as_str(), path) {
        ("GET", p) if p == hooks => Some(reply(200, Value::Array(f.hooks.clone()))),
        ("POST", p) if p == hooks => {
            let id = json!(100 + f.hooks.len());
            Some(reply(201, create_hook(f, r, "id", id)))
        }
        ("DELETE", p) if p.starts_with(&format!("{hooks}/")) => {
            delete_hook(f, p, "id");
            Some((204, String::new()))
        }
        ("POST", p) if p.starts_with(&format!("{repo}/statuses/")) => {
            let sha = p.rsplit('/').next().unwrap_or("").to_string();
            let v = record_status(f, &sha, &r.body, "context", "target_url");
            Some(reply(201, v))
        }
        _ => None,
    }
}

fn github(f: &mut Fake, r: &FakeRequest) -> Option<(u16, String)> {
    if let Some(answer) = github_style_hooks_and_statuses(f, r, &r.path, "/repos/octo/app") {
        return Some(answer);
    }
    let q = query_map(&r.query);
    let v = match (r.method.as_str(), r.path.as_str()) {
        ("GET", "/user") => json!({"id": 1001, "login": "octocat", "email": "octocat@example.com",
                                   "avatar_url": "https://avatars.example.com/octocat"}),
        ("GET", "/user/emails") => {
            json!([{"email": "octocat@example.com", "primary": true, "verified": true}])
        }
        ("GET", "/user/orgs") => json!([{"login": "octo", "avatar_url": ""}]),
        ("GET", "/orgs/octo/memberships/octocat") if !f.left_org => {
            json!({"state": "active", "role": "admin", "organization": {"login": "octo"}})
        }
        ("GET", "/user/repos") if first_page(&q) && !f.removed && !f.unlisted => {
            json!([f.github_repo()])
        }
        ("GET", "/user/repos") => json!([]),
        // By name, or by GitHub's id for it (the `forge_remote_id` stored and activated by).
        ("GET", "/repos/octo/app" | "/repositories/42") if !f.removed => f.github_repo(),
        // A repository of the same organisation that octocat may push to, not administer.
        ("GET", "/repos/octo/locked") => json!({
            "id": 43, "name": "locked", "full_name": "octo/locked", "private": true,
            "owner": {"login": "octo", "avatar_url": ""},
            "html_url": "https://github.com/octo/locked", "clone_url": f.clone_url,
            "default_branch": BRANCH, "permissions": {"admin": false, "push": true, "pull": true},
        }),
        ("GET", "/repos/octo/app/contents/.woodpecker.yaml") => {
            return Some((200, f.config.clone()));
        }
        ("GET", "/repos/octo/app/pulls") => json!([
            {"number": 7, "title": "Fix the frobnicator", "state": "open",
             "head": {"ref": "fix", "sha": f.head}, "base": {"ref": "main"}},
        ]),
        // As the repository's other reads: with a token that sees the private repository.
        ("GET", "/repos/octo/app/branches/main") if !f.removed => json!({
            "name": "main",
            "commit": {"sha": f.head, "commit": {"message": "m", "author": {"name": "O", "email": "o@x", "date": "2026-11-20T10:00:00Z"}}},
        }),
        _ => return None,
    };
    Some(reply(200, v))
}

/// Gitea's `/api/v1` (Forgejo serves the same).
fn gitea(f: &mut Fake, r: &FakeRequest) -> Option<(u16, String)> {
    let q = query_map(&r.query);
    let path = r.path.strip_prefix("/api/v1")?;
    if let Some(answer) = github_style_hooks_and_statuses(f, r, path, "/repos/octo/app") {
        return Some(answer);
    }
    let v = match (r.method.as_str(), path) {
        ("GET", "/user") => json!({"id": 1001, "login": "octocat", "username": "octocat",
            "full_name": "Octo Cat", "email": "octocat@example.com", "avatar_url": "/avatars/octocat"}),
        ("GET", "/user/repos") if first_page(&q) => json!([f.gitea_repo()]),
        ("GET", "/user/repos" | "/user/orgs") => json!([]),
        ("GET", "/repos/octo/app") => f.gitea_repo(),
        ("GET", "/repos/octo/app/raw/.woodpecker.yaml") => return Some((200, f.config.clone())),
        _ => return None,
    };
    Some(reply(200, v))
}

/// GitLab's `/api/v4`; projects are named by their URL-encoded path.
fn gitlab(f: &mut Fake, r: &FakeRequest) -> Option<(u16, String)> {
    let q = query_map(&r.query);
    let path = r.path.strip_prefix("/api/v4")?;
    let project = "/projects/octo%2Fapp";
    let v = match (r.method.as_str(), path) {
        ("GET", "/user") => json!({"id": 1001, "username": "octocat", "name": "Octo Cat",
            "email": "octocat@example.com", "avatar_url": "https://gitlab.example/uploads/octocat.png",
            "state": "active"}),
        ("GET", "/projects") if first_page(&q) => json!([f.gitlab_project()]),
        ("GET", "/projects" | "/groups") => json!([]),
        ("GET", p) if p == project => f.gitlab_project(),
        ("GET", p) if p == format!("{project}/repository/files/.woodpecker.yaml/raw") => {
            return Some((200, f.config.clone()));
        }
        ("GET", p) if p == format!("{project}/hooks") => Value::Array(f.hooks.clone()),
        ("POST", p) if p == format!("{project}/hooks") => {
            let id = json!(100 + f.hooks.len());
            return Some(reply(201, create_hook(f, r, "id", id)));
        }
        ("DELETE", p) if p.starts_with(&format!("{project}/hooks/")) => {
            delete_hook(f, p, "id");
            return Some((204, String::new()));
        }
        ("POST", p) if p.starts_with(&format!("{project}/statuses/")) => {
            let sha = p.rsplit('/').next().unwrap_or("").to_string();
            let v = record_status(f, &sha, &r.body, "name", "target_url");
            return Some(reply(201, v));
        }
        _ => return None,
    };
    Some(reply(200, v))
}

/// Bitbucket Cloud's `/2.0` (its paged lists are `{values, page, pagelen, next}`).
fn bitbucket(f: &mut Fake, r: &FakeRequest) -> Option<(u16, String)> {
    let q = query_map(&r.query);
    let path = r.path.strip_prefix("/2.0")?;
    let repo = "/repositories/octo/app";
    let page = |values: Value| json!({"values": values, "page": 1, "pagelen": 100, "size": values.as_array().map_or(0, Vec::len)});
    let v = match (r.method.as_str(), path) {
        ("GET", "/user") => f.bitbucket_user(),
        ("GET", "/user/emails") => page(json!([
            {"type": "email", "email": "octocat@example.com", "is_primary": true, "is_confirmed": true}
        ])),
        ("GET", "/user/permissions/repositories") if first_page(&q) => page(json!([
            {"type": "repository_permission", "permission": f.bitbucket_permission(),
             "repository": f.bitbucket_repo(), "user": f.bitbucket_user()}
        ])),
        ("GET", "/user/permissions/repositories" | "/user/workspaces") => page(json!([])),
        ("GET", "/user/workspaces/octo/permissions/repositories") => page(json!([
            {"type": "repository_permission", "permission": f.bitbucket_permission(),
             "repository": f.bitbucket_repo()}
        ])),
        ("GET", p) if p == repo => f.bitbucket_repo(),
        ("GET", p)
            if p.starts_with(&format!("{repo}/src/")) && p.ends_with("/.woodpecker.yaml") =>
        {
            return Some((200, f.config.clone()));
        }
        ("GET", p) if p == format!("{repo}/hooks") => page(Value::Array(f.hooks.clone())),
        ("POST", p) if p == format!("{repo}/hooks") => {
            let id = json!(format!("{{hook-{}}}", f.hooks.len() + 1));
            return Some(reply(201, create_hook(f, r, "uuid", id)));
        }
        ("DELETE", p) if p.starts_with(&format!("{repo}/hooks/")) => {
            delete_hook(f, p, "uuid");
            return Some((204, String::new()));
        }
        ("POST", p)
            if p.starts_with(&format!("{repo}/commit/")) && p.ends_with("/statuses/build") =>
        {
            let sha = p.split('/').nth(5).unwrap_or("").to_string();
            let v = record_status(f, &sha, &r.body, "name", "url");
            return Some(reply(201, v));
        }
        _ => return None,
    };
    Some(reply(200, v))
}

/// Bitbucket Data Center's REST 1.0 (paged lists are `{values, isLastPage, start, size}`).
fn bitbucket_dc(f: &mut Fake, r: &FakeRequest) -> Option<(u16, String)> {
    let q = query_map(&r.query);
    let repo = "/rest/api/1.0/projects/OCTO/repos/app";
    let page = |values: Value| {
        let size = values.as_array().map_or(0, Vec::len);
        json!({"values": values, "isLastPage": true, "start": 0, "limit": 25, "size": size})
    };
    let (_, push, admin) = f.perm;
    let v = match (r.method.as_str(), r.path.as_str()) {
        // whoami answers the slug as plain text.
        ("GET", "/plugins/servlet/applinks/whoami") => return Some((200, "octocat".into())),
        ("GET", "/rest/api/1.0/users/octocat") => json!({"name": "octocat", "slug": "octocat",
            "id": 1001, "emailAddress": "octocat@example.com", "displayName": "Octo Cat",
            "active": true, "type": "NORMAL"}),
        ("GET", "/rest/api/1.0/repos") => {
            let wanted = match q.get("permission").map(String::as_str) {
                Some("REPO_ADMIN") => admin,
                Some("REPO_WRITE") => push,
                _ => true,
            };
            let first = q.get("start").is_none_or(|s| s == "0");
            let named = q.get("name").is_none_or(|n| n == "app");
            if wanted && first && named {
                page(json!([f.dc_repo()]))
            } else {
                page(json!([]))
            }
        }
        ("GET", "/rest/api/1.0/projects") => page(json!([])),
        ("GET", p) if p == repo => f.dc_repo(),
        ("GET", p) if p == format!("{repo}/default-branch") => {
            json!({"id": "refs/heads/main", "displayId": BRANCH, "type": "BRANCH", "isDefault": true})
        }
        ("GET", p) if p == format!("{repo}/raw/.woodpecker.yaml") => {
            return Some((200, f.config.clone()));
        }
        ("GET", p) if p == format!("{repo}/webhooks") => {
            if !admin {
                return Some(reply(
                    401,
                    json!({"errors": [{"message": "You are not permitted to access this resource"}]}),
                ));
            }
            page(Value::Array(f.hooks.clone()))
        }
        ("POST", p) if p == format!("{repo}/webhooks") => {
            let id = json!(100 + f.hooks.len());
            return Some(reply(201, create_hook(f, r, "id", id)));
        }
        ("DELETE", p) if p.starts_with(&format!("{repo}/webhooks/")) => {
            delete_hook(f, p, "id");
            return Some((204, String::new()));
        }
        ("POST", p) if p.starts_with("/rest/build-status/1.0/commits/") => {
            let sha = p.rsplit('/').next().unwrap_or("").to_string();
            record_status(f, &sha, &r.body, "name", "url");
            return Some((204, String::new()));
        }
        _ => return None,
    };
    Some(reply(200, v))
}
