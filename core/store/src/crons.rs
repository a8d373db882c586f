//! Cron jobs of a repository, and the schedule arithmetic behind `next_exec`.
//!
//! **Schedules** ([`next_exec`]) accept what upstream's parser (`gdgvda/cron`'s
//! `ParseStandard`, a robfig/cron fork) accepts, plus an optional leading seconds field:
//! - 5 fields `minute hour day-of-month month day-of-week`, or 6 with `second` first; names
//!   (`MON`, `JAN`), ranges, lists, steps (`*/5`, and robfig's `0/10`), `?`; croner's `L`, `W`
//!   and `#` extensions come along;
//! - `@yearly` `@annually` `@monthly` `@weekly` `@daily` `@midnight` `@hourly`;
//! - `@every <duration>` in Go syntax (`90s`, `1h30m`, `1.5h`): the next run is that long
//!   after now (at least one second), whatever the timezone;
//! - a `CRON_TZ=Zone ` / `TZ=Zone ` prefix overrides the cron's timezone, as in robfig/cron.
//!
//! `next_exec` is evaluated in the cron's IANA timezone (`timezone`, default `UTC`), so
//! `0 6 * * *` in `Europe/Berlin` is 06:00 Berlin time across daylight-saving changes. Cron
//! parsing is croner's (<https://github.com/hexagon/croner-rust>), zones are chrono-tz's.
//!
//! **Frequency**: [`check_interval`] refuses schedules whose runs come closer together than a
//! minimum (the server's `pipeline.cron_min_interval_secs`), and [`next_exec_spaced`] keeps the
//! scheduler to that minimum for crons stored before it.
//!
//! **Scheduler hooks**: [`due`] lists enabled crons whose `next_exec` has passed; [`claim`]
//! moves a cron's `next_exec` forward only if nobody else did (upstream's `CronGetLock`).

use crate::{Tx, WriteTx};
use std::collections::BTreeMap;
use std::str::FromStr;

use crate::{OptionalExtension, Row};
use chrono::{TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use rusqlite::params;
use serde::Serialize;

use super::events::{self, Action};
use super::secrets::ResourceScope;
use super::{StoreError, StoreResult, now_unix};

pub const RECORD_TYPE: events::RecordType = events::RecordType::Crons;

pub const DEFAULT_TIMEZONE: &str = "UTC";
/// Longest name / branch / schedule accepted.
pub const MAX_FIELD: usize = 255;

/// Woodpecker's `Cron`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cron {
    pub id: i64,
    pub name: String,
    pub repo_id: i64,
    pub creator_id: i64,
    pub next_exec: i64,
    pub schedule: String,
    pub timezone: String,
    pub created: i64,
    pub branch: String,
    pub enabled: bool,
    pub variables: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct NewCron {
    pub name: String,
    pub repo_id: i64,
    pub creator_id: i64,
    pub next_exec: i64,
    pub schedule: String,
    pub timezone: String,
    pub branch: String,
    pub enabled: bool,
    pub variables: BTreeMap<String, String>,
}

/// A partial update: `None` leaves a field as it is. Callers recompute `next_exec` whenever
/// the schedule or timezone changes (see [`next_exec`]).
#[derive(Debug, Clone, Default)]
pub struct CronChange {
    pub name: Option<String>,
    pub creator_id: Option<i64>,
    pub next_exec: Option<i64>,
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub branch: Option<String>,
    pub enabled: Option<bool>,
    pub variables: Option<BTreeMap<String, String>>,
}

// ---------------------------------------------------------------------------------------------
// Schedules

/// An IANA timezone name (`UTC`, `Europe/Berlin`, …).
pub fn parse_timezone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name).map_err(|_| {
        format!(
            "unknown timezone {name:?}: expected an IANA name such as \"UTC\" or \"Europe/Berlin\""
        )
    })
}

/// The first run of `schedule` strictly after `after` (unix seconds), evaluated in `timezone`.
/// An `Err` describes why the schedule or timezone is unusable.
pub fn next_exec(schedule: &str, timezone: &str, after: i64) -> Result<i64, String> {
    Schedule::parse(schedule, timezone)?.next_after(after)
}

/// How many consecutive runs [`smallest_gap`] looks at.
const GAP_SAMPLE: usize = 64;

/// The shortest time, in seconds, between two consecutive runs of `schedule` (in `timezone`):
/// an `@every` duration itself; for a pattern, the smallest gap among [`GAP_SAMPLE`]
/// consecutive runs from the first one after `from`. Sampling finds a pattern's bursts:
/// every field is a set, so runs come in nested bursts (the selected seconds of a selected
/// minute, the selected minutes of a selected hour, ...) and the sample, which starts at a
/// run, starts inside such a burst; the tightest gap of a pattern is the spacing of its
/// innermost burst, or a boundary between two of them (`59,0`), both of which the first runs
/// show. Only a daylight-saving fold can bring two runs closer later, which the scheduler's
/// floor ([`next_exec_spaced`]) covers. `None` when the schedule runs only once in the sample.
pub fn smallest_gap(schedule: &str, timezone: &str, from: i64) -> Result<Option<i64>, String> {
    let parsed = Schedule::parse(schedule, timezone)?;
    if let Schedule::Every(seconds) = parsed {
        return Ok(Some(seconds));
    }
    let mut previous = parsed.next_after(from)?;
    let mut smallest: Option<i64> = None;
    for _ in 1..GAP_SAMPLE {
        // A pattern that stops matching (croner's search has an upper year) ends the sample.
        let Ok(next) = parsed.next_after(previous) else {
            break;
        };
        let gap = next - previous;
        smallest = Some(smallest.map_or(gap, |s| s.min(gap)));
        previous = next;
    }
    Ok(smallest)
}

/// Refuses a schedule whose runs can come less than `min_interval` seconds apart; the
/// message names the schedule, the gap found and the minimum. An unusable schedule is an
/// `Err` too, as from [`next_exec`].
pub fn check_interval(
    schedule: &str,
    timezone: &str,
    from: i64,
    min_interval: i64,
) -> Result<(), String> {
    let Some(gap) = smallest_gap(schedule, timezone, from)? else {
        return Ok(());
    };
    if gap >= min_interval {
        return Ok(());
    }
    let runs = if Schedule::is_every(schedule) {
        format!("runs every {gap}s")
    } else {
        format!("has runs only {gap}s apart")
    };
    Err(format!(
        "schedule {schedule:?} {runs}; the minimum interval is {min_interval}s"
    ))
}

/// The scheduler's next run of a cron that was due at `due` and runs at `now`: the schedule's
/// first run after `now`, but never sooner than `min_interval` seconds after `due` (crons
/// stored before the minimum existed, runs that a daylight-saving fold brings together).
/// Measured from the due time, not from `now`, so a scheduler pass that comes a few seconds
/// late does not push an every-minute cron to every other minute.
pub fn next_exec_spaced(
    schedule: &str,
    timezone: &str,
    due: i64,
    now: i64,
    min_interval: i64,
) -> Result<i64, String> {
    // `next_exec` is strictly after its start: the first run at or after the floor.
    let floor = due.saturating_add(min_interval.max(1) - 1);
    next_exec(schedule, timezone, now.max(floor))
}

/// A schedule checked and ready to evaluate.
enum Schedule {
    /// `@every <duration>`, in whole seconds.
    Every(i64),
    /// A pattern or macro, in its timezone.
    Pattern {
        cron: Box<croner::Cron>,
        tz: Tz,
        original: String,
    },
}

impl Schedule {
    /// Everything [`next_exec`] accepts; an `Err` describes why the schedule or timezone is
    /// unusable.
    fn parse(schedule: &str, timezone: &str) -> Result<Schedule, String> {
        let mut spec = schedule.trim();
        if spec.is_empty() {
            return Err("schedule is required".into());
        }
        if spec.len() > MAX_FIELD {
            return Err(format!("schedule must be at most {MAX_FIELD} characters"));
        }
        let mut tz = parse_timezone(timezone)?;
        if let Some((zone, pattern)) = Self::split_zone(spec) {
            let pattern = pattern
                .ok_or_else(|| format!("schedule {schedule:?} has a timezone but no pattern"))?;
            tz = parse_timezone(zone)?;
            spec = pattern;
        }
        if let Some(macro_) = spec.strip_prefix('@') {
            let lower = macro_.to_ascii_lowercase();
            if let Some(duration) = lower.strip_prefix("every") {
                let seconds = parse_go_duration(duration.trim())
                    .map_err(|e| format!("can't parse schedule {schedule:?}: {e}"))?;
                return Ok(Schedule::Every(seconds));
            }
            let canonical = match lower.as_str() {
                "yearly" | "annually" => "@yearly",
                "monthly" => "@monthly",
                "weekly" => "@weekly",
                "daily" | "midnight" => "@daily",
                "hourly" => "@hourly",
                _ => {
                    return Err(format!(
                        "can't parse schedule {schedule:?}: unknown descriptor; use @yearly, \
                         @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every \
                         <duration>"
                    ));
                }
            };
            return Self::pattern(canonical, schedule, tz);
        }
        let fields = spec.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(format!(
                "can't parse schedule {schedule:?}: expected 5 fields (minute hour day month \
                 weekday) or 6 (with seconds first), got {fields}"
            ));
        }
        if spec
            .split_whitespace()
            .any(|field| field.split(',').any(str::is_empty))
        {
            return Err(format!(
                "can't parse schedule {schedule:?}: empty item in a list"
            ));
        }
        Self::pattern(spec, schedule, tz)
    }

    /// A `CRON_TZ=Zone ` / `TZ=Zone ` prefix: the zone, and the pattern after it if any.
    fn split_zone(spec: &str) -> Option<(&str, Option<&str>)> {
        let rest = ["CRON_TZ=", "TZ="]
            .iter()
            .find_map(|prefix| spec.strip_prefix(prefix))?;
        Some(match rest.split_once(char::is_whitespace) {
            Some((zone, pattern)) => (zone, Some(pattern.trim())),
            None => (rest, None),
        })
    }

    /// Whether `schedule` is an `@every` duration (after any timezone prefix).
    fn is_every(schedule: &str) -> bool {
        let spec = schedule.trim();
        let spec = match Self::split_zone(spec) {
            Some((_, pattern)) => pattern.unwrap_or(""),
            None => spec,
        };
        spec.get(..6)
            .is_some_and(|head| head.eq_ignore_ascii_case("@every"))
    }

    fn pattern(pattern: &str, original: &str, tz: Tz) -> Result<Schedule, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .sloppy_ranges(true)
            .build()
            .parse(pattern)
            .map_err(|e| format!("can't parse schedule {original:?}: {e}"))?;
        check_feasible(&cron.pattern, pattern)
            .map_err(|why| format!("schedule {original:?} never runs: {why}"))?;
        Ok(Schedule::Pattern {
            cron: Box::new(cron),
            tz,
            original: original.to_string(),
        })
    }

    /// The first run strictly after `after` (unix seconds).
    fn next_after(&self, after: i64) -> Result<i64, String> {
        let (cron, tz, original) = match self {
            // At least one second, whatever the timezone.
            Schedule::Every(seconds) => return Ok(after.saturating_add(*seconds)),
            Schedule::Pattern { cron, tz, original } => (cron, tz, original),
        };
        let start = Utc
            .timestamp_opt(after, 0)
            .single()
            .ok_or_else(|| "time out of range".to_string())?
            .with_timezone(tz);
        let next = cron
            .find_next_occurrence(&start, false)
            .map_err(|e| format!("schedule {original:?} never runs: {e}"))?;
        Ok(next.timestamp())
    }
}

/// Rejects patterns that can never match before croner searches for a match (which, for
/// an impossible pattern, scans years ahead: a request must not be able to buy that much
/// CPU). Catches empty fields (`,` lists) and days that no selected month has (`31 4`, `30 2`)
/// unless a weekday alternative exists (standard cron ORs day-of-month and day-of-week).
fn check_feasible(cron: &croner::CronPattern, text: &str) -> Result<(), String> {
    for (name, component) in [
        ("second", &cron.seconds),
        ("minute", &cron.minutes),
        ("hour", &cron.hours),
        ("month", &cron.months),
    ] {
        if component.values().is_empty() {
            return Err(format!("no {name} selected"));
        }
    }
    let days = &cron.days;
    let weekdays = &cron.days_of_week;
    if days.values().is_empty() && !days.has_modifiers() {
        return Err("no day of month selected".into());
    }
    if weekdays.values().is_empty() && !weekdays.has_modifiers() {
        return Err("no day of week selected".into());
    }
    if days.has_modifiers() {
        return Ok(());
    }
    const DAYS_IN_MONTH: [u16; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let shortest_day = days.values().into_iter().min().unwrap_or(1);
    let fits = cron.months.values().into_iter().any(|m| {
        DAYS_IN_MONTH
            .get(usize::from(m).wrapping_sub(1))
            .is_some_and(|&max| shortest_day <= max)
    });
    if fits {
        return Ok(());
    }
    // The day-of-week field: OR-ed with the day of month unless it is `*`/`?` or `+`-prefixed.
    let fields: Vec<&str> = text.split_whitespace().collect();
    let weekday_field = fields.last().copied().unwrap_or("*");
    let weekday_alternative =
        !matches!(weekday_field, "*" | "?") && !weekday_field.starts_with('+');
    if weekday_alternative {
        Ok(())
    } else {
        Err("no selected month has the selected days".into())
    }
}

/// Go's `time.ParseDuration` (`300ms`, `1.5h`, `2h45m`), in whole seconds, at least 1.
fn parse_go_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("invalid duration {text:?} (examples: 30s, 5m, 1h30m)");
    if text.is_empty() || text.starts_with('-') {
        return Err(bad());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Err("the @every duration must be positive".into());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        nanos += number * unit;
    }
    if !nanos.is_finite() || nanos <= 0.0 {
        return Err("the @every duration must be positive".into());
    }
    // Upstream truncates to whole seconds and never runs more often than once a second.
    let seconds = (nanos / 1e9).floor();
    if seconds > 100.0 * 365.0 * 86400.0 {
        return Err(bad());
    }
    Ok((seconds as i64).max(1))
}

// ---------------------------------------------------------------------------------------------
// Storage

const COLUMNS: &str = "id, name, repo_id, creator_id, next_exec, schedule, timezone, created, branch, enabled, variables";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Cron> {
    Ok(Cron {
        id: r.get(0)?,
        name: r.get(1)?,
        repo_id: r.get(2)?,
        creator_id: r.get(3)?,
        next_exec: r.get(4)?,
        schedule: r.get(5)?,
        timezone: r.get(6)?,
        created: r.get(7)?,
        branch: r.get(8)?,
        enabled: r.get(9)?,
        variables: super::json_column(r, 10)?,
    })
}

/// A cron of a repository by id.
pub fn find(conn: &Tx, repo_id: i64, id: i64) -> StoreResult<Cron> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM crons WHERE repo_id = ?1 AND id = ?2"),
        params![repo_id, id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// One page of a repository's crons, by name.
pub fn list(conn: &Tx, repo_id: i64, page: u32, per_page: u32) -> StoreResult<Vec<Cron>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM crons WHERE repo_id = ?1 ORDER BY name, id LIMIT ?2 + 0 OFFSET ?3"
    ))?;
    let rows = stmt.query_map(params![repo_id, per_page, offset], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Enabled crons whose `next_exec` is at or before `now`, oldest first (for the scheduler).
pub fn due(conn: &Tx, now: i64, limit: u32) -> StoreResult<Vec<Cron>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM crons WHERE enabled = 1 AND next_exec <= ?1
         ORDER BY next_exec, id LIMIT ?2 + 0"
    ))?;
    let rows = stmt.query_map(params![now, limit], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn name_taken(conn: &Tx, repo_id: i64, name: &str, except: i64) -> StoreResult<bool> {
    conn.cached_row(
        "SELECT EXISTS (SELECT 1 FROM crons WHERE repo_id = ?1 AND name = ?2 AND id != ?3)",
        params![repo_id, name, except],
        |r| r.get(0),
    )
}

fn duplicate(name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "a cron job named {name:?} already exists in this repository"
    ))
}

fn owner(conn: &Tx, repo_id: i64) -> StoreResult<events::Owner> {
    ResourceScope::repo(repo_id).owner(conn)
}

/// Creates a cron (409 if the repository already has one of that name). Records
/// `crons.created`.
pub fn create(conn: &WriteTx, new: &NewCron, max_per_repo: u64) -> StoreResult<Cron> {
    if name_taken(conn, new.repo_id, &new.name, 0)? {
        return Err(duplicate(&new.name));
    }
    let count: i64 = conn.cached_row(
        "SELECT COUNT(*) FROM crons WHERE repo_id = ?1",
        [new.repo_id],
        |r| r.get(0),
    )?;
    if u64::try_from(count).unwrap_or(0) >= max_per_repo {
        return Err(StoreError::Conflict(format!(
            "this repository has {count} cron jobs, the most it may have \
             (pipeline.max_crons_per_repo = {max_per_repo}): remove one first"
        )));
    }
    conn.cached_exec(
        "INSERT INTO crons (name, repo_id, creator_id, next_exec, schedule, timezone, created,
                            branch, enabled, variables)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            new.name,
            new.repo_id,
            new.creator_id,
            new.next_exec,
            new.schedule,
            new.timezone,
            now_unix(),
            new.branch,
            new.enabled,
            serde_json::to_string(&new.variables)?,
        ],
    )?;
    let cron = find(conn, new.repo_id, conn.last_insert_rowid()?)?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        cron.id,
        &cron,
        owner(conn, cron.repo_id)?,
    )?;
    Ok(cron)
}

/// Applies `change` (409 if renamed onto another cron's name). Records `crons.updated`.
pub fn update(conn: &WriteTx, repo_id: i64, id: i64, change: &CronChange) -> StoreResult<Cron> {
    let before = find(conn, repo_id, id)?;
    if let Some(name) = &change.name
        && name_taken(conn, repo_id, name, id)?
    {
        return Err(duplicate(name));
    }
    let variables = change
        .variables
        .as_ref()
        .map(serde_json::to_string)
        .transpose()?;
    conn.cached_exec(
        "UPDATE crons SET
            name = coalesce(?2, name),
            creator_id = coalesce(?3, creator_id),
            next_exec = coalesce(?4, next_exec),
            schedule = coalesce(?5, schedule),
            timezone = coalesce(?6, timezone),
            branch = coalesce(?7, branch),
            enabled = coalesce(?8, enabled),
            variables = coalesce(?9, variables)
         WHERE id = ?1",
        params![
            id,
            change.name,
            change.creator_id,
            change.next_exec,
            change.schedule,
            change.timezone,
            change.branch,
            change.enabled,
            variables,
        ],
    )?;
    let after = find(conn, repo_id, id)?;
    events::append_update(
        conn,
        RECORD_TYPE,
        id,
        &before,
        &after,
        owner(conn, repo_id)?,
    )?;
    Ok(after)
}

/// Moves `next_exec` from `expected` to `next` if no one else has (the scheduler's lock).
/// Returns whether this caller won. Records `crons.updated` when it did.
pub fn claim(conn: &WriteTx, id: i64, expected: i64, next: i64) -> StoreResult<bool> {
    let Some(before) = conn
        .cached_row(
            &format!("SELECT {COLUMNS} FROM crons WHERE id = ?1"),
            [id],
            from_row,
        )
        .optional()?
    else {
        return Ok(false);
    };
    let n = conn.cached_exec(
        "UPDATE crons SET next_exec = ?3 WHERE id = ?1 AND next_exec = ?2",
        params![id, expected, next],
    )?;
    if n == 0 {
        return Ok(false);
    }
    let after = find(conn, before.repo_id, id)?;
    events::append_update(
        conn,
        RECORD_TYPE,
        id,
        &before,
        &after,
        owner(conn, before.repo_id)?,
    )?;
    Ok(true)
}

/// Deletes a cron. Records `crons.deleted`.
pub fn delete(conn: &WriteTx, repo_id: i64, id: i64) -> StoreResult<Cron> {
    let cron = find(conn, repo_id, id)?;
    let owner = owner(conn, repo_id)?;
    conn.cached_exec("DELETE FROM crons WHERE id = ?1", [id])?;
    events::append(conn, RECORD_TYPE, Action::Deleted, id, &cron, owner)?;
    Ok(cron)
}

/// Deletes every cron of a repository being deleted, recording `crons.deleted` each.
pub fn delete_scope(conn: &WriteTx, repo_id: i64) -> StoreResult<usize> {
    let ids: Vec<i64> = {
        let mut stmt =
            conn.prepare_cached("SELECT id FROM crons WHERE repo_id = ?1 ORDER BY id")?;
        let rows = stmt.query_map([repo_id], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for id in &ids {
        delete(conn, repo_id, *id)?;
    }
    Ok(ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    /// A database with repositories 1 and 2 (crons reference them).
    fn conn() -> WriteTx<'static> {
        let c = crate::sql::fresh_tx();
        c.execute_batch(
            "INSERT INTO forges (id, type, url, data, webhook_secret) VALUES (1, 'git', 'file:///f', '{}', 's');
             INSERT INTO repos (id, forge_id, forge_remote_id, org_id, full_name, hash, data, created)
             VALUES (1, 1, 'a/one', 7, 'a/one', 'h', '{}', 0), (2, 1, 'a/two', 7, 'a/two', 'h', '{}', 0);",
        )
        .unwrap();
        c
    }

    /// 2022-08-31T16:12:49Z (upstream's test instant), a Wednesday.
    const NOW: i64 = 1661962369;

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp()
    }

    #[test]
    fn standard_fields_and_seconds() {
        assert_eq!(
            next_exec("*/5 * * * *", "UTC", NOW).unwrap(),
            at("2022-08-31T16:15:00Z")
        );
        assert_eq!(
            next_exec("0 6 * * *", "UTC", NOW).unwrap(),
            at("2022-09-01T06:00:00Z")
        );
        assert_eq!(
            next_exec("30 0 6 * * *", "UTC", NOW).unwrap(),
            at("2022-09-01T06:00:30Z")
        );
        assert_eq!(
            next_exec("0 9 * * MON-FRI", "UTC", NOW).unwrap(),
            at("2022-09-01T09:00:00Z")
        );
        assert_eq!(
            next_exec("0 0 1 JAN *", "UTC", NOW).unwrap(),
            at("2023-01-01T00:00:00Z")
        );
        // robfig's "start/step".
        assert_eq!(
            next_exec("0/20 * * * *", "UTC", NOW).unwrap(),
            at("2022-08-31T16:20:00Z")
        );
    }

    #[test]
    fn macros_and_every() {
        assert_eq!(
            next_exec("@hourly", "UTC", NOW).unwrap(),
            at("2022-08-31T17:00:00Z")
        );
        for daily in ["@daily", "@midnight", "@DAILY"] {
            assert_eq!(
                next_exec(daily, "UTC", NOW).unwrap(),
                at("2022-09-01T00:00:00Z")
            );
        }
        assert_eq!(
            next_exec("@weekly", "UTC", NOW).unwrap(),
            at("2022-09-04T00:00:00Z")
        );
        assert_eq!(
            next_exec("@monthly", "UTC", NOW).unwrap(),
            at("2022-09-01T00:00:00Z")
        );
        for yearly in ["@yearly", "@annually"] {
            assert_eq!(
                next_exec(yearly, "UTC", NOW).unwrap(),
                at("2023-01-01T00:00:00Z")
            );
        }
        // Upstream's own test: @every 5m from this instant.
        assert_eq!(next_exec("@every 5m", "UTC", NOW).unwrap(), 1661962669);
        assert_eq!(next_exec("@every 1h30m", "UTC", NOW).unwrap(), NOW + 5400);
        assert_eq!(next_exec("@every 1.5h", "UTC", NOW).unwrap(), NOW + 5400);
        assert_eq!(next_exec("@every 10ms", "UTC", NOW).unwrap(), NOW + 1);
    }

    #[test]
    fn timezones() {
        // 06:00 in Berlin is 04:00 UTC in summer (CEST) ...
        assert_eq!(
            next_exec("0 6 * * *", "Europe/Berlin", NOW).unwrap(),
            at("2022-09-01T04:00:00Z")
        );
        // ... and 05:00 UTC in winter (CET).
        assert_eq!(
            next_exec("0 6 * * *", "Europe/Berlin", at("2022-12-01T12:00:00Z")).unwrap(),
            at("2022-12-02T05:00:00Z")
        );
        assert_eq!(
            next_exec("CRON_TZ=America/New_York 0 6 * * *", "UTC", NOW).unwrap(),
            at("2022-09-01T10:00:00Z")
        );
        assert!(next_exec("0 6 * * *", "Mars/Olympus", NOW).is_err());
        assert!(next_exec("0 6 * * *", "", NOW).is_err());
    }

    #[test]
    fn bad_schedules() {
        for bad in [
            "",
            "   ",
            "* * * *",
            "* * * * * * *",
            "61 * * * *",
            "* 25 * * *",
            "a b c d e",
            "@reboot",
            "@every",
            "@every 5",
            "@every -5m",
            "@every 5x",
            "@every 0s",
            "0 0 30 2 *",
            "0 0 31 4,6 *",
            "0 0 30 2 +1",
            ", * * * *",
            "0 0 1,,2 * *",
            "TZ=Europe/Berlin",
        ] {
            assert!(next_exec(bad, "UTC", NOW).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn odd_input_never_panics_and_is_quick() {
        let started = std::time::Instant::now();
        for odd in [
            "*/0 * * * *",
            "0- * * * *",
            "- * * * *",
            "5-1 * * * *",
            "L * * * *",
            "0 0 L * *",
            "0 0 * * 1#9",
            "0 0 * * 5L",
            "0 0 15W * *",
            "99999999999999999999 * * * *",
            "0 0 31 4 *",
            "0 0 29 2 *",
            "0 0 30 2 1",
            "@every 9999999999h",
            "@every 1e9h",
            "@every 1..5s",
            "@every µs",
            "CRON_TZ= * * * * *",
            "TZ=UTC @every 5m",
            "* * * * * ?",
            ", * * * *",
            "*/ * * * *",
        ] {
            let _ = next_exec(odd, "UTC", NOW);
            let _ = next_exec(odd, "Pacific/Chatham", NOW);
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(
            next_exec("TZ=UTC @every 5m", "UTC", NOW).unwrap(),
            NOW + 300
        );
        // A date that exists only in leap years is still found.
        assert_eq!(
            next_exec("0 0 29 2 *", "UTC", NOW).unwrap(),
            at("2024-02-29T00:00:00Z")
        );
    }

    #[test]
    fn smallest_gaps() {
        let gap = |schedule: &str| smallest_gap(schedule, "UTC", NOW).unwrap().unwrap();
        assert_eq!(gap("@every 1s"), 1);
        assert_eq!(gap("@every 30s"), 30);
        assert_eq!(gap("@every 1m"), 60);
        assert_eq!(gap("@EVERY 1h"), 3600);
        assert_eq!(gap("* * * * *"), 60);
        assert_eq!(gap("* * * * * *"), 1);
        assert_eq!(gap("0 * * * * *"), 60);
        assert_eq!(gap("*/30 * * * * *"), 30);
        assert_eq!(gap("0 */5 * * * *"), 300);
        assert_eq!(gap("0,1 * * * *"), 60);
        assert_eq!(gap("@hourly"), 3600);
        assert_eq!(gap("@daily"), 86400);
        assert_eq!(gap("CRON_TZ=Europe/Berlin */5 * * * *"), 300);
        // A burst at a boundary: 23:59 then 00:00 the next day.
        assert_eq!(gap("0,59 0,23 * * *"), 60);
        // A burst far away: every minute of a leap day.
        assert_eq!(gap("* * 29 2 *"), 60);
        assert!(smallest_gap("61 * * * *", "UTC", NOW).is_err());
    }

    #[test]
    fn interval_check_names_the_schedule_the_gap_and_the_minimum() {
        let check = |schedule: &str, min: i64| check_interval(schedule, "UTC", NOW, min);
        assert_eq!(
            check("@every 1s", 60).unwrap_err(),
            r#"schedule "@every 1s" runs every 1s; the minimum interval is 60s"#
        );
        assert_eq!(
            check("* * * * * *", 60).unwrap_err(),
            r#"schedule "* * * * * *" has runs only 1s apart; the minimum interval is 60s"#
        );
        assert!(check("@every 30s", 60).is_err());
        assert!(check("*/30 * * * * *", 60).is_err());
        assert!(check("@every 1m", 60).is_ok());
        assert!(check("* * * * *", 60).is_ok());
        assert!(check("0 * * * * *", 60).is_ok());
        assert!(check("0 */5 * * * *", 60).is_ok());
        assert!(check("@hourly", 60).is_ok());
        assert!(check("0,1 * * * *", 60).is_ok());
        assert_eq!(
            check("0,1 * * * *", 120).unwrap_err(),
            r#"schedule "0,1 * * * *" has runs only 60s apart; the minimum interval is 120s"#
        );
        assert!(check_interval("CRON_TZ=Europe/Berlin */5 * * * *", "UTC", NOW, 60).is_ok());
        assert!(check("CRON_TZ=Europe/Berlin @every 10s", 60).is_err());
        assert!(check("@every 1s", 1).is_ok());
        // An unusable schedule is refused as such.
        assert!(check("@every", 60).unwrap_err().contains("can't parse"));
    }

    #[test]
    fn the_scheduler_keeps_the_minimum_after_a_run() {
        let spaced = |schedule: &str, due: i64, now: i64| {
            next_exec_spaced(schedule, "UTC", due, now, 60).unwrap()
        };
        // A cron stored before the minimum existed runs no more often than the minimum ...
        assert_eq!(spaced("* * * * * *", NOW, NOW), NOW + 60);
        assert_eq!(spaced("@every 1s", NOW, NOW + 5), NOW + 60);
        // ... the schedule's own runs are kept, also when the pass comes late ...
        let minute = at("2022-08-31T16:13:00Z");
        assert_eq!(spaced("* * * * *", minute, minute + 9), minute + 60);
        assert_eq!(spaced("0 * * * * *", minute, minute), minute + 60);
        assert_eq!(
            spaced("@hourly", minute, minute),
            at("2022-08-31T17:00:00Z")
        );
        // ... and a pass long after the due time does not catch up on missed runs.
        assert_eq!(spaced("* * * * *", minute, minute + 3601), minute + 3660);
        assert!(next_exec_spaced("61 * * * *", "UTC", NOW, NOW, 60).is_err());
    }

    #[test]
    fn sampling_a_rare_pattern_is_quick() {
        let started = std::time::Instant::now();
        for rare in ["0 0 29 2 *", "0 0 1 1 *", "0 0 29 2 MON#5", "0 0 31 12 5"] {
            smallest_gap(rare, "Pacific/Chatham", NOW).unwrap();
        }
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    }

    fn new(name: &str, repo_id: i64) -> NewCron {
        NewCron {
            name: name.into(),
            repo_id,
            creator_id: 1,
            next_exec: NOW,
            schedule: "@daily".into(),
            timezone: "UTC".into(),
            enabled: true,
            ..NewCron::default()
        }
    }

    #[test]
    fn crud_due_claim_and_events() {
        let c = conn();
        let a = create(&c, &new("nightly", 1), 2).unwrap();
        create(&c, &new("nightly", 2), 2).unwrap();
        assert!(matches!(
            create(&c, &new("nightly", 1), 2),
            Err(StoreError::Conflict(_))
        ));
        let b = create(&c, &new("weekly", 1), 2).unwrap();
        // A third in repository 1 is past its limit of two; repository 2 has room.
        match create(&c, &new("hourly", 1), 2) {
            Err(StoreError::Conflict(m)) => {
                assert!(m.contains("pipeline.max_crons_per_repo = 2"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let paused = NewCron {
            enabled: false,
            ..new("hourly", 2)
        };
        create(&c, &paused, 2).unwrap();
        assert!(matches!(
            update(
                &c,
                1,
                b.id,
                &CronChange {
                    name: Some("nightly".into()),
                    ..CronChange::default()
                }
            ),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(find(&c, 2, a.id), Err(StoreError::NotFound)));
        let off = CronChange {
            enabled: Some(false),
            ..CronChange::default()
        };
        update(&c, 1, b.id, &off).unwrap();
        let due_now: Vec<_> = due(&c, NOW, 10).unwrap().iter().map(|c| c.id).collect();
        assert_eq!(due_now.len(), 2);
        assert!(!due_now.contains(&b.id));
        assert!(due(&c, NOW - 1, 10).unwrap().is_empty());
        assert!(claim(&c, a.id, NOW, NOW + 86400).unwrap());
        assert!(!claim(&c, a.id, NOW, NOW + 86400).unwrap());
        assert_eq!(list(&c, 1, 1, 50).unwrap().len(), 2);
        assert_eq!(delete_scope(&c, 1).unwrap(), 2);
        assert_eq!(list(&c, 2, 1, 50).unwrap().len(), 2);
        let types: Vec<_> = events::list_after(&c, 0, 20)
            .unwrap()
            .iter()
            .map(|e| e.event_type())
            .collect();
        assert_eq!(
            types,
            [
                "crons.created",
                "crons.created",
                "crons.created",
                "crons.created",
                "crons.updated",
                "crons.updated",
                "crons.deleted",
                "crons.deleted"
            ]
        );
    }
}
