//! Which files a push changed, from tree objects read over a `cat-file` session.
//!
//! The answers are those of the `git` commands the server's forge driver used to run, so
//! `when: path` filters behave as before:
//!
//! - [`between`]: `git diff --no-renames --name-only <before> <after>` — every path whose
//!   blob, mode or type differs between the two commits' trees (a rename is a deletion and
//!   an addition; a file replaced by a directory is the file and every file below it).
//! - [`of_commit`]: `git show --no-renames --name-only --format= <commit>` — a root commit
//!   lists every file; a commit with one parent, its diff against the parent; a merge, git's
//!   combined diff: only the paths that differ from *every* parent (a file taken unchanged
//!   from one side is not listed).
//!
//! Paths come out in git's order (a depth-first walk of the trees, a directory `d` sorted
//! as `d/`), as UTF-8 (lossy), never C-quoted as `git`'s text output quotes unusual names.

use std::cmp::Ordering;
use std::collections::HashSet;

use crate::object::{Commit, Kind, TreeEntry, hex};
use crate::{CatFile, GitError};

/// Deeper trees are refused (the walk recurses, and a blocking-pool thread's stack is
/// 2 MiB; git's own `core.maxTreeDepth` is 2048). The push then has no changed files.
const MAX_DEPTH: usize = 256;

/// The paths that differ between the tree of the commit (or tag) `before` and `new`, the
/// root tree of the pushed commit; `None` when `before` does not exist.
pub fn between(
    cat: &mut CatFile,
    before: &str,
    new: &[TreeEntry],
) -> Result<Option<Vec<String>>, GitError> {
    let Some(old) = root_tree(cat, before)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    diff(cat, &old, new, &mut Vec::new(), 0, &mut out)?;
    Ok(Some(out))
}

/// The paths `commit` changes, as `git show` lists them (see the module documentation);
/// `new` is its root tree.
pub fn of_commit(
    cat: &mut CatFile,
    commit: &Commit,
    new: &[TreeEntry],
) -> Result<Vec<String>, GitError> {
    let mut per_parent = Vec::with_capacity(commit.parents.len().max(1));
    if commit.parents.is_empty() {
        per_parent.push(against(cat, &[], new)?);
    }
    for parent in &commit.parents {
        let old = match root_tree(cat, parent)? {
            Some(old) => old,
            None => {
                return Err(GitError::Missing {
                    id: parent.clone(),
                    expected: Kind::Commit,
                });
            }
        };
        per_parent.push(against(cat, &old, new)?);
    }
    let mut lists = per_parent.into_iter();
    let first = lists.next().unwrap_or_default();
    let others: Vec<HashSet<String>> = lists.map(|l| l.into_iter().collect()).collect();
    Ok(first
        .into_iter()
        .filter(|path| others.iter().all(|set| set.contains(path)))
        .collect())
}

fn against(
    cat: &mut CatFile,
    old: &[TreeEntry],
    new: &[TreeEntry],
) -> Result<Vec<String>, GitError> {
    let mut out = Vec::new();
    diff(cat, old, new, &mut Vec::new(), 0, &mut out)?;
    Ok(out)
}

/// The root tree entries of the commit (or tag) `rev`; `None` when there is none.
fn root_tree(cat: &mut CatFile, rev: &str) -> Result<Option<Vec<TreeEntry>>, GitError> {
    match cat.get(&format!("{rev}^{{tree}}"))? {
        Some(obj) if obj.kind == Kind::Tree => obj.tree_entries().map(Some),
        _ => Ok(None),
    }
}

/// The entries of tree `id`.
pub fn tree(cat: &mut CatFile, id: &str) -> Result<Vec<TreeEntry>, GitError> {
    cat.get_kind(id, Kind::Tree)?.tree_entries()
}

/// git's order of tree entries: by name, a directory's name compared as if it ended in `/`
/// (so a file `a` and a directory `a` are different entries).
fn entry_order(a: &TreeEntry, b: &TreeEntry) -> Ordering {
    let common = a.name.len().min(b.name.len());
    a.name[..common].cmp(&b.name[..common]).then_with(|| {
        let next = |e: &TreeEntry| {
            e.name
                .get(common)
                .copied()
                .unwrap_or(if e.is_tree() { b'/' } else { 0 })
        };
        next(a).cmp(&next(b))
    })
}

/// Appends to `out` the paths below `prefix` that differ between the two listings.
fn diff(
    cat: &mut CatFile,
    old: &[TreeEntry],
    new: &[TreeEntry],
    prefix: &mut Vec<u8>,
    depth: usize,
    out: &mut Vec<String>,
) -> Result<(), GitError> {
    if depth > MAX_DEPTH {
        return Err(GitError::Malformed {
            kind: Kind::Tree,
            id: String::from_utf8_lossy(prefix).into_owned(),
            why: "nested deeper than 256 directories",
        });
    }
    let (mut i, mut j) = (0, 0);
    loop {
        let order = match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) => entry_order(a, b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => return Ok(()),
        };
        match order {
            Ordering::Less => {
                one_side(cat, &old[i], true, prefix, depth, out)?;
                i += 1;
            }
            Ordering::Greater => {
                one_side(cat, &new[j], false, prefix, depth, out)?;
                j += 1;
            }
            Ordering::Equal => {
                let (a, b) = (&old[i], &new[j]);
                if a.id != b.id || a.mode != b.mode {
                    if a.is_tree() && b.is_tree() {
                        let (sub_old, sub_new) = (tree(cat, &hex(&a.id))?, tree(cat, &hex(&b.id))?);
                        let len = push_dir(prefix, &a.name);
                        diff(cat, &sub_old, &sub_new, prefix, depth + 1, out)?;
                        prefix.truncate(len);
                    } else {
                        out.push(path(prefix, &a.name));
                    }
                }
                i += 1;
                j += 1;
            }
        }
    }
}

/// An entry only one side has: the entry itself, or every file below it.
fn one_side(
    cat: &mut CatFile,
    entry: &TreeEntry,
    is_old: bool,
    prefix: &mut Vec<u8>,
    depth: usize,
    out: &mut Vec<String>,
) -> Result<(), GitError> {
    if !entry.is_tree() {
        out.push(path(prefix, &entry.name));
        return Ok(());
    }
    let sub = tree(cat, &hex(&entry.id))?;
    let len = push_dir(prefix, &entry.name);
    let (old, new): (&[TreeEntry], &[TreeEntry]) = if is_old { (&sub, &[]) } else { (&[], &sub) };
    diff(cat, old, new, prefix, depth + 1, out)?;
    prefix.truncate(len);
    Ok(())
}

/// Appends `name/` to `prefix`; returns the length to truncate back to.
fn push_dir(prefix: &mut Vec<u8>, name: &[u8]) -> usize {
    let len = prefix.len();
    prefix.extend_from_slice(name);
    prefix.push(b'/');
    len
}

fn path(prefix: &[u8], name: &[u8]) -> String {
    let mut full = Vec::with_capacity(prefix.len() + name.len());
    full.extend_from_slice(prefix);
    full.extend_from_slice(name);
    String::from_utf8_lossy(&full).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::{change_history, commit_all, names, repo};

    /// The root tree entries of commit `id`.
    fn root(cat: &mut CatFile, id: &str) -> (Commit, Vec<TreeEntry>) {
        let commit = cat.commit(id).unwrap().unwrap();
        let entries = tree(cat, &commit.tree).unwrap();
        (commit, entries)
    }

    #[test]
    fn lists_what_git_diff_and_git_show_list() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let commits = change_history(d);
        let mut cat = CatFile::start(d, Duration::from_secs(10)).unwrap();
        for (n, after) in commits.iter().enumerate() {
            let (commit, new) = root(&mut cat, after);
            let shown = names(
                d,
                &["show", "--no-renames", "--name-only", "--format=", after],
            );
            assert_eq!(of_commit(&mut cat, &commit, &new).unwrap(), shown, "{n}");
            for before in &commits {
                let listed = names(d, &["diff", "--no-renames", "--name-only", before, after]);
                let got = between(&mut cat, before, &new).unwrap();
                assert_eq!(got, Some(listed), "{before}..{after}");
            }
        }
        // A `before` that does not exist is no answer; a parent that does not is an error.
        let (commit, new) = root(&mut cat, &commits[1]);
        assert_eq!(between(&mut cat, &"1".repeat(40), &new).unwrap(), None);
        let orphan = Commit {
            parents: vec!["1".repeat(40)],
            ..commit
        };
        let err = of_commit(&mut cat, &orphan, &new).unwrap_err();
        assert!(
            matches!(
                err,
                GitError::Missing {
                    expected: Kind::Commit,
                    ..
                }
            ),
            "{err}"
        );
        assert!(cat.is_usable());
    }

    #[test]
    fn a_tree_too_deep_is_an_error_not_a_crash() {
        let (dir, _) = repo();
        let deep = vec!["d"; MAX_DEPTH + 10].join("/");
        std::fs::create_dir_all(dir.path().join(&deep)).unwrap();
        std::fs::write(dir.path().join(&deep).join("f"), "x").unwrap();
        let head = commit_all(dir.path(), "deep");
        let mut cat = CatFile::start(dir.path(), Duration::from_secs(10)).unwrap();
        let commit = cat.commit(&head).unwrap().unwrap();
        let root = tree(&mut cat, &commit.tree).unwrap();
        let err = of_commit(&mut cat, &commit, &root).unwrap_err();
        assert!(matches!(err, GitError::Malformed { .. }), "{err}");
        // The answer was complete: the session still works.
        assert!(cat.is_usable());
        assert!(cat.commit(&head).unwrap().is_some());
    }
}
