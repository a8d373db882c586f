//! The events feed: Clever-style `GET /events` and `GET /events/{id}` over the outbox.
//!
//! Every state change in the server appends a row to the `events` table in the same
//! transaction as the change (see `store::events`); this module only reads those rows.
//! Paging is by cursor over the event id (a fixed-width hex rendering of the outbox sequence):
//! `starting_after` reads forward, `ending_before` reads the page just before a cursor, pages
//! are always oldest first, and `links` carry `self`, plus `next`/`prev` when more events lie
//! in that direction — so a client can store its last id and resume with no gap and no
//! duplicate, across restarts. Errors are `{"message": …}` JSON as in Clever.
//!
//! Filters: `record_type` (repeatable or comma-separated) keeps events whose type starts with
//! that record type (`pipelines`, `repos`, `users`, …); `school` keeps events owned by one
//! organisation, given by id or by name. Callers authenticate with a CI token; instance admins
//! see every event, other users only events of repositories they can pull and of
//! organisations they belong to.
//!
//! A retention task (`crate::retention`) removes events older than `events.retention_days` and
//! beyond `events.max_events`; a cursor that fell off answers 404 saying so.

mod render;

use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::modules::ci::access::{CallerReads, readable_by_caller};
use crate::state::Ctx;
use crate::state::rendered;
use crate::store::events::{self, Cursor, Direction, Filter, Visible};
use crate::store::{StoreResult, orgs};
use render::{Link, TextEvent};

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 10_000;

/// The feed's routes below its mount.
pub(super) fn routes(scope: &mut Scope<'_, Ctx>) {
    scope.get("", list).get("/{id}", get);
}

/// A query parameter under its Clever name or its CamelCase alias.
fn param(req: &Request, snake: &str, camel: &str) -> Vec<String> {
    let mut values = req.query_all(snake);
    values.extend(req.query_all(camel));
    values
}

fn single(req: &Request, snake: &str, camel: &str) -> Result<Option<String>, ApiError> {
    let values = param(req, snake, camel);
    match values.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(ApiError::bad_request(format!(
            "{snake} may be given only once"
        ))),
    }
}

/// An event id → outbox sequence; anything else is 404 (ids are opaque to clients).
fn parse_id(id: &str) -> Option<i64> {
    (id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| i64::from_str_radix(id, 16).ok())
        .flatten()
        .filter(|seq| *seq > 0)
}

/// What the caller may see (`None`: everything), 401 for anonymous callers.
async fn visibility(ctx: &Ctx, req: &Request) -> Result<Option<Visible>, ApiError> {
    Ok(visible(readable_by_caller(ctx, req).await?))
}

fn visible(reads: CallerReads) -> Option<Visible> {
    reads.readable.map(|ids| {
        let (repo_ids, org_ids) = (*ids).clone();
        Visible { repo_ids, org_ids }
    })
}

/// The parsed query of `GET /events`.
struct Query {
    limit: usize,
    starting_after: Option<String>,
    ending_before: Option<String>,
    record_types: Vec<String>,
    school: Option<String>,
}

impl Query {
    fn parse(req: &Request) -> Result<Query, ApiError> {
        let limit = match single(req, "limit", "Limit")? {
            None => DEFAULT_LIMIT,
            Some(raw) => {
                let n: i64 = raw.trim().parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid limit {raw:?}: expected a positive integer"
                    ))
                })?;
                if n < 1 {
                    return Err(ApiError::bad_request(format!(
                        "invalid limit {n}: must be at least 1"
                    )));
                }
                if n as u64 > MAX_LIMIT as u64 {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("limit {n} exceeds the maximum of {MAX_LIMIT}"),
                    ));
                }
                n as usize
            }
        };
        let mut record_types: Vec<String> = param(req, "record_type", "RecordType")
            .iter()
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        record_types.dedup();
        Ok(Query {
            limit,
            starting_after: single(req, "starting_after", "StartingAfter")?
                .filter(|v| !v.is_empty()),
            ending_before: single(req, "ending_before", "EndingBefore")?.filter(|v| !v.is_empty()),
            record_types,
            school: single(req, "school", "School")?.filter(|v| !v.is_empty()),
        })
    }

    /// A link to the same query with other cursors.
    fn link(&self, base: &str, after: Option<&str>, before: Option<&str>) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", &self.limit.to_string());
        for t in &self.record_types {
            q.append_pair("record_type", t);
        }
        if let Some(s) = &self.school {
            q.append_pair("school", s);
        }
        if let Some(a) = after {
            q.append_pair("starting_after", a);
        }
        if let Some(b) = before {
            q.append_pair("ending_before", b);
        }
        format!("{base}?{}", q.finish())
    }
}

/// Resolves a cursor id to its sequence, or a 404 that says what happened to it.
fn resolve_cursor(
    conn: &crate::store::Tx,
    id: &str,
    name: &str,
) -> StoreResult<Result<i64, ApiError>> {
    let Some(seq) = parse_id(id) else {
        return Ok(Err(ApiError::not_found(format!(
            "{name}: no event with id {id:?}"
        ))));
    };
    Ok(match events::cursor(conn, seq)? {
        Cursor::Exists => Ok(seq),
        Cursor::Pruned => Err(ApiError::not_found(format!(
            "{name}: event {id} is no longer available (removed by retention); \
             start again without a cursor to read from the oldest event"
        ))),
        Cursor::Unknown => Err(ApiError::not_found(format!(
            "{name}: no event with id {id:?}"
        ))),
    })
}

/// A page of events and whether more lie after and before it.
type Page = (Vec<TextEvent>, bool, bool);

/// `GET /events`: the page as rendered for an earlier equal request while no event was
/// appended or removed and no permission changed, else freshly read.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    // Before any read, so a commit during this request leaves the body already stale.
    let generation = rendered::events_generation(&ctx.ci.reads);
    let reads = readable_by_caller(&ctx, &req).await?;
    let query = Query::parse(&req)?;
    let viewer = reads.readable.is_some().then_some(reads.user_id);
    let render = render_list(&ctx, &req, query, visible(reads));
    let body = ctx
        .rendered
        .events
        .get_or_render((viewer, req.query.clone()), generation, render)
        .await?;
    Ok(Response::json_text(body))
}

/// Reads and renders one page of `GET /events`.
async fn render_list(
    ctx: &Ctx,
    req: &Request,
    query: Query,
    visible: Option<Visible>,
) -> Result<String, ApiError> {
    let base = if ctx.config.events.module.mount.is_empty() {
        "/".to_string()
    } else {
        ctx.config.events.module.mount.clone()
    };
    let self_uri = if req.query.is_empty() {
        base.clone()
    } else {
        format!("{base}?{}", req.query)
    };

    let school = query.school.clone();
    let after_id = query.starting_after.clone();
    let before_id = query.ending_before.clone();
    // Built once: the read's closure may run more than once (`Store::read`).
    let mut filter = Filter {
        record_types: query.record_types.clone(),
        org_id: None,
        visible,
    };
    let limit = query.limit;
    let outcome = ctx
        .ci
        .reads
        .read(move |c| -> StoreResult<Result<Page, ApiError>> {
            filter.org_id = match &school {
                None => None,
                Some(s) => match s.parse::<i64>() {
                    Ok(id) => Some(id),
                    // By name; an unknown organisation matches nothing.
                    Err(_) => Some(orgs::by_any_name(c, s).map(|o| o.id).unwrap_or(-1)),
                },
            };
            let after = match &after_id {
                None => 0,
                Some(id) => match resolve_cursor(c, id, "starting_after")? {
                    Ok(seq) => seq,
                    Err(e) => return Ok(Err(e)),
                },
            };
            let before = match &before_id {
                None => i64::MAX,
                Some(id) => match resolve_cursor(c, id, "ending_before")? {
                    Ok(seq) => seq,
                    Err(e) => return Ok(Err(e)),
                },
            };
            let direction = if before_id.is_some() && after_id.is_none() {
                Direction::Backward
            } else {
                Direction::Forward
            };
            // One event more than the page tells whether more lie in the reading direction;
            // only the other side needs its own probe.
            let mut page: Vec<TextEvent> =
                events::page(c, after, before, &filter, direction, limit + 1)?;
            let beyond = page.len() > limit;
            if beyond {
                match direction {
                    Direction::Forward => page.truncate(limit),
                    Direction::Backward => drop(page.remove(0)),
                }
            }
            let (more_after, more_before) = match (page.first(), page.last(), direction) {
                (Some(first), _, Direction::Forward) => {
                    (beyond, events::any_between(c, 0, first.seq, &filter)?)
                }
                (_, Some(last), Direction::Backward) => {
                    (events::any_between(c, last.seq, i64::MAX, &filter)?, beyond)
                }
                _ => (false, false),
            };
            Ok(Ok((page, more_after, more_before)))
        })
        .await?;
    let (page, more_after, more_before) = outcome?;

    let mut links = vec![Link {
        rel: "self",
        uri: self_uri,
    }];
    if let (Some(first), Some(last)) = (page.first(), page.last()) {
        if more_after {
            links.push(Link {
                rel: "next",
                uri: query.link(&base, Some(&last.id()), None),
            });
        }
        if more_before {
            links.push(Link {
                rel: "prev",
                uri: query.link(&base, None, Some(&first.id())),
            });
        }
    }
    Ok(render::page(&page, &base, &links))
}

/// `GET /events/{id}`.
async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let visible = visibility(&ctx, &req).await?;
    let id = req.param("id").to_string();
    let Some(seq) = parse_id(&id) else {
        return Err(ApiError::not_found(format!("no event with id {id:?}")));
    };
    let filter = Filter {
        visible,
        ..Filter::default()
    };
    let found = ctx
        .ci
        .reads
        .read(move |c| {
            let event: Option<TextEvent> = events::get(c, seq, &filter)?;
            Ok((event, events::cursor(c, seq)?))
        })
        .await?;
    match found {
        (Some(event), _) => Ok(Response::json_text(render::one(&event))),
        (None, Cursor::Pruned) => Err(ApiError::not_found(format!(
            "event {id} is no longer available (removed by retention)"
        ))),
        (None, _) => Err(ApiError::not_found(format!("no event with id {id:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(parse_id(&events::format_id(42)), Some(42));
        assert_eq!(parse_id("2a"), None);
        assert_eq!(parse_id(&"0".repeat(24)), None);
        assert_eq!(parse_id(&"g".repeat(24)), None);
    }
}
