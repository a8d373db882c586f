//! `woodlark exec [PATH]`: runs a pipeline on this machine before it is pushed, as
//! `woodpecker-cli exec` does, with the compiler and the runner the server uses.
//!
//! The checkout is the workspace (upstream's `--local`, its default): nothing is cloned, the
//! steps see the files as they are, uncommitted changes included, and what they write stays.
//! The run's facts come from the checkout's git (commit, branch, message, author) and the
//! flags (`--event`, `--branch`, `--env`, `--secret`). The workflows run one after another
//! in dependency order, each as an agent runs it ([`crate::runner::run_workflow`]), talking to
//! an in-memory agent API ([`ExecApi`]) that prints each step's lines as they come,
//! `[step:L<line>:<seconds>s] text`, secrets already masked by the runner. Ctrl-C cancels the
//! run (its steps are killed and removed); the exit status is the pipeline's.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;

use crate::ci::create::{Trigger, metadata};
use crate::ci::forge::RemoteRepo;
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::status::{self, Status};
use crate::pipeline::types::{
    Commit, CompileInput, CompiledWorkflow, ConfigFile, LineKind, LogLine, SecretValue, Trust,
};
use crate::runner::protocol::{AgentInfo, StepRef, StepUpdate, Work, WorkflowDone};
use crate::runner::sandbox::SandboxMode;
use crate::runner::{self, AgentApi, RunnerError};
use crate::store::forges::ForgeKind;
use crate::store::repos::RepoRow;

/// What `woodlark exec` was asked to do.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// A config file or a folder of them (default: `.woodpecker/`, else `.woodpecker.yaml`).
    pub path: Option<PathBuf>,
    /// Where steps run: `docker`, `local` (host processes, unsandboxed: your own code on
    /// your own machine) or `auto` (docker when an engine answers).
    #[arg(long, alias = "backend-engine", default_value = "docker", value_parser = super::named::<runner::BackendKind>())]
    pub backend: runner::BackendKind,
    /// The workspace (default: the folder holding the config, or the parent of
    /// `.woodpecker/`).
    #[arg(long)]
    pub repo_path: Option<PathBuf>,
    /// A pipeline variable, `NAME=value`, repeatable: in every step's environment and in
    /// `${NAME}` substitution.
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// A secret for `from_secret`, `name=value`, repeatable; masked in the output.
    #[arg(long = "secret")]
    pub secrets: Vec<String>,
    /// The event the run is for (`when: event` filters, `CI_PIPELINE_EVENT`).
    #[arg(long, alias = "pipeline-event", default_value = "manual")]
    pub event: String,
    /// The branch (default: the checkout's current branch, else `main`).
    #[arg(long, alias = "commit-branch")]
    pub branch: Option<String>,
    /// The full ref (default: `refs/heads/<branch>`).
    #[arg(long = "ref", alias = "commit-ref")]
    pub git_ref: Option<String>,
    /// `owner/name` of the repository (default: `local/<folder name>`).
    #[arg(long)]
    pub repo: Option<String>,
    /// Minutes each workflow may take.
    #[arg(long, default_value_t = 60)]
    pub timeout: i64,
    /// Allow `network_mode`, `dns` and `extra_hosts`.
    #[arg(long)]
    pub repo_trusted_network: bool,
    /// Allow host `volumes` and `tmpfs`.
    #[arg(long)]
    pub repo_trusted_volumes: bool,
    /// Allow `privileged` and `devices`.
    #[arg(long)]
    pub repo_trusted_security: bool,
}

/// Compiles and runs the pipeline; an error (the exit status 1) when it does not succeed.
pub fn run(args: ExecArgs) -> anyhow::Result<()> {
    crate::logging::LogControl::install(crate::logging::LogLevel::Warn);
    let files = match &args.path {
        Some(path) => super::lint::config_files(std::slice::from_ref(path))?,
        None => super::lint::config_files(&[])?,
    };
    let workspace = workspace_of(&args, &files)?;
    let trigger = trigger_of(&args, &workspace)?;
    let repo = repo_of(&args, &workspace, &trigger.commit.branch)?;
    let secrets = args
        .secrets
        .iter()
        .map(|s| {
            let (name, value) = super::pair("--secret", s, '=')?;
            Ok(SecretValue {
                name,
                value,
                events: Vec::new(),
                images: Vec::new(),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let compiled = crate::pipeline::compile(&CompileInput {
        files,
        meta: metadata("", &repo, &trigger, 1, ForgeKind::Git, None),
        secrets,
        trust: Trust {
            security: args.repo_trusted_security,
            volumes: args.repo_trusted_volumes,
            network: args.repo_trusted_network,
        },
        privileged_plugins: Vec::new(),
    });
    for e in &compiled.errors {
        let severity = if e.is_warning { "warning" } else { "error" };
        eprintln!("{severity}: {}", e.message);
    }
    if compiled.errors.iter().any(|e| !e.is_warning) {
        bail!("the pipeline does not compile");
    }
    if compiled.workflows.is_empty() {
        bail!(
            "no workflow to run: `when` filtered every one out, or each needs one that does not run (see the warnings above)"
        );
    }
    let run = Run {
        workflows: compiled
            .workflows
            .into_iter()
            .map(CompiledWorkflow::without_clone)
            .collect(),
        repo: repo.repo.full_name.clone(),
        commit: trigger.commit,
        timeout: args.timeout.max(1),
    };
    super::runtime()?.block_on(run.execute(args.backend, workspace))
}

/// The workspace: `--repo-path`, else the folder of the config (the parent of `.woodpecker/`).
fn workspace_of(args: &ExecArgs, files: &[ConfigFile]) -> anyhow::Result<PathBuf> {
    let dir = match (&args.repo_path, &args.path) {
        (Some(dir), _) => dir.clone(),
        (None, Some(path)) if path.is_dir() => {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        }
        _ => {
            let first = Path::new(&files[0].name);
            let dir = first.parent().unwrap_or(Path::new(""));
            match dir.file_name() {
                Some(name) if name == ".woodpecker" => {
                    dir.parent().unwrap_or(Path::new("")).to_path_buf()
                }
                _ => dir.to_path_buf(),
            }
        }
    };
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    // Absolute: the docker backend mounts it.
    dir.canonicalize()
        .with_context(|| format!("the workspace {}", dir.display()))
}

/// The repository as the compiler sees it: named after the folder, trusted as flagged.
fn repo_of(args: &ExecArgs, workspace: &Path, branch: &str) -> anyhow::Result<RepoRow> {
    let full_name = match &args.repo {
        Some(name) => name.clone(),
        None => format!(
            "local/{}",
            workspace
                .file_name()
                .map_or("workspace".into(), |n| n.to_string_lossy())
        ),
    };
    let Some((owner, name)) = full_name.split_once('/') else {
        bail!("--repo {full_name:?}: expected owner/name");
    };
    let mut repo = RemoteRepo {
        forge_remote_id: full_name.clone(),
        owner: owner.to_string(),
        name: name.to_string(),
        clone_url: workspace.display().to_string(),
        forge_url: String::new(),
        default_branch: branch.to_string(),
        private: true,
        avatar_url: String::new(),
    }
    .new_repo(0, 0);
    repo.trusted.network = args.repo_trusted_network;
    repo.trusted.volumes = args.repo_trusted_volumes;
    repo.trusted.security = args.repo_trusted_security;
    Ok(RepoRow {
        repo,
        user_id: 0,
        hash: String::new(),
    })
}

/// The event and the commit: the checkout's HEAD (zeros outside git), and the flags.
fn trigger_of(args: &ExecArgs, workspace: &Path) -> anyhow::Result<Trigger> {
    let Some(event) = WebhookEvent::parse(&args.event) else {
        let known: Vec<&str> = WebhookEvent::ALL.iter().map(|e| e.as_str()).collect();
        bail!("--event {:?}: one of {}", args.event, known.join(", "));
    };
    let mut variables = std::collections::BTreeMap::new();
    for pair in &args.env {
        let (k, v) = super::pair("--env", pair, '=')?;
        variables.insert(k, v);
    }
    let branch = args
        .branch
        .clone()
        .unwrap_or_else(|| current_branch(workspace));
    // HEAD's facts in one call, NUL-separated (the message, last, may hold anything else).
    let head = git_output(
        workspace,
        &["log", "-1", "--format=%H%x00%an%x00%ae%x00%ct%x00%B"],
    )
    .unwrap_or_default();
    let mut fields = head.splitn(5, '\0');
    let mut field = || fields.next().unwrap_or_default().to_string();
    let (sha, author, author_email, timestamp, message) =
        (field(), field(), field(), field(), field());
    let commit = Commit {
        sha: if sha.is_empty() { "0".repeat(40) } else { sha },
        git_ref: args
            .git_ref
            .clone()
            .unwrap_or_else(|| format!("refs/heads/{branch}")),
        branch,
        message,
        author,
        author_email,
        timestamp: timestamp
            .parse()
            .unwrap_or_else(|_| crate::store::now_unix()),
        sender: std::env::var("USER").unwrap_or_default(),
        ..Commit::default()
    };
    Ok(Trigger {
        event,
        commit,
        variables,
        ..Trigger::default()
    })
}

fn current_branch(workspace: &Path) -> String {
    git_output(workspace, &["symbolic-ref", "--short", "-q", "HEAD"])
        .unwrap_or_else(|| "main".into())
}

/// `git <args>` in `dir`, trimmed; `None` outside a repository or without git.
fn git_output(dir: &Path, args: &[&str]) -> Option<String> {
    let text = woodlark_git::Git::in_dir(dir, args).stdout().ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The compiled pipeline and what every workflow's [`Work`] repeats.
struct Run {
    workflows: Vec<CompiledWorkflow>,
    repo: String,
    commit: Commit,
    timeout: i64,
}

impl Run {
    async fn execute(self, kind: runner::BackendKind, workspace: PathBuf) -> anyhow::Result<()> {
        let owner = format!(
            "exec-{}",
            woodlark_stdx::random_secret()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(12)
                .collect::<String>()
                .to_lowercase()
        );
        let spool = runner::spool_dir(std::path::Path::new(""), &owner);
        // Your own code on your own machine: unsandboxed, workspaces in the temp dir.
        let settings = crate::config::RunnerConfig {
            backend: kind,
            sandbox: SandboxMode::None,
            ..Default::default()
        };
        let backend = runner::choose_backend(settings.backend_options(owner, None)).await?;
        let config = runner::RunnerConfig {
            capacity: 1,
            info: AgentInfo::default(),
            backend: backend.clone(),
            host_workspace: Some(workspace),
            spool,
            // Unused: `exec` runs its workflows itself, not through `runner::run`.
            shutdown_grace: std::time::Duration::ZERO,
        };
        let (cancel, canceled) = watch::channel(false);
        let signals = super::ShutdownSignals::install()?;
        tokio::spawn(async move {
            signals.recv().await;
            eprintln!("interrupted: stopping the steps");
            let _ = cancel.send(true);
        });
        let mut states: Vec<Option<Status>> = vec![None; self.workflows.len()];
        let mut next_step_id = 1;
        while let Some(i) = self.next_ready(&states) {
            let wf = &self.workflows[i];
            let deps = self.dependency_states(wf, &states);
            let state = if *canceled.borrow() {
                Status::Canceled
            } else if !status::runs_after(&wf.runs_on, &deps) {
                Status::Skipped
            } else {
                println!("# {}", wf.name);
                let steps: Vec<StepRef> = wf
                    .steps
                    .iter()
                    .map(|s| {
                        next_step_id += 1;
                        StepRef {
                            id: next_step_id - 1,
                            uuid: String::new(),
                            name: s.name.clone(),
                        }
                    })
                    .collect();
                let api = ExecApi::new(&steps, canceled.clone());
                let work = Work {
                    workflow_id: i as i64 + 1,
                    pipeline_id: 1,
                    pipeline_number: 1,
                    repo: self.repo.clone(),
                    timeout_minutes: self.timeout,
                    clone_url: String::new(),
                    commit: self.commit.sha.clone(),
                    git_ref: self.commit.git_ref.clone(),
                    netrc: None,
                    workflow: wf.clone(),
                    steps,
                    log_offsets: Default::default(),
                    // Everything is printed here and nothing is stored.
                    max_log_bytes: 0,
                };
                runner::run_workflow(&api, work, &config).await;
                api.outcome()
            };
            if state != Status::Success {
                eprintln!("workflow {}: {state}", wf.name);
            }
            states[i] = Some(state);
        }
        // The docker backend keeps an idle network for the next workflow: not after this.
        if let Err(e) = backend.sweep().await {
            eprintln!("warning: {e}");
        }
        match status::merge(states.into_iter().flatten()) {
            Status::Success => Ok(()),
            state => bail!("the pipeline ended: {state}"),
        }
    }

    /// The first workflow not run yet whose dependencies have all ended.
    fn next_ready(&self, states: &[Option<Status>]) -> Option<usize> {
        (0..self.workflows.len()).find(|&i| {
            states[i].is_none()
                && self.workflows[i].depends_on.iter().all(|dep| {
                    self.workflows
                        .iter()
                        .zip(states)
                        .all(|(w, s)| w.name != *dep || s.is_some())
                })
        })
    }

    fn dependency_states(&self, wf: &CompiledWorkflow, states: &[Option<Status>]) -> Vec<Status> {
        self.workflows
            .iter()
            .zip(states)
            .filter(|(w, _)| wf.depends_on.contains(&w.name))
            .filter_map(|(_, s)| *s)
            .collect()
    }
}

/// The agent API of one workflow run by `exec`: lines go to stdout as they arrive, states
/// are kept for the exit status.
#[derive(Clone)]
struct ExecApi {
    names: Arc<HashMap<i64, String>>,
    canceled: watch::Receiver<bool>,
    done: Arc<Mutex<Option<WorkflowDone>>>,
}

impl ExecApi {
    fn new(steps: &[StepRef], canceled: watch::Receiver<bool>) -> ExecApi {
        ExecApi {
            names: Arc::new(steps.iter().map(|s| (s.id, s.name.clone())).collect()),
            canceled,
            done: Arc::default(),
        }
    }

    fn name(&self, step_id: i64) -> &str {
        self.names.get(&step_id).map_or("?", String::as_str)
    }

    /// The workflow's end state (`error` if it never reported one).
    fn outcome(&self) -> Status {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        match &*done {
            Some(d) if !d.error.is_empty() => {
                eprintln!("error: {}", d.error);
                d.state
            }
            Some(d) => d.state,
            None => Status::Error,
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error of the run.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

impl AgentApi for ExecApi {
    async fn next(&self, _info: &AgentInfo) -> Result<Option<Work>, RunnerError> {
        Ok(None)
    }

    async fn init(&self, _workflow_id: i64) -> Result<(), RunnerError> {
        Ok(())
    }

    async fn step(&self, _workflow_id: i64, update: StepUpdate) -> Result<(), RunnerError> {
        let name = self.name(update.step_id);
        let text = match update.state {
            Status::Running => return Ok(()),
            Status::Success | Status::Failure => {
                format!(
                    "[{name}] {} (exit code {})\n",
                    update.state, update.exit_code
                )
            }
            state if update.error.is_empty() => format!("[{name}] {state}\n"),
            state => format!("[{name}] {state}: {}\n", update.error),
        };
        print(&text);
        Ok(())
    }

    async fn logs(&self, _workflow_id: i64, lines: Vec<LogLine>) -> Result<(), RunnerError> {
        let mut text = String::new();
        for line in lines {
            if !matches!(line.kind, LineKind::Stdout | LineKind::Stderr) {
                continue;
            }
            let data = line.data.strip_suffix('\n').unwrap_or(&line.data);
            text.push_str(&format!(
                "[{}:L{}:{}s] {data}\n",
                self.name(line.step_id),
                line.line,
                line.time
            ));
        }
        print(&text);
        Ok(())
    }

    async fn extend(&self, _workflow_id: i64) -> Result<(), RunnerError> {
        Ok(())
    }

    async fn wait_canceled(&self, _workflow_id: i64) -> Result<bool, RunnerError> {
        let mut canceled = self.canceled.clone();
        let waited = tokio::time::timeout(Duration::from_secs(30), canceled.wait_for(|c| *c))
            .await
            .map(|r| r.map(drop));
        match waited {
            Ok(Ok(())) => Ok(true),
            // No one can cancel any more: the runner asks again, but not at once.
            Ok(Err(_)) => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(false)
            }
            Err(_) => Ok(false),
        }
    }

    async fn done(&self, _workflow_id: i64, done: WorkflowDone) -> Result<(), RunnerError> {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
        Ok(())
    }
}
