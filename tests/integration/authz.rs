//! The generated authorization matrix: every route of the router table (`App::routes`, never a
//! list written here) is called as every principal, and the answer must be the one its rule in
//! [`RULES`] predicts. A route without a rule fails the test, and so does a rule for a route
//! that no longer exists, so a new route cannot ship without someone deciding who may call it.
//!
//! Principals: anonymous; three credentials that are not user tokens (an agent token, a hook
//! token, the algod admin token), which the CI API must treat as anonymous; `bob` (a stranger
//! to Alice's repositories); `dave` (pull permission on Alice's repositories: a reader);
//! `carol` (an admin permission row on Alice's repositories, as activating or moving one
//! repository gives: a repo admin who is *not* an organisation admin); `alice` (owner of the
//! namespace `alice`, her personal organisation) and `root` (instance admin).
//!
//! "Allowed" means authorisation passed: not 401/403, not a 404 that hides a record from the
//! caller ("Repository not found", "Organization not found", "no event with id"), not the
//! hook's 400 for a missing token, and no 5xx. A 400/409/422 for a deliberately minimal body is
//! fine, and so is "Cron not found" for the second allowed caller of a DELETE (the first one
//! removed it, past the same authorisation). Refusals must have the exact status, and must not
//! depend on the body: refused principals send one that does not parse, so a handler that reads
//! the body before authorising fails here. Per route, the refused principals go first, so a
//! deletion by an allowed one cannot change what they see; records that routes delete or move
//! are throw-away fixtures of their own, and a rotated token (`DELETE /api/user/token`) replaces
//! the principal's old one. `AUTHZ_TRACE=1` prints every call.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};
use woodlark::modules::participation::ADMIN_TOKEN_FILE;

use woodlark::participation::ids::encode_address;
use woodlark::participation::keygen::{Plan, generate};
use woodlark::store::repos::{self, Perm};

use crate::pipelines::push_files;
use crate::util::{Resp, TestServer, git};

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Anon,
    /// A registered agent's token (global agent).
    Agent,
    /// The hook token of `alice/hello`.
    Hook,
    /// The participation (algod) admin token.
    Algod,
    Bob,
    /// `dave`: pull permission on Alice's repositories.
    Reader,
    /// `carol`: admin permission rows on Alice's repositories, no standing in her org.
    Collab,
    Alice,
    Admin,
}

const EVERYONE: [Who; 9] = [
    Who::Anon,
    Who::Agent,
    Who::Hook,
    Who::Algod,
    Who::Bob,
    Who::Reader,
    Who::Collab,
    Who::Alice,
    Who::Admin,
];

/// Who may call a route. `access.rs` has the rules behind these.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Anyone, signed in or not (what they see may differ).
    Public,
    /// Any signed-in user, for themselves: anonymous 401.
    User,
    /// Instance admins: anonymous 401, other users 403.
    Admin,
    /// Pull permission on the (private) repository: anonymous 401, strangers 404.
    RepoRead,
    /// Push permission: as `RepoRead`, and readers 403.
    RepoPush,
    /// Repo admin: as `RepoRead`, and readers 403.
    RepoAdmin,
    /// `POST /repos/{id}/move?to=alice/…`: repo admin *and* the right to put repositories into
    /// the target namespace (instance admin, own namespace, org admin), so a repo admin who is
    /// no org admin of `alice` gets 403.
    RepoMove,
    /// `POST /repos?forge_remote_id=alice/…`: the right to put repositories into namespace
    /// `alice`; everyone else signed in gets 403.
    Activate,
    /// Organisation members (org admin, or push/admin on one of its repositories): anonymous
    /// 401, others 403.
    OrgMember,
    /// Organisation lookup by name: members only; others 404 (the name does not leak).
    OrgLookup,
    /// Organisation admins (instance admin or the namespace's own user, never a permission on
    /// one repository): anonymous 401, everyone else 403.
    OrgAdmin,
    /// One event of the feed: anonymous 401, callers who may not see its record 404.
    EventRead,
    /// The agent protocol: only an agent token; user tokens are no agent (401).
    AgentToken,
    /// `POST /hook`: only the repository's signed hook token; without one the answer is
    /// upstream's 400 "failure to parse token from hook".
    HookToken,
    /// The algod-compatible interface: only its admin token (401 "Invalid API Token").
    Algod,
    /// A page of the built-in web UI for signed-in users only: anyone else is sent to the
    /// sign-in page (303), where the API would answer 401.
    SignInPage,
    /// The built-in UI's admin page: anyone not signed in is sent to the sign-in page (303),
    /// other users get the API's 403.
    AdminPage,
}

/// What a principal must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Allowed,
    Status(u16),
}

impl Rule {
    fn expect(self, who: Who) -> Expect {
        use Expect::{Allowed, Status};
        use Who::*;
        let user = matches!(who, Bob | Reader | Collab | Alice | Admin);
        match self {
            Rule::Public => Allowed,
            Rule::AgentToken if who == Agent => Allowed,
            Rule::AgentToken => Status(401),
            Rule::HookToken if who == Hook => Allowed,
            Rule::HookToken => Status(400),
            Rule::Algod if who == Algod => Allowed,
            Rule::Algod => Status(401),
            Rule::SignInPage if !user => Status(303),
            Rule::SignInPage => Allowed,
            Rule::AdminPage if !user => Status(303),
            Rule::AdminPage if who == Admin => Allowed,
            Rule::AdminPage => Status(403),
            _ if !user => Status(401),
            Rule::User => Allowed,
            Rule::Admin if who == Admin => Allowed,
            Rule::Admin => Status(403),
            Rule::RepoRead | Rule::EventRead if who == Bob => Status(404),
            Rule::RepoRead | Rule::EventRead => Allowed,
            Rule::RepoPush | Rule::RepoAdmin => match who {
                Bob => Status(404),
                Reader => Status(403),
                _ => Allowed,
            },
            Rule::RepoMove => match who {
                Bob => Status(404),
                Reader | Collab => Status(403),
                _ => Allowed,
            },
            Rule::Activate | Rule::OrgAdmin => match who {
                Bob | Reader | Collab => Status(403),
                _ => Allowed,
            },
            Rule::OrgMember => match who {
                Bob | Reader => Status(403),
                _ => Allowed,
            },
            Rule::OrgLookup => match who {
                Bob | Reader => Status(404),
                _ => Allowed,
            },
        }
    }
}

/// The rule of every route, by its router name (`METHOD /pattern`, default mounts).
const RULES: &[(&str, Rule)] = &[
    // The caller and user administration.
    ("GET /api/user", Rule::User),
    ("POST /api/user/token", Rule::User),
    ("GET /api/user/feed", Rule::User),
    ("GET /api/user/repos", Rule::User),
    ("POST /api/user/repos/refresh", Rule::User),
    ("DELETE /api/user/token", Rule::User),
    ("GET /api/users", Rule::Admin),
    ("POST /api/users", Rule::Admin),
    ("GET /api/users/{login}", Rule::Admin),
    ("GET /api/users/{login}/avatar.svg", Rule::Public),
    ("PATCH /api/users/{login}", Rule::Admin),
    ("DELETE /api/users/{login}", Rule::Admin),
    ("GET /api/log-level", Rule::Admin),
    ("POST /api/log-level", Rule::Admin),
    ("GET /api/signature/public-key", Rule::User),
    // Forges: anyone lists and reads (non-admins see id, type and url only); admins write.
    ("GET /api/forges", Rule::Public),
    ("POST /api/forges", Rule::Admin),
    ("GET /api/forges/{forge_id}", Rule::Public),
    ("PATCH /api/forges/{forge_id}", Rule::Admin),
    ("DELETE /api/forges/{forge_id}", Rule::Admin),
    // Repositories.
    ("GET /api/repos", Rule::Admin),
    ("POST /api/repos", Rule::Activate),
    ("POST /api/repos/repair", Rule::Admin),
    ("GET /api/repos/lookup/{*full_name}", Rule::RepoRead),
    ("GET /api/repos/{repo_id}", Rule::RepoRead),
    ("PATCH /api/repos/{repo_id}", Rule::RepoAdmin),
    ("DELETE /api/repos/{repo_id}", Rule::RepoAdmin),
    ("GET /api/repos/{repo_id}/permissions", Rule::RepoRead),
    ("GET /api/repos/{repo_id}/branches", Rule::RepoRead),
    ("GET /api/repos/{repo_id}/pull_requests", Rule::RepoRead),
    ("POST /api/repos/{repo_id}/chown", Rule::RepoAdmin),
    ("POST /api/repos/{repo_id}/repair", Rule::RepoAdmin),
    ("POST /api/repos/{repo_id}/move", Rule::RepoMove),
    // Organisations.
    ("GET /api/orgs", Rule::Admin),
    ("GET /api/orgs/lookup/{*org_full_name}", Rule::OrgLookup),
    ("GET /api/org/lookup/{*org_full_name}", Rule::OrgLookup),
    ("GET /api/orgs/{org_id}", Rule::OrgMember),
    ("DELETE /api/orgs/{org_id}", Rule::Admin),
    // The caller's own standing: `{member: false, admin: false}` for anonymous, as upstream.
    ("GET /api/orgs/{org_id}/permissions", Rule::Public),
    ("POST /api/hook", Rule::HookToken),
    // Pipelines and logs.
    ("GET /api/repos/{repo_id}/pipelines", Rule::RepoRead),
    ("POST /api/repos/{repo_id}/pipelines", Rule::RepoPush),
    ("GET /api/repos/{repo_id}/pipelines/latest", Rule::RepoRead),
    (
        "GET /api/repos/{repo_id}/pipelines/{number}",
        Rule::RepoRead,
    ),
    (
        "POST /api/repos/{repo_id}/pipelines/{number}",
        Rule::RepoPush,
    ),
    (
        "DELETE /api/repos/{repo_id}/pipelines/{number}",
        Rule::RepoAdmin,
    ),
    (
        "POST /api/repos/{repo_id}/pipelines/{number}/cancel",
        Rule::RepoPush,
    ),
    (
        "POST /api/repos/{repo_id}/pipelines/{number}/approve",
        Rule::RepoPush,
    ),
    (
        "POST /api/repos/{repo_id}/pipelines/{number}/decline",
        Rule::RepoPush,
    ),
    (
        "GET /api/repos/{repo_id}/pipelines/{number}/config",
        Rule::RepoRead,
    ),
    (
        "GET /api/repos/{repo_id}/pipelines/{number}/metadata",
        Rule::RepoRead,
    ),
    (
        "GET /api/repos/{repo_id}/logs/{number}/{step_id}",
        Rule::RepoRead,
    ),
    (
        "DELETE /api/repos/{repo_id}/logs/{number}/{step_id}",
        Rule::RepoPush,
    ),
    (
        "GET /api/repos/{repo_id}/logs/{number}/{step_id}/download",
        Rule::RepoRead,
    ),
    ("DELETE /api/repos/{repo_id}/logs/{number}", Rule::RepoPush),
    ("POST /api/repos/{repo_id}/cron/{cron}", Rule::RepoAdmin),
    ("GET /api/queue/info", Rule::Admin),
    ("POST /api/queue/pause", Rule::Admin),
    ("POST /api/queue/resume", Rule::Admin),
    ("GET /api/queue/norunningpipelines", Rule::Admin),
    ("GET /api/pipelines", Rule::Admin),
    // The agent protocol.
    ("POST /api/agent/next", Rule::AgentToken),
    (
        "POST /api/agent/workflows/{workflow_id}/init",
        Rule::AgentToken,
    ),
    (
        "POST /api/agent/workflows/{workflow_id}/steps",
        Rule::AgentToken,
    ),
    (
        "POST /api/agent/workflows/{workflow_id}/logs",
        Rule::AgentToken,
    ),
    (
        "POST /api/agent/workflows/{workflow_id}/extend",
        Rule::AgentToken,
    ),
    (
        "GET /api/agent/workflows/{workflow_id}/canceled",
        Rule::AgentToken,
    ),
    (
        "POST /api/agent/workflows/{workflow_id}/done",
        Rule::AgentToken,
    ),
    (
        "POST /api/agent/workflows/{workflow_id}/hand-over",
        Rule::AgentToken,
    ),
    // Server-sent events: anyone may listen to the pipelines they may see.
    ("GET /api/stream/events", Rule::Public),
    (
        "GET /api/stream/logs/{repo_id}/{number}/{step_id}",
        Rule::RepoRead,
    ),
    // Badges follow the repository's visibility.
    ("GET /api/badges/{repo_id}/status.svg", Rule::RepoRead),
    ("GET /api/badges/{repo_id}/cc.xml", Rule::RepoRead),
    ("GET /api/badges/{owner}/{name}/status.svg", Rule::RepoRead),
    ("GET /api/badges/{owner}/{name}/cc.xml", Rule::RepoRead),
    ("GET /api/plugins", Rule::Admin),
    // Secrets at three scopes; global ones are read (without values) by every user, as
    // upstream, and written by instance admins.
    ("GET /api/secrets", Rule::User),
    ("POST /api/secrets", Rule::Admin),
    ("GET /api/secrets/{secret}", Rule::User),
    ("PATCH /api/secrets/{secret}", Rule::Admin),
    ("DELETE /api/secrets/{secret}", Rule::Admin),
    ("GET /api/orgs/{org_id}/secrets", Rule::OrgAdmin),
    ("POST /api/orgs/{org_id}/secrets", Rule::OrgAdmin),
    ("GET /api/orgs/{org_id}/secrets/{secret}", Rule::OrgAdmin),
    ("PATCH /api/orgs/{org_id}/secrets/{secret}", Rule::OrgAdmin),
    ("DELETE /api/orgs/{org_id}/secrets/{secret}", Rule::OrgAdmin),
    ("GET /api/repos/{repo_id}/secrets", Rule::RepoAdmin),
    ("POST /api/repos/{repo_id}/secrets", Rule::RepoAdmin),
    ("GET /api/repos/{repo_id}/secrets/{secret}", Rule::RepoAdmin),
    (
        "PATCH /api/repos/{repo_id}/secrets/{secret}",
        Rule::RepoAdmin,
    ),
    (
        "DELETE /api/repos/{repo_id}/secrets/{secret}",
        Rule::RepoAdmin,
    ),
    // Registries at three scopes; global ones as global secrets (read without passwords).
    ("GET /api/registries", Rule::User),
    ("POST /api/registries", Rule::Admin),
    ("GET /api/registries/{registry}", Rule::User),
    ("PATCH /api/registries/{registry}", Rule::Admin),
    ("DELETE /api/registries/{registry}", Rule::Admin),
    ("GET /api/orgs/{org_id}/registries", Rule::OrgAdmin),
    ("POST /api/orgs/{org_id}/registries", Rule::OrgAdmin),
    (
        "GET /api/orgs/{org_id}/registries/{registry}",
        Rule::OrgAdmin,
    ),
    (
        "PATCH /api/orgs/{org_id}/registries/{registry}",
        Rule::OrgAdmin,
    ),
    (
        "DELETE /api/orgs/{org_id}/registries/{registry}",
        Rule::OrgAdmin,
    ),
    ("GET /api/repos/{repo_id}/registries", Rule::RepoAdmin),
    ("POST /api/repos/{repo_id}/registries", Rule::RepoAdmin),
    (
        "GET /api/repos/{repo_id}/registries/{registry}",
        Rule::RepoAdmin,
    ),
    (
        "PATCH /api/repos/{repo_id}/registries/{registry}",
        Rule::RepoAdmin,
    ),
    (
        "DELETE /api/repos/{repo_id}/registries/{registry}",
        Rule::RepoAdmin,
    ),
    // Agents: every agent for instance admins, an organisation's own for its admins.
    ("GET /api/agents", Rule::Admin),
    ("POST /api/agents", Rule::Admin),
    ("GET /api/agents/{agent_id}", Rule::Admin),
    ("PATCH /api/agents/{agent_id}", Rule::Admin),
    ("DELETE /api/agents/{agent_id}", Rule::Admin),
    ("GET /api/agents/{agent_id}/tasks", Rule::Admin),
    ("GET /api/orgs/{org_id}/agents", Rule::OrgAdmin),
    ("POST /api/orgs/{org_id}/agents", Rule::OrgAdmin),
    ("PATCH /api/orgs/{org_id}/agents/{agent_id}", Rule::OrgAdmin),
    (
        "DELETE /api/orgs/{org_id}/agents/{agent_id}",
        Rule::OrgAdmin,
    ),
    // Cron jobs.
    ("GET /api/repos/{repo_id}/cron", Rule::RepoAdmin),
    ("POST /api/repos/{repo_id}/cron", Rule::RepoAdmin),
    ("GET /api/repos/{repo_id}/cron/{cron}", Rule::RepoAdmin),
    ("PATCH /api/repos/{repo_id}/cron/{cron}", Rule::RepoAdmin),
    ("DELETE /api/repos/{repo_id}/cron/{cron}", Rule::RepoAdmin),
    // Server root: health and version for probes; metrics are open unless
    // `server.metrics_token` is set (it is not here).
    ("GET /healthz", Rule::Public),
    ("GET /version", Rule::Public),
    ("GET /metrics", Rule::Public),
    // The events feed: every signed-in user, filtered to what they may see.
    ("GET /events", Rule::User),
    ("GET /events/{id}", Rule::EventRead),
    // The algod-compatible participation interface and debug settings.
    ("GET /debug/settings/pprof", Rule::Algod),
    ("PUT /debug/settings/pprof", Rule::Algod),
    ("GET /debug/settings/config", Rule::Algod),
    ("GET /debug/pprof/profile", Rule::Algod),
    ("GET /v2/participation", Rule::Algod),
    ("POST /v2/participation", Rule::Algod),
    ("POST /v2/participation/generate/{address}", Rule::Algod),
    ("GET /v2/participation/{participation_id}", Rule::Algod),
    ("DELETE /v2/participation/{participation_id}", Rule::Algod),
    ("POST /v2/participation/{participation_id}", Rule::Algod),
    // The web UI: its page, its configuration and the sign-in pages are for everyone (the
    // personal access token in the sign-in form is the credential).
    ("GET /", Rule::Public),
    ("GET /web-config.js", Rule::Public),
    ("GET /authorize", Rule::Public),
    ("POST /authorize", Rule::Public),
    ("GET /logout", Rule::Public),
    ("GET /login", Rule::Public),
    ("GET /assets/custom.js", Rule::Public),
    ("GET /assets/custom.css", Rule::Public),
    // The built-in web UI (`[web] dir` empty): its pages decide as the API does.
    ("GET /assets/woodlark.css", Rule::Public),
    ("GET /assets/woodlark.js", Rule::Public),
    ("GET /user", Rule::SignInPage),
    ("GET /repos", Rule::SignInPage),
    ("GET /repos/{repo_id}", Rule::RepoRead),
    ("GET /repos/{repo_id}/pipeline/{number}", Rule::RepoRead),
    (
        "GET /repos/{repo_id}/pipeline/{number}/{step_pid}",
        Rule::RepoRead,
    ),
    (
        "GET /repos/{repo_id}/pipeline/{number}/config",
        Rule::RepoRead,
    ),
    (
        "GET /repos/{repo_id}/pipeline/{number}/changed-files",
        Rule::RepoRead,
    ),
    (
        "GET /repos/{repo_id}/pipeline/{number}/errors",
        Rule::RepoRead,
    ),
    (
        "GET /repos/{repo_id}/pipeline/{number}/debug",
        Rule::RepoRead,
    ),
    // The built-in UI's settings, admin and user forms: as the API routes they post through.
    ("GET /repos/{repo_id}/settings", Rule::RepoAdmin),
    ("POST /repos/{repo_id}/settings", Rule::RepoAdmin),
    ("POST /repos/{repo_id}/settings/secrets", Rule::RepoAdmin),
    (
        "POST /repos/{repo_id}/settings/secrets/edit",
        Rule::RepoAdmin,
    ),
    (
        "POST /repos/{repo_id}/settings/secrets/delete",
        Rule::RepoAdmin,
    ),
    ("POST /repos/{repo_id}/settings/registries", Rule::RepoAdmin),
    (
        "POST /repos/{repo_id}/settings/registries/delete",
        Rule::RepoAdmin,
    ),
    ("POST /repos/{repo_id}/settings/crons", Rule::RepoAdmin),
    (
        "POST /repos/{repo_id}/settings/crons/delete",
        Rule::RepoAdmin,
    ),
    ("POST /repos/{repo_id}/settings/crons/run", Rule::RepoAdmin),
    ("GET /admin", Rule::AdminPage),
    ("GET /repos/add", Rule::SignInPage),
    ("POST /repos/add", Rule::User),
    ("GET /orgs/{org_id}", Rule::OrgMember),
    ("GET /org/{org_id}/settings", Rule::OrgAdmin),
    ("POST /org/{org_id}/settings/secrets", Rule::OrgAdmin),
    ("POST /org/{org_id}/settings/secrets/edit", Rule::OrgAdmin),
    ("POST /org/{org_id}/settings/secrets/delete", Rule::OrgAdmin),
    ("POST /org/{org_id}/settings/registries", Rule::OrgAdmin),
    (
        "POST /org/{org_id}/settings/registries/delete",
        Rule::OrgAdmin,
    ),
    ("GET /repos/{repo_id}/branches", Rule::RepoRead),
    ("GET /repos/{repo_id}/pull-requests", Rule::RepoRead),
    ("POST /admin/users", Rule::Admin),
    ("POST /admin/users/delete", Rule::Admin),
    ("POST /admin/users/admin", Rule::Admin),
    ("POST /admin/agents", Rule::Admin),
    ("POST /admin/agents/delete", Rule::Admin),
    ("POST /admin/queue/pause", Rule::Admin),
    ("POST /admin/queue/resume", Rule::Admin),
    ("POST /admin/secrets", Rule::Admin),
    ("POST /admin/secrets/edit", Rule::Admin),
    ("POST /admin/secrets/delete", Rule::Admin),
    ("POST /admin/registries", Rule::Admin),
    ("POST /admin/registries/delete", Rule::Admin),
    ("POST /user/token", Rule::User),
    ("POST /user/token/reset", Rule::User),
    ("POST /logout", Rule::Public),
    // The pipeline page's action forms: the API's own rule for each action.
    (
        "POST /repos/{repo_id}/pipeline/{number}/cancel",
        Rule::RepoPush,
    ),
    (
        "POST /repos/{repo_id}/pipeline/{number}/restart",
        Rule::RepoPush,
    ),
    (
        "POST /repos/{repo_id}/pipeline/{number}/approve",
        Rule::RepoPush,
    ),
    (
        "POST /repos/{repo_id}/pipeline/{number}/decline",
        Rule::RepoPush,
    ),
    // A step's log lines by range (the live view and long logs): the log's own rule.
    (
        "GET /repos/{repo_id}/pipeline/{number}/{step_pid}/lines",
        Rule::RepoRead,
    ),
    // The manual-run form: the API's manual run's rule.
    ("GET /repos/{repo_id}/manual", Rule::RepoPush),
    ("POST /repos/{repo_id}/manual", Rule::RepoPush),
];

/// Routes that may legitimately hold an allowed caller's request open (long polls): no answer
/// within [`HELD_OPEN_WAIT`] counts as allowed. Refusals must still come at once.
const HELD_OPEN: &[&str] = &[
    "POST /api/agent/next",
    "GET /api/agent/workflows/{workflow_id}/canceled",
    "GET /api/queue/norunningpipelines",
];
const HELD_OPEN_WAIT: Duration = Duration::from_millis(1500);
/// Any other request must answer within this.
const WAIT: Duration = Duration::from_secs(20);

/// What refused principals send as the body.
const UNPARSABLE: &str = "this is not JSON {";

/// Bodies of 404s and 400s that mean "not for you" rather than "no such thing".
const DENIAL_BODIES: &[(u16, &str)] = &[
    (404, "Repository not found"),
    (404, "Organization not found"),
    (404, "no event with id"),
    (400, "failure to parse token from hook"),
];

fn denied(r: &Resp) -> bool {
    let status = r.status.as_u16();
    let text = r.text();
    matches!(status, 401 | 403)
        || DENIAL_BODIES
            .iter()
            .any(|(s, body)| *s == status && text.contains(body))
}

/// The records path parameters resolve to. Everything belongs to Alice (or to nobody, for
/// instance-level records); what a route deletes or moves is a throw-away record of its own.
struct Fixture {
    forge: i64,
    /// Deleted by `DELETE /api/forges/{forge_id}`.
    junk_forge: i64,
    /// `alice/hello`, private.
    repo: i64,
    /// Deactivated by `DELETE /api/repos/{repo_id}`.
    trash_repo: i64,
    /// Moved by `POST /api/repos/{repo_id}/move` (to `alice/moved`).
    mover_repo: i64,
    /// Alice's personal organisation.
    org: i64,
    /// Deleted by `DELETE /api/orgs/{org_id}` (the personal org of user `yan`).
    junk_org: i64,
    /// Pipeline 1 (from a push): read, restarted, approved.
    pipeline: i64,
    step: i64,
    /// The same step's number within its pipeline (the web UI's step pages).
    step_pid: i64,
    workflow: i64,
    /// Pipeline 2 (manual): canceled, its logs deleted.
    scratch_pipeline: i64,
    scratch_step: i64,
    /// Pipeline 3 (manual, canceled): deleted.
    doomed_pipeline: i64,
    cron: i64,
    doomed_cron: i64,
    agent: i64,
    doomed_agent: i64,
    org_agent: i64,
    doomed_org_agent: i64,
    event: String,
    partkey: String,
    doomed_partkey: String,
    address: String,
    head: String,
}

impl Fixture {
    /// The value of path parameter `name` in `route`.
    fn param(&self, route: &str, name: &str) -> Option<String> {
        let delete = route.starts_with("DELETE ");
        let scratch = [
            "POST /api/repos/{repo_id}/pipelines/{number}/cancel",
            "POST /repos/{repo_id}/pipeline/{number}/cancel",
            "DELETE /api/repos/{repo_id}/logs/{number}/{step_id}",
            "DELETE /api/repos/{repo_id}/logs/{number}",
        ]
        .contains(&route);
        let org_route = route.contains(" /api/orgs/{org_id}");
        let value = match name {
            "repo_id" if route == "DELETE /api/repos/{repo_id}" => self.trash_repo.to_string(),
            "repo_id" if route == "POST /api/repos/{repo_id}/move" => self.mover_repo.to_string(),
            "repo_id" => self.repo.to_string(),
            "number" if route == "DELETE /api/repos/{repo_id}/pipelines/{number}" => {
                self.doomed_pipeline.to_string()
            }
            "number" if scratch => self.scratch_pipeline.to_string(),
            "number" => self.pipeline.to_string(),
            "step_id" if scratch => self.scratch_step.to_string(),
            "step_id" => self.step.to_string(),
            "step_pid" => self.step_pid.to_string(),
            "workflow_id" => self.workflow.to_string(),
            "org_id" if route == "DELETE /api/orgs/{org_id}" => self.junk_org.to_string(),
            "org_id" => self.org.to_string(),
            "secret" if delete => "doomed".into(),
            "secret" => "token".into(),
            "registry" if delete => "doomed.example.com".into(),
            "registry" => "registry.example.com".into(),
            "cron" if delete => self.doomed_cron.to_string(),
            "cron" => self.cron.to_string(),
            "agent_id" if org_route && delete => self.doomed_org_agent.to_string(),
            "agent_id" if org_route => self.org_agent.to_string(),
            "agent_id" if delete => self.doomed_agent.to_string(),
            "agent_id" => self.agent.to_string(),
            "login" if delete => "zed".into(),
            "login" => "bob".into(),
            "forge_id" if delete => self.junk_forge.to_string(),
            "forge_id" => self.forge.to_string(),
            "full_name" => "alice/hello".into(),
            "org_full_name" | "owner" => "alice".into(),
            "name" => "hello".into(),
            "id" => self.event.clone(),
            "participation_id" if delete => self.doomed_partkey.clone(),
            "participation_id" => self.partkey.clone(),
            "address" => self.address.clone(),
            _ => return None,
        };
        Some(value)
    }

    /// The query string a route needs to reach its authorisation decision.
    fn query(&self, route: &str) -> String {
        match route {
            "POST /api/repos" => format!("?forge_remote_id=alice/new&forge_id={}", self.forge),
            "POST /api/repos/{repo_id}/move" => "?to=alice/moved".into(),
            _ => String::new(),
        }
    }

    /// The request body: one that parses (so authorisation decides), valid where cheap.
    fn body(&self, route: &str) -> Option<String> {
        let (method, pattern) = route.split_once(' ').unwrap();
        if matches!(method, "GET" | "DELETE") {
            return None;
        }
        let body = if pattern.ends_with("/secrets") {
            json!({"name": "extra", "value": "v", "events": ["push"]}).to_string()
        } else if pattern.ends_with("/registries") {
            json!({"address": "extra.example.com", "username": "u", "password": "p"}).to_string()
        } else if pattern.ends_with("/agents") {
            json!({"name": "authz-extra"}).to_string()
        } else {
            match route {
                "POST /api/users" => json!({"login": "newbie"}).to_string(),
                "POST /api/log-level" => json!({"log-level": "info"}).to_string(),
                "POST /api/repos/{repo_id}/cron" => {
                    json!({"name": "extra", "schedule": "@daily"}).to_string()
                }
                "POST /api/hook" => format!("{} {} refs/heads/main\n", "0".repeat(40), self.head),
                _ => "{}".into(),
            }
        };
        Some(body)
    }

    /// `route` with its parameters filled in, or the names of the parameters without a value.
    fn path(&self, route: &str) -> Result<String, Vec<String>> {
        let pattern = route.split_once(' ').unwrap().1;
        let mut out = String::new();
        let mut missing = Vec::new();
        let mut rest = pattern;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = open + rest[open..].find('}').unwrap();
            let name = rest[open + 1..close].trim_start_matches('*');
            match self.param(route, name) {
                Some(v) => out.push_str(&v),
                None => missing.push(name.to_string()),
            }
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        if missing.is_empty() {
            Ok(out + &self.query(route))
        } else {
            Err(missing)
        }
    }
}

async fn user_id(s: &TestServer, token: &str) -> i64 {
    s.http
        .get("/api/user", Some(token))
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap()
}

async fn post_json(s: &TestServer, path: &str, token: &str, body: Value) -> Value {
    s.http
        .post(path, Some(token), &body.to_string())
        .await
        .expect(200)
        .json()
}

async fn new_partkey(s: &TestServer, parent: u8) -> String {
    let key = tokio::task::spawn_blocking(move || {
        generate(&Plan::new([parent; 32], 0, 100, 0).expect("plan"))
    })
    .await
    .unwrap();
    s.app_state
        .keyring
        .install(key)
        .await
        .expect("install key")
        .id
}

/// Builds every record the routes' parameters name; returns the fixture and the tokens.
async fn fixture(s: &TestServer) -> (Fixture, BTreeMap<Who, String>) {
    let p = s.principals().await;
    let dave = s.user("dave", false).await;
    let carol = s.user("carol", false).await;
    s.user("zed", false).await;
    s.user("yan", false).await;

    let forge = s.git_forge(&p.admin).await;
    let junk_dir = s.dir.path().join("junk-forge");
    std::fs::create_dir_all(&junk_dir).unwrap();
    let junk_forge = post_json(
        s,
        "/api/forges",
        &p.admin,
        json!({"type": "git", "url": format!("file://{}", junk_dir.display())}),
    )
    .await["id"]
        .as_i64()
        .unwrap();

    let hello = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let repo = hello["id"].as_i64().unwrap();
    let org = hello["org_id"].as_i64().unwrap();
    assert_eq!(
        hello["private"], true,
        "the matrix needs a private repository"
    );
    let trash_repo = s.git_repo(&p.admin, &p.alice, "alice/trash").await["id"]
        .as_i64()
        .unwrap();
    let mover_repo = s.git_repo(&p.admin, &p.alice, "alice/mover").await["id"]
        .as_i64()
        .unwrap();
    s.init_git_repo("alice/moved");
    s.init_git_repo("alice/new");
    let junk_org = s
        .http
        .get("/api/users/yan", Some(&p.admin))
        .await
        .expect(200)
        .json()["org_id"]
        .as_i64()
        .unwrap();
    assert!(junk_org > 0 && junk_org != org);

    // Dave may pull Alice's repositories; Carol administers them (rows such as activating or
    // moving a repository leave), which must not make her an admin of Alice's organisation.
    let (dave_id, carol_id) = (user_id(s, &dave).await, user_id(s, &carol).await);
    s.app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            for r in [repo, trash_repo, mover_repo] {
                repos::set_perm(c, dave_id, r, Perm::pull_only())?;
                repos::set_perm(c, carol_id, r, Perm::all())?;
            }
            Ok(())
        })
        .await
        .unwrap();

    // Pipeline 1 from a push (no runner: it stays pending), pipeline 2 run by hand.
    push_files(
        s,
        "alice/hello",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "ci",
    )
    .await;
    let work = s.dir.path().join("work").join("alice/hello");
    let head = git(&work, &["rev-parse", "HEAD"]).trim().to_string();
    let first = s
        .http
        .get(&format!("/api/repos/{repo}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    let second = post_json(
        s,
        &format!("/api/repos/{repo}/pipelines"),
        &p.alice,
        json!({}),
    )
    .await;
    let scratch_pipeline = second["number"].as_i64().unwrap();
    let second = s
        .http
        .get(
            &format!("/api/repos/{repo}/pipelines/{scratch_pipeline}"),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    let doomed_pipeline = post_json(
        s,
        &format!("/api/repos/{repo}/pipelines"),
        &p.alice,
        json!({}),
    )
    .await["number"]
        .as_i64()
        .unwrap();
    s.http
        .post(
            &format!("/api/repos/{repo}/pipelines/{doomed_pipeline}/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let first_step = |p: &Value| p["workflows"][0]["children"][0]["id"].as_i64().unwrap();
    let workflow = first["workflows"][0]["id"].as_i64().unwrap();

    // Secrets and registries at every scope, each with a doomed twin for DELETE.
    for (base, token) in [
        ("/api".to_string(), &p.admin),
        (format!("/api/orgs/{org}"), &p.alice),
        (format!("/api/repos/{repo}"), &p.alice),
    ] {
        for name in ["token", "doomed"] {
            post_json(
                s,
                &format!("{base}/secrets"),
                token,
                json!({"name": name, "value": "v", "events": ["push"]}),
            )
            .await;
        }
        for address in ["registry.example.com", "doomed.example.com"] {
            post_json(
                s,
                &format!("{base}/registries"),
                token,
                json!({"address": address, "username": "u", "password": "p"}),
            )
            .await;
        }
    }
    let mut crons = Vec::new();
    for name in ["nightly", "doomed"] {
        crons.push(
            post_json(
                s,
                &format!("/api/repos/{repo}/cron"),
                &p.alice,
                json!({"name": name, "schedule": "@daily"}),
            )
            .await["id"]
                .as_i64()
                .unwrap(),
        );
    }
    let runner = post_json(s, "/api/agents", &p.admin, json!({"name": "runner"})).await;
    let doomed_agent = post_json(s, "/api/agents", &p.admin, json!({"name": "doomed"})).await;
    let org_agent = post_json(
        s,
        &format!("/api/orgs/{org}/agents"),
        &p.alice,
        json!({"name": "alice-agent"}),
    )
    .await;
    let doomed_org_agent = post_json(
        s,
        &format!("/api/orgs/{org}/agents"),
        &p.alice,
        json!({"name": "alice-doomed"}),
    )
    .await;

    // An event about alice/hello (the feed carries ids as strings, as Clever does).
    let repo_key = repo.to_string();
    let events = s
        .http
        .get("/events?limit=1000", Some(&p.alice))
        .await
        .expect(200)
        .json();
    let event = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["data"])
        .find(|e| e["type"] == "repos.created" && e["data"]["object"]["id"] == repo_key.as_str())
        .unwrap_or_else(|| panic!("no repos.created event for alice/hello"))["id"]
        .as_str()
        .unwrap()
        .to_string();

    let hook = {
        let row = s
            .app_state
            .ci
            .reads
            .read(move |c| repos::by_id(c, repo))
            .await
            .unwrap();
        woodlark::auth::token::hook_token(forge, &row.repo.forge_remote_id, &row.hash)
    };
    let algod = std::fs::read_to_string(s.dir.path().join(ADMIN_TOKEN_FILE))
        .unwrap()
        .trim()
        .to_string();

    let fixture = Fixture {
        forge,
        junk_forge,
        repo,
        trash_repo,
        mover_repo,
        org,
        junk_org,
        pipeline: first["number"].as_i64().unwrap(),
        step: first_step(&first),
        step_pid: first["workflows"][0]["children"][0]["pid"]
            .as_i64()
            .unwrap(),
        workflow,
        scratch_pipeline,
        scratch_step: first_step(&second),
        doomed_pipeline,
        cron: crons[0],
        doomed_cron: crons[1],
        agent: runner["id"].as_i64().unwrap(),
        doomed_agent: doomed_agent["id"].as_i64().unwrap(),
        org_agent: org_agent["id"].as_i64().unwrap(),
        doomed_org_agent: doomed_org_agent["id"].as_i64().unwrap(),
        event,
        partkey: new_partkey(s, 1).await,
        doomed_partkey: new_partkey(s, 2).await,
        address: encode_address(&[3; 32]),
        head,
    };
    let tokens = BTreeMap::from([
        (Who::Agent, runner["token"].as_str().unwrap().to_string()),
        (Who::Hook, hook),
        (Who::Algod, algod),
        (Who::Bob, p.bob),
        (Who::Reader, dave),
        (Who::Collab, carol),
        (Who::Alice, p.alice),
        (Who::Admin, p.admin),
    ]);
    (fixture, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_has_an_authorization_rule_and_keeps_it() {
    let s = TestServer::start().await; // no runner: pipelines stay queued
    let mut failures: Vec<String> = Vec::new();

    // The rule table and the router's table must name the same routes.
    let routes = s.routes.clone();
    assert!(routes.len() > 100, "suspiciously few routes: {routes:?}");
    let ruled: BTreeSet<&str> = RULES.iter().map(|(r, _)| *r).collect();
    assert_eq!(ruled.len(), RULES.len(), "a route has two rules");
    for route in &routes {
        if !ruled.contains(route.as_str()) {
            failures.push(format!(
                "route {route} has no authorization rule: add one to tests/integration/authz.rs"
            ));
        }
    }
    for (route, _) in RULES {
        if !routes.iter().any(|r| r == route) {
            failures.push(format!(
                "rule for {route}, which is not a route (any more): remove it from tests/integration/authz.rs"
            ));
        }
    }
    for route in HELD_OPEN {
        if !routes.iter().any(|r| r == route) {
            failures.push(format!("HELD_OPEN names {route}, which is not a route"));
        }
    }

    let (fx, mut tokens) = fixture(&s).await;
    // `AUTHZ_TRACE=1` prints every call and its answer.
    let trace = std::env::var_os("AUTHZ_TRACE").is_some();
    let mut checked = 0;
    for route in &routes {
        let Some((_, rule)) = RULES.iter().find(|(r, _)| r == route) else {
            continue;
        };
        let path = match fx.path(route) {
            Ok(path) => path,
            Err(missing) => {
                failures.push(format!(
                    "route {route}: no fixture value for {missing:?}: add one to Fixture::param"
                ));
                continue;
            }
        };
        let method = route.split_once(' ').unwrap().0;
        let body = fx.body(route);
        let held_open = HELD_OPEN.contains(&route.as_str());
        // Refused principals first, then the allowed ones (whose calls may delete things).
        let mut order: Vec<(Who, Expect)> =
            EVERYONE.iter().map(|w| (*w, rule.expect(*w))).collect();
        order.sort_by_key(|(_, e)| *e == Expect::Allowed);
        for (who, expect) in order {
            let token = tokens.get(&who).cloned();
            let wait = if held_open && expect == Expect::Allowed {
                HELD_OPEN_WAIT
            } else {
                WAIT
            };
            // A refusal must not depend on the body: refused principals send one that does
            // not parse, so a handler that reads the body before authorising shows up.
            let body = match expect {
                Expect::Allowed => body.as_deref(),
                Expect::Status(_) => body.as_ref().map(|_| UNPARSABLE),
            };
            let answer = s
                .http
                .send_within(
                    method,
                    &path,
                    token.as_deref(),
                    body.map(str::as_bytes),
                    wait,
                )
                .await;
            checked += 1;
            if trace {
                let (status, mut text) = answer
                    .as_ref()
                    .map_or((0, "(held open)".into()), |r| (r.status.as_u16(), r.text()));
                text.truncate(80);
                eprintln!("{route} [{path}] as {who:?}: {status} {text:?}");
            }
            let Some(r) = answer else {
                if !(held_open && expect == Expect::Allowed) {
                    failures.push(format!(
                        "{route} as {who:?}: no answer within {wait:?} (expected {expect:?})"
                    ));
                }
                continue;
            };
            let status = r.status.as_u16();
            let ok = match expect {
                Expect::Status(want) => status == want,
                Expect::Allowed => !denied(&r) && status < 500,
            };
            if !ok {
                let mut text = r.text();
                text.truncate(200);
                failures.push(format!(
                    "{route} as {who:?} ({rule:?}): expected {expect:?}, got {status} {text:?}"
                ));
            }
            // Rotating a token revokes the old one: go on with the new.
            if route == "DELETE /api/user/token" && status == 200 {
                tokens.insert(who, r.text().trim().to_string());
            }
        }
    }
    eprintln!(
        "authz: {} routes, {} rules, {checked} calls, {} failures",
        routes.len(),
        RULES.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} authorization failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
