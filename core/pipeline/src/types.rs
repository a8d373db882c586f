//! The shapes that cross between the config compiler, the server and the runner.
//!
//! The compiler turns a pipeline's config files plus what is known about the event
//! ([`Metadata`]) and the secrets in scope into [`CompiledWorkflow`]s: everything the runner
//! needs, with secrets already resolved (the runner never sees a secret it was not given).
//! These types are serialised into the agent protocol, so field names are part of it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::WebhookEvent;

/// One config file as read from the repository at the pipeline's commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigFile {
    /// Path in the repository, e.g. `.woodpecker/build.yaml` or `.woodpecker.yml`.
    pub name: String,
    pub data: String,
}

/// The commit a pipeline runs, as its trigger reported it: one record from the hook (or the
/// forge, for manual runs and cron jobs) through the compiler's [`Metadata`] to the stored
/// pipeline, which flattens it into Woodpecker's pipeline JSON under upstream's names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Commit {
    #[serde(rename = "commit")]
    pub sha: String,
    pub branch: String,
    /// Full ref, e.g. `refs/heads/main`, `refs/tags/v1`, `refs/pull/3/head`.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// `source:target` branches of a pull request.
    pub refspec: String,
    pub message: String,
    pub author: String,
    pub author_email: String,
    pub author_avatar: String,
    /// Who caused the event: the pusher, the user of a manual run, `cron`.
    pub sender: String,
    /// The commit, pull request or tag on the forge.
    pub forge_url: String,
    /// Unix seconds.
    pub timestamp: i64,
    /// Files changed by the commit(s); empty = unknown (path filters then match).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<String>,
}

/// What the compiler knows about the run (drives `when` filters and `CI_*` variables).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub event: WebhookEvent,
    pub commit: Commit,
    /// `owner/name`.
    pub repo: String,
    pub repo_clone_url: String,
    pub default_branch: String,
    /// Name of the cron job for cron events.
    pub cron: String,
    /// Target of deployment events.
    pub deploy_to: String,
    pub pipeline_number: i64,
    /// Platform of the runner that will run it, e.g. `linux/amd64`.
    pub platform: String,
    /// Pipeline-level variables given on a manual run or restart (`PipelineOptions.variables`).
    pub variables: BTreeMap<String, String>,
    /// Every `CI_*` variable of the run (the server computes them; the compiler adds the
    /// workflow- and step-specific ones).
    pub env: BTreeMap<String, String>,
}

/// A secret in scope for the pipeline (already merged repo > org > global by name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretValue {
    pub name: String,
    pub value: String,
    /// Events allowed to use it (empty = any).
    pub events: Vec<String>,
    /// Non-empty: only plugin steps with one of these images may use it.
    pub images: Vec<String>,
}

/// Input of [`crate::compile`](fn@crate::compile).
#[derive(Debug, Clone, Default)]
pub struct CompileInput {
    pub files: Vec<ConfigFile>,
    pub meta: Metadata,
    pub secrets: Vec<SecretValue>,
    /// What the repository is trusted with (set by instance admins).
    pub trust: Trust,
    /// Images that may run privileged without a trusted repository (admin configuration;
    /// plugin steps only, as upstream).
    pub privileged_plugins: Vec<String>,
}

/// The repository's `trusted` flags, as the compiler needs them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trust {
    /// `privileged` and `devices`.
    pub security: bool,
    /// Host `volumes` and `tmpfs`.
    pub volumes: bool,
    /// `network_mode` (other than `none`), `dns`, `dns_search`, `extra_hosts`.
    pub network: bool,
}

/// `errors[]` of a pipeline (Woodpecker's `PipelineError`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineError {
    /// linter, deprecation, compiler, generic, bad_habit.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub is_warning: bool,
    /// Where: `{"file": ..., "field": ...}` when known.
    #[serde(default)]
    pub data: serde_json::Value,
}

/// Output of [`crate::compile`](fn@crate::compile). Any error that is not a warning means the
/// pipeline gets status `error`; an empty `workflows` without errors means everything was
/// filtered out by `when`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompileResult {
    pub workflows: Vec<CompiledWorkflow>,
    pub errors: Vec<PipelineError>,
}

/// What a step does when it fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// The workflow fails (default).
    #[default]
    Fail,
    /// The failure is shown but does not fail the workflow.
    Ignore,
    /// The whole pipeline is canceled.
    Cancel,
}

/// Woodpecker's step types.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    Clone,
    Service,
    Plugin,
    #[default]
    Commands,
    Cache,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledStep {
    pub name: String,
    pub kind: StepKind,
    /// The shell (local backend: sh, bash, …) or, for plugin steps, the executable.
    pub image: String,
    pub commands: Vec<String>,
    pub entrypoint: Vec<String>,
    /// Final environment of the step: `CI_*`, `environment:` (secrets resolved), plugin
    /// `settings:` as `PLUGIN_*`.
    pub environment: BTreeMap<String, String>,
    /// Values to mask in this step's log (every secret the step received).
    pub secrets: Vec<String>,
    /// Names of steps in the same workflow this one waits for. Empty and `!dag` means
    /// "the previous step" (sequential); the compiler fills that in, so this is always the
    /// full dependency list.
    pub depends_on: Vec<String>,
    pub failure: OnFailure,
    /// Run when the workflow so far came to one of these; default `[success]`.
    pub when_status: Vec<RunOn>,
    /// Keep running in the background (services, `detach: true`).
    pub detach: bool,
    /// Working directory relative to the workspace.
    pub directory: String,
    /// Credentials for the step image's registry (the runner writes them as a Docker
    /// `config.json` and points `DOCKER_CONFIG` at it). Filled by the server, not the compiler.
    #[serde(default)]
    pub registries: Vec<RegistryCredential>,
    /// Pull the image even when the engine has it (`pull: true`).
    #[serde(default)]
    pub pull: bool,
    /// The options below reach the host; the compiler lets them through only for trusted
    /// repositories (and privileged plugins), and only the docker backend uses them.
    #[serde(default)]
    pub privileged: bool,
    #[serde(default)]
    pub volumes: Vec<String>,
    #[serde(default)]
    pub devices: Vec<String>,
    #[serde(default)]
    pub network_mode: String,
    #[serde(default)]
    pub dns: Vec<String>,
    #[serde(default)]
    pub dns_search: Vec<String>,
    #[serde(default)]
    pub extra_hosts: Vec<String>,
    #[serde(default)]
    pub tmpfs: Vec<String>,
    /// The user the container runs as (`backend_options.docker.user`).
    #[serde(default)]
    pub user: String,
    /// Run with `no-new-privileges` and without the capabilities a build does not need
    /// (docker backend): every step of a repository not trusted for security, and the
    /// clone. A payload stored before the field existed reads as hardened.
    #[serde(default = "hardened_unless_said")]
    pub hardened: bool,
}

fn hardened_unless_said() -> bool {
    true
}

/// A registry login handed to a step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryCredential {
    pub address: String,
    pub username: String,
    pub password: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledWorkflow {
    /// From the file name (`.woodpecker/build.yaml` → `build`), `woodpecker` for a single
    /// file; with a matrix, one workflow per axis combination sharing the name.
    pub name: String,
    /// Matrix values of this workflow (Woodpecker's `environ`).
    pub environ: BTreeMap<String, String>,
    /// `labels:` plus the server's `repo=` label, for agent matching.
    pub labels: BTreeMap<String, String>,
    /// Names of workflows this one waits for.
    pub depends_on: Vec<String>,
    /// Run when the dependencies ended in these states; default `["success"]`.
    pub runs_on: Vec<String>,
    pub skip_clone: bool,
    /// Steps in order, the clone step first unless `skip_clone`.
    pub steps: Vec<CompiledStep>,
    /// `concurrency:`: at most `limit` workflows of the group run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
}

impl CompiledWorkflow {
    /// The workflow without its clone step, for a workspace that is already there (upstream's
    /// `exec --local`): the steps that waited for the clone no longer do.
    pub fn without_clone(mut self) -> CompiledWorkflow {
        let clones: Vec<String> = self
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::Clone)
            .map(|s| s.name.clone())
            .collect();
        self.steps.retain(|s| s.kind != StepKind::Clone);
        for step in &mut self.steps {
            step.depends_on.retain(|d| !clones.contains(d));
        }
        self.skip_clone = true;
        self
    }
}

/// Upstream's workflow concurrency limit: workflows sharing a group (by default, the same
/// workflow of the same repository) beyond `limit` wait in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Concurrency {
    pub limit: u32,
    /// Empty: the workflow's own name.
    pub group: String,
}

/// One captured output line (secrets already masked), the one type for a log line from
/// the runner that captures it, over the agent protocol, to the store and the live log bus.
/// (The API renders stored lines as `LogEntry`, with an id and base64 data.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub step_id: i64,
    /// 1-based line number within the step.
    pub line: i64,
    /// Seconds since the step started.
    pub time: i64,
    #[serde(default, alias = "type")]
    pub kind: LineKind,
    pub data: String,
}

/// What a log line carries: Woodpecker's `LogEntryType`s. On the wire (agent protocol, API)
/// and in the store it is the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LineKind {
    /// A line of the step's output.
    #[default]
    Stdout,
    Stderr,
    /// The step's exit code.
    ExitCode,
    Metadata,
    Progress,
}

impl LineKind {
    pub const ALL: [LineKind; 5] = [
        LineKind::Stdout,
        LineKind::Stderr,
        LineKind::ExitCode,
        LineKind::Metadata,
        LineKind::Progress,
    ];

    /// The number the agent protocol, the API and the store use.
    pub fn code(self) -> i64 {
        match self {
            LineKind::Stdout => 0,
            LineKind::Stderr => 1,
            LineKind::ExitCode => 2,
            LineKind::Metadata => 3,
            LineKind::Progress => 4,
        }
    }

    /// The kind numbered `code`, if there is one.
    pub fn from_code(code: i64) -> Option<LineKind> {
        LineKind::ALL.into_iter().find(|k| k.code() == code)
    }
}

impl Serialize for LineKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.code())
    }
}

impl<'de> Deserialize<'de> for LineKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = i64::deserialize(deserializer)?;
        LineKind::from_code(code).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown log line type {code}: expected 0 (stdout), 1 (stderr), 2 (exit code), 3 (metadata) or 4 (progress)"
            ))
        })
    }
}

/// What the workflow's steps so far came to, as a step's `when: status:` names it: a step
/// runs only in the outcomes it lists (`success` when it lists none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOn {
    Success,
    Failure,
}

impl RunOn {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOn::Success => "success",
            RunOn::Failure => "failure",
        }
    }

    /// The outcome named `text`, if it is one.
    pub fn parse(text: &str) -> Option<RunOn> {
        [RunOn::Success, RunOn::Failure]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}
