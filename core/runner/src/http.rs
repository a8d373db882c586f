//! The agent protocol over HTTP, client side (`woodlark agent`).
//!
//! Every call is a JSON request to `<server><prefix>/agent/...` with `Authorization: Bearer
//! <agent token>` (a token made by `POST /api/agents`). Long polls (`next`, `canceled`) are
//! bounded by the server (about 25 s) and simply repeated.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use woodlark_http::client::Client;

use super::protocol::{AgentInfo, LogLine, StepUpdate, Work, WorkflowDone};
use super::{AgentApi, RunnerError};

#[derive(Clone)]
pub struct HttpAgent {
    base: String,
    token: String,
    client: Client,
}

/// The largest reply the agent reads (a workflow with its compiled steps and secrets).
const MAX_REPLY: usize = 64 << 20;

impl HttpAgent {
    /// `server` is the server's root URL (`http://ci.example.com:8000`), `prefix` the CI
    /// mount (`/api`).
    pub fn new(server: &str, prefix: &str, token: &str) -> Result<HttpAgent, RunnerError> {
        Ok(HttpAgent {
            base: format!(
                "{}{}/agent",
                server.trim_end_matches('/'),
                prefix.trim_end_matches('/')
            ),
            token: token.to_string(),
            client: Client::new().map_err(|e| RunnerError::Transport(e.to_string()))?,
        })
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Bytes), RunnerError> {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .body(Bytes::from(body.unwrap_or_default()))
            .map_err(|e| RunnerError::Transport(e.to_string()))?;
        let resp = self
            .client
            .send(req, MAX_REPLY)
            .await
            .map_err(|e| RunnerError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp.into_body();
        match status {
            200..=299 => Ok((status, body)),
            409 => Err(RunnerError::NotHeld(
                String::from_utf8_lossy(&body).into_owned(),
            )),
            500..=599 => Err(RunnerError::Transport(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
            ))),
            _ => Err(RunnerError::Refused(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
            ))),
        }
    }

    async fn post<T: Serialize>(&self, path: &str, body: &T) -> Result<(u16, Bytes), RunnerError> {
        let json = serde_json::to_vec(body).map_err(|e| RunnerError::Transport(e.to_string()))?;
        self.call("POST", path, Some(json)).await
    }

    fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, RunnerError> {
        serde_json::from_slice(body).map_err(|e| RunnerError::Transport(format!("bad reply: {e}")))
    }
}

impl AgentApi for HttpAgent {
    async fn next(&self, info: &AgentInfo) -> Result<Option<Work>, RunnerError> {
        let (status, body) = self.post("/next", info).await?;
        if status == 204 {
            return Ok(None);
        }
        Self::parse(&body).map(Some)
    }

    async fn init(&self, workflow_id: i64) -> Result<(), RunnerError> {
        self.call("POST", &format!("/workflows/{workflow_id}/init"), None)
            .await
            .map(|_| ())
    }

    async fn step(&self, workflow_id: i64, update: StepUpdate) -> Result<(), RunnerError> {
        self.post(&format!("/workflows/{workflow_id}/steps"), &update)
            .await
            .map(|_| ())
    }

    async fn logs(&self, workflow_id: i64, lines: Vec<LogLine>) -> Result<(), RunnerError> {
        self.post(&format!("/workflows/{workflow_id}/logs"), &lines)
            .await
            .map(|_| ())
    }

    async fn extend(&self, workflow_id: i64) -> Result<(), RunnerError> {
        self.call("POST", &format!("/workflows/{workflow_id}/extend"), None)
            .await
            .map(|_| ())
    }

    async fn wait_canceled(&self, workflow_id: i64) -> Result<bool, RunnerError> {
        let (_, body) = self
            .call("GET", &format!("/workflows/{workflow_id}/canceled"), None)
            .await?;
        let v: serde_json::Value = Self::parse(&body)?;
        Ok(v["canceled"].as_bool().unwrap_or(false))
    }

    async fn done(&self, workflow_id: i64, done: WorkflowDone) -> Result<(), RunnerError> {
        self.post(&format!("/workflows/{workflow_id}/done"), &done)
            .await
            .map(|_| ())
    }

    async fn hand_over(&self, workflow_id: i64) -> Result<(), RunnerError> {
        self.call("POST", &format!("/workflows/{workflow_id}/hand-over"), None)
            .await
            .map(|_| ())
    }
}
