//! Status values and how they roll up (step → workflow → pipeline), as upstream.

use serde::{Deserialize, Serialize};

/// The state of a pipeline, a workflow or a step (Woodpecker's `StatusValue`), rendered in
/// lowercase on the wire and in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    #[default]
    Created,
    Pending,
    Running,
    Success,
    Failure,
    Killed,
    Canceled,
    Error,
    Skipped,
    Blocked,
    Declined,
}

pub const CREATED: Status = Status::Created;
pub const PENDING: Status = Status::Pending;
pub const RUNNING: Status = Status::Running;
pub const SUCCESS: Status = Status::Success;
pub const FAILURE: Status = Status::Failure;
pub const KILLED: Status = Status::Killed;
pub const CANCELED: Status = Status::Canceled;
pub const ERROR: Status = Status::Error;
pub const SKIPPED: Status = Status::Skipped;
pub const BLOCKED: Status = Status::Blocked;
pub const DECLINED: Status = Status::Declined;

pub const ALL: &[Status] = &[
    CREATED, PENDING, RUNNING, SUCCESS, FAILURE, KILLED, CANCELED, ERROR, SKIPPED, BLOCKED,
    DECLINED,
];

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Success => "success",
            Status::Failure => "failure",
            Status::Killed => "killed",
            Status::Canceled => "canceled",
            Status::Error => "error",
            Status::Skipped => "skipped",
            Status::Blocked => "blocked",
            Status::Declined => "declined",
        }
    }

    /// The status named `text`, if it is one.
    pub fn parse(text: &str) -> Option<Status> {
        ALL.iter().copied().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Roll-up priority, highest first (upstream's `MergeStatusValues`).
const PRIORITY: &[Status] = &[
    DECLINED, BLOCKED, CREATED, ERROR, KILLED, CANCELED, RUNNING, PENDING, FAILURE, SUCCESS,
    SKIPPED,
];

/// The combined status of several: the one with the highest priority (`skipped` when empty).
pub fn merge(states: impl IntoIterator<Item = Status>) -> Status {
    let mut best = PRIORITY.len() - 1;
    for s in states {
        if let Some(i) = PRIORITY.iter().position(|p| *p == s) {
            best = best.min(i);
        }
    }
    PRIORITY[best]
}

/// Finished states: nothing more will happen.
pub fn is_done(state: Status) -> bool {
    matches!(
        state,
        SUCCESS | FAILURE | KILLED | CANCELED | ERROR | SKIPPED | DECLINED
    )
}

/// States in which a pipeline still holds resources (cannot be deleted).
pub fn is_active(state: Status) -> bool {
    matches!(state, CREATED | PENDING | RUNNING | BLOCKED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_follows_priority() {
        assert_eq!(merge([SUCCESS, FAILURE]), FAILURE);
        assert_eq!(merge([SUCCESS, SKIPPED]), SUCCESS);
        assert_eq!(merge([FAILURE, RUNNING]), RUNNING);
        assert_eq!(merge([KILLED, SUCCESS, CANCELED]), KILLED);
        assert_eq!(merge([ERROR, DECLINED]), DECLINED);
        assert_eq!(merge([]), SKIPPED);
    }

    #[test]
    fn classes() {
        assert!(is_done(KILLED) && !is_done(RUNNING));
        assert!(is_active(BLOCKED) && !is_active(SUCCESS));
        assert_eq!(ALL.len(), 11);
        for s in ALL {
            assert_eq!(Status::parse(s.as_str()), Some(*s));
            assert_eq!(serde_json::to_string(s).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(Status::parse("done"), None);
    }
}
