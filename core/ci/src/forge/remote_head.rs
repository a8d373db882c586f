//! A branch's head commit straight from the repository's git remote (`git ls-remote`).
//!
//! The forge-adapter WIT (0.1.0) has no "branch head" call, but every forge serves its
//! repositories over git, and the runner clones from the same URL with the same credentials.
//! So manual runs and cron on plugin-served forges ask the remote itself: the forge's API token
//! goes in an `Authorization: Basic oauth2:<token>` header passed through git's environment
//! config (`GIT_CONFIG_*`, readable only by this user; never on the command line, never in the
//! URL), the call is bounded by a timeout, and only the exact ref `refs/heads/<branch>` counts.

use std::time::Duration;

use base64::Engine;
use woodlark_git::command::Output;

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
    let header = (!token.is_empty()
        && (clone_url.starts_with("https://") || clone_url.starts_with("http://")))
    .then(|| {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{token}"));
        format!("Authorization: Basic {basic}")
    });
    let Output { stdout, stderr } =
        woodlark_git::command::ls_remote_heads(clone_url, &wanted, header.as_deref(), timeout)?;
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
}
