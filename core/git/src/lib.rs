//! Git object plumbing: reading a repository's commits, trees and blobs, and the files that
//! changed between two trees, as the `git` binary would answer, at a fraction of its cost.
//!
//! What it reads: objects named by id or by the `<id>^{commit}`, `<id>^{tree}` and
//! `<id>:<path>` forms, in SHA-1 repositories (bare or with a work tree), from loose object
//! files and from version-2 packs with their deltas applied ([`odb`]); anything else
//! (refs such as `refs/heads/main`, abbreviated ids, SHA-256 repositories, alternates, a
//! pack written a moment ago) is asked of one long-lived `git cat-file --batch` process per
//! session ([`CatFile`]).
//!
//! Why in place, and why sessions: every `git` process costs ~2.5 ms of fork/exec and
//! repository setup, and a push hook used to run several of them in a row. A `cat-file
//! --batch` pipe answers any number of questions, but each object is still a round trip to
//! another process (~0.2 ms and a share of git's CPU); read from the files, an object costs
//! a few microseconds. The in-place reader only answers when sure: every object it puts
//! together is hashed and must match the id asked for, and everything else goes down the
//! pipe, so git stays the authority and this is a shortcut in front of it. Sessions are
//! pooled per repository ([`pool`]): bounded, idle ones reaped, broken or timed-out ones
//! killed, never reused.
//!
//! Modules, lowest first; none imports one above it:
//! - [`object`]: kinds, ids, objects, tree entries and commits as data, and their parsers
//!   (no I/O); [`GitError`] (`error.rs`), the crate's one error type.
//! - [`odb`]: objects read in place (`pack`, `inflate`, `delta` below it).
//! - [`CatFile`] (`catfile.rs`): one session, the in-place reader in front of the pipe.
//! - [`pool`]: sessions kept per repository; [`with_session`].
//! - [`diff`]: changed files between trees, as `git diff`/`git show --name-only` list them.
//! - [`command`]: the other `git` commands the server runs (refs, hooks, `ls-remote`), each
//!   failure a [`CommandError`] naming the command and carrying git's stderr.
//! - `testing` (feature `test-support`): real repositories made with `git`, for tests.

mod catfile;
pub mod command;
pub mod diff;
mod error;
pub mod object;
pub mod odb;
pub mod pool;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use catfile::CatFile;
pub use command::{CommandError, Git};
pub use error::GitError;
pub use object::{Commit, Kind, Object, TreeEntry, hex, parse_commit, parse_tree};
pub use pool::with_session;
