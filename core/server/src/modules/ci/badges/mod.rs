//! Status at a glance: `GET /badges/{repo}/status.svg` and `GET /badges/{repo}/cc.xml`
//! (also addressable as `/badges/{owner}/{name}/…`). No token is needed for public
//! repositories; private ones need a token with pull permission, like every read.
//!
//! A status badge shows the newest pipeline of a branch, or one workflow of it
//! (`?workflow=`), or one step of that workflow (`&step=`), as upstream's do since 3.x; its
//! SVG is drawn in [`svg`], sized by text widths from [`metrics`].

mod metrics;
mod svg;

use super::access::{self, current, repo_by};
use crate::http::{ApiError, HeaderValue, Request, Response, StatusCode, header};
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::status::{self, Status};
use crate::state::Ctx;
use crate::store::pipelines::{self, ListFilter, Pipeline};
use crate::store::repos;

pub fn routes(scope: &mut crate::http::Scope<'_, Ctx>) {
    scope
        .get("/badges/{repo_id}/status.svg", status_svg)
        .get("/badges/{repo_id}/cc.xml", cc_xml)
        .get("/badges/{owner}/{name}/status.svg", status_svg)
        .get("/badges/{owner}/{name}/cc.xml", cc_xml);
}

/// The repository named by `{repo_id}` or `{owner}/{name}`, readable by the caller.
async fn repo_of(ctx: &Ctx, req: &Request) -> Result<access::RepoAccess, ApiError> {
    let user = current(ctx, req).await?;
    if req.params.iter().any(|(k, _)| k == "repo_id") {
        let id = req.param_i64("repo_id")?;
        repo_by(ctx, user, move |c| repos::by_id(c, id)).await
    } else {
        let full = format!("{}/{}", req.param("owner"), req.param("name"));
        repo_by(ctx, user, move |c| repos::by_full_name(c, &full)).await
    }
}

/// `GET …/status.svg?branch=&events=&workflow=&step=`: the newest pipeline of the branch
/// (default: the repository's default branch) among the events (default `push`; a name
/// that is not an event is a 400) that is not waiting for approval. With `workflow`, the
/// badge is that workflow's, named after it (its workflows of that name merged); with
/// `step` too, that step's in it, named `workflow: step`. A workflow or step the pipeline
/// does not have shows "none".
async fn status_svg(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = repo_of(&ctx, &req).await?;
    let events = events_of(req.query("events").as_deref())?;
    let branch = req
        .query("branch")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| access.row.repo.default_branch.clone());
    let workflow = req.query("workflow").filter(|w| !w.is_empty());
    let step = req.query("step").filter(|s| !s.is_empty());
    let repo_id = access.row.repo.id;
    let with_workflows = workflow.is_some();
    let newest = ctx
        .ci
        .reads
        .read(move |c| {
            let Some(mut newest) = pipelines::newest_for_badge(c, repo_id, &branch, &events)?
            else {
                return Ok(None);
            };
            if with_workflows {
                newest.workflows = Some(pipelines::workflows(c, newest.id)?);
            }
            Ok(Some(newest))
        })
        .await?;
    let (subject, status) = match &workflow {
        None => ("pipeline".to_string(), newest.map(|p| p.status)),
        Some(workflow) => workflow_badge(newest.as_ref(), workflow, step.as_deref()),
    };
    Ok(Response::new(
        StatusCode::OK,
        "image/svg+xml",
        svg::render(&subject, status),
    ))
}

/// The `events` a badge counts: `push` unless the query names some, comma-separated.
fn events_of(query: Option<&str>) -> Result<Vec<String>, ApiError> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(vec![WebhookEvent::Push.as_str().to_string()]);
    };
    query
        .split(',')
        .map(|name| {
            let name = name.trim();
            match WebhookEvent::parse(name) {
                Some(event) => Ok(event.as_str().to_string()),
                None => Err(ApiError::bad_request(format!(
                    "events: {name:?} is not an event (one of {})",
                    WebhookEvent::names()
                ))),
            }
        })
        .collect()
}

/// The subject and status of the badge of `workflow` (and `step` in it) in `pipeline`, as
/// upstream folds them: every workflow of that name, or every step of that name in them,
/// merged ([`status::merge_pair`]). The subject names the step only when the pipeline has
/// the workflow (upstream's rule).
fn workflow_badge(
    pipeline: Option<&Pipeline>,
    workflow: &str,
    step: Option<&str>,
) -> (String, Option<Status>) {
    let mut subject = workflow.to_string();
    let mut merged: Option<Status> = None;
    let mut add = |state: Status| {
        merged = Some(merged.map_or(state, |m| status::merge_pair(m, state)));
    };
    let workflows = pipeline.and_then(|p| p.workflows.as_deref()).unwrap_or(&[]);
    for wf in workflows.iter().filter(|wf| wf.name == workflow) {
        match step {
            None => add(wf.state),
            Some(step) => {
                subject = format!("{workflow}: {step}");
                wf.children
                    .iter()
                    .filter(|s| s.name == step)
                    .for_each(|s| add(s.state));
            }
        }
    }
    (subject, merged)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The CCTray `<Project>` of a repository's newest pipeline.
pub fn cc_project(name: &str, pipeline: &Pipeline, web_url: &str) -> String {
    let activity = if matches!(pipeline.status, Status::Pending | Status::Running) {
        "Building"
    } else {
        "Sleeping"
    };
    let last = match pipeline.status {
        Status::Success => "Success",
        Status::Failure => "Failure",
        Status::Error | Status::Killed => "Exception",
        _ => "Unknown",
    };
    let time = pipeline
        .finished
        .max(pipeline.started)
        .max(pipeline.created);
    format!(
        r#"<Projects><Project name="{}" activity="{activity}" lastBuildStatus="{last}" lastBuildLabel="{}" lastBuildTime="{}" webUrl="{}"></Project></Projects>"#,
        xml_escape(name),
        pipeline.number,
        crate::timefmt::rfc3339_seconds(time),
        xml_escape(web_url)
    )
}

/// `GET …/cc.xml`: 404 for a repository without pipelines.
async fn cc_xml(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = repo_of(&ctx, &req).await?;
    let repo_id = access.row.repo.id;
    let newest = ctx
        .ci
        .reads
        .read(move |c| {
            Ok(pipelines::list(c, repo_id, &ListFilter::default(), 1, 1)?
                .into_iter()
                .next())
        })
        .await?
        .ok_or_else(|| ApiError::not_found("the repository has no pipelines"))?;
    let web = format!(
        "{}/repos/{}/pipeline/{}",
        ctx.public_url(),
        repo_id,
        newest.number
    );
    Ok(Response::new(
        StatusCode::OK,
        "application/xml; charset=utf-8",
        cc_project(&access.row.repo.full_name, &newest, &web),
    )
    .with_header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_default_to_push_and_must_be_events() {
        assert_eq!(events_of(None).unwrap(), ["push"]);
        assert_eq!(events_of(Some("")).unwrap(), ["push"]);
        assert_eq!(
            events_of(Some("push, tag,manual")).unwrap(),
            ["push", "tag", "manual"]
        );
        let err = events_of(Some("push,pushh")).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(
            err.message.contains("\"pushh\" is not an event"),
            "{}",
            err.message
        );
        assert!(events_of(Some("push,")).is_err());
    }

    fn workflow(name: &str, state: Status, steps: &[(&str, Status)]) -> pipelines::Workflow {
        pipelines::Workflow {
            name: name.into(),
            state,
            children: steps
                .iter()
                .map(|(name, state)| pipelines::Step {
                    name: (*name).into(),
                    state: *state,
                    ..pipelines::Step::default()
                })
                .collect(),
            ..pipelines::Workflow::default()
        }
    }

    #[test]
    fn a_workflow_or_step_badge_folds_what_has_its_name() {
        let p = Pipeline {
            status: Status::Failure,
            workflows: Some(vec![
                workflow("build", Status::Success, &[("compile", Status::Success)]),
                workflow(
                    "test",
                    Status::Failure,
                    &[("unit", Status::Success), ("e2e", Status::Failure)],
                ),
                // A matrix: two workflows of one name.
                workflow(
                    "test",
                    Status::Canceled,
                    &[("unit", Status::Canceled), ("e2e", Status::Canceled)],
                ),
            ]),
            ..Pipeline::default()
        };
        let p = Some(&p);
        assert_eq!(
            workflow_badge(p, "build", None),
            ("build".into(), Some(Status::Success))
        );
        assert_eq!(
            workflow_badge(p, "test", None),
            ("test".into(), Some(Status::Killed))
        );
        assert_eq!(
            workflow_badge(p, "build", Some("compile")),
            ("build: compile".into(), Some(Status::Success))
        );
        assert_eq!(
            workflow_badge(p, "test", Some("unit")),
            ("test: unit".into(), Some(Status::Killed))
        );
        assert_eq!(
            workflow_badge(p, "build", Some("nope")),
            ("build: nope".into(), None)
        );
        assert_eq!(workflow_badge(p, "lint", Some("x")), ("lint".into(), None));
        assert_eq!(workflow_badge(None, "build", None), ("build".into(), None));
    }

    #[test]
    fn cc_project_fields() {
        let p = Pipeline {
            number: 7,
            status: Status::Running,
            created: 0,
            ..Pipeline::default()
        };
        let x = cc_project("a/<b>", &p, "http://x/repos/1/pipeline/7");
        assert!(x.contains(r#"name="a/&lt;b&gt;""#));
        assert!(x.contains(r#"activity="Building""#));
        assert!(x.contains(r#"lastBuildStatus="Unknown""#));
        assert!(x.contains(r#"lastBuildLabel="7""#));
        assert!(x.contains(r#"lastBuildTime="1970-01-01T00:00:00Z""#));
    }
}
