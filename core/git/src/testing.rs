//! Real repositories for tests, made with the `git` binary: this crate's tests, and (with
//! the `test-support` feature) other crates' ones. Every helper panics on failure, which
//! in a test is a failure with git's output in it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::object::{Object, parse_header};

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

/// git's own answers to `specs`, from one `git cat-file --batch` that reads them all (no
/// in-place reading): the oracle the readers of this crate are held against.
pub fn batch_answers(dir: &Path, specs: &[String]) -> Vec<Option<Object>> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input: String = specs.iter().map(|s| format!("{s}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut rest = out.stdout.as_slice();
    let mut answers = Vec::with_capacity(specs.len());
    for spec in specs {
        let eol = rest.iter().position(|&b| b == b'\n').unwrap();
        let header = &rest[..eol];
        rest = &rest[eol + 1..];
        if header.ends_with(b" missing") || header.ends_with(b" ambiguous") {
            answers.push(None);
            continue;
        }
        let space = header.iter().position(|&b| b == b' ').unwrap();
        let id = String::from_utf8(header[..space].to_vec()).unwrap();
        let (kind, size) = parse_header(&header[space + 1..]).unwrap();
        let data = rest[..size].to_vec();
        assert_eq!(rest[size], b'\n', "{spec}");
        rest = &rest[size + 1..];
        let id_len = id.len() / 2;
        answers.push(Some(Object {
            id,
            kind,
            id_len,
            data,
        }));
    }
    answers
}

/// A work tree at `d` (which must exist) with a history of every kind of change a diff
/// lists: modified, added deep, deleted, renamed, a symlink, a type change, a mode change,
/// a file replaced by a directory and back, an empty commit, names that git quotes, merges
/// (clean, `-s ours`, an octopus); every commit id, oldest first.
pub fn change_history(d: &Path) -> Vec<String> {
    let write = |path: &str, data: &str| {
        let p = d.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    };
    let remove = |path: &str| {
        let p = d.join(path);
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap()
        } else {
            std::fs::remove_file(p).unwrap()
        }
    };
    let mut commits = Vec::new();
    git(d, &["init", "-q", "-b", "main"]);
    write("f", "1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    write("dir/a", "a");
    write("dir/sub/b", "b");
    write("dir-x", "x");
    write("dir.z", "z");
    write("caf\u{e9}/\u{e9}t\u{e9}.yml", "e");
    write("tab\there \"q\"", "t");
    commits.push(commit_all(d, "root"));
    write("dir/sub/b", "b2");
    write("new/deep/er/file", "n");
    remove("dir-x");
    commits.push(commit_all(d, "modify, add deep, delete"));
    git(d, &["mv", "dir.z", "renamed.z"]);
    std::os::unix::fs::symlink("f", d.join("link")).unwrap();
    commits.push(commit_all(d, "rename and symlink"));
    remove("link");
    write("link", "now a file");
    git(d, &["update-index", "--chmod=+x", "f"]);
    commits.push(commit_all(d, "typechange and mode"));
    remove("dir");
    write("dir", "a file where a directory was");
    remove("renamed.z");
    write("renamed.z/inside", "a directory where a file was");
    commits.push(commit_all(d, "file <-> directory"));
    commits.push(commit_all(d, "empty"));
    // Branches and merges: both sides touch `f` (merged cleanly), each adds a file.
    git(d, &["checkout", "-q", "-b", "side"]);
    let f = std::fs::read_to_string(d.join("f")).unwrap();
    write("f", &f.replacen("1\n", "one\n", 1));
    write("side-only", "s");
    commits.push(commit_all(d, "side"));
    git(d, &["checkout", "-q", "main"]);
    write("f", &f.replacen("9\n", "nine\n", 1));
    write("main-only", "m");
    commits.push(commit_all(d, "main"));
    git(d, &["merge", "-q", "--no-edit", "side"]);
    commits.push(git(d, &["rev-parse", "HEAD"]).trim().to_string());
    // A merge that keeps main's tree, and an octopus.
    git(d, &["checkout", "-q", "-b", "other", &commits[2]]);
    write("other", "o");
    commits.push(commit_all(d, "other"));
    git(d, &["checkout", "-q", "main"]);
    git(d, &["merge", "-q", "-s", "ours", "--no-edit", "other"]);
    commits.push(git(d, &["rev-parse", "HEAD"]).trim().to_string());
    git(d, &["checkout", "-q", "-b", "o1", &commits[5]]);
    write("o1", "1");
    commits.push(commit_all(d, "o1"));
    git(d, &["checkout", "-q", "-b", "o2", &commits[5]]);
    write("o2", "2");
    commits.push(commit_all(d, "o2"));
    git(d, &["checkout", "-q", "main"]);
    git(d, &["merge", "-q", "--no-edit", "o1", "o2"]);
    commits.push(git(d, &["rev-parse", "HEAD"]).trim().to_string());
    commits
}

/// The `-z` names a `git` command prints (raw bytes, never quoted).
pub fn names(dir: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["-c", "core.quotePath=false"];
    all.extend_from_slice(args);
    all.push("-z");
    git(dir, &all)
        .split('\0')
        .map(|l| l.trim_start_matches('\n'))
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}
