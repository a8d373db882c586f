//! Status values and how they roll up (step → workflow → pipeline), as upstream.

/// Every status value of pipelines, workflows and steps.
pub const CREATED: &str = "created";
pub const PENDING: &str = "pending";
pub const RUNNING: &str = "running";
pub const SUCCESS: &str = "success";
pub const FAILURE: &str = "failure";
pub const KILLED: &str = "killed";
pub const CANCELED: &str = "canceled";
pub const ERROR: &str = "error";
pub const SKIPPED: &str = "skipped";
pub const BLOCKED: &str = "blocked";
pub const DECLINED: &str = "declined";

pub const ALL: &[&str] = &[
    CREATED, PENDING, RUNNING, SUCCESS, FAILURE, KILLED, CANCELED, ERROR, SKIPPED, BLOCKED,
    DECLINED,
];

/// Roll-up priority, highest first (upstream's `MergeStatusValues`).
const PRIORITY: &[&str] = &[
    DECLINED, BLOCKED, CREATED, ERROR, KILLED, CANCELED, RUNNING, PENDING, FAILURE, SUCCESS,
    SKIPPED,
];

/// The combined status of several: the one with the highest priority (`skipped` when empty).
pub fn merge<'a>(states: impl IntoIterator<Item = &'a str>) -> &'static str {
    let mut best = PRIORITY.len() - 1;
    for s in states {
        if let Some(i) = PRIORITY.iter().position(|p| *p == s) {
            best = best.min(i);
        }
    }
    PRIORITY[best]
}

/// Finished states: nothing more will happen.
pub fn is_done(state: &str) -> bool {
    matches!(
        state,
        SUCCESS | FAILURE | KILLED | CANCELED | ERROR | SKIPPED | DECLINED
    )
}

/// States in which a pipeline still holds resources (cannot be deleted).
pub fn is_active(state: &str) -> bool {
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
    }
}
