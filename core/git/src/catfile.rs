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
//! ([`crate::object`] describes the tree and commit formats the answers carry.)
//!
//! Most questions never reach the pipe: a session first reads the object from the
//! repository's files itself ([`Odb`]), which answers object ids and the `^{commit}`,
//! `^{tree}` and `:<path>` forms of them in microseconds, and asks git only when that
//! reader is not sure (a missing object, a form it does not parse, …).
//!
//! A [`CatFile`] is one such session; it is killed when dropped. Every answer must arrive
//! within the session's timeout: a session that times out or breaks mid-answer is marked
//! broken (its pipe may hold half an answer) and must be dropped, never reused; the pool
//! ([`crate::pool`]) does that.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::GitError;
use crate::object::{Commit, Kind, MAX_OBJECT, Object, parse_commit, parse_header};
use crate::odb::Odb;

/// Longer questions are answered "missing" without asking (no path is that long).
const MAX_SPEC: usize = 4096;
/// What one read from the pipe asks for.
const CHUNK: usize = 64 << 10;

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
    pub fn get_kind(&mut self, id: &str, kind: Kind) -> Result<Object, GitError> {
        let obj = self.get(id)?.ok_or_else(|| GitError::Missing {
            id: id.to_string(),
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
            Some(obj) if obj.kind == Kind::Commit => parse_commit(&obj.id, &obj.data).map(Some),
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
        let (id, rest) = header.split_once(' ').ok_or_else(bad)?;
        let (kind, size) = parse_header(rest.as_bytes()).ok_or_else(bad)?;
        let id = id.to_string();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{commit_all, git};

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
        assert_eq!(tree.kind, Kind::Tree);
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
}
