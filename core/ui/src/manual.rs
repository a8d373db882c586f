//! The manual-run form (`/repos/{id}/manual`): a branch from the forge's list and pipeline
//! variables as key/value rows, posted to the same path; the API's own
//! `POST /api/repos/{id}/pipelines` runs it (`through_api`, after `access::repo_push` let the
//! form be read) and the browser lands on the new pipeline. A refused run shows the form again
//! with what was entered and why.

use std::sync::Arc;

use std::collections::BTreeMap;

use askama::Template;

use serde_json::{Value, json};

use super::forms::{self, Form, FormError};
use super::host::UiHost;
use super::through_api::{self, Call};
use super::{Frame, or_error_page, page};
use crate::ci::access::RepoAccess;
use crate::http::{ApiError, Method, Request, Response, Scope, StatusCode};

/// Empty variable rows the form offers beyond those already filled (no script adds rows).
const SPARE_ROWS: usize = 3;

#[derive(Template)]
#[template(path = "manual.html")]
struct ManualPage {
    frame: Frame,
    repo_id: i64,
    full_name: String,
    branches: Vec<String>,
    selected: String,
    message: String,
    /// Variable rows: name and value, then spare empty rows.
    rows: Vec<(String, String)>,
    error: Option<String>,
}

/// What was entered, kept for showing the form again.
#[derive(Default)]
struct Entered {
    branch: String,
    message: String,
    rows: Vec<(String, String)>,
}

/// The routes of the manual-run form, below the UI's root.
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    scope.get("/repos/{repo_id}/manual", show);
    forms::post(scope, "/repos/{repo_id}/manual", run);
}

/// `GET <root>/repos/{id}/manual`.
pub async fn show<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Run a pipeline").await;
    let outcome = async {
        let access = host.repo_push(&req).await?;
        let entered = Entered {
            branch: access.row.repo.default_branch.clone(),
            ..Entered::default()
        };
        form_page(&host, &frame, &access, entered, None).await
    }
    .await;
    or_error_page(frame, outcome)
}

/// `POST <root>/repos/{id}/manual` (fields `csrf`, `branch`, `message`, and `key`/`value`
/// pairs in order).
pub async fn run<H: UiHost>(host: Arc<H>, mut req: Request) -> Result<Response, ApiError> {
    let form = Form::read(&mut req);
    let (frame, _) = Frame::of(&host, &req, "Run a pipeline").await;
    let outcome = start(&host, req, &frame, form).await;
    or_error_page(frame, outcome)
}

async fn start<H: UiHost>(
    host: &Arc<H>,
    req: Request,
    frame: &Frame,
    form: Result<Form, FormError>,
) -> Result<Response, ApiError> {
    forms::caller(host, &req).await?;
    let access = host.repo_push(&req).await?;
    let form = form?;
    let entered = Entered {
        branch: form.get("branch").unwrap_or("").trim().to_string(),
        message: form.get("message").unwrap_or("").trim().to_string(),
        rows: form
            .all("key")
            .zip(form.all("value"))
            .map(|(k, v)| (k.trim().to_string(), v.to_string()))
            .filter(|(k, v)| !k.is_empty() || !v.is_empty())
            .collect(),
    };
    let variables = match variables(&entered.rows) {
        Ok(variables) => variables,
        Err(err) => {
            let message = err.to_string();
            return form_page(host, frame, &access, entered, Some(message)).await;
        }
    };
    let repo_id = access.row.repo.id;
    let call = Call::body(json!({
        "branch": entered.branch,
        "message": entered.message,
        "variables": variables,
    }));
    let api = "/repos/{repo_id}/pipelines";
    let head = through_api::head_of(&req);
    match through_api::send(host, req, Method::POST, api, call).await {
        Ok(created) if created.status == StatusCode::OK => {
            let number = serde_json::from_slice::<Value>(&created.body)
                .map_err(ApiError::internal)?["number"]
                .as_i64()
                .unwrap_or(0);
            tracing::info!(repo_id, number, "ui manual run");
            let to = format!("{}/repos/{repo_id}/pipeline/{number}", frame.root);
            let note = format!("Pipeline #{number} started.");
            Ok(forms::see_other(host, &head, &to, Some(&note)))
        }
        Ok(_) => {
            let to = format!("{}/repos/{repo_id}", frame.root);
            let note = "No pipeline ran: every workflow was filtered out or skipped.";
            Ok(forms::see_other(host, &head, &to, Some(note)))
        }
        // The run was refused for what was entered: the form again, nothing lost.
        Err(err) if err.status.is_client_error() => {
            let status = err.status;
            let mut response = form_page(host, frame, &access, entered, Some(err.message)).await?;
            response.status = status;
            Ok(response)
        }
        Err(err) => Err(err),
    }
}

/// The rows as pipeline variables: a value without a name, or a name given twice, is
/// refused (the API's checks of names and values follow).
fn variables(rows: &[(String, String)]) -> Result<BTreeMap<String, String>, FormError> {
    let mut out = BTreeMap::new();
    for (key, value) in rows {
        if key.is_empty() {
            return Err(FormError::Invalid {
                field: "key".into(),
                reason: format!("the value {value:?} has no variable name"),
            });
        }
        if out.insert(key.clone(), value.clone()).is_some() {
            return Err(FormError::Invalid {
                field: "key".into(),
                reason: format!("variable {key:?} is given twice"),
            });
        }
    }
    Ok(out)
}

async fn form_page<H: UiHost>(
    host: &Arc<H>,
    frame: &Frame,
    access: &RepoAccess,
    entered: Entered,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let mut branches = host.branches(access).await?;
    if !entered.branch.is_empty() && !branches.contains(&entered.branch) {
        // Kept as entered (the forge's list may have changed since the form was shown).
        branches.insert(0, entered.branch.clone());
    }
    let mut rows = entered.rows;
    rows.extend(std::iter::repeat_n(
        (String::new(), String::new()),
        SPARE_ROWS,
    ));
    let full_name = access.row.repo.full_name.clone();
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    page(
        status,
        &ManualPage {
            frame: frame
                .clone()
                .titled(&format!("Run a pipeline · {full_name}")),
            repo_id: access.row.repo.id,
            full_name,
            branches,
            selected: entered.branch,
            message: entered.message,
            rows,
            error,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rows_become_variables_or_a_reason() {
        let ok = variables(&rows(&[("A", "1"), ("B", "")])).unwrap();
        assert_eq!(ok.get("A").map(String::as_str), Some("1"));
        assert_eq!(ok.get("B").map(String::as_str), Some(""));
        let err = variables(&rows(&[("", "lost")])).unwrap_err();
        assert!(err.to_string().contains("no variable name"), "{err}");
        let err = variables(&rows(&[("A", "1"), ("A", "2")])).unwrap_err();
        assert!(err.to_string().contains("given twice"), "{err}");
    }
}
