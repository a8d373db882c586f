//! What the runner needs from a place that runs steps: the [`Backend`] interface.
//!
//! The runner schedules steps, ships their logs and reports their states; a backend only
//! creates a workflow's resources, starts steps in them, removes them again and sweeps
//! whatever its owner left behind. [`crate::local`] runs steps as host processes (under
//! bubblewrap by default), [`crate::docker`] as containers. A runner holds one backend,
//! picked once at start ([`crate::choose_backend`]).

use std::path::PathBuf;

use async_trait::async_trait;

use crate::lines::Output;
use woodlark_pipeline::types::CompiledStep;

/// Runs steps somewhere. Implemented by the local (host processes) and the docker backends;
/// a Kubernetes backend would implement it next (workspace as a volume claim, steps as pods,
/// the sweep as label-selected deletes counted as "pods", "volume claims"…; see
/// docs/kubernetes-backend.md).
///
/// Every object a backend creates is marked with its owner (a label, a name prefix), so that
/// [`Backend::sweep`] finds what a crashed run left: the runner sweeps when it starts and
/// when it stops.
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Which backend this is (never [`BackendKind::Auto`]); agents report it to the server.
    fn kind(&self) -> BackendKind;

    /// Creates a workflow's resources (workspace, network, …). What is created before a
    /// failure is removed again.
    async fn create_workflow(
        &self,
        setup: &WorkflowSetup,
    ) -> Result<Box<dyn Workflow>, BackendError>;

    /// Removes everything this backend's owner created and that is still there (after a
    /// crash, or when the runner stops with workflows running).
    async fn sweep(&self) -> Result<Swept, BackendError>;

    /// How each step's resources are bounded, as said in the log and in the agent's record;
    /// `Err` says why they are not.
    fn step_limits(&self) -> Result<String, String>;
}

/// One workflow's resources on a backend.
#[async_trait]
pub trait Workflow: Send + Sync {
    /// Starts step `step_id` (`step`), in the workflow's workspace.
    async fn start(&self, step_id: i64, step: &CompiledStep) -> Result<Started, BackendError>;

    /// Removes the workflow's resources: called once, after its steps ended (detached ones
    /// stopped). What cannot be removed is left to the next sweep.
    async fn remove(&self) -> Result<(), BackendError>;
}

/// A step that started: its handle and its output.
pub struct Started {
    pub handle: Box<dyn StepHandle>,
    /// stdout and stderr merged, unmasked: the runner cuts and masks it ([`crate::lines`]).
    pub output: Output,
}

/// A running step.
#[async_trait]
pub trait StepHandle: Send + Sync {
    /// Kills the step without waiting; `wait` then returns [`Exit::Killed`].
    fn kill(&self);

    /// Waits for the step to end (and frees what only it used).
    async fn wait(&mut self) -> Exit;

    /// Kills the step and waits until it is gone (detached steps at the end of a workflow,
    /// before its resources go).
    async fn stop(&self) {
        self.kill();
    }
}

/// How a step ended.
#[derive(Debug)]
pub enum Exit {
    Code(i32),
    /// Killed (cancel, timeout, or a signal).
    Killed,
    /// The backend lost the step.
    Lost(BackendError),
}

/// What a backend needs to know of a workflow before its first step.
#[derive(Debug, Clone, Default)]
pub struct WorkflowSetup {
    pub workflow_id: i64,
    /// What the clone step checks out.
    pub clone: CloneSource,
    /// A directory of this machine to run the steps in instead of a fresh workspace
    /// (`woodlark exec`): it is used as it is and left in place when the workflow ends.
    pub host_workspace: Option<PathBuf>,
}

/// What the clone step checks out, from the work the server handed out (never from the
/// step's environment).
#[derive(Debug, Clone, Default)]
pub struct CloneSource {
    pub url: String,
    pub commit: String,
    pub git_ref: String,
    pub netrc: Option<crate::protocol::Netrc>,
}

impl CloneSource {
    /// The commit id as forges give it (hex): anything else could read as an option to git.
    pub fn checked_commit(&self) -> Result<&str, BackendError> {
        let commit = self.commit.as_str();
        let ok = (4..=64).contains(&commit.len()) && commit.bytes().all(|b| b.is_ascii_hexdigit());
        if ok {
            Ok(commit)
        } else {
            Err(BackendError::NotACommit(commit.to_string()))
        }
    }

    /// The directory of the clone URL if it names a repository on this machine (`file:///…`
    /// or `/…`).
    pub fn local_repository(&self) -> Option<String> {
        crate::local_repository(&self.url)
    }
}

/// What a sweep removed: how many of each kind of object, named as the backend calls them
/// ("containers", "workspaces"), in the order first counted. Displayed as
/// `containers: 2, networks: 1`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    removed: Vec<(&'static str, usize)>,
}

impl Swept {
    /// Counts one removed object of kind `what`.
    pub fn count(&mut self, what: &'static str) {
        self.add_n(what, 1);
    }

    /// How many objects of kind `what` were removed.
    pub fn of(&self, what: &str) -> usize {
        self.removed
            .iter()
            .find(|(kind, _)| *kind == what)
            .map_or(0, |(_, n)| *n)
    }

    pub fn is_empty(&self) -> bool {
        self.removed.iter().all(|(_, n)| *n == 0)
    }

    /// Adds another pass's counts to these.
    pub fn add(&mut self, other: &Swept) {
        for &(what, n) in &other.removed {
            self.add_n(what, n);
        }
    }

    fn add_n(&mut self, what: &'static str, n: usize) {
        match self.removed.iter_mut().find(|(kind, _)| *kind == what) {
            Some((_, count)) => *count += n,
            None => self.removed.push((what, n)),
        }
    }
}

impl std::fmt::Display for Swept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut counted = self.removed.iter().filter(|(_, n)| *n > 0);
        match counted.next() {
            None => f.write_str("nothing"),
            Some((what, n)) => {
                write!(f, "{what}: {n}")?;
                counted.try_for_each(|(what, n)| write!(f, ", {what}: {n}"))
            }
        }
    }
}

/// The backend setting (`runner.backend`, `woodlark agent --backend`, `woodlark exec
/// --backend`), parsed by [`crate::setting::Named`] from the names in [`BackendKind::ALL`].
///
/// A new backend takes exactly:
/// - a file in this crate implementing [`Backend`], [`Workflow`] and [`StepHandle`] (its
///   `sweep` removes what its owner key marks);
/// - a variant here, listed in [`BackendKind::ALL`] (else no setting can name it) and named
///   in [`BackendKind::as_str`];
/// - an arm in [`crate::choose_backend`], the one place a kind becomes an implementation;
/// - only if it has settings of its own: a field of [`crate::BackendOptions`], filled by the
///   server's `RunnerConfig::backend_options` (`[runner]`) and the agent's flags.
///
/// The test `every_variant_is_in_all` does not compile until a new variant has a place in
/// its cycle, and then fails until the variant is in `ALL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Docker when an engine answers, else local (with a warning).
    Auto,
    Docker,
    Local,
}

impl BackendKind {
    pub const ALL: [BackendKind; 3] = [BackendKind::Auto, BackendKind::Docker, BackendKind::Local];

    /// The setting's value, as agents also report the backend they use.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Docker => "docker",
            BackendKind::Local => "local",
        }
    }
}

crate::setting::named_setting!(BackendKind);

/// Why a backend could not do something. The text is what a step's log and error show.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A file system or process call of the local backend.
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the step's directory {} does not exist", .0.display())]
    NoDirectory(PathBuf),
    #[error("the commit to clone, {0:?}, is not a commit id")]
    NotACommit(String),
    #[error(
        "plugin {0:?} is not an executable on this agent (the local backend runs plugins from PATH)"
    )]
    NoPlugin(String),
    /// A blocking task of the backend panicked or was cancelled.
    #[error("a background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A call to the Docker engine.
    #[error("docker: {what}: {source}")]
    Docker {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("step {0:?} has no image")]
    NoImage(String),
    /// `hint` says how to get the image, if we know.
    #[error("cannot pull image {image:?}: {reason}{hint}")]
    Pull {
        image: String,
        reason: String,
        hint: &'static str,
    },
    #[error("docker: lost the container")]
    LostContainer,
    #[error("could not remove {0}; the next start sweeps it")]
    Leftover(String),
    #[error("this backend cannot run {0}")]
    Unsupported(String),
}

impl BackendError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackendError {
        let what = what.into();
        move |source| BackendError::Io { what, source }
    }

    pub(crate) fn docker(
        what: impl Into<String>,
    ) -> impl FnOnce(bollard::errors::Error) -> BackendError {
        let what = what.into();
        move |source| BackendError::Docker { what, source }
    }
}

/// Resource limits of every container (docker) or step (local, through cgroups); 0 means
/// none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Memory in bytes; swap is not added on top (memory+swap is the same number).
    pub memory_bytes: i64,
    /// Processes and threads.
    pub pids: i64,
    /// CPUs (fractions allowed); 0 here means all of the engine's (or host's) CPUs but one.
    pub cpus: f64,
}

impl Limits {
    /// The limits in words, e.g. `memory 4096 MiB, 4096 processes, 1 CPUs`.
    pub fn describe(&self) -> String {
        let memory = match self.memory_bytes {
            0 => "no memory limit".to_string(),
            b => format!("memory {} MiB", b / (1024 * 1024)),
        };
        let pids = match self.pids {
            0 => "no process limit".to_string(),
            n => format!("{n} processes"),
        };
        let cpus = if self.cpus > 0.0 {
            format!("{} CPUs", self.cpus)
        } else {
            "all CPUs but one".to_string()
        };
        format!("{memory}, {pids}, {cpus}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setting::Named;

    /// The variant after `kind` in a cycle through every variant. No wildcard arm: a new
    /// variant does not compile until it is put in the cycle.
    fn next(kind: BackendKind) -> BackendKind {
        match kind {
            BackendKind::Auto => BackendKind::Docker,
            BackendKind::Docker => BackendKind::Local,
            BackendKind::Local => BackendKind::Auto,
        }
    }

    #[test]
    fn every_variant_is_in_all() {
        let mut every = vec![BackendKind::Auto];
        let mut kind = next(BackendKind::Auto);
        while kind != BackendKind::Auto {
            assert!(
                !every.contains(&kind),
                "{kind:?} twice: the cycle skips a variant"
            );
            every.push(kind);
            kind = next(kind);
        }
        for kind in &every {
            assert!(BackendKind::ALL.contains(kind), "{kind:?} is not in ALL");
            assert_eq!(BackendKind::from_name(kind.as_str()), Ok(*kind));
        }
        assert_eq!(
            every.len(),
            BackendKind::ALL.len(),
            "ALL lists a variant twice"
        );
    }

    #[test]
    fn swept_counts_what_the_backend_names() {
        let mut first = Swept::default();
        assert!(first.is_empty());
        assert_eq!(first.to_string(), "nothing");
        first.count("containers");
        first.count("containers");
        first.count("networks");
        let mut second = Swept::default();
        second.count("volumes");
        second.count("containers");
        first.add(&second);
        first.add(&Swept::default());
        assert!(!first.is_empty());
        assert_eq!(
            (
                first.of("containers"),
                first.of("networks"),
                first.of("volumes")
            ),
            (3, 1, 1)
        );
        assert_eq!(first.of("pods"), 0);
        assert_eq!(first.to_string(), "containers: 3, networks: 1, volumes: 1");
    }

    #[test]
    fn only_commit_ids_are_cloned() {
        let source = |commit: &str| CloneSource {
            commit: commit.into(),
            ..CloneSource::default()
        };
        assert_eq!(source("0123abcDEF").checked_commit().unwrap(), "0123abcDEF");
        assert!(source(&"a".repeat(64)).checked_commit().is_ok());
        for bad in [
            "",
            "abc",
            "--upload-pack=x",
            "main",
            "a b c d",
            &"a".repeat(65),
        ] {
            let err = source(bad).checked_commit().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("the commit to clone, {bad:?}, is not a commit id")
            );
        }
    }
}
