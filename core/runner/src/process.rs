//! Running one step as host processes (upstream's "local" backend).
//!
//! Each step runs in its own process group so that cancelling or timing out kills
//! everything it started, not just the shell. stdout and stderr share one pipe (merged, as
//! upstream), read line by line; each line is masked and handed to the caller as it comes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use tokio::sync::mpsc;

use woodlark_pipeline::types::{CompiledStep, StepKind};

/// Shells the local backend knows by name; `image` picks one.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "fish", "dash", "ash", "ksh"];

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    /// Killed by us (cancel or timeout).
    Killed,
    /// Could not start at all.
    StartFailed(String),
}

/// The pieces of the secrets that are masked: each line of a value, if at least 2 bytes.
fn mask_parts(secrets: &[String]) -> impl Iterator<Item = &str> {
    secrets
        .iter()
        .flat_map(|s| s.lines())
        .filter(|p| p.len() >= 2)
}

/// Replaces every secret value in `line` with `********`.
pub fn mask(line: &str, secrets: &[String]) -> String {
    let mut out = line.to_string();
    for part in mask_parts(secrets) {
        if out.contains(part) {
            out = out.replace(part, "********");
        }
    }
    out
}

/// Longest log line handed on; longer output without a newline becomes several lines (so one
/// endless line can neither exhaust memory nor exceed the log upload limit).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Where to cut an over-long line `buf`: as late as possible, but never inside an occurrence
/// of a secret (each half would escape masking) nor inside a UTF-8 character. The tail from
/// the cut on is carried into the next line.
fn split_point(buf: &[u8], secrets: &[String]) -> usize {
    let parts: Vec<&[u8]> = mask_parts(secrets).map(str::as_bytes).collect();
    let longest = parts.iter().map(|p| p.len()).max().unwrap_or(1);
    // Keep back enough that a secret starting near the end is seen whole next time.
    let mut cut = buf.len() - (longest - 1).min(buf.len() / 2);
    loop {
        let straddled = parts.iter().find_map(|part| {
            let from = cut.saturating_sub(part.len() - 1);
            let window = &buf[from..(cut + part.len() - 1).min(buf.len())];
            window
                .windows(part.len())
                .position(|w| w == *part)
                .map(|i| from + i)
                .filter(|&start| start < cut && start + part.len() > cut)
        });
        match straddled {
            Some(start) => cut = start,
            None => break,
        }
    }
    let continuation = |b: u8| (b & 0b1100_0000) == 0b1000_0000;
    if cut == buf.len() {
        // Cutting at the end: step back over a character whose last bytes are still unread.
        let start = (0..buf.len())
            .rev()
            .take(4)
            .find(|&i| !continuation(buf[i]))
            .unwrap_or(buf.len());
        let width = match buf.get(start) {
            Some(b) if *b >= 0xF0 => 4,
            Some(b) if *b >= 0xE0 => 3,
            Some(b) if *b >= 0xC0 => 2,
            _ => 1,
        };
        if start + width > buf.len() {
            cut = start;
        }
    }
    while cut > 0 && cut < buf.len() && continuation(buf[cut]) {
        cut -= 1;
    }
    if cut == 0 { buf.len() } else { cut }
}

/// Reads `reader` line by line (lines of at most [`MAX_LINE_BYTES`]), masks each and calls
/// `emit` until it returns false or the input ends.
pub(crate) fn read_lines(
    reader: impl std::io::Read,
    secrets: &[String],
    mut emit: impl FnMut(String) -> bool,
) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    let mut carried = Vec::new();
    loop {
        buf.clear();
        buf.append(&mut carried);
        let room = MAX_LINE_BYTES.saturating_sub(buf.len()).max(1) as u64;
        let read = std::io::Read::take(&mut reader, room).read_until(b'\n', &mut buf);
        match read {
            Err(_) => break,
            Ok(0) if buf.is_empty() => break,
            Ok(_) => {}
        }
        if buf.last() != Some(&b'\n') && buf.len() >= MAX_LINE_BYTES {
            carried = buf.split_off(split_point(&buf, secrets));
        }
        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            buf.pop();
        }
        if !emit(mask(&String::from_utf8_lossy(&buf), secrets)) {
            break;
        }
    }
}

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
pub fn command_for(step: &CompiledStep) -> Result<(String, Vec<String>), String> {
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
                Err(format!(
                    "plugin {:?} is not an executable on this agent (the local backend runs plugins from PATH)",
                    step.image
                ))
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
}

impl Running {
    /// Kills the whole process group.
    pub fn kill(&self) {
        kill_process_group(self.pgid);
    }

    pub async fn wait(&mut self) -> Exit {
        match self.child.wait().await {
            Ok(status) => match status.code() {
                Some(code) => Exit::Code(code),
                None => Exit::Killed,
            },
            Err(e) => Exit::StartFailed(e.to_string()),
        }
    }
}

/// Starts `program args` in `dir` with exactly `env` (plus PATH/LANG from the host), in a
/// new process group. Output lines (masked) go to `lines` with seconds since start.
pub fn spawn(
    program: &str,
    args: &[String],
    dir: &Path,
    env: &BTreeMap<String, String>,
    secrets: Vec<String>,
    lines: mpsc::UnboundedSender<(i64, String)>,
) -> Result<Running, String> {
    // Said first: otherwise the failed chdir reads as the program (bwrap) being missing.
    if !dir.is_dir() {
        return Err(format!(
            "the step's directory {} does not exist",
            dir.display()
        ));
    }
    let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let writer2 = writer
        .try_clone()
        .map_err(|e| format!("cannot create a pipe: {e}"))?;
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
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    drop(cmd); // closes our copies of the pipe's write end
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let started = Instant::now();
    std::thread::Builder::new()
        .name("woodlark-step-output".into())
        .spawn(move || {
            read_lines(reader, &secrets, |line| {
                lines
                    .send((started.elapsed().as_secs() as i64, line))
                    .is_ok()
            });
        })
        .map_err(|e| format!("cannot start the output reader: {e}"))?;
    Ok(Running { child, pgid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(input: &[u8], secrets: &[&str]) -> Vec<String> {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let mut out = Vec::new();
        read_lines(input, &secrets, |l| {
            out.push(l);
            true
        });
        out
    }

    #[test]
    fn long_lines_are_split_without_losing_bytes_or_unmasking() {
        assert_eq!(lines_of(b"a\nb\r\n\nlast", &[]), ["a", "b", "", "last"]);
        // An endless line becomes bounded lines that add up to the input.
        let long = "x".repeat(MAX_LINE_BYTES * 2 + 10);
        let got = lines_of(format!("{long}\nend\n").as_bytes(), &[]);
        assert!(got.iter().all(|l| l.len() <= MAX_LINE_BYTES));
        assert_eq!(got[..got.len() - 1].concat(), long);
        assert_eq!(got.last().unwrap(), "end");
        // A secret across every possible cut is masked whole.
        let secret = "s3cr3t-v4lue";
        for offset in 0..secret.len() + 2 {
            let mut line = "y".repeat(MAX_LINE_BYTES - offset);
            line.push_str(secret);
            line.push_str("zz");
            let got = lines_of(line.as_bytes(), &[secret]);
            let all = got.concat();
            assert!(!all.contains("s3cr"), "offset {offset}");
            assert!(!all.contains("v4lue"), "offset {offset}");
            assert!(all.contains("********"), "offset {offset}");
        }
        // Multi-byte characters are not cut in half.
        // (one ASCII byte first, so the byte limit falls inside a character)
        let wide = format!("a{}", "é".repeat(MAX_LINE_BYTES));
        let got = lines_of(wide.as_bytes(), &[]);
        assert!(got.iter().all(|l| !l.contains('\u{FFFD}')));
        assert_eq!(got.concat(), wide);
    }

    #[test]
    fn masking() {
        let secrets = vec!["hunter2".to_string(), "a\nbc".to_string()];
        assert_eq!(mask("pw=hunter2!", &secrets), "pw=********!");
        assert_eq!(mask("bc and a", &secrets), "******** and a");
        assert_eq!(mask("nothing", &secrets), "nothing");
    }

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
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut env = BTreeMap::new();
        env.insert("GREETING".to_string(), "hello".to_string());
        let args = vec![
            "-e".into(),
            "-c".into(),
            "echo $GREETING; echo oops >&2; echo s3cret; exit 3".into(),
        ];
        let mut run = spawn("sh", &args, dir.path(), &env, vec!["s3cret".into()], tx).unwrap();
        assert_eq!(run.wait().await, Exit::Code(3));
        let mut got = Vec::new();
        while let Some((_, l)) = rx.recv().await {
            got.push(l);
        }
        assert_eq!(got, ["hello", "oops", "********"]);
    }

    #[tokio::test]
    async fn kill_takes_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let args = vec!["-c".into(), "sleep 600 & sleep 600; wait".into()];
        let mut run = spawn("sh", &args, dir.path(), &BTreeMap::new(), vec![], tx).unwrap();
        let pgid = run.pgid;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let started = Instant::now();
        run.kill();
        assert_eq!(run.wait().await, Exit::Killed);
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
