//! Status at a glance: `GET /badges/{repo}/status.svg` and `GET /badges/{repo}/cc.xml`
//! (also addressable as `/badges/{owner}/{name}/…`). No token is needed for public
//! repositories; private ones need a token with pull permission, like every read.

use super::access::{self, current, repo_by};
use crate::http::{ApiError, HeaderValue, Request, Response, StatusCode, header};
use crate::pipeline::status::Status;
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

/// The badge word and colour for a pipeline status (upstream's mapping).
fn badge_for(status: Option<Status>) -> (&'static str, &'static str) {
    match status {
        Some(Status::Success) => ("success", "#44cc11"),
        Some(Status::Failure) => ("failure", "#e05d44"),
        Some(Status::Pending | Status::Running) => ("started", "#dfb317"),
        Some(Status::Error | Status::Killed) => ("error", "#9f9f9f"),
        _ => ("none", "#9f9f9f"),
    }
}

/// Width of a badge word in DejaVu Sans 11px plus padding, for the words badges use.
fn text_width(word: &str) -> u32 {
    match word {
        "pipeline" => 49,
        "success" => 49,
        "failure" => 40,
        "started" => 45,
        "error" => 32,
        _ => 33, // "none"
    }
}

/// `12.5` or `12` — the shortest form, as upstream prints floats.
fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// The flat shields-style SVG, byte for byte as upstream renders it.
pub fn svg(status: Option<Status>) -> String {
    let (word, color) = badge_for(status);
    let left = text_width("pipeline");
    let right = text_width(word);
    let total = left + right;
    let lx = num(f64::from(left) / 2.0 + 1.0);
    let rx = num(f64::from(left) + f64::from(right) / 2.0 - 1.0);
    format!(
        concat!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="{total}" height="20">"##,
            r##"<linearGradient id="smooth" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>"##,
            r##"<mask id="round"><rect width="{total}" height="20" rx="3" fill="#fff"/></mask>"##,
            r##"<g mask="url(#round)"><rect width="{left}" height="20" fill="#555"/><rect x="{left}" width="{right}" height="20" fill="{color}"/><rect width="{total}" height="20" fill="url(#smooth)"/></g>"##,
            r##"<g fill="#fff" text-anchor="middle" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11">"##,
            r##"<text x="{lx}" y="15" fill="#010101" fill-opacity=".3">pipeline</text><text x="{lx}" y="14">pipeline</text>"##,
            r##"<text x="{rx}" y="15" fill="#010101" fill-opacity=".3">{word}</text><text x="{rx}" y="14">{word}</text></g></svg>"##
        ),
        total = total,
        left = left,
        right = right,
        color = color,
        lx = lx,
        rx = rx,
        word = word,
    )
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

/// `GET …/status.svg?branch=&events=`: the newest non-blocked pipeline of the branch
/// (default branch) among the events (default `push`).
async fn status_svg(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = repo_of(&ctx, &req).await?;
    let branch = req
        .query("branch")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| access.row.repo.default_branch.clone());
    let events: Vec<String> = req
        .query("events")
        .filter(|e| !e.is_empty())
        .map(|e| e.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_else(|| vec!["push".to_string()]);
    let repo_id = access.row.repo.id;
    let filter = ListFilter {
        branch: Some(branch),
        events,
        ..ListFilter::default()
    };
    let newest = ctx
        .ci
        .reads
        .read(move |c| {
            let list = pipelines::list(c, repo_id, &filter, 1, 50)?;
            Ok(list.into_iter().find(|p| p.status != Status::Blocked))
        })
        .await?;
    Ok(Response::new(
        StatusCode::OK,
        "image/svg+xml",
        svg(newest.as_ref().map(|p| p.status)),
    ))
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
    fn badge_geometry() {
        let s = svg(Some(Status::Failure));
        assert!(s.contains(r#"width="89" height="20""#));
        assert!(s.contains(r#"<text x="68" y="14">failure</text>"#));
        assert!(svg(Some(Status::Running)).contains(">started<"));
        assert!(svg(Some(Status::Blocked)).contains(">none<"));
        assert!(svg(None).contains(r#"<text x="64.5" y="14">none</text>"#));
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
