//! `[runner]`: the embedded agent's settings, which `woodlark agent`'s flags repeat, and
//! the one place they become a backend's options ([`RunnerConfig::backend_options`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::runner::sandbox::{Sandbox, SandboxMode};
use crate::runner::{BackendKind, BackendOptions, Limits};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerConfig {
    /// Run the embedded local agent inside the server.
    pub enabled: bool,
    /// How many workflows the local agent runs at once.
    pub capacity: usize,
    /// Parent directory of per-workflow workspaces ("" = the system temp dir).
    pub workdir: PathBuf,
    /// How steps are isolated from the host: "bwrap" (each step in a bubblewrap sandbox that
    /// hides the data dir, the secrets key, the plugin cache, this file and the TLS key) or
    /// "none" (steps read whatever the server's user can: trusted code only).
    pub sandbox: SandboxMode,
    /// Where steps run: "docker" (each step in a container of its image, on the engine at
    /// `DOCKER_HOST` or the local socket), "local" (host processes) or "auto" (docker when an
    /// engine answers at start-up, else local with a warning).
    pub backend: BackendKind,
    /// The image of the clone step on the docker backend (upstream's clone-plugin protocol);
    /// the default is built locally by `.ci/clone-image`.
    pub clone_image: String,
    /// Memory limit of each container (docker backend), MiB; no swap on top; 0 = none.
    pub memory_mb: u64,
    /// Most processes and threads in each container; 0 = none.
    pub pids: u64,
    /// CPUs each container may use (fractions allowed); 0 = the engine's CPUs but one.
    pub cpus: f64,
    /// On SIGTERM, how long running workflows may go on to their end; those still running
    /// then are stopped, with a line in their steps' logs, and handed back to the queue.
    pub shutdown_grace_secs: u64,
}

impl RunnerConfig {
    /// The options [`crate::runner::choose_backend`] takes, for the runner `owner`: the one
    /// constructor the embedded runner, `woodlark agent` and `woodlark exec` share, so a
    /// setting reaches every backend the same way. `sandbox` is the one [`Self::sandbox`]
    /// asks for (`None` for [`SandboxMode::None`]), built by the caller, since what it hides
    /// is the caller's: the server hides its own files, an agent has none.
    pub fn backend_options(&self, owner: String, sandbox: Option<Sandbox>) -> BackendOptions {
        debug_assert_eq!(
            sandbox.is_some(),
            self.sandbox == SandboxMode::Bwrap,
            "the sandbox is the one runner.sandbox asks for"
        );
        BackendOptions {
            kind: self.backend,
            owner,
            workdir: self.workdir.clone(),
            sandbox,
            limits: Limits {
                memory_bytes: (self.memory_mb as i64).saturating_mul(1024 * 1024),
                pids: self.pids as i64,
                cpus: self.cpus,
            },
            clone_image: self.clone_image.clone(),
        }
    }

    /// Checks the values serde accepted but a runner cannot use: the key and why.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.capacity == 0 {
            return Err(("runner.capacity", "must be at least 1".into()));
        }
        if self.clone_image.trim().is_empty() {
            return Err(("runner.clone_image", "must name an image".into()));
        }
        if !(self.cpus.is_finite() && self.cpus >= 0.0) {
            return Err((
                "runner.cpus",
                format!("{} is not a CPU count (0 or more)", self.cpus),
            ));
        }
        if self.memory_mb != 0 && self.memory_mb < 6 {
            return Err((
                "runner.memory_mb",
                "must be 0 (no limit) or at least 6 (the engine's minimum)".into(),
            ));
        }
        if self.memory_mb > (i64::MAX as u64) >> 20 {
            return Err(("runner.memory_mb", "is too large".into()));
        }
        if self.pids > i64::MAX as u64 {
            return Err(("runner.pids", "is too large".into()));
        }
        Ok(())
    }
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            enabled: true,
            capacity: 2,
            workdir: PathBuf::new(),
            sandbox: SandboxMode::Bwrap,
            backend: BackendKind::Auto,
            clone_image: crate::runner::docker::DEFAULT_CLONE_IMAGE.into(),
            memory_mb: 4096,
            pids: 4096,
            cpus: 0.0,
            shutdown_grace_secs: 30,
        }
    }
}

/// The embedded runner's settings: `[runner]`, the data dir, and the sandbox that hides the
/// server's files from its steps.
pub fn embedded_runner(config: &super::Config) -> crate::ci::embedded::EmbeddedRunner {
    let runner = &config.runner;
    crate::ci::embedded::EmbeddedRunner {
        data_dir: config.server.data_dir.clone(),
        options: local_sandbox(config)
            .map(|sandbox| runner.backend_options(String::new(), sandbox)),
        capacity: runner.capacity,
        shutdown_grace: std::time::Duration::from_secs(runner.shutdown_grace_secs),
        sandbox: runner.sandbox.as_str(),
    }
}

/// What steps of the embedded runner must not see: the data dir (databases, signing keys,
/// `secrets.key`, `algod.admin.token`, the default plugin cache), and the files the
/// configuration may place outside it: the secrets key, the plugin cache, the configuration
/// file itself (tokens, plugin secrets) and the TLS key.
fn sandbox_hidden(config: &super::Config) -> Vec<std::path::PathBuf> {
    let mut hidden = vec![
        config.server.data_dir.clone(),
        config.secret_key_path(),
        config.plugins.cache_dir.clone(),
        config.server.tls_key.clone(),
    ];
    let file = std::path::Path::new(&config.source);
    if file.is_file() {
        hidden.push(file.to_path_buf());
    }
    hidden
}

/// The sandbox of the embedded runner's steps (`runner.sandbox`); `None` for `"none"`.
pub fn local_sandbox(config: &super::Config) -> Result<Option<Sandbox>, String> {
    if config.runner.sandbox == SandboxMode::None {
        return Ok(None);
    }
    Sandbox::new(sandbox_hidden(config)).map(Some)
}

/// The start-up check of `runner.sandbox` (with the local runner on): `"bwrap"` must be
/// installed and work here, else the server does not start; `"none"` is said loudly.
pub fn check_sandbox(config: &super::Config) -> Result<(), String> {
    if config.runner.sandbox == SandboxMode::None {
        tracing::warn!(
            "runner.sandbox = \"none\": {}",
            crate::runner::sandbox::UNSANDBOXED_WARNING
        );
        return Ok(());
    }
    let opt_out = format!(
        "set runner.sandbox = \"none\" in {} (trusted pipelines only)",
        config.source
    );
    crate::runner::sandbox::checked(sandbox_hidden(config), &opt_out)
        .map(drop)
        .map_err(|err| format!("{}: runner.sandbox: {err}", config.source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConfigError};

    fn load(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, "test.toml", &[])
    }

    #[test]
    fn backend_options_carry_the_settings_in_the_backends_units() {
        let runner = RunnerConfig::default();
        let options = runner.backend_options("owner-1".into(), Some(sandbox()));
        assert_eq!(options.kind, BackendKind::Auto);
        assert_eq!(options.owner, "owner-1");
        assert_eq!(options.workdir, PathBuf::new());
        assert!(options.sandbox.is_some());
        assert_eq!(
            options.limits,
            Limits {
                memory_bytes: 4096 << 20,
                pids: 4096,
                cpus: 0.0
            }
        );
        assert_eq!(
            options.clone_image,
            crate::runner::docker::DEFAULT_CLONE_IMAGE
        );
        assert_eq!(
            options.limits.describe(),
            "memory 4096 MiB, 4096 processes, all CPUs but one"
        );

        let c = load(
            "[runner]\nbackend = \"local\"\nsandbox = \"none\"\nworkdir = \"/srv/runs\"\n\
             clone_image = \"git:2\"\nmemory_mb = 0\npids = 12\ncpus = 1.5\n",
        )
        .unwrap();
        let options = c.runner.backend_options("o".into(), None);
        assert_eq!(options.kind, BackendKind::Local);
        assert_eq!(options.workdir, PathBuf::from("/srv/runs"));
        assert!(options.sandbox.is_none());
        assert_eq!(
            options.limits,
            Limits {
                memory_bytes: 0,
                pids: 12,
                cpus: 1.5
            }
        );
        assert_eq!(options.clone_image, "git:2");
    }

    /// A sandbox for the options (whether bubblewrap works here does not matter).
    fn sandbox() -> Sandbox {
        Sandbox::with_program("/usr/bin/bwrap".into(), Vec::new())
    }

    #[test]
    fn runner_sandbox() {
        let c = load("").unwrap();
        assert_eq!(c.runner.sandbox, SandboxMode::Bwrap, "sandboxed by default");
        let c = load("[runner]\nsandbox = \"none\"\n").unwrap();
        assert_eq!(c.runner.sandbox, SandboxMode::None);
        let err = load("[runner]\nsandbox = \"docker\"\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "test.toml: runner.sandbox: \"docker\" is not \"bwrap\" or \"none\" (line 2)"
        );
        let shown = serde_json::to_value(c.redacted()).unwrap();
        assert_eq!(shown["runner"]["sandbox"], "none");
    }

    #[test]
    fn runner_backend() {
        assert_eq!(load("").unwrap().runner.backend, BackendKind::Auto);
        for kind in BackendKind::ALL {
            let c = load(&format!("[runner]\nbackend = \"{kind}\"\n")).unwrap();
            assert_eq!(c.runner.backend, kind);
            let shown = serde_json::to_value(c.redacted()).unwrap();
            assert_eq!(shown["runner"]["backend"], kind.as_str());
        }
        let err = load("[runner]\nbackend = \"kubernetes\"\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "test.toml: runner.backend: \"kubernetes\" is not \"auto\", \"docker\" or \"local\" (line 2)"
        );
        let err = load("[runner]\nbackend = 3\n").unwrap_err().to_string();
        assert!(err.starts_with("test.toml: runner.backend: "), "{err}");
        // The environment wins over the file, through the same parser.
        let env = |value: &str| [("WOODLARK_RUNNER_BACKEND".to_string(), value.to_string())];
        let c = Config::from_toml(
            "[runner]\nbackend = \"docker\"\n",
            "test.toml",
            &env("local"),
        );
        assert_eq!(c.unwrap().runner.backend, BackendKind::Local);
        let err = Config::from_toml("", "test.toml", &env("Docker"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "test.toml: WOODLARK_RUNNER_BACKEND: \"Docker\" is not \"auto\", \"docker\" or \"local\""
        );
    }

    #[test]
    fn steps_do_not_see_the_servers_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = r#"
[server]
data_dir = "/srv/woodlark/data"
tls_cert = "/etc/woodlark/cert.pem"
tls_key = "/etc/woodlark/key.pem"
[storage]
secret_key_file = "/etc/woodlark/secrets.key"
[plugins]
cache_dir = "/var/cache/woodlark"
"#;
        std::fs::write(&path, text).unwrap();
        let config = Config::load(&path).unwrap();
        let hidden = sandbox_hidden(&config);
        for p in [
            "/srv/woodlark/data",
            "/etc/woodlark/secrets.key",
            "/var/cache/woodlark",
            "/etc/woodlark/key.pem",
        ] {
            assert!(hidden.contains(&p.into()), "{p} not in {hidden:?}");
        }
        assert!(hidden.contains(&path), "the configuration file itself");
        // The defaults: the key and the plugin cache live in the data dir; no file, no TLS.
        let hidden = sandbox_hidden(&Config::default());
        assert_eq!(
            hidden,
            [
                std::path::PathBuf::from("data"),
                std::path::PathBuf::from("data/secrets.key"),
                std::path::PathBuf::new(),
                std::path::PathBuf::new(),
            ]
        );
        let none = Config::from_toml("[runner]\nsandbox = \"none\"\n", "t", &[]).unwrap();
        assert!(local_sandbox(&none).unwrap().is_none());
    }
}
