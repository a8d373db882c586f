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
//! A [`CatFile`] is one such session; it is killed when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::ForgeError;

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
}

impl TreeEntry {
    /// A file (regular, executable or symlink), not a directory or a submodule.
    pub fn is_blob(&self) -> bool {
        self.mode & 0o170000 == 0o100000 || self.mode & 0o170000 == 0o120000
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
        rest = &rest[id_len..];
        entries.push(TreeEntry { mode, name });
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
}
