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
//! Commit objects are text: header lines (`tree`, `parent`…, `author`, `committer`, maybe
//! `encoding`, `gpgsig` with continuation lines that start with a space), an empty line, and
//! the message.
//!
//! Most questions never reach the pipe: a session first reads the object from the
//! repository's files itself ([`Odb`], `git_odb.rs`), which answers object ids and the
//! `^{commit}`, `^{tree}` and `:<path>` forms of them in microseconds, and asks git only
//! when that reader is not sure (a missing object, a form it does not parse, …).
//!
//! A [`CatFile`] is one such session; it is killed when dropped. Every answer must arrive
//! within the session's timeout: a session that times out or breaks mid-answer is marked
//! broken (its pipe may hold half an answer) and must be dropped, never reused; the pool
//! (`git_pool.rs`) does that.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::ForgeError;
use super::git_odb::Odb;

/// Larger answers are refused (a config file, a commit or a tree listing is far smaller).
const MAX_OBJECT: usize = 64 << 20;
/// Longer questions are answered "missing" without asking (no path is that long).
const MAX_SPEC: usize = 4096;
/// What one read from the pipe asks for.
const CHUNK: usize = 64 << 10;

/// What can go wrong reading objects; every variant names the question or the object.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git cat-file in {dir}: {source}")]
    Spawn {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("git cat-file {spec:?}: {source}")]
    Io {
        spec: String,
        source: std::io::Error,
    },
    #[error("git cat-file {spec:?}: no answer within {timeout:?}; the session is killed")]
    Timeout { spec: String, timeout: Duration },
    #[error("git cat-file {spec:?}: the session ended")]
    Ended { spec: String },
    #[error("git cat-file {spec:?}: bad answer {header:?}")]
    BadAnswer { spec: String, header: String },
    #[error("git cat-file {spec:?}: object of {size} bytes is too large")]
    TooLarge { spec: String, size: usize },
    #[error("malformed {kind} object {id}: {why}")]
    Malformed {
        kind: &'static str,
        id: String,
        why: &'static str,
    },
    #[error("{id} is a {found}, not a {expected}")]
    WrongKind {
        id: String,
        found: String,
        expected: &'static str,
    },
    #[error("every git session of {dir} stayed busy for {waited:?}")]
    Busy { dir: PathBuf, waited: Duration },
}

impl From<GitError> for ForgeError {
    fn from(err: GitError) -> ForgeError {
        ForgeError::Failed(err.to_string())
    }
}

/// An object as `cat-file --batch` returns it.
#[derive(Debug, PartialEq, Eq)]
pub struct Object {
    /// The object's id, hex.
    pub id: String,
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
    /// The entry's object id, raw bytes.
    pub id: Vec<u8>,
}

impl TreeEntry {
    /// A file (regular, executable or symlink), not a directory or a submodule.
    pub fn is_blob(&self) -> bool {
        self.mode & 0o170000 == 0o100000 || self.mode & 0o170000 == 0o120000
    }

    /// A directory (another tree).
    pub fn is_tree(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }
}

/// What a commit object says (the parts a pipeline needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The commit's id, hex.
    pub id: String,
    /// Its root tree's id, hex.
    pub tree: String,
    /// Parent ids, hex, in order.
    pub parents: Vec<String>,
    pub author_name: String,
    pub author_email: String,
    /// The committer's time, Unix seconds (git's `%ct`); 0 when unreadable.
    pub committer_time: i64,
    /// Everything after the headers (git's `%B`), as text.
    pub message: String,
}

/// One running `git cat-file --batch` in a repository directory.
pub struct CatFile {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Bytes read from the pipe; `buf[start..end]` is not consumed yet.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    timeout: Duration,
    broken: bool,
    /// The repository's object files, read in place before asking the pipe.
    native: Option<Odb>,
}

impl CatFile {
    /// Starts a session in `dir`; every answer must arrive within `timeout`.
    pub fn start(dir: &Path, timeout: Duration) -> Result<CatFile, GitError> {
        let spawn = |source| GitError::Spawn {
            dir: dir.to_path_buf(),
            source,
        };
        let mut child = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["cat-file", "--batch"])
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(spawn)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(spawn(std::io::Error::other("no pipes")));
        };
        Ok(CatFile {
            child,
            stdin,
            stdout,
            buf: vec![0; CHUNK],
            start: 0,
            end: 0,
            timeout,
            broken: false,
            native: Odb::open(dir),
        })
    }

    /// False once a question went unanswered or half answered: the session must be dropped.
    pub fn is_usable(&self) -> bool {
        !self.broken
    }

    /// The object `spec` names (`<rev>:<path>`, `<id>^{commit}` or an id); `None` when it
    /// does not exist.
    pub fn get(&mut self, spec: &str) -> Result<Option<Object>, GitError> {
        if spec.is_empty() || spec.len() > MAX_SPEC || spec.contains(['\n', '\r']) {
            return Ok(None);
        }
        if self.broken {
            return Err(GitError::Ended {
                spec: spec.to_string(),
            });
        }
        if let Some(found) = self.native.as_mut().and_then(|odb| odb.get(spec)) {
            return Ok(Some(found));
        }
        let answer = self.ask(spec);
        // After any failure the pipe may hold (part of) an answer: the session is done.
        self.broken = answer.is_err();
        if self.start == self.end && self.buf.len() > CHUNK {
            // A large object grew the buffer; a pooled session does not keep that memory.
            self.buf = vec![0; CHUNK];
            (self.start, self.end) = (0, 0);
        }
        answer
    }

    /// The object `id` names, which must be of `kind`.
    pub fn get_kind(&mut self, id: &str, kind: &'static str) -> Result<Object, GitError> {
        let obj = self.get(id)?.ok_or_else(|| GitError::WrongKind {
            id: id.to_string(),
            found: "missing object".to_string(),
            expected: kind,
        })?;
        if obj.kind != kind {
            return Err(GitError::WrongKind {
                id: id.to_string(),
                found: obj.kind,
                expected: kind,
            });
        }
        Ok(obj)
    }

    /// The commit `rev` names (an annotated tag is peeled to its commit); `None` when there
    /// is none.
    pub fn commit(&mut self, rev: &str) -> Result<Option<Commit>, GitError> {
        match self.get(&format!("{rev}^{{commit}}"))? {
            Some(obj) if obj.kind == "commit" => parse_commit(&obj.id, &obj.data).map(Some),
            _ => Ok(None),
        }
    }

    fn ask(&mut self, spec: &str) -> Result<Option<Object>, GitError> {
        let deadline = Instant::now() + self.timeout;
        let io = |source| GitError::Io {
            spec: spec.to_string(),
            source,
        };
        self.stdin
            .write_all(format!("{spec}\n").as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(io)?;
        let header = self.read_line(spec, deadline)?;
        let header = String::from_utf8_lossy(&header).into_owned();
        if header.ends_with(" missing") || header.ends_with(" ambiguous") {
            return Ok(None);
        }
        let bad = || GitError::BadAnswer {
            spec: spec.to_string(),
            header: header.clone(),
        };
        let mut parts = header.rsplitn(3, ' ');
        let size: usize = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let kind = parts.next().ok_or_else(bad)?.to_string();
        let id = parts.next().ok_or_else(bad)?.to_string();
        let id_len = match id.len() {
            40 => 20,
            64 => 32,
            _ => return Err(bad()),
        };
        if size > MAX_OBJECT {
            return Err(GitError::TooLarge {
                spec: spec.to_string(),
                size,
            });
        }
        let mut data = self.read_exact(size + 1, spec, deadline)?;
        if data.pop() != Some(b'\n') {
            return Err(bad());
        }
        Ok(Some(Object {
            id,
            kind,
            id_len,
            data,
        }))
    }

    /// The next line from git, without its `\n`.
    fn read_line(&mut self, spec: &str, deadline: Instant) -> Result<Vec<u8>, GitError> {
        let mut searched = self.start;
        loop {
            if let Some(at) = self.buf[searched..self.end]
                .iter()
                .position(|&b| b == b'\n')
            {
                let line = self.buf[self.start..searched + at].to_vec();
                self.start = searched + at + 1;
                return Ok(line);
            }
            searched = self.end;
            let before = self.start;
            self.fill(spec, deadline)?;
            // `fill` may move the unread bytes to the front.
            searched -= before - self.start;
        }
    }

    /// The next `n` bytes from git.
    fn read_exact(&mut self, n: usize, spec: &str, deadline: Instant) -> Result<Vec<u8>, GitError> {
        while self.end - self.start < n {
            self.fill(spec, deadline)?;
        }
        let out = self.buf[self.start..self.start + n].to_vec();
        self.start += n;
        Ok(out)
    }

    /// Reads what git has sent (at least one byte), waiting at most until `deadline`.
    fn fill(&mut self, spec: &str, deadline: Instant) -> Result<(), GitError> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let io = |source| GitError::Io {
            spec: spec.to_string(),
            source,
        };
        if !wait_readable(self.stdout.as_raw_fd(), deadline).map_err(io)? {
            return Err(GitError::Timeout {
                spec: spec.to_string(),
                timeout: self.timeout,
            });
        }
        let read = loop {
            match self.stdout.read(&mut self.buf[self.end..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other.map_err(io)?,
            }
        };
        if read == 0 {
            return Err(GitError::Ended {
                spec: spec.to_string(),
            });
        }
        self.end += read;
        Ok(())
    }
}

#[cfg(test)]
impl CatFile {
    /// This session without the in-place reader: every question goes down the pipe.
    pub fn pipe_only(mut self) -> CatFile {
        self.native = None;
        self
    }

    /// Whether the in-place reader is on (the repository's files are readable to it).
    pub fn reads_in_place(&self) -> bool {
        self.native.is_some()
    }

    /// Kills git under the session (a crashed session); questions then go to the pipe.
    pub fn kill_for_test(&mut self) {
        self.native = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops git under the session (a hung session; questions then go to the pipe); dropping
    /// the session still kills it.
    pub fn stop_for_test(&mut self) {
        self.native = None;
        // SAFETY: kill(2) sends a signal; no memory is touched.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGSTOP);
        }
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `fd` can be read (data, end of file or an error) or `deadline` passes (false).
fn wait_readable(fd: i32, deadline: Instant) -> std::io::Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one valid pollfd that lives across the call.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        match ready {
            0 => continue,
            n if n > 0 => return Ok(true),
            _ => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}

/// Hex of raw id bytes.
pub fn hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(id.len() * 2);
    for b in id {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

impl Object {
    /// The entries of this tree object.
    pub fn tree_entries(&self) -> Result<Vec<TreeEntry>, GitError> {
        parse_tree(&self.id, &self.data, self.id_len)
    }
}

/// The entries of raw tree object `id` whose entry ids are `id_len` bytes long.
pub fn parse_tree(id: &str, data: &[u8], id_len: usize) -> Result<Vec<TreeEntry>, GitError> {
    let bad = |why| GitError::Malformed {
        kind: "tree",
        id: id.to_string(),
        why,
    };
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

/// Reads a commit object's headers and message the way `git show --format=…` does.
pub fn parse_commit(id: &str, data: &[u8]) -> Result<Commit, GitError> {
    let bad = |why| GitError::Malformed {
        kind: "commit",
        id: id.to_string(),
        why,
    };
    let (head, message) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data.strip_suffix(b"\n").unwrap_or(data), &[][..]),
    };
    let mut commit = Commit {
        id: id.to_string(),
        tree: String::new(),
        parents: Vec::new(),
        author_name: String::new(),
        author_email: String::new(),
        committer_time: 0,
        message: String::from_utf8_lossy(message).into_owned(),
    };
    let (mut author, mut committer) = (false, false);
    for line in head.split(|&b| b == b'\n') {
        let (key, value) = match line.iter().position(|&b| b == b' ') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &[][..]),
        };
        match key {
            b"tree" if commit.tree.is_empty() => {
                commit.tree = String::from_utf8_lossy(value).into_owned();
            }
            b"parent" => commit
                .parents
                .push(String::from_utf8_lossy(value).into_owned()),
            b"author" if !author => {
                author = true;
                let (name, email) = ident(value);
                (commit.author_name, commit.author_email) = (name, email);
            }
            b"committer" if !committer => {
                committer = true;
                commit.committer_time = ident_time(value);
            }
            _ => {}
        }
    }
    let is_id =
        |s: &str| (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_id(&commit.tree) {
        return Err(bad("no tree"));
    }
    if !commit.parents.iter().all(|p| is_id(p)) {
        return Err(bad("bad parent"));
    }
    Ok(commit)
}

/// Name and email of an ident (`Name <email> 1700000000 +0100`), as git's
/// `split_ident_line` reads them: the name runs up to the first `<` (trailing blanks
/// dropped), the email up to the next `>`. Empty when there is no `<`.
fn ident(value: &[u8]) -> (String, String) {
    let Some(lt) = value.iter().position(|&b| b == b'<') else {
        return (String::new(), String::new());
    };
    let name = value[..lt].trim_ascii_end();
    let rest = &value[lt + 1..];
    let email = &rest[..rest.iter().position(|&b| b == b'>').unwrap_or(rest.len())];
    (
        String::from_utf8_lossy(name).into_owned(),
        String::from_utf8_lossy(email).into_owned(),
    )
}

/// The Unix time of an ident: the digits after its last `>`; 0 when there are none.
fn ident_time(value: &[u8]) -> i64 {
    let Some(gt) = value.iter().rposition(|&b| b == b'>') else {
        return 0;
    };
    let rest = value[gt + 1..].trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// Real repositories for the forge tests.
#[cfg(test)]
pub mod testing {
    use std::path::Path;
    use std::process::Command;

    /// Runs `git` in `dir` with a fixed identity; stdout. Panics (a test failure) on error.
    pub fn git(dir: &Path, args: &[&str]) -> String {
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

    /// Commits everything in the work tree; the new commit's id.
    pub fn commit_all(dir: &Path, msg: &str) -> String {
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", msg, "--allow-empty"]);
        git(dir, &["rev-parse", "HEAD"]).trim().to_string()
    }

    /// A new repository (branch `main`) with one commit of a file unique to it.
    pub fn repo() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        // Unique content: two repositories never share a commit id.
        std::fs::write(
            dir.path().join("a"),
            dir.path().to_string_lossy().as_bytes(),
        )
        .unwrap();
        let head = commit_all(dir.path(), "one");
        (dir, head)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{commit_all, git};
    use super::*;

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

        let mut cat = CatFile::start(d, Duration::from_secs(10)).unwrap();
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
        let entries = tree.tree_entries().unwrap();
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

        // A large object is read whole; the buffer it needed is not kept.
        let big = "x".repeat(3 * CHUNK + 17);
        std::fs::write(d.join("big"), &big).unwrap();
        let with_big = commit_all(d, "big");
        let obj = cat.get(&format!("{with_big}:big")).unwrap().unwrap();
        assert_eq!(obj.data, big.as_bytes());
        assert_eq!(cat.buf.len(), CHUNK);
        assert!(cat.get(&format!("{with_big}:new.yaml")).unwrap().is_some());

        // A killed session is an error, not a hang or a panic, and stays unusable.
        assert!(cat.is_usable());
        cat.kill_for_test();
        assert!(cat.get(&format!("{first}:.woodpecker/a.yaml")).is_err());
        assert!(!cat.is_usable());
        assert!(cat.get(&first).is_err());
    }

    #[test]
    fn reads_commits_like_git_show() {
        let repo = tempfile::tempdir().unwrap();
        let d = repo.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("a"), "a").unwrap();
        let root = commit_all(d, "root\n\nbody line\n\n");
        std::fs::write(d.join("a"), "b").unwrap();
        git(d, &["add", "-A"]);
        let out = Command::new("git")
            .arg("-C")
            .arg(d)
            .args(["commit", "-q", "-m", "second  ", "--author", "Zoë  Q <z@q>"])
            .env("GIT_COMMITTER_NAME", "C")
            .env("GIT_COMMITTER_EMAIL", "c@x")
            .env("GIT_COMMITTER_DATE", "1700000000 +0200")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let second = git(d, &["rev-parse", "HEAD"]).trim().to_string();
        git(d, &["tag", "-a", "v1", "-m", "a tag"]);

        let mut cat = CatFile::start(d, Duration::from_secs(10)).unwrap();
        for sha in [&root, &second] {
            let c = cat.commit(sha).unwrap().unwrap();
            let shown = git(
                d,
                &[
                    "show",
                    "-s",
                    "--format=%H%x00%T%x00%P%x00%an%x00%ae%x00%ct%x00%B",
                    sha,
                ],
            );
            let want: Vec<&str> = shown.splitn(7, '\0').collect();
            assert_eq!(c.id, want[0]);
            assert_eq!(c.tree, want[1]);
            assert_eq!(c.parents.join(" "), want[2]);
            assert_eq!(c.author_name, want[3]);
            assert_eq!(c.author_email, want[4]);
            assert_eq!(c.committer_time.to_string(), want[5]);
            assert_eq!(c.message.trim_end(), want[6].trim_end());
        }
        let c = cat.commit(&second).unwrap().unwrap();
        assert_eq!(
            (c.author_name.as_str(), c.committer_time),
            ("Zoë  Q", 1700000000)
        );
        assert_eq!(c.parents, std::slice::from_ref(&root));
        // An annotated tag is peeled to its commit; a missing or non-commit object is None.
        let tag = git(d, &["rev-parse", "v1"]).trim().to_string();
        assert_ne!(tag, second);
        assert_eq!(cat.commit(&tag).unwrap().unwrap().id, second);
        assert_eq!(cat.commit("refs/heads/nope").unwrap(), None);
        assert_eq!(cat.commit(&"0".repeat(40)).unwrap(), None);
        let tree = c.tree.clone();
        assert_eq!(cat.commit(&tree).unwrap(), None);
        assert!(cat.is_usable());
    }

    #[test]
    fn commit_headers_edge_cases() {
        let tree = "a".repeat(40);
        let raw = format!(
            "tree {tree}\nparent {p1}\nparent {p2}\nauthor No Email 12 +0000\ncommitter X <x> 99 +0000\ngpgsig -----BEGIN\n author fake <f> 1\n -----END\n\nmsg\n",
            p1 = "b".repeat(40),
            p2 = "c".repeat(40)
        );
        let c = parse_commit("id", raw.as_bytes()).unwrap();
        assert_eq!(c.parents.len(), 2);
        assert_eq!((c.author_name.as_str(), c.author_email.as_str()), ("", ""));
        assert_eq!((c.committer_time, c.message.as_str()), (99, "msg\n"));
        // No message at all, and garbage.
        let bare = parse_commit(
            "id",
            format!("tree {tree}\ncommitter X <x> 5 +0000\n").as_bytes(),
        )
        .unwrap();
        assert_eq!((bare.message.as_str(), bare.committer_time), ("", 5));
        assert!(parse_commit("id", b"").is_err());
        assert!(parse_commit("id", format!("tree {tree}\nparent zz\n\n").as_bytes()).is_err());
        assert_eq!(ident(b"A <b"), ("A".to_string(), "b".to_string()));
        assert_eq!(ident_time(b"A <b> x"), 0);
    }

    #[test]
    fn malformed_trees_are_errors() {
        assert!(parse_tree("t", b"100644 a\0short", 20).is_err());
        assert!(parse_tree("t", b"xyz a\0", 0).is_err());
        assert!(parse_tree("t", b"100644 a", 20).is_err());
        assert_eq!(parse_tree("t", b"", 20).unwrap(), vec![]);
        assert_eq!(hex(&[0, 0xab, 0x7f]), "00ab7f");
    }
}
