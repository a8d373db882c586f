//! Reading git objects through one `git cat-file --batch` pipe.
//!
//! Why: every `git` process costs ~2.5 ms of fork/exec and repository setup, and a webhook
//! used to run several of them one after another. `cat-file --batch` answers any number of
//! object questions over one stdin/stdout pair: we write `<rev>:<path>\n` (or an object id)
//! and git answers
//!
//! ```text
//! <oid> SP <type> SP <size> LF <size bytes of raw object> LF     (found)
//! <input> SP missing LF                                          (not found)
//! ```
//!
//! Tree objects come back raw and binary: a sequence of `<octal mode> SP <name> NUL <id>`,
//! where the id is 20 bytes in SHA-1 repositories and 32 in SHA-256 ones (the length of the
//! hex id in the answer header tells which). Names are bytes, not necessarily UTF-8.
//!
//! A [`CatFile`] is one such session; it is killed when dropped. [`with_session`] keeps idle
//! sessions per repository for the next caller (a webhook then starts no process at all),
//! discards one that fails, and never waits on a silent pipe longer than [`READ_TIMEOUT`].
//! Sessions are only asked for object ids and `<id>:<path>`, never ref names, so what a
//! long-lived session answers cannot go stale: objects are immutable, and git looks again
//! on disk for one it does not know yet (a push after the session started).
//!
//! On top of the objects: [`commit_info`] (author, committer time, message) and
//! [`changed_files`] (a tree diff), which a push hook needs next to its config files.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use super::{CommitInfo, ForgeError};

/// The longest a session may stay silent before its answer is given up (and it is killed).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle sessions kept per repository, and in all.
const IDLE_PER_REPO: usize = 4;
const IDLE_TOTAL: usize = 64;
/// An idle session older than this is closed when the pool is next touched.
const IDLE_FOR: Duration = Duration::from_secs(120);

/// Larger answers are refused (a config file or a tree listing is far smaller).
const MAX_OBJECT: usize = 64 << 20;

/// An object as `cat-file --batch` returns it.
#[derive(Debug, PartialEq, Eq)]
pub struct Object {
    pub kind: String,
    /// The object id's length in bytes (20: SHA-1, 32: SHA-256).
    pub id_len: usize,
    pub data: Vec<u8>,
}

/// One entry of a tree object.
#[derive(Debug, PartialEq, Eq)]
pub struct TreeEntry {
    pub mode: u32,
    pub name: Vec<u8>,
    /// The raw object id (20 or 32 bytes).
    pub id: Vec<u8>,
}

impl TreeEntry {
    /// A file (regular, executable or symlink), not a directory or a submodule.
    pub fn is_blob(&self) -> bool {
        self.mode & 0o170000 == 0o100000 || self.mode & 0o170000 == 0o120000
    }

    pub fn is_tree(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }

    fn hex_id(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// One running `git cat-file --batch` in a repository directory.
pub struct CatFile {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl CatFile {
    pub fn start(dir: &Path) -> Result<CatFile, ForgeError> {
        let mut child = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["cat-file", "--batch"])
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| ForgeError::Failed(format!("cannot run git cat-file: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ForgeError::Failed("git cat-file: no pipes".to_string()));
        };
        Ok(CatFile {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// The object `spec` names (`<rev>:<path>` or an id); `None` when it does not exist.
    pub fn get(&mut self, spec: &str) -> Result<Option<Object>, ForgeError> {
        if spec.is_empty() || spec.contains(['\n', '\r']) {
            return Ok(None);
        }
        let io = |e: std::io::Error| ForgeError::Failed(format!("git cat-file {spec:?}: {e}"));
        self.stdin
            .write_all(format!("{spec}\n").as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(io)?;
        self.wait_readable(spec)?;
        let mut header = Vec::new();
        self.stdout.read_until(b'\n', &mut header).map_err(io)?;
        if header.last() != Some(&b'\n') {
            return Err(ForgeError::Failed(format!(
                "git cat-file {spec:?}: the session ended"
            )));
        }
        header.pop();
        let header = String::from_utf8_lossy(&header).into_owned();
        if header.ends_with(" missing") || header.ends_with(" ambiguous") {
            return Ok(None);
        }
        let bad = || ForgeError::Failed(format!("git cat-file {spec:?}: bad answer {header:?}"));
        let mut parts = header.rsplitn(3, ' ');
        let size: usize = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let kind = parts.next().ok_or_else(bad)?.to_string();
        let oid = parts.next().ok_or_else(bad)?;
        let id_len = match oid.len() {
            40 => 20,
            64 => 32,
            _ => return Err(bad()),
        };
        if size > MAX_OBJECT {
            return Err(ForgeError::Failed(format!(
                "git cat-file {spec:?}: object of {size} bytes is too large"
            )));
        }
        let mut data = vec![0; size + 1];
        self.stdout.read_exact(&mut data).map_err(io)?;
        if data.pop() != Some(b'\n') {
            return Err(bad());
        }
        Ok(Some(Object { kind, id_len, data }))
    }
}

impl CatFile {
    /// Waits until the answer starts arriving, at most [`READ_TIMEOUT`]; git writes an
    /// answer's header and body together, so the rest follows without another wait.
    fn wait_readable(&mut self, spec: &str) -> Result<(), ForgeError> {
        if !self.stdout.buffer().is_empty() {
            return Ok(());
        }
        let mut fd = libc::pollfd {
            fd: self.stdout.get_ref().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = READ_TIMEOUT.as_millis() as libc::c_int;
        // SAFETY: one valid pollfd for the call's duration.
        let ready = unsafe { libc::poll(&mut fd, 1, millis) };
        if ready > 0 {
            Ok(())
        } else {
            Err(ForgeError::Failed(format!(
                "git cat-file {spec:?}: no answer within {}s",
                READ_TIMEOUT.as_secs()
            )))
        }
    }
}

/// Idle sessions of one repository, each with the time it went idle.
type Idle = Vec<(CatFile, Instant)>;

/// Idle sessions by repository directory.
static POOL: LazyLock<Mutex<HashMap<PathBuf, Idle>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Runs `f` on a session in `dir`: an idle one when there is one, else a new one. The session
/// goes back to the pool when `f` succeeds and is killed when it fails. A reused session that
/// fails is replaced by a fresh one for a second try, so a stale pipe costs a retry, not an
/// error.
pub fn with_session<T>(
    dir: &Path,
    mut f: impl FnMut(&mut CatFile) -> Result<T, ForgeError>,
) -> Result<T, ForgeError> {
    let idle = {
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        pool.get_mut(dir).and_then(Vec::pop).map(|(cat, _)| cat)
    };
    if let Some(mut cat) = idle
        && let Ok(value) = f(&mut cat)
    {
        give_back(dir, cat);
        return Ok(value);
    }
    let mut cat = CatFile::start(dir)?;
    let value = f(&mut cat)?;
    give_back(dir, cat);
    Ok(value)
}

fn give_back(dir: &Path, cat: CatFile) {
    let now = Instant::now();
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    for sessions in pool.values_mut() {
        sessions.retain(|(_, since)| now.duration_since(*since) < IDLE_FOR);
    }
    pool.retain(|_, sessions| !sessions.is_empty());
    let total: usize = pool.values().map(Vec::len).sum();
    let here = pool.entry(dir.to_path_buf()).or_default();
    if here.len() < IDLE_PER_REPO && total < IDLE_TOTAL {
        here.push((cat, now));
    }
}

/// Author, committer time and message of commit `sha` (`git show -s
/// --format=%H%x00%an%x00%ae%x00%ct%x00%B`), `None` when there is no such commit.
pub fn commit_info(cat: &mut CatFile, sha: &str) -> Result<Option<CommitInfo>, ForgeError> {
    let Some(obj) = cat.get(sha)? else {
        return Ok(None);
    };
    if obj.kind != "commit" {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&obj.data);
    let (headers, message) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut info = CommitInfo {
        sha: sha.to_string(),
        message: message.trim_end().to_string(),
        ..CommitInfo::default()
    };
    for line in headers.lines() {
        if let Some(ident) = line.strip_prefix("author ") {
            let (name, email, _) = split_ident(ident);
            info.author = name.to_string();
            info.author_email = email.to_string();
        } else if let Some(ident) = line.strip_prefix("committer ") {
            info.timestamp = split_ident(ident).2;
        }
    }
    Ok(Some(info))
}

/// `Name <email> 1700000000 +0100` → (name, email, seconds).
fn split_ident(ident: &str) -> (&str, &str, i64) {
    let Some((name, rest)) = ident.split_once(" <") else {
        return (ident, "", 0);
    };
    let (email, when) = rest.split_once('>').unwrap_or((rest, ""));
    let seconds = when.split_whitespace().next().and_then(|s| s.parse().ok());
    (name, email, seconds.unwrap_or(0))
}

/// The tree and parents of commit `sha`.
fn tree_and_parents(cat: &mut CatFile, sha: &str) -> Result<(String, Vec<String>), ForgeError> {
    let obj = cat
        .get(sha)?
        .filter(|o| o.kind == "commit")
        .ok_or_else(|| ForgeError::Failed(format!("no commit {sha}")))?;
    let text = String::from_utf8_lossy(&obj.data);
    let headers = text.split("\n\n").next().unwrap_or_default();
    let mut tree = String::new();
    let mut parents = Vec::new();
    for line in headers.lines() {
        if let Some(id) = line.strip_prefix("tree ") {
            tree = id.to_string();
        } else if let Some(id) = line.strip_prefix("parent ") {
            parents.push(id.to_string());
        }
    }
    Ok((tree, parents))
}

/// The files that differ between commits `before` and `after` (`git diff --no-renames
/// --name-only`); with no `before` (empty or all zeros: a new branch), the files `after`
/// changes (`git show --name-only`: against its parent, every file of a root commit, and for a
/// merge the files that differ from every parent). Sorted.
pub fn changed_files(
    cat: &mut CatFile,
    before: &str,
    after: &str,
) -> Result<Vec<String>, ForgeError> {
    let (tree, parents) = tree_and_parents(cat, after)?;
    let files = if before.is_empty() || before.bytes().all(|b| b == b'0') {
        match parents.as_slice() {
            [] => diff_trees(cat, None, Some(&tree))?,
            [first, rest @ ..] => {
                let (base, _) = tree_and_parents(cat, first)?;
                let mut common: BTreeSet<String> = diff_trees(cat, Some(&base), Some(&tree))?;
                for parent in rest {
                    let (base, _) = tree_and_parents(cat, parent)?;
                    let other = diff_trees(cat, Some(&base), Some(&tree))?;
                    common.retain(|f| other.contains(f));
                }
                common
            }
        }
    } else {
        let (base, _) = tree_and_parents(cat, before)?;
        diff_trees(cat, Some(&base), Some(&tree))?
    };
    Ok(files.into_iter().collect())
}

fn diff_trees(
    cat: &mut CatFile,
    a: Option<&str>,
    b: Option<&str>,
) -> Result<BTreeSet<String>, ForgeError> {
    let mut out = BTreeSet::new();
    diff_into(cat, a, b, "", &mut out)?;
    Ok(out)
}

fn tree_entries(cat: &mut CatFile, id: Option<&str>) -> Result<Vec<TreeEntry>, ForgeError> {
    let Some(id) = id else {
        return Ok(Vec::new());
    };
    match cat.get(id)? {
        Some(obj) if obj.kind == "tree" => parse_tree(&obj.data, obj.id_len),
        _ => Err(ForgeError::Failed(format!("no tree {id}"))),
    }
}

/// Adds to `out` every non-tree path under `prefix` whose entry differs between trees `a`
/// and `b` (a side that is `None` is empty); unchanged subtrees are skipped by their id.
fn diff_into(
    cat: &mut CatFile,
    a: Option<&str>,
    b: Option<&str>,
    prefix: &str,
    out: &mut BTreeSet<String>,
) -> Result<(), ForgeError> {
    let (left, right) = (tree_entries(cat, a)?, tree_entries(cat, b)?);
    let names: BTreeSet<&[u8]> = left
        .iter()
        .chain(&right)
        .map(|e| e.name.as_slice())
        .collect();
    for name in names {
        let x = left.iter().find(|e| e.name == name);
        let y = right.iter().find(|e| e.name == name);
        if x.map(|e| (&e.id, e.mode)) == y.map(|e| (&e.id, e.mode)) {
            continue;
        }
        let path = format!("{prefix}{}", String::from_utf8_lossy(name));
        let sub = |e: Option<&TreeEntry>| e.filter(|e| e.is_tree()).map(TreeEntry::hex_id);
        let (xt, yt) = (sub(x), sub(y));
        if xt.is_some() || yt.is_some() {
            diff_into(cat, xt.as_deref(), yt.as_deref(), &format!("{path}/"), out)?;
        }
        if x.is_some_and(|e| !e.is_tree()) || y.is_some_and(|e| !e.is_tree()) {
            out.insert(path);
        }
    }
    Ok(())
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The entries of a raw tree object whose ids are `id_len` bytes long.
pub fn parse_tree(data: &[u8], id_len: usize) -> Result<Vec<TreeEntry>, ForgeError> {
    let bad = |why: &str| ForgeError::Failed(format!("malformed tree object: {why}"));
    let mut entries = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad("no mode"))?;
        let mode = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or_else(|| bad("mode is not octal"))?;
        rest = &rest[space + 1..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad("no name end"))?;
        let name = rest[..nul].to_vec();
        rest = &rest[nul + 1..];
        if rest.len() < id_len {
            return Err(bad("truncated id"));
        }
        let id = rest[..id_len].to_vec();
        rest = &rest[id_len..];
        entries.push(TreeEntry { mode, name, id });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "A")
            .env("GIT_AUTHOR_EMAIL", "a@x")
            .env("GIT_COMMITTER_NAME", "A")
            .env("GIT_COMMITTER_EMAIL", "a@x")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn commit_all(dir: &Path, msg: &str) -> String {
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", msg]);
        git(dir, &["rev-parse", "HEAD"]).trim().to_string()
    }

    #[test]
    fn reads_blobs_trees_and_missing_objects_in_one_session() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        git(d, &["init", "-q"]);
        std::fs::create_dir_all(d.join(".woodpecker/sub")).unwrap();
        std::fs::write(d.join(".woodpecker/a.yaml"), "a: 1\n").unwrap();
        std::fs::write(d.join(".woodpecker/sub/b.yaml"), "b").unwrap();
        std::fs::write(d.join(".woodpecker/\u{e9}.yml"), "e").unwrap();
        let first = commit_all(d, "one");

        let mut cat = CatFile::start(d).unwrap();
        let blob = cat
            .get(&format!("{first}:.woodpecker/a.yaml"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (blob.kind.as_str(), blob.data.as_slice()),
            ("blob", &b"a: 1\n"[..])
        );
        assert_eq!(cat.get(&format!("{first}:nope.yaml")).unwrap(), None);
        assert_eq!(cat.get(&"0".repeat(40)).unwrap(), None);
        assert_eq!(cat.get("a\nb").unwrap(), None);

        let tree = cat.get(&format!("{first}:.woodpecker")).unwrap().unwrap();
        assert_eq!(tree.kind, "tree");
        let entries = parse_tree(&tree.data, tree.id_len).unwrap();
        let names: Vec<(String, bool)> = entries
            .iter()
            .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.is_blob()))
            .collect();
        assert_eq!(
            names,
            [
                ("a.yaml".to_string(), true),
                ("sub".to_string(), false),
                ("\u{e9}.yml".to_string(), true)
            ]
        );

        // A commit made after the session started, then packed: still found.
        std::fs::write(d.join("new.yaml"), "n").unwrap();
        let second = commit_all(d, "two");
        assert!(cat.get(&format!("{second}:new.yaml")).unwrap().is_some());
        git(d, &["gc", "-q"]);
        std::fs::write(d.join("newer.yaml"), "m").unwrap();
        let third = commit_all(d, "three");
        git(d, &["repack", "-adq"]);
        assert!(cat.get(&format!("{third}:newer.yaml")).unwrap().is_some());
        assert!(
            cat.get(&format!("{first}:.woodpecker/a.yaml"))
                .unwrap()
                .is_some()
        );

        // A killed session is an error, not a hang or a panic.
        let _ = cat.child.kill();
        let _ = cat.child.wait();
        assert!(cat.get(&format!("{first}:.woodpecker/a.yaml")).is_err());
    }

    #[test]
    fn malformed_trees_are_errors() {
        assert!(parse_tree(b"100644 a\0short", 20).is_err());
        assert!(parse_tree(b"xyz a\0", 0).is_err());
        assert!(parse_tree(b"100644 a", 20).is_err());
        assert_eq!(parse_tree(b"", 20).unwrap(), vec![]);
    }

    fn sorted_lines(text: &str) -> Vec<String> {
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    /// The tree diff and the commit reader answer what the `git` commands they replace
    /// answered, over one session, for adds, edits, deletes, renames, nested folders, a file
    /// that becomes a folder, a root commit and a merge.
    #[test]
    fn changed_files_and_commits_match_the_git_commands() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(d.join("src/deep")).unwrap();
        std::fs::write(d.join("README.md"), "hi").unwrap();
        std::fs::write(d.join("src/a.rs"), "a").unwrap();
        std::fs::write(d.join("src/deep/b.rs"), "b").unwrap();
        std::fs::write(d.join("thing"), "file").unwrap();
        let root = commit_all(d, "root\n\nbody line");

        std::fs::write(d.join("src/a.rs"), "a2").unwrap();
        std::fs::remove_file(d.join("src/deep/b.rs")).unwrap();
        std::fs::write(d.join("src/deep/c.rs"), "c").unwrap();
        std::fs::rename(d.join("README.md"), d.join("README.txt")).unwrap();
        std::fs::remove_file(d.join("thing")).unwrap();
        std::fs::create_dir_all(d.join("thing")).unwrap();
        std::fs::write(d.join("thing/inside"), "x").unwrap();
        let second = commit_all(d, "second");

        git(d, &["checkout", "-q", "-b", "side", &root]);
        std::fs::write(d.join("side.txt"), "s").unwrap();
        std::fs::write(d.join("src/a.rs"), "a-side").unwrap();
        let side = commit_all(d, "side");
        git(d, &["checkout", "-q", "main"]);
        let out = Command::new("git")
            .arg("-C")
            .arg(d)
            .args(["merge", "-q", "--no-edit", "side"])
            .env("GIT_AUTHOR_NAME", "A")
            .env("GIT_AUTHOR_EMAIL", "a@x")
            .env("GIT_COMMITTER_NAME", "A")
            .env("GIT_COMMITTER_EMAIL", "a@x")
            .output()
            .unwrap();
        if !out.status.success() {
            // A conflict on src/a.rs: keep ours and finish the merge.
            std::fs::write(d.join("src/a.rs"), "merged").unwrap();
            commit_all(d, "merge");
        }
        let merge = git(d, &["rev-parse", "HEAD"]).trim().to_string();

        let zeros = "0".repeat(40);
        let mut cat = CatFile::start(d).unwrap();
        for (before, after) in [
            (root.as_str(), second.as_str()),
            (second.as_str(), root.as_str()),
            (root.as_str(), side.as_str()),
            (second.as_str(), merge.as_str()),
            (root.as_str(), root.as_str()),
        ] {
            let expected = sorted_lines(&git(
                d,
                &["diff", "--no-renames", "--name-only", before, after],
            ));
            assert_eq!(
                changed_files(&mut cat, before, after).unwrap(),
                expected,
                "{before}..{after}"
            );
        }
        for commit in [&root, &second, &side, &merge] {
            let expected = sorted_lines(&git(
                d,
                &["show", "--no-renames", "--name-only", "--format=", commit],
            ));
            assert_eq!(
                changed_files(&mut cat, &zeros, commit).unwrap(),
                expected,
                "show {commit}"
            );
            assert_eq!(changed_files(&mut cat, "", commit).unwrap(), expected);

            let shown = git(
                d,
                &[
                    "show",
                    "-s",
                    "--format=%H%x00%an%x00%ae%x00%ct%x00%B",
                    commit,
                ],
            );
            let parts: Vec<&str> = shown.splitn(5, '\0').collect();
            let info = commit_info(&mut cat, commit).unwrap().unwrap();
            assert_eq!(info.sha, parts[0]);
            assert_eq!(
                (info.author.as_str(), info.author_email.as_str()),
                (parts[1], parts[2])
            );
            assert_eq!(info.timestamp.to_string(), parts[3].trim());
            assert_eq!(info.message, parts[4].trim_end());
        }
        assert_eq!(commit_info(&mut cat, &zeros).unwrap(), None);
        assert!(changed_files(&mut cat, &zeros, &"1".repeat(40)).is_err());
    }

    #[test]
    fn the_pool_reuses_sessions_and_survives_a_dead_one() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("f"), "1").unwrap();
        let first = commit_all(d, "one");
        let pid = |cat: &mut CatFile| Ok(cat.child.id());
        let a = with_session(d, pid).unwrap();
        assert_eq!(
            with_session(d, pid).unwrap(),
            a,
            "the idle session is reused"
        );

        // Kill the idle session behind the pool's back: the next call retries with a new one.
        {
            let mut pool = POOL.lock().unwrap();
            let (cat, _) = pool.get_mut(d).unwrap().last_mut().unwrap();
            cat.child.kill().unwrap();
            cat.child.wait().unwrap();
        }
        let info = with_session(d, |cat| commit_info(cat, &first))
            .unwrap()
            .unwrap();
        assert_eq!(info.message, "one");

        // A commit made after the session started is found by it.
        std::fs::write(d.join("f"), "2").unwrap();
        let second = commit_all(d, "two");
        let info = with_session(d, |cat| commit_info(cat, &second))
            .unwrap()
            .unwrap();
        assert_eq!(info.message, "two");
    }
}
