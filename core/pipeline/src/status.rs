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

pub const ALL: &[Status] = &[
    Status::Created,
    Status::Pending,
    Status::Running,
    Status::Success,
    Status::Failure,
    Status::Killed,
    Status::Canceled,
    Status::Error,
    Status::Skipped,
    Status::Blocked,
    Status::Declined,
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
    Status::Declined,
    Status::Blocked,
    Status::Created,
    Status::Error,
    Status::Killed,
    Status::Canceled,
    Status::Running,
    Status::Pending,
    Status::Failure,
    Status::Success,
    Status::Skipped,
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

/// Two statuses as one, as upstream (3.17) folds a badge's workflows or steps: the one of
/// higher priority, except that `canceled` beside anything but another `canceled` counts as
/// `killed` (the pipeline had run before it was stopped).
pub fn merge_pair(a: Status, b: Status) -> Status {
    if a == Status::Canceled && b == Status::Canceled {
        return Status::Canceled;
    }
    let ran = |s: Status| match s {
        Status::Canceled => Status::Killed,
        s => s,
    };
    merge([ran(a), ran(b)])
}

/// Finished states: nothing more will happen.
pub fn is_done(state: Status) -> bool {
    matches!(
        state,
        Status::Success
            | Status::Failure
            | Status::Killed
            | Status::Canceled
            | Status::Error
            | Status::Skipped
            | Status::Declined
    )
}

/// Whether a workflow whose dependencies all ended in `deps` runs, by its `runs_on` (empty
/// = `["success"]`): dependencies that all succeeded (or were skipped) are a `success`,
/// anything else a `failure`.
pub fn runs_after(runs_on: &[String], deps: &[Status]) -> bool {
    let outcome = if deps
        .iter()
        .all(|s| matches!(s, Status::Success | Status::Skipped))
    {
        "success"
    } else {
        "failure"
    };
    if runs_on.is_empty() {
        outcome == "success"
    } else {
        runs_on.iter().any(|r| r == outcome)
    }
}

/// States in which a pipeline still holds resources (cannot be deleted).
pub fn is_active(state: Status) -> bool {
    matches!(
        state,
        Status::Created | Status::Pending | Status::Running | Status::Blocked
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_follows_priority() {
        assert_eq!(merge([Status::Success, Status::Failure]), Status::Failure);
        assert_eq!(merge([Status::Success, Status::Skipped]), Status::Success);
        assert_eq!(merge([Status::Failure, Status::Running]), Status::Running);
        assert_eq!(
            merge([Status::Killed, Status::Success, Status::Canceled]),
            Status::Killed
        );
        assert_eq!(merge([Status::Error, Status::Declined]), Status::Declined);
        assert_eq!(merge([]), Status::Skipped);
    }

    #[test]
    fn merge_pair_is_upstreams_merge_status_values() {
        use Status::*;
        assert_eq!(merge_pair(Success, Failure), Failure);
        assert_eq!(merge_pair(Skipped, Success), Success);
        assert_eq!(merge_pair(Running, Failure), Running);
        assert_eq!(merge_pair(Canceled, Canceled), Canceled);
        assert_eq!(merge_pair(Canceled, Success), Killed);
        assert_eq!(merge_pair(Failure, Canceled), Killed);
        assert_eq!(merge_pair(Canceled, Error), Error);
        assert_eq!(merge_pair(Declined, Canceled), Declined);
    }

    #[test]
    fn runs_after_reads_runs_on() {
        let on = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(runs_after(&[], &[Status::Success, Status::Skipped]));
        assert!(!runs_after(&[], &[Status::Success, Status::Failure]));
        assert!(runs_after(&on(&["failure"]), &[Status::Killed]));
        assert!(!runs_after(&on(&["failure"]), &[Status::Success]));
        assert!(runs_after(&on(&["success", "failure"]), &[Status::Error]));
    }

    #[test]
    fn classes() {
        assert!(is_done(Status::Killed) && !is_done(Status::Running));
        assert!(is_active(Status::Blocked) && !is_active(Status::Success));
        assert_eq!(ALL.len(), 11);
        for s in ALL {
            assert_eq!(Status::parse(s.as_str()), Some(*s));
            assert_eq!(serde_json::to_string(s).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(Status::parse("done"), None);
    }
}
