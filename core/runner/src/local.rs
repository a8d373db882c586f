//! The local backend: steps run as host processes ([`crate::process`]), each inside a
//! bubblewrap sandbox ([`crate::sandbox`]) unless the operator opted out.
//!
//! A workflow gets a directory `<workdir>/woodlark-<owner>-<workflow>-<random>` holding
//! `workspace/` (where steps run) and `home/` (their `HOME`, with per-step registry logins).
//! The clone's credentials (the repository owner's forge token, as a `.netrc`) are kept
//! apart, in a sibling `…-<random>.clone/` that is the clone's `HOME` and no other step's:
//! the sandbox covers the workdir but for the workflow's own directory, and the sibling goes
//! as soon as a step after the clone starts. The token grants everything its owner may do on
//! the forge, so a step (run for anyone with push access) must never read it. The owner in
//! the name is what the sweep goes by: it removes the directories of this owner that are
//! still there, and only those, so runners may share a workdir. Directories are created and
//! removed off the runtime's workers (`tokio::fs`, the blocking pool), as is everything else
//! that touches the file system before a step starts (registry logins, the sandbox's view of
//! `/run`, the step's cgroups).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{
    Backend, BackendError, BackendKind, CloneSource, Started, Swept, Workflow, WorkflowSetup,
};
use crate::cgroup::{Limiter, StepGroup};
use crate::process;
use crate::sandbox::Sandbox;
use woodlark_pipeline::types::{CompiledStep, StepKind};

/// Runs steps as host processes below one parent directory.
#[derive(Debug, Clone)]
pub struct Local {
    /// Parent of the workflow directories.
    parent: PathBuf,
    /// `woodlark-<owner>-`: the start of this owner's directory names.
    prefix: String,
    sandbox: Option<Arc<Sandbox>>,
    /// Each step's control groups (`runner.memory_mb`, `pids`, `cpus`), or why there are
    /// none.
    limiter: Result<Arc<Limiter>, String>,
}

impl Local {
    /// A local backend keeping workflow directories under `workdir` ("" = the system temp
    /// dir), named after `owner`, running steps in `sandbox` (`None`: directly on the host).
    pub fn new(workdir: &Path, owner: &str, sandbox: Option<Sandbox>) -> Local {
        let parent = if workdir.as_os_str().is_empty() {
            std::env::temp_dir()
        } else {
            workdir.to_path_buf()
        };
        // `-` ends the owner in the name: owner `a` must not sweep owner `a-b`'s directories.
        let owner: String = owner
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        Local {
            parent,
            prefix: format!("woodlark-{owner}-"),
            sandbox: sandbox.map(Arc::new),
            limiter: Err("no limits were asked for".into()),
        }
    }

    /// Runs every step in control groups with `limits`, where the host allows; otherwise
    /// steps run without limits and [`Backend::step_limits`] says why.
    pub fn with_limits(mut self, owner: &str, limits: crate::backend::Limits) -> Local {
        self.limiter = Limiter::detect(owner, limits).map(Arc::new);
        self
    }
}

#[async_trait]
impl Backend for Local {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }

    async fn create_workflow(
        &self,
        setup: &WorkflowSetup,
    ) -> Result<Box<dyn Workflow>, BackendError> {
        let suffix: String = woodlark_stdx::random_secret()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(8)
            .collect();
        let root = self
            .parent
            .join(format!("{}{}-{suffix}", self.prefix, setup.workflow_id));
        if setup.host_workspace.is_some() && self.sandbox.is_some() {
            // The sandbox shows a step its workflow directory only.
            return Err(BackendError::Unsupported(
                "a workspace on the host with the sandbox".into(),
            ));
        }
        let credentials = setup.clone.netrc.as_ref().map(|_| {
            let mut name = root.clone().into_os_string();
            name.push(".clone");
            PathBuf::from(name)
        });
        let workflow = LocalWorkflow {
            credentials,
            workspace: setup
                .host_workspace
                .clone()
                .unwrap_or_else(|| root.join("workspace")),
            root,
            clone: setup.clone.clone(),
            sandbox: self.sandbox.clone(),
            limiter: self.limiter.as_ref().ok().cloned(),
        };
        if let Err(e) = workflow.prepare().await {
            if let Err(left) = workflow.remove().await {
                tracing::warn!(error = %left, "could not remove a workflow directory");
            }
            return Err(e);
        }
        Ok(Box::new(workflow))
    }

    async fn sweep(&self) -> Result<Swept, BackendError> {
        let mut swept = Swept::default();
        let mut entries = match tokio::fs::read_dir(&self.parent).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(swept),
            Err(e) => {
                return Err(BackendError::io(format!("list {}", self.parent.display()))(
                    e,
                ));
            }
        };
        let listing = format!("list {}", self.parent.display());
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(BackendError::io(listing.as_str()))?
        {
            let ours = entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with(&self.prefix));
            if ours && remove_tree(&entry.path()).await? {
                swept.count("workspaces");
            }
        }
        if let Ok(limiter) = &self.limiter {
            let limiter = limiter.clone();
            let groups = tokio::task::spawn_blocking(move || limiter.sweep()).await?;
            if groups > 0 {
                tracing::info!(groups, "removed step cgroups an earlier run left");
            }
        }
        Ok(swept)
    }

    fn step_limits(&self) -> Result<String, String> {
        self.limiter
            .as_ref()
            .map(|l| l.describe())
            .map_err(Clone::clone)
    }
}

/// Removes the directory `path` and everything in it; `false` if it was not there.
async fn remove_tree(path: &Path) -> Result<bool, BackendError> {
    match tokio::fs::remove_dir_all(path).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(BackendError::io(format!("remove {}", path.display()))(e)),
    }
}

/// A workflow's directory on this machine.
struct LocalWorkflow {
    root: PathBuf,
    /// Where steps run: `workspace/` in `root`, or a directory of the host's.
    workspace: PathBuf,
    clone: CloneSource,
    sandbox: Option<Arc<Sandbox>>,
    /// The clone's `HOME` with its `.netrc`, beside `root` (never inside it: every step sees
    /// `root`); `None` when the clone needs no credentials.
    credentials: Option<PathBuf>,
    limiter: Option<Arc<Limiter>>,
}

impl LocalWorkflow {
    /// Creates the workspace and home, and the clone's `.netrc` in its own home.
    async fn prepare(&self) -> Result<(), BackendError> {
        for dir in [&self.workspace, &home(&self.root)] {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(BackendError::io(format!("create {}", dir.display())))?;
        }
        if let (Some(netrc), Some(dir)) = (&self.clone.netrc, &self.credentials) {
            let text = format!(
                "machine {}\nlogin {}\npassword {}\n",
                netrc.machine, netrc.login, netrc.password
            );
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || {
                private_dir(&dir)?;
                woodlark_stdx::write_private(&dir.join(".netrc"), &text)
            })
            .await?
            .map_err(BackendError::io("write the clone's .netrc"))?;
        }
        Ok(())
    }

    /// Removes the clone's credentials; nothing after the clone needs them.
    async fn forget_credentials(&self) -> Result<(), BackendError> {
        match &self.credentials {
            Some(dir) => remove_tree(dir).await.map(drop),
            None => Ok(()),
        }
    }
}

/// Creates `dir` readable by this user only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[async_trait]
impl Workflow for LocalWorkflow {
    async fn start(&self, step_id: i64, step: &CompiledStep) -> Result<Started, BackendError> {
        if step.kind != StepKind::Clone {
            self.forget_credentials().await?;
        }
        let plan = Plan {
            limiter: self.limiter.clone(),
            credentials: self.credentials.clone(),
            root: self.root.clone(),
            workspace: self.workspace.clone(),
            clone: self.clone.clone(),
            sandbox: self.sandbox.clone(),
            step_id,
            step: step.clone(),
        };
        let command = tokio::task::spawn_blocking(move || plan.command()).await??;
        let (running, output) = process::spawn(
            &command.program,
            &command.args,
            &command.cwd,
            &command.env,
            command.group,
        )?;
        Ok(Started {
            handle: Box::new(running),
            output,
        })
    }

    async fn remove(&self) -> Result<(), BackendError> {
        self.forget_credentials().await?;
        remove_tree(&self.root).await.map(drop)
    }
}

fn home(root: &Path) -> PathBuf {
    root.join("home")
}

/// What to start for one step, worked out on the blocking pool (it reads and writes files).
struct Plan {
    root: PathBuf,
    credentials: Option<PathBuf>,
    limiter: Option<Arc<Limiter>>,
    workspace: PathBuf,
    clone: CloneSource,
    sandbox: Option<Arc<Sandbox>>,
    step_id: i64,
    step: CompiledStep,
}

/// A process to start: program, arguments, working directory, environment and the control
/// groups it runs in.
#[derive(Debug)]
struct Command {
    program: String,
    args: Vec<String>,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    group: Option<StepGroup>,
}

impl Plan {
    /// The step's command, wrapped in the sandbox if there is one; writes the step's registry
    /// logins first.
    fn command(self) -> Result<Command, BackendError> {
        let step = &self.step;
        let dir = self.workspace.clone();
        let home = home(&self.root);
        let (program, args) = match step.kind {
            StepKind::Clone => clone_command(&self.clone)?,
            _ => process::command_for(step)?,
        };
        let cwd = if step.directory.is_empty() {
            dir.clone()
        } else {
            dir.join(&step.directory)
        };
        let mut readonly = Vec::new();
        let mut env = if step.kind == StepKind::Clone {
            // The clone alone sees the local repository it clones from (which may lie in a
            // covered directory, such as a `git` forge inside the data dir), and only if it
            // is one: a clone URL cannot uncover any other directory.
            readonly.extend(self.clone.local_repository().map(PathBuf::from));
            // Its credentials, beside the workflow's directory where only it can see them.
            readonly.extend(self.credentials.clone());
            host_clone_env(self.credentials.as_deref().unwrap_or(&home))
        } else {
            self.step_env(&dir, &home)?
        };
        // Said before starting: otherwise the failed chdir reads as the program (bwrap)
        // being missing.
        if !cwd.is_dir() {
            return Err(BackendError::NoDirectory(cwd));
        }
        let (program, args) = match &self.sandbox {
            Some(sandbox) => sandbox.wrap(&self.root, &readonly, &cwd, &program, &args, &mut env),
            None => (program, args),
        };
        let group = match &self.limiter {
            Some(limiter) => {
                let name = format!(
                    "{}-{}",
                    self.root.file_name().unwrap_or_default().to_string_lossy(),
                    self.step_id
                );
                Some(
                    limiter
                        .create(&name)
                        .map_err(BackendError::io("create the step's cgroup"))?,
                )
            }
            None => None,
        };
        Ok(Command {
            program,
            args,
            cwd,
            env,
            group,
        })
    }

    /// The environment of a step other than the clone: the compiler's, the home, the
    /// workspace and, if the step has registry logins, a Docker config dir of its own.
    fn step_env(&self, dir: &Path, home: &Path) -> Result<BTreeMap<String, String>, BackendError> {
        let step = &self.step;
        let mut env = step.environment.clone();
        env.insert("HOME".into(), home.display().to_string());
        if !step.registries.is_empty() {
            // A Docker config dir per step, so image-building steps can log in.
            let config = home.join(".docker-steps").join(self.step_id.to_string());
            std::fs::create_dir_all(&config)
                .and_then(|()| {
                    woodlark_stdx::write_private(
                        &config.join("config.json"),
                        &woodlark_pipeline::registry::docker_config(&step.registries),
                    )
                })
                .map_err(BackendError::io("write the registry logins"))?;
            env.insert("DOCKER_CONFIG".into(), config.display().to_string());
        }
        env.insert("CI_WORKSPACE".into(), dir.display().to_string());
        Ok(env)
    }
}

/// The host clone: `git clone` of the source and a checkout of its commit.
fn clone_command(source: &CloneSource) -> Result<(String, Vec<String>), BackendError> {
    let script = format!(
        "echo '+ git clone'\ngit clone --quiet --no-checkout -- {url} .\necho '+ git checkout {commit}'\ngit -c advice.detachedHead=false checkout --quiet {commit}\n",
        url = shell_quote(&source.url),
        commit = shell_quote(source.checked_commit()?)
    );
    Ok(("sh".into(), vec!["-e".into(), "-c".into(), script]))
}

/// The environment of the host clone: fixed, whatever the step's payload says. Git reads
/// configuration and commands from its environment (`GIT_CONFIG_*`, `GIT_SSH_COMMAND`,
/// `core.fsmonitor` through `GIT_CONFIG_PARAMETERS`), so nothing of a pipeline's or a
/// person's choosing may reach this process.
fn host_clone_env(home: &Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("HOME".to_string(), home.display().to_string()),
        ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
        // No `ext::` or `fd::` transports, whatever a clone URL says.
        (
            "GIT_ALLOW_PROTOCOL".to_string(),
            "file:git:http:https:ssh".to_string(),
        ),
    ])
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Exit;
    use futures_util::StreamExt;

    fn commands(name: &str, commands: &[&str]) -> CompiledStep {
        CompiledStep {
            name: name.into(),
            image: "sh".into(),
            commands: commands.iter().map(|c| c.to_string()).collect(),
            ..CompiledStep::default()
        }
    }

    async fn output_of(started: Started) -> (Exit, String) {
        let Started { mut handle, output } = started;
        let bytes: Vec<u8> = output.map(|b| b.to_vec()).concat().await;
        (handle.wait().await, String::from_utf8_lossy(&bytes).into())
    }

    #[tokio::test]
    async fn workflows_get_a_directory_their_steps_run_in_and_lose_it_on_removal() {
        let top = tempfile::tempdir().unwrap();
        let backend = Local::new(top.path(), "server-1", None);
        let setup = WorkflowSetup {
            workflow_id: 7,
            clone: CloneSource {
                netrc: Some(crate::protocol::Netrc {
                    machine: "forge.example".into(),
                    login: "bot".into(),
                    password: "pw".into(),
                }),
                ..CloneSource::default()
            },
            ..WorkflowSetup::default()
        };
        let workflow = backend.create_workflow(&setup).await.unwrap();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(top.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        assert_eq!(dirs.len(), 2, "{dirs:?}");
        let name = dirs[0].file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("woodlark-server_1-7-"), "{name}");
        // The clone's credentials lie beside the workflow's directory, never in it.
        let credentials = dirs[1].clone();
        assert_eq!(
            credentials.file_name().unwrap().to_str().unwrap(),
            format!("{name}.clone")
        );
        let netrc = std::fs::read_to_string(credentials.join(".netrc")).unwrap();
        assert!(netrc.contains("password pw"));
        assert!(!dirs[0].join("home/.netrc").exists());

        let step = commands("write", &["echo made > file", "cat file", "pwd", "exit 3"]);
        let (exit, out) = output_of(workflow.start(1, &step).await.unwrap()).await;
        assert!(matches!(exit, Exit::Code(3)), "{exit:?}");
        let workspace = dirs[0].join("workspace");
        assert_eq!(
            out,
            format!(
                "+ echo made > file\n+ cat file\nmade\n+ pwd\n{}\n+ exit 3\n",
                workspace.display()
            )
        );
        // A step after the clone started: the credentials are gone.
        assert!(!credentials.exists());

        let missing = CompiledStep {
            directory: "nowhere".into(),
            ..commands("lost", &["true"])
        };
        let err = workflow.start(2, &missing).await.err().unwrap();
        assert!(matches!(err, BackendError::NoDirectory(_)), "{err}");

        workflow.remove().await.unwrap();
        assert!(!dirs[0].exists());
        workflow.remove().await.unwrap();
    }

    #[tokio::test]
    async fn kill_ends_a_step_and_its_output() {
        let top = tempfile::tempdir().unwrap();
        let backend = Local::new(top.path(), "o", None);
        let workflow = backend
            .create_workflow(&WorkflowSetup::default())
            .await
            .unwrap();
        let step = commands("sleep", &["sleep 600 & sleep 600"]);
        let Started { mut handle, output } = workflow.start(1, &step).await.unwrap();
        let started = std::time::Instant::now();
        handle.kill();
        assert!(matches!(handle.wait().await, Exit::Killed));
        // Every writer of the pipe is gone: the output ends.
        let _: Vec<_> = output.collect().await;
        assert!(started.elapsed().as_secs() < 5);
        workflow.remove().await.unwrap();
    }

    #[tokio::test]
    async fn the_sweep_removes_this_owners_directories_only() {
        let top = tempfile::tempdir().unwrap();
        let ours = Local::new(top.path(), "a", None);
        let theirs = Local::new(top.path(), "b", None);
        for id in [1, 2] {
            ours.create_workflow(&WorkflowSetup {
                workflow_id: id,
                ..WorkflowSetup::default()
            })
            .await
            .unwrap();
        }
        theirs
            .create_workflow(&WorkflowSetup::default())
            .await
            .unwrap();
        std::fs::create_dir(top.path().join("unrelated")).unwrap();
        let swept = ours.sweep().await.unwrap();
        assert_eq!(swept.of("workspaces"), 2);
        let mut left: Vec<String> = std::fs::read_dir(top.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), 2);
        assert!(left[0] == "unrelated" || left[1] == "unrelated", "{left:?}");
        assert!(left.iter().any(|n| n.starts_with("woodlark-b-")));
        assert!(ours.sweep().await.unwrap().is_empty());
        // A workdir that does not exist (yet) has nothing to sweep.
        let gone = Local::new(&top.path().join("missing"), "a", None);
        assert!(gone.sweep().await.unwrap().is_empty());
    }

    #[test]
    fn the_host_clone_checks_out_a_commit_id_only() {
        let source = CloneSource {
            url: "https://forge.example/a'b.git".into(),
            commit: "--upload-pack=x".into(),
            ..CloneSource::default()
        };
        assert!(matches!(
            clone_command(&source),
            Err(BackendError::NotACommit(_))
        ));
        let source = CloneSource {
            commit: "abc123".into(),
            ..source
        };
        let (program, args) = clone_command(&source).unwrap();
        assert_eq!(program, "sh");
        assert!(args[2].contains("-- 'https://forge.example/a'\\''b.git' ."));
        assert!(args[2].contains("checkout --quiet 'abc123'"));
    }
}
