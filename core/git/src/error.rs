//! What can go wrong reading git objects: one typed error for the whole crate, each variant
//! naming the question or the object, so a caller's message says what was asked.

use std::path::PathBuf;
use std::time::Duration;

use crate::object::Kind;

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
        kind: Kind,
        id: String,
        why: &'static str,
    },
    #[error("{id} is a {found}, not a {expected}")]
    WrongKind {
        id: String,
        found: Kind,
        expected: Kind,
    },
    #[error("{id} is a missing object, not a {expected}")]
    Missing { id: String, expected: Kind },
    #[error("every git session of {dir} stayed busy for {waited:?}")]
    Busy { dir: PathBuf, waited: Duration },
}
