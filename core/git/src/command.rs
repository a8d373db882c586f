//! The `git` commands the server runs besides reading objects (refs, hooks, `ls-remote`):
//! the one place outside `cat-file` sessions that spawns `git`, so each failure names the
//! command and carries what git said.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// At most this much of a bounded command's stdout and of its stderr is kept.
const BOUNDED_OUTPUT_MAX: u64 = 1 << 20;

/// A `git` command that could not run or did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("cannot run git: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("git {command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("git {} did not answer within {} s", subcommand(command), timeout.as_secs_f32())]
    Timeout { command: String, timeout: Duration },
    #[error("waiting for git: {source}")]
    Wait {
        command: String,
        source: std::io::Error,
    },
}

impl CommandError {
    /// The command's arguments after `git`, space-separated.
    pub fn command(&self) -> &str {
        match self {
            CommandError::Spawn { command, .. }
            | CommandError::Failed { command, .. }
            | CommandError::Timeout { command, .. }
            | CommandError::Wait { command, .. } => command,
        }
    }
}

fn subcommand(command: &str) -> &str {
    command.split(' ').next().unwrap_or_default()
}

/// What a bounded command printed, whether or not it succeeded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

/// One `git` invocation, built up like [`std::process::Command`].
pub struct Git {
    cmd: Command,
    command: String,
}

impl Git {
    /// `git <args>`.
    pub fn new(args: &[&str]) -> Git {
        let mut cmd = Command::new("git");
        cmd.args(args);
        Git {
            cmd,
            command: args.join(" "),
        }
    }

    /// `git -C <dir> <args>`.
    pub fn in_dir(dir: &Path, args: &[&str]) -> Git {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir).args(args);
        Git {
            cmd,
            command: args.join(" "),
        }
    }

    /// `GIT_TERMINAL_PROMPT=0`: a remote that wants credentials fails instead of waiting
    /// for someone to type them.
    pub fn without_prompt(self) -> Git {
        self.env("GIT_TERMINAL_PROMPT", "0")
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Git {
        self.cmd.env(key, value);
        self
    }

    /// Runs the command to its end; its stdout when git succeeded, else
    /// [`CommandError::Failed`] with its stderr, trimmed.
    pub fn stdout(mut self) -> Result<String, CommandError> {
        let out = self.cmd.output().map_err(|source| CommandError::Spawn {
            command: self.command.clone(),
            source,
        })?;
        if !out.status.success() {
            return Err(CommandError::Failed {
                command: self.command,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs the command in its own process group for at most `timeout`, then kills the
    /// group (git's transport helpers too); what it printed (up to 1 MiB each), whatever
    /// its exit status.
    pub fn bounded(mut self, timeout: Duration) -> Result<Output, CommandError> {
        let mut child = self
            .cmd
            .stdin(Stdio::null())
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| CommandError::Spawn {
                command: self.command.clone(),
                source,
            })?;
        // Both pipes drained on their own threads, so a chatty remote cannot block the child.
        let out = drain(child.stdout.take());
        let err = drain(child.stderr.take());
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    kill_group(child.id());
                    let _ = child.wait();
                    return Err(CommandError::Timeout {
                        command: self.command,
                        timeout,
                    });
                }
                Err(source) => {
                    return Err(CommandError::Wait {
                        command: self.command,
                        source,
                    });
                }
            }
        }
        Ok(Output {
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        })
    }
}

/// Reads `pipe` to its end (or the size limit) on a thread of its own.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(BOUNDED_OUTPUT_MAX).read_to_string(&mut text);
        }
        text
    })
}

/// Kills process group `pgid` (a child started with `process_group(0)`).
fn kill_group(pgid: u32) {
    if let Ok(pgid) = i32::try_from(pgid)
        && pgid > 0
    {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// `git ls-remote --heads <url> <refname>`, bounded by `timeout`, with no prompt for
/// credentials. `extra_header` (e.g. `Authorization: …`) goes to HTTP remotes through git's
/// environment config, never on the command line or in the URL.
pub fn ls_remote_heads(
    url: &str,
    refname: &str,
    extra_header: Option<&str>,
    timeout: Duration,
) -> Result<Output, CommandError> {
    let mut git = Git::new(&["ls-remote", "--heads", url, refname]).without_prompt();
    if let Some(header) = extra_header {
        git = git
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env("GIT_CONFIG_VALUE_0", header);
    }
    git.bounded(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn stdout_on_success_and_stderr_in_the_error() {
        let (dir, head) = testing::repo();
        let out = Git::in_dir(dir.path(), &["rev-parse", "HEAD"])
            .without_prompt()
            .stdout()
            .unwrap();
        assert_eq!(out.trim(), head);
        let err = Git::in_dir(dir.path(), &["rev-parse", "--verify", "nope"])
            .stdout()
            .unwrap_err();
        assert_eq!(err.command(), "rev-parse --verify nope");
        assert!(
            err.to_string()
                .starts_with("git rev-parse --verify nope failed: fatal:"),
            "{err}"
        );
    }

    #[test]
    fn ls_remote_lists_the_branch_asked_for() {
        let (dir, head) = testing::repo();
        let url = format!("file://{}", dir.path().display());
        let out = ls_remote_heads(
            &url,
            "refs/heads/main",
            Some("X-Test: 1"),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(out.stdout, format!("{head}\trefs/heads/main\n"));
        let missing = format!("{url}/missing");
        let out = ls_remote_heads(&missing, "refs/heads/main", None, Duration::from_secs(30));
        assert!(!out.unwrap().stderr.is_empty());
    }

    #[test]
    fn a_silent_remote_is_killed_at_the_timeout() {
        // Accepts connections and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let _hold = std::thread::spawn(move || {
            let conns: Vec<_> = listener.incoming().take(2).collect();
            std::thread::sleep(Duration::from_secs(5));
            drop(conns);
        });
        let started = Instant::now();
        let url = format!("http://{addr}/o/r.git");
        let err =
            ls_remote_heads(&url, "refs/heads/main", None, Duration::from_millis(300)).unwrap_err();
        assert_eq!(err.to_string(), "git ls-remote did not answer within 0.3 s");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
