//! A branch's head commit straight from the repository's git remote (`git ls-remote`).
//!
//! The forge-adapter WIT (0.1.0) has no "branch head" call, but every forge serves its
//! repositories over git, and the runner clones from the same URL with the same credentials.
//! So manual runs and cron on plugin-served forges ask the remote itself: the forge's API token
//! goes in an `Authorization: Basic oauth2:<token>` header passed through git's environment
//! config (`GIT_CONFIG_*`, readable only by this user; never on the command line, never in the
//! URL), the call is bounded by a timeout, and only the exact ref `refs/heads/<branch>` counts.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;

use super::ForgeError;

/// How long a remote may take to list its refs.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The commit id `refs/heads/<branch>` points at on the remote `clone_url`.
pub fn branch_head(
    clone_url: &str,
    token: &str,
    branch: &str,
    timeout: Duration,
) -> Result<String, ForgeError> {
    check_branch_name(branch)?;
    if clone_url.is_empty() || clone_url.starts_with('-') {
        return Err(ForgeError::Invalid(format!(
            "the repository has no usable clone URL ({clone_url:?})"
        )));
    }
    let wanted = format!("refs/heads/{branch}");
    let mut cmd = Command::new("git");
    cmd.args(["ls-remote", "--heads", clone_url, &wanted])
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        // Its own process group, so a timeout also ends git's transport helper.
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !token.is_empty() && (clone_url.starts_with("https://") || clone_url.starts_with("http://"))
    {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{token}"));
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: Basic {basic}"),
            );
    }
    let (stdout, stderr) = run_bounded(cmd, timeout)?;
    for line in stdout.lines() {
        if let Some((sha, name)) = line.split_once('\t')
            && name == wanted
            && is_commit_id(sha)
        {
            return Ok(sha.to_string());
        }
    }
    if !stderr.trim().is_empty() {
        return Err(ForgeError::Failed(format!(
            "git ls-remote {clone_url}: {}",
            stderr.trim()
        )));
    }
    Err(ForgeError::RepoNotFound(format!(
        "{clone_url}: branch {branch}"
    )))
}

/// Rejects names git would not accept for a branch, and anything that could read as an option.
fn check_branch_name(branch: &str) -> Result<(), ForgeError> {
    let bad = branch.is_empty()
        || branch.starts_with('-')
        || branch.starts_with('/')
        || branch.ends_with('/')
        || branch.ends_with(".lock")
        || branch.ends_with('.')
        || branch.contains("..")
        || branch.contains("//")
        || branch.contains("@{")
        || branch
            .chars()
            .any(|c| c.is_control() || " ~^:?*[\\".contains(c));
    if bad {
        return Err(ForgeError::Invalid(format!(
            "{branch:?} is not a valid branch name"
        )));
    }
    Ok(())
}

fn is_commit_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Runs `cmd` to completion or kills it after `timeout`; returns stdout and stderr.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<(String, String), ForgeError> {
    let mut child = cmd
        .spawn()
        .map_err(|e| ForgeError::Failed(format!("cannot run git: {e}")))?;
    // Drain both pipes on their own threads so a chatty remote cannot block the child.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(pipe) = pipe {
                let _ = pipe.take(1 << 20).read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                crate::runner::process::kill_process_group(child.id() as i32);
                let _ = child.wait();
                return Err(ForgeError::Failed(format!(
                    "git ls-remote did not answer within {} s",
                    timeout.as_secs_f32()
                )));
            }
            Err(e) => return Err(ForgeError::Failed(format!("waiting for git: {e}"))),
        }
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok((stdout, stderr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use woodlark_git::testing::git;

    #[test]
    fn finds_the_exact_branch_on_a_remote() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path();
        git(work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("a"), "1").unwrap();
        git(work, &["add", "a"]);
        git(work, &["commit", "-q", "-m", "one"]);
        let main = git(work, &["rev-parse", "HEAD"]).trim().to_string();
        git(work, &["branch", "feature/main"]);
        std::fs::write(work.join("a"), "2").unwrap();
        git(work, &["commit", "-q", "-am", "two"]);
        git(work, &["branch", "-f", "feature/main"]);
        let feature = git(work, &["rev-parse", "HEAD"]).trim().to_string();
        git(work, &["checkout", "-q", "-B", "main", &main]);
        let url = format!("file://{}", work.display());

        assert_eq!(branch_head(&url, "", "main", TIMEOUT).unwrap(), main);
        // A token is harmless for non-HTTP remotes; `main` must not match `feature/main`.
        assert_eq!(
            branch_head(&url, "tok", "feature/main", TIMEOUT).unwrap(),
            feature
        );
        assert!(matches!(
            branch_head(&url, "", "nope", TIMEOUT),
            Err(ForgeError::RepoNotFound(_))
        ));
        let missing = format!("file://{}/missing", work.display());
        assert!(matches!(
            branch_head(&missing, "", "main", TIMEOUT),
            Err(ForgeError::Failed(_))
        ));
    }

    #[test]
    fn rejects_bad_branch_names_and_urls() {
        for name in [
            "", "-x", "a..b", "a b", "a:b", "x.lock", "a//b", "/a", "a@{1}",
        ] {
            assert!(
                matches!(
                    branch_head("file:///nowhere", "", name, TIMEOUT),
                    Err(ForgeError::Invalid(_))
                ),
                "{name:?}"
            );
        }
        assert!(matches!(
            branch_head("--upload-pack=x", "", "main", TIMEOUT),
            Err(ForgeError::Invalid(_))
        ));
    }

    #[test]
    fn a_silent_remote_times_out() {
        // Accepts the connection and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let _hold = std::thread::spawn(move || {
            let conns: Vec<_> = listener.incoming().take(2).collect();
            std::thread::sleep(Duration::from_secs(5));
            drop(conns);
        });
        let started = Instant::now();
        let err = branch_head(
            &format!("http://{addr}/o/r.git"),
            "secret-token",
            "main",
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(err.to_string().contains("did not answer"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
