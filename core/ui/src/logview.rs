//! A step's log on its page, in chunks: the page renders one chunk of [`CHUNK`] lines (the
//! first, or the one `?from=N` names) and a link in place of every other chunk, so a
//! 50,000-line log never becomes one huge page or DOM. The script (`woodlark.js`) swaps a
//! link for its lines when it scrolls into view or when `#L<n>` names a line in it, fetching
//! them from `…/{pid}/lines?from=N`; without a script the links open the page at that chunk.
//!
//! Lines are rendered here only (HTML escaped, ANSI colours as classes by [`super::ansi`]):
//! the live view asks the same endpoint for the lines after the last one shown whenever the
//! API's log stream says more were written, so a line reads the same whichever way it came
//! (no second ANSI renderer in the script).

use std::sync::Arc;

use std::fmt::Write;

use super::ansi;
use super::host::UiHost;
use super::pipeline::{load, steps};
use crate::http::{ApiError, HeaderValue, Request, Response, Scope, StatusCode, header};
use crate::store::logs::{self, StoredLine};
use crate::store::{StoreResult, Tx};
use woodlark_pipeline::types::LineKind;

/// Lines per chunk.
pub const CHUNK: i64 = 1000;
/// At most this much text in one chunk (a log of very long lines still comes in pieces).
const CHUNK_BYTES: usize = 512 * 1024;
/// The header of a fragment naming the next line to ask for (0-based).
pub const NEXT_LINE: &str = "x-next-line";

/// One chunk of a log and where it sits.
pub struct Chunk {
    /// The lines as HTML (`<div class="line" id="L…">…</div>` each).
    pub html: String,
    /// The first line shown (0-based) and the line after the last one shown.
    pub from: i64,
    pub next: i64,
    /// How many lines the log has now.
    pub total: i64,
}

/// A link standing for lines `from`.. (0-based) not on the page.
pub struct Gap {
    pub from: i64,
    /// First and last line numbers as shown (from 1).
    pub first: i64,
    pub last: i64,
}

impl Chunk {
    /// The chunk of step `step_id`'s log that starts at line `from` (rounded down to a chunk).
    pub fn read(c: &Tx, step_id: i64, from: i64) -> StoreResult<Chunk> {
        let mut total = logs::next_line(c, step_id)?;
        // A finished step's last line is its exit code, which is not shown: no link for it.
        let last = logs::page(c, step_id, total - 1, 1, CHUNK_BYTES)?;
        if last.first().is_some_and(|l| l.kind == LineKind::ExitCode) {
            total -= 1;
        }
        let from = (from.clamp(0, total.max(0)) / CHUNK) * CHUNK;
        let lines = logs::page(c, step_id, from, CHUNK as usize, CHUNK_BYTES)?;
        let next = lines.last().map_or(from, |l| l.line + 1);
        Ok(Chunk {
            html: render(&lines),
            from,
            next,
            total,
        })
    }

    /// Links for the chunks before this one.
    pub fn gaps_before(&self) -> Vec<Gap> {
        gaps(0, self.from)
    }

    /// Links for the chunks after this one.
    pub fn gaps_after(&self) -> Vec<Gap> {
        gaps(self.next, self.total)
    }
}

fn gaps(from: i64, to: i64) -> Vec<Gap> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        let end = ((at / CHUNK + 1) * CHUNK).min(to);
        out.push(Gap {
            from: at,
            first: at + 1,
            last: end,
        });
        at = end;
    }
    out
}

/// Stored lines as the page shows them: numbered from 1 (the `#L<n>` anchors), the exit code
/// line left out.
pub fn render(lines: &[StoredLine]) -> String {
    let mut out = String::new();
    for l in lines.iter().filter(|l| l.kind != LineKind::ExitCode) {
        let n = l.line + 1;
        let _ = writeln!(
            out,
            "<div class=\"line\" id=\"L{n}\"><a class=\"ln\" href=\"#L{n}\" aria-label=\"line {n}\">{n}</a><span class=\"text\">{}</span></div>",
            ansi::line_to_html(&l.data)
        );
    }
    out
}

/// The route of the lines endpoint, below the UI's root.
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    scope.get("/repos/{repo_id}/pipeline/{number}/{step_pid}/lines", lines);
}

/// `GET <root>/repos/{id}/pipeline/{number}/{step pid}/lines?from=N`: the chunk of lines
/// from line `N` (0-based) as HTML, at most [`CHUNK`]; [`NEXT_LINE`] says where the next
/// one starts. Access as for the step's page (the API's log endpoints: `access::repo`).
pub async fn lines<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let access = host.repo(&req).await?;
    let number = req.param_i64("number")?;
    let pid = req.param_i64("step_pid")?;
    let from = match req.query("from") {
        None => 0,
        Some(raw) => raw.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::bad_request(format!("invalid from {raw:?}: expected a line number"))
        })?,
    };
    let row = load(&host, access.row.repo.id, number).await?;
    let step_id = steps(&row)
        .find(|s| s.pid == pid)
        .map(|s| s.id)
        .ok_or_else(|| ApiError::not_found("Step not found"))?;
    // Exactly the lines asked for (not rounded to a chunk): the live view asks for what follows.
    let lines = host
        .services()
        .log_reads
        .read_blocking(move |c| logs::page(c, step_id, from, CHUNK as usize, CHUNK_BYTES))
        .await?;
    let next = lines.last().map_or(from, |l| l.line + 1);
    Ok(
        Response::new(StatusCode::OK, "text/html; charset=utf-8", render(&lines))
            .with_header(
                header::HeaderName::from_static(NEXT_LINE),
                HeaderValue::from(next),
            )
            .with_header(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(super::CSP),
            ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_cover_the_rest_in_chunks() {
        let g = gaps(1000, 3500);
        let spans: Vec<(i64, i64, i64)> = g.iter().map(|g| (g.from, g.first, g.last)).collect();
        assert_eq!(
            spans,
            [(1000, 1001, 2000), (2000, 2001, 3000), (3000, 3001, 3500)]
        );
        assert!(gaps(5, 5).is_empty());
        // A chunk that ended early (its byte bound) is followed up to the next boundary.
        let g = gaps(1500, 2100);
        assert_eq!((g[0].from, g[0].last, g[1].from), (1500, 2000, 2000));
    }
}
