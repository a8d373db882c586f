//! The built-in `git` forge: bare or non-bare repositories below one local directory.
//!
//! A forge created as `{"type": "git", "url": "file:///abs/dir"}` serves every git repository
//! below `/abs/dir`; a repository's remote id is its path relative to that directory without
//! `.git` (`alice/hello` for `/abs/dir/alice/hello.git`). Everything goes through the real
//! `git` binary. Activation installs a `post-receive` hook that posts the pushed ref updates
//! to the server's hook endpoint, so `git push` starts pipelines with no network forge.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use woodlark_git::diff as git_diff;
use woodlark_git::{
    CatFile, CommandError, Commit, Git, GitError, Kind, Object, TreeEntry, hex, with_session,
};

use super::{
    CONFIG_DIR, CONFIG_FILES, ForgeDriver, ForgeError, PullRequest, RemoteRepo, off_runtime,
};
use crate::pipeline::types::{self, ConfigFile};
use crate::store::repos::Repo;

/// First line after the shebang of every hook we install; we only ever overwrite or remove
/// a hook that carries it.
const HOOK_MARKER: &str = "# Installed by Woodlark";

/// How deep below the root the repository listing looks (`group/sub/owner/name`).
const LIST_DEPTH: usize = 4;
/// At most this many repositories are listed (a huge directory must not stall a request).
const LIST_MAX: usize = 2000;

impl From<GitError> for ForgeError {
    fn from(err: GitError) -> ForgeError {
        ForgeError::Failed(err.to_string())
    }
}

impl From<CommandError> for ForgeError {
    fn from(err: CommandError) -> ForgeError {
        ForgeError::Failed(err.to_string())
    }
}

#[derive(Clone)]
pub struct GitForge {
    root: PathBuf,
}

impl GitForge {
    /// `file:///abs/dir` → a driver for that directory (which must exist).
    pub fn from_url(url: &str) -> Result<GitForge, ForgeError> {
        let root = root_from_url(url)?;
        Ok(GitForge { root })
    }

    /// The repository directory of `remote_id` (bare `X.git` preferred over `X/.git`).
    fn locate(&self, remote_id: &str) -> Result<PathBuf, ForgeError> {
        validate_remote_id(remote_id)?;
        let bare = self.root.join(format!("{remote_id}.git"));
        if bare.join("HEAD").is_file() {
            return Ok(bare);
        }
        let plain = self.root.join(remote_id);
        if plain.join(".git").join("HEAD").is_file() {
            return Ok(plain);
        }
        if plain.join("HEAD").is_file() && plain.join("objects").is_dir() {
            return Ok(plain);
        }
        Err(ForgeError::RepoNotFound(remote_id.to_string()))
    }

    /// The repository a located directory holds, as the forge describes it.
    fn describe(&self, remote_id: &str, dir: &Path, default_branch: String) -> RemoteRepo {
        let (owner, name) = remote_id.rsplit_once('/').unwrap_or(("", remote_id));
        let url = format!("file://{}", dir.display());
        RemoteRepo {
            forge_remote_id: remote_id.to_string(),
            owner: owner.to_string(),
            name: name.to_string(),
            clone_url: url.clone(),
            forge_url: url,
            default_branch,
            private: true,
            avatar_url: String::new(),
        }
    }

    /// The directory holding the repository's hooks.
    fn hooks_dir(&self, remote_id: &str) -> Result<PathBuf, ForgeError> {
        let dir = self.locate(remote_id)?;
        let out = git(&dir, &["rev-parse", "--git-path", "hooks"])?;
        let hooks = PathBuf::from(out.trim());
        Ok(if hooks.is_absolute() {
            hooks
        } else {
            dir.join(hooks)
        })
    }
}

/// Checks a forge URL for the `git` type: `file://` + an absolute path to a directory.
pub fn root_from_url(url: &str) -> Result<PathBuf, ForgeError> {
    let path = url.strip_prefix("file://").ok_or_else(|| {
        ForgeError::Invalid(format!(
            "url {url:?}: a git forge needs a file:///absolute/directory URL"
        ))
    })?;
    let path = PathBuf::from(path);
    if !path.is_absolute() {
        return Err(ForgeError::Invalid(format!(
            "url {url:?}: the path must be absolute"
        )));
    }
    if !path.is_dir() {
        return Err(ForgeError::Invalid(format!(
            "url {url:?}: {} is not a directory",
            path.display()
        )));
    }
    Ok(path)
}

/// A remote id is a relative path of at least two plain components (`owner/name`).
pub fn validate_remote_id(remote_id: &str) -> Result<(), ForgeError> {
    let invalid = |why: &str| ForgeError::Invalid(format!("forge_remote_id {remote_id:?}: {why}"));
    if remote_id.is_empty() {
        return Err(invalid("must not be empty"));
    }
    let path = Path::new(remote_id);
    let mut parts = 0;
    for component in path.components() {
        match component {
            Component::Normal(part) => {
                let part = part.to_str().unwrap_or("");
                if part.is_empty()
                    || part.starts_with('.')
                    || !part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                {
                    return Err(invalid(
                        "each part may hold letters, digits, '.', '_' and '-' and not start with '.'",
                    ));
                }
                parts += 1;
            }
            _ => return Err(invalid("must be a relative path like owner/name")),
        }
    }
    if parts < 2 {
        return Err(invalid(
            "must name an owner and a repository, like owner/name",
        ));
    }
    if remote_id.ends_with('/') || remote_id.contains("//") {
        return Err(invalid("must not contain empty parts"));
    }
    Ok(())
}

/// Collects `(remote id, directory)` of the repositories below `dir`: bare `name.git`,
/// `name/.git` and bare `name/`; hidden directories and symlinks are not followed, and a
/// repository's own directory is not searched further.
fn find_repos(dir: &Path, prefix: &str, depth: usize, found: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if found.len() >= LIST_MAX {
            return;
        }
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        let id_of = |n: &str| format!("{prefix}{n}");
        let bare = path.join("HEAD").is_file() && path.join("objects").is_dir();
        let repo_id = if bare {
            Some(id_of(name.strip_suffix(".git").unwrap_or(&name)))
        } else if path.join(".git").join("HEAD").is_file() {
            Some(id_of(&name))
        } else {
            None
        };
        match repo_id {
            Some(id) if validate_remote_id(&id).is_ok() => found.push((id, path)),
            Some(_) => {}
            None if depth + 1 < LIST_DEPTH => {
                find_repos(&path, &format!("{prefix}{name}/"), depth + 1, found)
            }
            None => {}
        }
    }
}

/// The branch `HEAD` names, read from the file (listing many repositories spawns no `git`).
fn head_branch(dir: &Path) -> Option<String> {
    let head = ["HEAD", ".git/HEAD"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())?;
    head.trim()
        .strip_prefix("ref: refs/heads/")
        .map(str::to_string)
}

/// Runs `git` in `dir`; stdout on success.
fn git(dir: &Path, args: &[&str]) -> Result<String, ForgeError> {
    Ok(Git::in_dir(dir, args).without_prompt().stdout()?)
}

/// The blocking answers, one per [`ForgeDriver`] call; the trait impl below runs each on
/// the blocking pool. (Same names as the trait's methods: on a `GitForge` value these,
/// the inherent ones, are what a call resolves to.)
impl GitForge {
    pub fn repo(&self, remote_id: &str) -> Result<RemoteRepo, ForgeError> {
        let dir = self.locate(remote_id)?;
        let default_branch = git(&dir, &["symbolic-ref", "--short", "HEAD"])
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "main".to_string());
        Ok(self.describe(remote_id, &dir, default_branch))
    }

    pub fn list_repos(&self) -> Result<Option<Vec<RemoteRepo>>, ForgeError> {
        let mut found = Vec::new();
        find_repos(&self.root, "", 0, &mut found);
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.dedup_by(|a, b| a.0 == b.0);
        Ok(Some(
            found
                .into_iter()
                .map(|(id, dir)| {
                    let branch = head_branch(&dir).unwrap_or_else(|| "main".to_string());
                    self.describe(&id, &dir, branch)
                })
                .collect(),
        ))
    }

    pub fn branches(&self, repo: &Repo) -> Result<Vec<String>, ForgeError> {
        let dir = self.locate(&repo.forge_remote_id)?;
        let out = git(
            &dir,
            &["for-each-ref", "--format=%(refname:short)", "refs/heads"],
        )?;
        Ok(out
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect())
    }

    pub fn pull_requests(&self, repo: &Repo) -> Result<Vec<PullRequest>, ForgeError> {
        // Plain git has no pull requests; the repository must still exist.
        self.locate(&repo.forge_remote_id)?;
        Ok(Vec::new())
    }

    pub fn activate(&self, repo: &Repo, hook_url: &str) -> Result<(), ForgeError> {
        let hooks = self.hooks_dir(&repo.forge_remote_id)?;
        std::fs::create_dir_all(&hooks)
            .map_err(|e| ForgeError::Failed(format!("cannot create {}: {e}", hooks.display())))?;
        let path = hooks.join("post-receive");
        if let Ok(existing) = std::fs::read_to_string(&path)
            && !existing.contains(HOOK_MARKER)
        {
            return Err(ForgeError::Conflict(format!(
                "{} already has a post-receive hook that Woodlark did not install; remove it or chain it by hand",
                repo.forge_remote_id
            )));
        }
        let script = hook_script(hook_url);
        let tmp = hooks.join(".post-receive.woodlark.tmp");
        write_executable(&tmp, &script)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| ForgeError::Failed(format!("cannot install {}: {e}", path.display())))
    }

    pub fn branch_head(&self, repo: &Repo, branch: &str) -> Result<types::Commit, ForgeError> {
        let dir = self.locate(&repo.forge_remote_id)?;
        let not_found = || ForgeError::RepoNotFound(format!("{}: branch {branch}", repo.full_name));
        if !is_branch_name(branch) {
            return Err(not_found());
        }
        let commit = with_session(&dir, |cat| cat.commit(&format!("refs/heads/{branch}")))?;
        commit.map(commit_info).ok_or_else(not_found)
    }

    pub fn commit(&self, repo: &Repo, sha: &str) -> Result<types::Commit, ForgeError> {
        if !is_sha(sha) {
            return Err(ForgeError::Invalid(format!("{sha:?} is not a commit id")));
        }
        let dir = self.locate(&repo.forge_remote_id)?;
        with_session(&dir, |cat| cat.commit(sha))?
            .map(commit_info)
            .ok_or_else(|| ForgeError::RepoNotFound(format!("{}: commit {sha}", repo.full_name)))
    }

    pub fn changed_files(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<Vec<String>, ForgeError> {
        let dir = self.locate(&repo.forge_remote_id)?;
        check_push_ids(before, after)?;
        with_session(&dir, |cat| {
            let Some(commit) = cat.commit(after)? else {
                return Ok(None);
            };
            changes(cat, before, &commit, None)
        })?
        .ok_or_else(|| missing_push(repo, before, after))
    }

    pub fn pushed(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<super::Pushed, ForgeError> {
        let dir = self.locate(&repo.forge_remote_id)?;
        check_push_ids(before, after)?;
        // One session, and the commit and its root tree read once for all three answers.
        let (commit, changed, config) = with_session(&dir, |cat| {
            let Some(commit) = cat.commit(after)? else {
                return Ok(None);
            };
            // Missing or malformed, the answers below read it again and say why.
            let root = match cat.get(&commit.tree)? {
                Some(obj) if obj.kind == Kind::Tree => obj.tree_entries().ok(),
                _ => None,
            };
            let changed = changes(cat, before, &commit, root.as_deref());
            let config =
                config_files_at(cat, repo.config_file.trim(), &commit.id, root.as_deref())?;
            Ok(Some((commit, changed, config)))
        })?
        .ok_or_else(|| ForgeError::RepoNotFound(format!("{}: commit {after}", repo.full_name)))?;
        let changed = match changed {
            Ok(Some(files)) => files,
            Ok(None) => super::unknown_changes(repo, missing_push(repo, before, after)),
            Err(err) => super::unknown_changes(repo, err.into()),
        };
        Ok(super::Pushed {
            commit: commit_info(commit),
            changed,
            config,
        })
    }

    pub fn config_files(&self, repo: &Repo, commit: &str) -> Result<Vec<ConfigFile>, ForgeError> {
        if !is_sha(commit) {
            return Err(ForgeError::Invalid(format!(
                "{commit:?} is not a commit id"
            )));
        }
        let dir = self.locate(&repo.forge_remote_id)?;
        // One pooled `cat-file --batch` session answers the listing and every file.
        Ok(with_session(&dir, |cat| {
            config_files_at(cat, repo.config_file.trim(), commit, None)
        })?)
    }

    pub fn deactivate(&self, repo: &Repo) -> Result<(), ForgeError> {
        let Ok(hooks) = self.hooks_dir(&repo.forge_remote_id) else {
            return Ok(());
        };
        let path = hooks.join("post-receive");
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing.contains(HOOK_MARKER) => std::fs::remove_file(&path)
                .map_err(|e| ForgeError::Failed(format!("cannot remove {}: {e}", path.display()))),
            _ => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl ForgeDriver for GitForge {
    /// Local repositories have no users of their own: every call is the server's.
    fn acting_as(&self, _token: &str) -> Arc<dyn ForgeDriver> {
        Arc::new(self.clone())
    }

    async fn repo(&self, remote_id: &str) -> Result<RemoteRepo, ForgeError> {
        let (git, id) = (self.clone(), remote_id.to_string());
        off_runtime(move || git.repo(&id)).await
    }

    async fn list_repos(&self) -> Result<Option<Vec<RemoteRepo>>, ForgeError> {
        let git = self.clone();
        off_runtime(move || git.list_repos()).await
    }

    async fn branches(&self, repo: &Repo) -> Result<Vec<String>, ForgeError> {
        let (git, repo) = (self.clone(), repo.clone());
        off_runtime(move || git.branches(&repo)).await
    }

    async fn pull_requests(&self, repo: &Repo) -> Result<Vec<PullRequest>, ForgeError> {
        let (git, repo) = (self.clone(), repo.clone());
        off_runtime(move || git.pull_requests(&repo)).await
    }

    async fn activate(&self, repo: &Repo, hook_url: &str) -> Result<(), ForgeError> {
        let (git, repo, url) = (self.clone(), repo.clone(), hook_url.to_string());
        off_runtime(move || git.activate(&repo, &url)).await
    }

    async fn deactivate(&self, repo: &Repo) -> Result<(), ForgeError> {
        let (git, repo) = (self.clone(), repo.clone());
        off_runtime(move || git.deactivate(&repo)).await
    }

    async fn branch_head(&self, repo: &Repo, branch: &str) -> Result<types::Commit, ForgeError> {
        let (git, repo, branch) = (self.clone(), repo.clone(), branch.to_string());
        off_runtime(move || git.branch_head(&repo, &branch)).await
    }

    async fn commit(&self, repo: &Repo, sha: &str) -> Result<types::Commit, ForgeError> {
        let (git, repo, sha) = (self.clone(), repo.clone(), sha.to_string());
        off_runtime(move || git.commit(&repo, &sha)).await
    }

    async fn changed_files(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<Vec<String>, ForgeError> {
        let (git, repo) = (self.clone(), repo.clone());
        let (before, after) = (before.to_string(), after.to_string());
        off_runtime(move || git.changed_files(&repo, &before, &after)).await
    }

    /// One hop and one `cat-file` session for the commit, its changes and its config.
    async fn pushed(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<super::Pushed, ForgeError> {
        let (git, repo) = (self.clone(), repo.clone());
        let (before, after) = (before.to_string(), after.to_string());
        off_runtime(move || git.pushed(&repo, &before, &after)).await
    }

    async fn config_files(&self, repo: &Repo, commit: &str) -> Result<Vec<ConfigFile>, ForgeError> {
        let (git, repo, commit) = (self.clone(), repo.clone(), commit.to_string());
        off_runtime(move || git.config_files(&repo, &commit)).await
    }
}

/// The pipeline config files at `commit` in upstream's lookup order (see
/// [`ForgeDriver::config_files`]); `config` is the repository's `config_file`.
///
/// The default lookup reads the root tree once (or takes it as `root`, already read) and
/// fetches what it lists by id (one object per question, not a path walk from the commit
/// per candidate); a `config_file` is looked up as `git` resolves `<commit>:<path>`.
fn config_files_at(
    cat: &mut CatFile,
    config: &str,
    commit: &str,
    root: Option<&[TreeEntry]>,
) -> Result<Vec<ConfigFile>, GitError> {
    if !config.is_empty() {
        let path = config.trim_end_matches('/');
        let Some(obj) = cat.get(&format!("{commit}:{path}"))? else {
            return Ok(Vec::new());
        };
        return match obj.kind {
            // A malformed tree holds no config, as a missing one does.
            Kind::Tree if config.ends_with('/') => {
                yaml_files_in(cat, path, &obj.tree_entries().unwrap_or_default())
            }
            Kind::Blob if !config.ends_with('/') => Ok(vec![config_file(path, obj)]),
            _ => Ok(Vec::new()),
        };
    }
    let read;
    let root = match root {
        Some(root) => root,
        None => {
            read = match cat.get(&format!("{commit}^{{tree}}"))? {
                Some(obj) if obj.kind == Kind::Tree => obj.tree_entries().unwrap_or_default(),
                _ => return Ok(Vec::new()),
            };
            &read
        }
    };
    let named = |name: &str| root.iter().find(|e| e.name == name.as_bytes());
    if let Some(dir) = named(CONFIG_DIR).filter(|e| e.is_tree()) {
        let entries = match cat.get(&hex(&dir.id))? {
            Some(obj) if obj.kind == Kind::Tree => obj.tree_entries().unwrap_or_default(),
            _ => Vec::new(),
        };
        let files = yaml_files_in(cat, CONFIG_DIR, &entries)?;
        if !files.is_empty() {
            return Ok(files);
        }
    }
    for name in CONFIG_FILES {
        if let Some(entry) = named(name).filter(|e| e.is_blob())
            && let Some(obj) = cat.get(&hex(&entry.id))?
        {
            return Ok(vec![config_file(name, obj)]);
        }
    }
    Ok(Vec::new())
}

/// The `*.yaml` and `*.yml` files of a tree listing (not below it), by name.
fn yaml_files_in(
    cat: &mut CatFile,
    prefix: &str,
    entries: &[TreeEntry],
) -> Result<Vec<ConfigFile>, GitError> {
    let mut named: Vec<(String, &TreeEntry)> = entries
        .iter()
        .filter(|e| e.is_blob())
        .map(|e| (format!("{prefix}/{}", String::from_utf8_lossy(&e.name)), e))
        .filter(|(n, _)| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut files = Vec::with_capacity(named.len());
    for (name, entry) in named {
        if let Some(obj) = cat.get(&hex(&entry.id))? {
            files.push(config_file(&name, obj));
        }
    }
    Ok(files)
}

fn config_file(name: &str, blob: Object) -> ConfigFile {
    ConfigFile {
        name: name.to_string(),
        data: String::from_utf8_lossy(&blob.data).into_owned(),
    }
}

/// `before` (may be empty) and `after` must be commit ids.
fn check_push_ids(before: &str, after: &str) -> Result<(), ForgeError> {
    let bad = if !before.is_empty() && !is_sha(before) {
        before
    } else if !is_sha(after) {
        after
    } else {
        return Ok(());
    };
    Err(ForgeError::Invalid(format!("{bad:?} is not a commit id")))
}

fn missing_push(repo: &Repo, before: &str, after: &str) -> ForgeError {
    ForgeError::RepoNotFound(format!("{}: commit {before}..{after}", repo.full_name))
}

/// The files a push of `before..commit` changed (`before` empty or all zeros: those the
/// commit itself changed); `None` when `before` does not exist. `root` is the commit's root
/// tree if already read.
fn changes(
    cat: &mut CatFile,
    before: &str,
    commit: &Commit,
    root: Option<&[TreeEntry]>,
) -> Result<Option<Vec<String>>, GitError> {
    let read;
    let root = match root {
        Some(root) => root,
        None => {
            read = git_diff::tree(cat, &commit.tree)?;
            &read
        }
    };
    if before.is_empty() || before.bytes().all(|b| b == b'0') {
        git_diff::of_commit(cat, commit, root).map(Some)
    } else {
        git_diff::between(cat, before, root)
    }
}

/// What the API shows of a commit: `git show`'s `%H %an %ae %ct %B`, the message without
/// trailing whitespace.
fn commit_info(commit: Commit) -> types::Commit {
    types::Commit {
        sha: commit.id,
        author: commit.author_name,
        author_email: commit.author_email,
        timestamp: commit.committer_time,
        message: commit.message.trim_end().to_string(),
        ..types::Commit::default()
    }
}

/// A branch name git would accept (`git check-ref-format --branch`, roughly): anything that
/// could make `refs/heads/<name>` mean another revision (`~`, `^`, `:`, `@{`, `..`) is not.
fn is_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['-', '/', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("@{")
        && !name.contains("//")
        && !name.contains("/.")
        && name != "@"
        && !name
            .chars()
            .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
}

fn is_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn write_executable(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The post-receive hook: forwards git's `<old> <new> <ref>` lines to the server and shows
/// the server's answer in the pusher's terminal (`remote: …`). It never fails the push.
fn hook_script(hook_url: &str) -> String {
    let quoted = hook_url.replace('\'', r"'\''");
    format!(
        r#"#!/bin/sh
{HOOK_MARKER}; re-installed by "repair", removed on deactivation.
url='{quoted}'
if ! command -v curl >/dev/null 2>&1; then
  echo "woodlark: curl is not installed; the server was not notified of this push" >&2
  exit 0
fi
answer=$(curl -sS --max-time 30 -X POST -H 'Content-Type: text/plain' -H 'X-Woodlark-Event: push' --data-binary @- "$url" 2>&1) \
  || echo "woodlark: could not notify the server: $answer" >&2
[ -n "$answer" ] && printf 'woodlark: %s\n' "$answer" >&2
exit 0
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use woodlark_git::testing::{change_history, commit_all, git as run, names};

    /// `alice/work` (a work tree) below a forge root, with a history of every kind of
    /// change; the forge, the repository record and every commit id.
    fn history() -> (tempfile::TempDir, GitForge, Repo, Vec<String>) {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("alice/work");
        std::fs::create_dir_all(&d).unwrap();
        let commits = change_history(&d);

        let forge = GitForge::from_url(&format!("file://{}", root.path().display())).unwrap();
        let remote = forge.repo("alice/work").unwrap();
        let repo = remote.new_repo(1, 1);
        (root, forge, repo, commits)
    }

    #[test]
    fn changed_files_match_the_git_commands() {
        let (root, forge, repo, commits) = history();
        let d = root.path().join("alice/work");
        let zeros = "0".repeat(40);
        for c in &commits {
            let want = names(&d, &["show", "--no-renames", "--name-only", "--format=", c]);
            assert_eq!(
                forge.changed_files(&repo, &zeros, c).unwrap(),
                want,
                "show {c}"
            );
            assert_eq!(forge.changed_files(&repo, "", c).unwrap(), want, "show {c}");
        }
        for before in &commits {
            for after in &commits {
                let want = names(&d, &["diff", "--no-renames", "--name-only", before, after]);
                let got = forge.changed_files(&repo, before, after).unwrap();
                assert_eq!(got, want, "diff {before} {after}");
            }
        }
        // Spot checks of the semantics the comparison covers.
        let merge = forge.changed_files(&repo, &zeros, &commits[8]).unwrap();
        assert_eq!(merge, ["f"], "a merge lists what differs from every parent");
        assert!(
            forge
                .changed_files(&repo, &zeros, &commits[10])
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            forge
                .changed_files(&repo, &zeros, &commits[0])
                .unwrap()
                .len(),
            7
        );
        // Unknown commits are errors (the hook then goes on without files).
        let unknown = "1".repeat(40);
        assert!(forge.changed_files(&repo, &unknown, &commits[1]).is_err());
        assert!(forge.changed_files(&repo, &zeros, &unknown).is_err());
        assert!(forge.changed_files(&repo, "HEAD~1", &commits[1]).is_err());
    }

    #[test]
    fn an_annotated_tag_is_read_as_its_commit() {
        let (root, forge, repo, commits) = history();
        let d = root.path().join("alice/work");
        run(&d, &["tag", "-a", "v1", "-m", "tag message", &commits[1]]);
        let tag = run(&d, &["rev-parse", "v1"]).trim().to_string();
        let commit = forge.commit(&repo, &tag).unwrap();
        assert_eq!(
            (commit.sha.as_str(), commit.message.as_str()),
            (commits[1].as_str(), "modify, add deep, delete")
        );
        let zeros = "0".repeat(40);
        let want = names(
            &d,
            &[
                "show",
                "--no-renames",
                "--name-only",
                "--format=",
                &commits[1],
            ],
        );
        assert_eq!(forge.changed_files(&repo, &zeros, &tag).unwrap(), want);
    }

    #[test]
    fn commits_and_branch_heads_match_the_git_commands() {
        let (root, forge, repo, commits) = history();
        let d = root.path().join("alice/work");
        for c in &commits {
            let out = run(
                &d,
                &["show", "-s", "--format=%H%x00%an%x00%ae%x00%ct%x00%B", c],
            );
            let want: Vec<&str> = out.splitn(5, '\0').collect();
            let got = forge.commit(&repo, c).unwrap();
            assert_eq!(
                (
                    got.sha.as_str(),
                    got.author.as_str(),
                    got.author_email.as_str()
                ),
                (want[0], want[1], want[2])
            );
            assert_eq!(got.timestamp.to_string(), want[3]);
            assert_eq!(got.message, want[4].trim_end());
        }
        for branch in ["main", "side", "o1"] {
            let sha = run(&d, &["rev-parse", branch]).trim().to_string();
            assert_eq!(forge.branch_head(&repo, branch).unwrap().sha, sha);
        }
        // A moved branch is seen by the pooled session at once.
        run(&d, &["branch", "-f", "side", &commits[0]]);
        assert_eq!(forge.branch_head(&repo, "side").unwrap().sha, commits[0]);
        run(&d, &["pack-refs", "--all"]);
        assert_eq!(forge.branch_head(&repo, "o1").unwrap().sha, commits[11]);
        for bad in [
            "nope", "main~1", "main^", "side:f", "HEAD@{1}", "", "a..b", "-x",
        ] {
            assert!(
                matches!(
                    forge.branch_head(&repo, bad),
                    Err(ForgeError::RepoNotFound(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            forge.commit(&repo, "main"),
            Err(ForgeError::Invalid(_))
        ));
        assert!(matches!(
            forge.commit(&repo, &"1".repeat(40)),
            Err(ForgeError::RepoNotFound(_))
        ));
    }

    #[test]
    fn pushed_answers_as_commit_and_changed_files_do() {
        let (_root, forge, repo, commits) = history();
        let zeros = "0".repeat(40);
        for (before, after) in [
            (&zeros, &commits[0]),
            (&commits[1], &commits[4]),
            (&zeros, &commits[8]),
        ] {
            let pushed = forge.pushed(&repo, before, after).unwrap();
            assert_eq!(pushed.commit, forge.commit(&repo, after).unwrap());
            assert_eq!(
                pushed.changed,
                forge.changed_files(&repo, before, after).unwrap()
            );
            assert_eq!(pushed.config, forge.config_files(&repo, after).unwrap());
        }
        // An unknown `before` (a force push after gc) costs the files, not the push.
        let pushed = forge.pushed(&repo, &"1".repeat(40), &commits[1]).unwrap();
        assert_eq!(
            (pushed.commit.sha.as_str(), pushed.changed.len()),
            (commits[1].as_str(), 0)
        );
        assert!(matches!(
            forge.pushed(&repo, &zeros, &"1".repeat(40)),
            Err(ForgeError::RepoNotFound(_))
        ));
    }

    #[test]
    fn config_lookup_order() {
        let (root, forge, mut repo, _) = history();
        let d = root.path().join("alice/work");
        let write = |path: &str| {
            let p = d.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, path).unwrap();
        };
        let names = |repo: &Repo, commit: &str| -> Vec<(String, String)> {
            forge
                .config_files(repo, commit)
                .unwrap()
                .into_iter()
                .map(|f| (f.name, f.data))
                .collect()
        };
        let pair = |n: &str| (n.to_string(), n.to_string());
        let none = commit_all(&d, "no config");
        assert!(names(&repo, &none).is_empty());
        write(".woodpecker.yml");
        let yml = commit_all(&d, "yml");
        assert_eq!(names(&repo, &yml), [pair(".woodpecker.yml")]);
        write(".woodpecker.yaml");
        write(".woodpecker/notes.txt");
        let yaml = commit_all(&d, "yaml beats yml; a folder without yaml is no config");
        assert_eq!(names(&repo, &yaml), [pair(".woodpecker.yaml")]);
        write(".woodpecker/b.yml");
        write(".woodpecker/a.yaml");
        write(".woodpecker/sub/c.yaml");
        let folder = commit_all(&d, "the folder beats both");
        assert_eq!(
            names(&repo, &folder),
            [pair(".woodpecker/a.yaml"), pair(".woodpecker/b.yml")]
        );
        write("ci/x.yaml");
        let custom = commit_all(&d, "custom");
        repo.config_file = "ci/x.yaml".into();
        assert_eq!(names(&repo, &custom), [pair("ci/x.yaml")]);
        repo.config_file = "ci/".into();
        assert_eq!(names(&repo, &custom), [pair("ci/x.yaml")]);
        repo.config_file = "ci".into();
        assert!(
            names(&repo, &custom).is_empty(),
            "a folder needs the trailing /"
        );
        repo.config_file = "ci/x.yaml/".into();
        assert!(names(&repo, &custom).is_empty());
    }

    #[test]
    fn branch_names() {
        for good in ["main", "feature/x-1", "release-1.2", "a@b", "\u{e9}t\u{e9}"] {
            assert!(is_branch_name(good), "{good}");
        }
        for bad in [
            "a b", "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "x.lock", "a/.b", ".a", "a/", "@",
            "a\tb",
        ] {
            assert!(!is_branch_name(bad), "{bad}");
        }
    }

    #[test]
    fn remote_ids() {
        assert!(validate_remote_id("alice/hello").is_ok());
        assert!(validate_remote_id("group/sub/repo-1.x").is_ok());
        for bad in [
            "",
            "hello",
            "/abs/x",
            "a/../b",
            "a/.hidden",
            "a//b",
            "a/b/",
            "a/b c",
        ] {
            assert!(validate_remote_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_every_repository_below_the_root() {
        let root = tempfile::tempdir().unwrap();
        let bare = |rel: &str, head: &str| {
            let d = root.path().join(rel);
            std::fs::create_dir_all(d.join("objects")).unwrap();
            std::fs::write(d.join("HEAD"), head).unwrap();
        };
        bare("alice/app.git", "ref: refs/heads/trunk\n");
        bare("group/sub/lib.git", "ref: refs/heads/main\n");
        bare("top.git", "ref: refs/heads/main\n"); // no owner: not a repository id
        bare("alice/.hidden.git", "ref: refs/heads/main\n");
        let work = root.path().join("bob/tool/.git");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("HEAD"), "ref: refs/heads/dev\n").unwrap();
        std::fs::create_dir_all(root.path().join("bob/tool/nested.git/objects")).unwrap();
        std::fs::create_dir_all(root.path().join("empty/dir")).unwrap();

        let forge = GitForge::from_url(&format!("file://{}", root.path().display())).unwrap();
        let listed = forge.list_repos().unwrap().unwrap();
        let got: Vec<(&str, &str, &str)> = listed
            .iter()
            .map(|r| {
                (
                    r.forge_remote_id.as_str(),
                    r.owner.as_str(),
                    r.default_branch.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("alice/app", "alice", "trunk"),
                ("bob/tool", "bob", "dev"),
                ("group/sub/lib", "group/sub", "main"),
            ]
        );
    }

    #[test]
    fn urls() {
        let dir = tempfile::tempdir().unwrap();
        assert!(root_from_url(&format!("file://{}", dir.path().display())).is_ok());
        assert!(root_from_url("https://example.com").is_err());
        assert!(root_from_url("file://relative/dir").is_err());
        assert!(root_from_url("file:///does/not/exist").is_err());
    }

    #[test]
    fn hook_script_quotes_the_url() {
        let s = hook_script("http://x/api/hook?access_token=a'b");
        assert!(s.contains(r"url='http://x/api/hook?access_token=a'\''b'"));
        assert!(s.contains(HOOK_MARKER));
    }
}
