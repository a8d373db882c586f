//! The agent protocol's messages: what a runner and the server say to each other.
//!
//! The embedded local runner passes these values in memory; a remote agent sends the same
//! values as JSON over HTTP (see [`super::http`] and the README's "Agent protocol").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use woodlark_pipeline::status::Status;
use woodlark_pipeline::types::CompiledWorkflow;
pub use woodlark_pipeline::types::{LineKind, LogLine};

/// A step of the assigned workflow: the server's ids for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRef {
    pub id: i64,
    pub uuid: String,
    pub name: String,
}

/// Git credentials for cloning (`machine`/`login`/`password` as in a `.netrc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Netrc {
    pub machine: String,
    pub login: String,
    pub password: String,
}

/// A workflow handed to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Work {
    pub workflow_id: i64,
    pub pipeline_id: i64,
    pub pipeline_number: i64,
    pub repo: String,
    /// Minutes the whole workflow may take.
    pub timeout_minutes: i64,
    pub clone_url: String,
    pub commit: String,
    pub git_ref: String,
    #[serde(default)]
    pub netrc: Option<Netrc>,
    pub workflow: CompiledWorkflow,
    /// Ids of the workflow's steps, in the order of `workflow.steps`.
    pub steps: Vec<StepRef>,
    /// The number of the next line per step id that already has lines (lines count from 0; a
    /// re-run continues the numbering).
    #[serde(default)]
    pub log_offsets: BTreeMap<i64, i64>,
    /// Bytes of output kept per step (the server's `pipeline.max_step_log_bytes`; 0, as
    /// from a server older than the field: no limit).
    #[serde(default)]
    pub max_log_bytes: u64,
}

/// A step's state change, reported as it happens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepUpdate {
    pub step_id: i64,
    /// running, success, failure, killed, skipped, canceled.
    pub state: Status,
    #[serde(default)]
    pub exit_code: i64,
    #[serde(default)]
    pub error: String,
    /// Unix seconds (0 = not set).
    #[serde(default)]
    pub started: i64,
    #[serde(default)]
    pub finished: i64,
    /// The step failed and has `failure: cancel`: the server cancels the whole pipeline.
    #[serde(default)]
    pub cancel_pipeline: bool,
    /// The report's number among this lease's reports (1, 2, 3, … in the order they
    /// happened): the server applies each number once and ignores one it has already seen,
    /// so a report re-sent after a lost answer changes nothing. 0 (agents older than the
    /// field): applied as it comes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// How a workflow ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowDone {
    /// success, failure, killed or error.
    pub state: Status,
    #[serde(default)]
    pub error: String,
}

/// What an agent says about itself when it asks for work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub platform: String,
    pub backend: String,
    pub capacity: i64,
    pub version: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How each step's resources are bounded (`none: <why>` where they are not), shown in
    /// `/api/agents`; empty from agents older than this field.
    #[serde(default)]
    pub limits: String,
}

impl AgentInfo {
    /// Records `backend`'s kind and how it bounds steps.
    pub fn describe_backend(&mut self, backend: &dyn crate::Backend) {
        self.backend = backend.kind().to_string();
        self.limits = backend
            .step_limits()
            .unwrap_or_else(|why| format!("none: {why}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_kinds_keep_their_numbers_on_the_wire() {
        assert_eq!(LineKind::Stdout.code(), 0);
        assert_eq!(LineKind::ExitCode.code(), 2);
        let line = LogLine {
            step_id: 1,
            line: 0,
            time: 0,
            kind: LineKind::Stdout,
            data: "x".into(),
        };
        let json = serde_json::to_value(&line).unwrap();
        assert_eq!(json["kind"], 0);
        for kind in LineKind::ALL {
            let json = serde_json::json!({"step_id": 1, "line": 0, "time": 0, "type": kind.code(), "data": ""});
            assert_eq!(serde_json::from_value::<LogLine>(json).unwrap().kind, kind);
        }
        let unknown =
            serde_json::json!({"step_id": 1, "line": 0, "time": 0, "kind": 9, "data": ""});
        let err = serde_json::from_value::<LogLine>(unknown).unwrap_err();
        assert!(err.to_string().contains("unknown log line type 9"), "{err}");
    }
}
