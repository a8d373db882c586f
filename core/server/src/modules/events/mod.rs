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
//! A retention task ([`prune_loop`]) removes events older than `events.retention_days` and
//! beyond `events.max_events`; a cursor that fell off answers 404 saying so.

use std::borrow::Cow;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::app::Ctx;
use crate::http::{ApiError, ErrorStyle, Request, Response, Scope, StatusCode};
use crate::modules::ci::access::readable_by_caller;
use crate::store::events::{self, Cursor, Direction, Filter, RawEvent, Visible};
use crate::store::{StoreResult, now_unix_ms, orgs};
use crate::timefmt::rfc3339_millis;

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 10_000;

pub struct Events;

impl super::Module for Events {
    fn name(&self) -> &'static str {
        "events"
    }

    fn error_style(&self) -> ErrorStyle {
        ErrorStyle::JsonMessage
    }

    fn routes(&self, scope: &mut Scope<'_, Ctx>) {
        scope.get("", list).get("/{id}", get);
    }

    fn spawn_background(&self, ctx: &Ctx) -> Vec<tokio::task::JoinHandle<()>> {
        vec![tokio::spawn(prune_loop(ctx.clone()))]
    }
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

/// What the caller may see.
async fn visibility(ctx: &Ctx, req: &Request) -> Result<Option<Visible>, ApiError> {
    Ok(readable_by_caller(ctx, req).await?.map(|ids| {
        let (repo_ids, org_ids) = (*ids).clone();
        Visible { repo_ids, org_ids }
    }))
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

/// The Clever `Event` object.
/// One event as Clever renders it. Fields in alphabetical order, as every other JSON
/// object of the feed; the record snapshots are copied as stored.
#[derive(Serialize)]
struct EventOut<'a> {
    created: String,
    data: EventData<'a>,
    id: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize)]
struct EventData<'a> {
    object: Cow<'a, RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_attributes: Option<&'a RawValue>,
}

/// The record with its `id` as a string: Clever's schemas type every id as a string, and its
/// clients read `data.object.id` as one. The CI API keeps Woodpecker's numeric ids; only the
/// feed's copy changes. The stored text is spliced where its top-level `id` number stands
/// (found by [`top_level_number`], without decoding the object); a snapshot without a numeric
/// `id` is served as stored.
fn with_string_id(raw: &RawValue) -> Cow<'_, RawValue> {
    let text = raw.get();
    let Some(span) = top_level_number(text, "id") else {
        return Cow::Borrowed(raw);
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push_str(&text[..span.start]);
    out.push('"');
    out.push_str(&text[span.clone()]);
    out.push('"');
    out.push_str(&text[span.end..]);
    RawValue::from_string(out).map_or(Cow::Borrowed(raw), Cow::Owned)
}

/// Where the number stored under `key` in the top level of the JSON object `text` stands,
/// if it is there and is a number. Scans the text once: strings (with escapes) and nested
/// values are skipped, not decoded. Anything that is not a well-formed object gives `None`.
fn top_level_number(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    // The end of the string starting at `i` (at its opening quote), past the closing quote.
    let string_end = |mut i: usize| -> Option<usize> {
        i += 1;
        loop {
            match b.get(i)? {
                b'"' => return Some(i + 1),
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
    };
    // The end of the value starting at `i`.
    let value_end = |mut i: usize| -> Option<usize> {
        let mut depth = 0usize;
        loop {
            match b.get(i)? {
                b'"' => i = string_end(i)?,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                b',' | b'}' | b']' if depth == 0 => return Some(i),
                _ => i += 1,
            }
            if depth == 0 && matches!(b.get(i.wrapping_sub(1)), Some(b'"' | b'}' | b']')) {
                return Some(i);
            }
        }
    };
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(i + 1);
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let name_end = string_end(i)?;
        let name = &text[i + 1..name_end - 1];
        i = ws(name_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        let end = value_end(start)?;
        if name == key {
            let number = text[start..end].trim_end();
            let numeric = !number.is_empty()
                && number
                    .bytes()
                    .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'));
            return numeric.then(|| start..start + number.len());
        }
        i = ws(end);
        match b.get(i)? {
            b',' => i = ws(i + 1),
            _ => return None,
        }
    }
}

fn render(event: &RawEvent) -> EventOut<'_> {
    EventOut {
        created: rfc3339_millis(event.created_ms),
        data: EventData {
            object: with_string_id(&event.object),
            previous_attributes: event.previous.as_deref(),
        },
        id: event.id(),
        kind: event.event_type(),
    }
}

/// A page of events and whether more lie after and before it.
type Page = (Vec<RawEvent>, bool, bool);

/// `GET /events`.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let visible = visibility(&ctx, &req).await?;
    let query = Query::parse(&req)?;
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
    let record_types = query.record_types.clone();
    let limit = query.limit;
    let outcome = ctx
        .store
        .read(move |c| -> StoreResult<Result<Page, ApiError>> {
            let org_id = match &school {
                None => None,
                Some(s) => match s.parse::<i64>() {
                    Ok(id) => Some(id),
                    // By name; an unknown organisation matches nothing.
                    Err(_) => Some(orgs::by_any_name(c, s).map(|o| o.id).unwrap_or(-1)),
                },
            };
            let filter = Filter {
                record_types,
                org_id,
                visible,
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
            let page = events::page(c, after, before, &filter, direction, limit)?;
            let (more_after, more_before) = match (page.first(), page.last()) {
                (Some(first), Some(last)) => (
                    events::any_between(c, last.seq, i64::MAX, &filter)?,
                    events::any_between(c, 0, first.seq, &filter)?,
                ),
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
    let data: Vec<PageItem> = page
        .iter()
        .map(|e| PageItem {
            data: render(e),
            uri: format!("{}/{}", base.trim_end_matches('/'), e.id()),
        })
        .collect();
    Ok(Response::json(&PageOut { data, links }))
}

#[derive(Serialize)]
struct Link {
    rel: &'static str,
    uri: String,
}

#[derive(Serialize)]
struct PageItem<'a> {
    data: EventOut<'a>,
    uri: String,
}

#[derive(Serialize)]
struct PageOut<'a> {
    data: Vec<PageItem<'a>>,
    links: Vec<Link>,
}

#[derive(Serialize)]
struct One<'a> {
    data: EventOut<'a>,
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
        .store
        .read(move |c| {
            let event: Option<RawEvent> = events::get(c, seq, &filter)?;
            Ok((event, events::cursor(c, seq)?))
        })
        .await?;
    match found {
        (Some(event), _) => Ok(Response::json(&One {
            data: render(&event),
        })),
        (None, Cursor::Pruned) => Err(ApiError::not_found(format!(
            "event {id} is no longer available (removed by retention)"
        ))),
        (None, _) => Err(ApiError::not_found(format!("no event with id {id:?}"))),
    }
}

/// Rows removed per write transaction, so pruning never holds the writer for long.
const PRUNE_BATCH: usize = 5_000;

/// Applies retention every `events.prune_interval_secs`, forever.
pub async fn prune_loop(ctx: Ctx) {
    let settings = &ctx.config.events;
    if settings.retention_days == 0 && settings.max_events == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(settings.prune_interval_secs));
    // The first tick fires at once; start-up is no time to hold the writer.
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(err) = prune_once(&ctx).await {
            tracing::warn!(%err, "event retention failed; will retry");
        }
    }
}

/// One retention pass; returns the number of events removed.
pub async fn prune_once(ctx: &Ctx) -> StoreResult<usize> {
    let settings = &ctx.config.events;
    let older_than = (settings.retention_days > 0)
        .then(|| now_unix_ms() - (settings.retention_days as i64) * 86_400_000);
    let keep = (settings.max_events > 0).then_some(settings.max_events);
    let mut total = 0;
    loop {
        let removed = ctx
            .store
            .write(move |c| events::prune(c, older_than, keep, PRUNE_BATCH))
            .await?;
        total += removed;
        if removed < PRUNE_BATCH {
            break;
        }
    }
    if total > 0 {
        tracing::info!(removed = total, "old events removed");
    }
    Ok(total)
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

    fn string_id(text: &str) -> String {
        let raw = RawValue::from_string(text.to_string()).unwrap();
        with_string_id(&raw).get().to_string()
    }

    #[test]
    fn object_ids_become_strings_wherever_the_key_stands() {
        assert_eq!(string_id(r#"{"id":7,"a":1}"#), r#"{"id":"7","a":1}"#);
        assert_eq!(
            string_id(r#"{"a":"x\"}","b":{"id":1},"c":[1,{"id":2}],"id":-12}"#),
            r#"{"a":"x\"}","b":{"id":1},"c":[1,{"id":2}],"id":"-12"}"#
        );
        assert_eq!(
            string_id(r#"{ "name" : "n", "id" : 3 , "z": null }"#),
            r#"{ "name" : "n", "id" : "3" , "z": null }"#
        );
        // Only a numeric top-level id changes.
        for unchanged in [
            r#"{"id":"7"}"#,
            r#"{"id":null,"a":1}"#,
            r#"{"a":{"id":1}}"#,
            r#"{"a":1}"#,
            r#"{}"#,
            r#"[1,2]"#,
            r#"{"ids":1,"b":true}"#,
        ] {
            assert_eq!(string_id(unchanged), unchanged);
        }
        // Every result is still JSON.
        let v: serde_json::Value =
            serde_json::from_str(&string_id(r#"{"x":[{"y":"]}"}],"id":5}"#)).unwrap();
        assert_eq!(v["id"], "5");
        assert_eq!(v["x"][0]["y"], "]}");
    }
}
