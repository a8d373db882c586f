//! Host processes for the local backend (upstream's "local" backend).
//!
//! Each step runs in its own process group so that cancelling or timing out kills
//! everything it started, not just the shell. stdout and stderr share one pipe (merged, as
//! upstream), read by the runtime as chunks ([`Output`]); cutting them into lines and
//! masking them is the runner's ([`crate::lines`]), as on every backend.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use crate::backend::{BackendError, Exit, StepHandle};
use crate::cgroup::StepGroup;
use crate::lines::Output;
use woodlark_pipeline::types::{CompiledStep, StepKind};

/// Shells the local backend knows by name; `image` picks one.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "fish", "dash", "ash", "ksh"];

/// Quotes `s` for a POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script a commands step runs: each command echoed with `+ ` before it runs.
pub fn script(commands: &[String]) -> String {
    let mut s = String::new();
    for c in commands {
        s.push_str(&format!("echo {}\n{c}\n", quote(&format!("+ {c}"))));
    }
    s
}

/// The program to run for `image`: a known shell, an executable on PATH or given by path,
/// else `sh` (so configs written for container images still run their commands here).
fn shell_for(image: &str) -> String {
    let name = image.split(':').next().unwrap_or(image);
    let base = name.rsplit('/').next().unwrap_or(name);
    if SHELLS.contains(&base) && which(base).is_some() {
        return base.to_string();
    }
    if Path::new(name).is_absolute() && Path::new(name).is_file() {
        return name.to_string();
    }
    "sh".to_string()
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// What to execute for a step (clone steps are built by the runner).
pub fn command_for(step: &CompiledStep) -> Result<(String, Vec<String>), BackendError> {
    match step.kind {
        StepKind::Plugin if step.commands.is_empty() => {
            let program = step
                .image
                .split(':')
                .next()
                .unwrap_or(&step.image)
                .to_string();
            if Path::new(&program).is_absolute() || which(&program).is_some() {
                Ok((program, step.entrypoint.clone()))
            } else {
                Err(BackendError::NoPlugin(step.image.clone()))
            }
        }
        _ => {
            let shell = shell_for(&step.image);
            Ok((
                shell,
                vec!["-e".into(), "-c".into(), script(&step.commands)],
            ))
        }
    }
}

/// SIGKILLs process group `pgid` (a child started with `process_group(0)`); 0 or less: no-op.
pub fn kill_process_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// A running process group.
pub struct Running {
    child: tokio::process::Child,
    pgid: i32,
    /// The step's control groups, removed once it has ended.
    group: Option<Arc<StepGroup>>,
}

#[async_trait]
impl StepHandle for Running {
    /// Kills the whole process group.
    fn kill(&self) {
        kill_process_group(self.pgid);
    }

    async fn wait(&mut self) -> Exit {
        let exit = match self.child.wait().await {
            Ok(status) => match status.code() {
                Some(code) => Exit::Code(code),
                None => Exit::Killed,
            },
            Err(e) => Exit::Lost(BackendError::io("wait for the step")(e)),
        };
        if let Some(group) = self.group.take() {
            // Whatever the step left running in its group dies with its first process (the
            // sandbox's PID namespace, or the process group killed on cancel); the group goes
            // once they have.
            group.remove().await;
        }
        exit
    }
}

/// Bytes read from a step's pipe at most at once.
const READ_CHUNK: usize = 16 * 1024;

/// The read end of a step's output pipe as chunks, read by the runtime (no thread per step);
/// ends when every process holding the write end has closed it.
fn pipe_output(reader: std::io::PipeReader) -> Result<Output, BackendError> {
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(BackendError::io("read the step's output"))?;
    Ok(futures_util::stream::unfold(pipe, |mut pipe| async move {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        match pipe.read_buf(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some((buf.freeze(), pipe)),
        }
    })
    .boxed())
}

/// Starts `program args` in `dir` with exactly `env` (plus PATH/LANG from the host), in a
/// new process group and, if given, in `group` (entered before `exec`, so everything the step
/// starts is limited); its output (stdout and stderr merged) is the returned stream. Must be
/// called on the runtime; `dir` must exist.
pub fn spawn(
    program: &str,
    args: &[String],
    dir: &Path,
    env: &BTreeMap<String, String>,
    group: Option<StepGroup>,
) -> Result<(Running, Output), BackendError> {
    let (reader, writer) = std::io::pipe().map_err(BackendError::io("create a pipe"))?;
    let writer2 = writer
        .try_clone()
        .map_err(BackendError::io("create a pipe"))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        .process_group(0)
        .kill_on_drop(true);
    for key in ["PATH", "LANG", "LC_ALL", "TZ"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(env);
    let group = group.map(Arc::new);
    if let Some(group) = group.clone() {
        // SAFETY: `enter` only opens, writes and closes files whose paths were prepared
        // before the fork: async-signal-safe calls, as the child of a fork may make.
        unsafe {
            cmd.pre_exec(move || group.enter());
        }
    }
    let spawned = cmd
        .spawn()
        .map_err(BackendError::io(format!("start {program}")));
    drop(cmd); // closes our copies of the pipe's write end
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            if let Some(group) = &group {
                group.remove_now();
            }
            return Err(e);
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let output = pipe_output(reader)?;
    Ok((Running { child, pgid, group }, output))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_echoes_commands() {
        let s = script(&["echo 'hi'".to_string(), "ls".to_string()]);
        assert_eq!(
            s,
            "echo '+ echo '\\''hi'\\'''\necho 'hi'\necho '+ ls'\nls\n"
        );
    }

    #[test]
    fn image_picks_the_shell() {
        assert_eq!(shell_for("sh"), "sh");
        assert_eq!(shell_for("alpine:3.20"), "sh");
        assert_eq!(
            shell_for("bash").as_str(),
            if which("bash").is_some() {
                "bash"
            } else {
                "sh"
            }
        );
    }

    #[tokio::test]
    async fn runs_and_captures_merged_output() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = BTreeMap::new();
        env.insert("GREETING".to_string(), "hello".to_string());
        let args = vec![
            "-e".into(),
            "-c".into(),
            "echo $GREETING; echo oops >&2; echo s3cret; exit 3".into(),
        ];
        let (mut run, output) = spawn("sh", &args, dir.path(), &env, None).unwrap();
        assert!(matches!(run.wait().await, Exit::Code(3)));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        crate::lines::pump(output, vec!["s3cret".into()], tx).await;
        let mut got = Vec::new();
        while let Some((_, l)) = rx.recv().await {
            got.push(l);
        }
        assert_eq!(got, ["hello", "oops", "********"]);
    }

    #[tokio::test]
    async fn kill_takes_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let args = vec!["-c".into(), "sleep 600 & sleep 600; wait".into()];
        let (mut run, _output) = spawn("sh", &args, dir.path(), &BTreeMap::new(), None).unwrap();
        let pgid = run.pgid;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        run.kill();
        assert!(matches!(run.wait().await, Exit::Killed));
        assert!(started.elapsed().as_secs() < 2);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // No process of the group is left running (zombies waiting for init to reap them
        // are dead already).
        let running: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                // pid (comm) state ppid pgrp ...
                let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
                let fields: Vec<&str> = after.split_whitespace().collect();
                fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
                    && fields.first() != Some(&"Z")
            })
            .collect();
        assert!(
            running.is_empty(),
            "process group {pgid} still runs: {running:?}"
        );
    }
}
