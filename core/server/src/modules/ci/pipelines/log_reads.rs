//! Reading a stored step log over HTTP, page by page.
//!
//! A log may hold megabytes (up to `pipeline.max_step_log_bytes` per step, or more from
//! before that limit), and public repositories' logs are readable by anyone. Rendering a
//! whole log at once cost about 3.5 times its size per reader (rows, entries, JSON), so a
//! few readers of one big log took gigabytes. Here a reader holds one page of lines at a
//! time: the response is streamed through a small channel, and the next page is read only
//! when the client has taken the last one.

use bytes::Bytes;

use crate::ci::Reads;
use crate::pipeline::types::LineKind;
use crate::store::logs::{self, LogEntry, StoredLine};

/// Lines per page, and about how much text a page holds at most.
const PAGE_LINES: usize = 256;
const PAGE_BYTES: usize = 256 * 1024;

/// Pages sent ahead of the client.
const PAGES_AHEAD: usize = 2;

/// How a page becomes bytes of the response: JSON entries or raw text.
#[derive(Clone, Copy)]
pub enum Format {
    /// `[{"id":…,"data":"<base64>",…},…]`, as upstream's log endpoint.
    Json,
    /// The lines' text, each ended by a newline, without exit-code entries (downloads).
    Text,
}

impl Format {
    fn start(self) -> &'static [u8] {
        match self {
            Format::Json => b"[",
            Format::Text => b"",
        }
    }

    fn end(self) -> &'static [u8] {
        match self {
            Format::Json => b"]",
            Format::Text => b"",
        }
    }

    /// `lines` rendered; `first`: nothing was rendered before them.
    fn render(self, step_id: i64, lines: &[StoredLine], first: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(lines.iter().map(|l| l.data.len() * 2).sum());
        for (i, l) in lines.iter().enumerate() {
            match self {
                Format::Json => {
                    if !(first && i == 0) {
                        out.push(b',');
                    }
                    let entry = LogEntry::new(l.id, step_id, l.time, l.line, l.kind, &l.data);
                    if let Err(err) = serde_json::to_writer(&mut out, &entry) {
                        tracing::error!(%err, "a log entry could not be rendered");
                    }
                }
                Format::Text if l.kind == LineKind::ExitCode => {}
                Format::Text => {
                    out.extend_from_slice(&l.data);
                    out.push(b'\n');
                }
            }
        }
        out
    }
}

/// The stored lines of `step_id` as a stream of chunks in `format`. A failure halfway
/// (the database gone) ends the stream early and is logged: the status was already sent.
pub fn stream(store: Reads, step_id: i64, format: Format) -> tokio::sync::mpsc::Receiver<Bytes> {
    let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
    tokio::spawn(async move {
        if tx.send(Bytes::from_static(format.start())).await.is_err() {
            return;
        }
        let (mut from, mut first) = (0, true);
        loop {
            let page = store
                .read_blocking(move |c| logs::page(c, step_id, from, PAGE_LINES, PAGE_BYTES))
                .await;
            let page = match page {
                Ok(page) => page,
                Err(err) => {
                    tracing::warn!(step = step_id, %err, "a log read stopped halfway");
                    return;
                }
            };
            let Some(last) = page.last() else { break };
            from = last.line + 1;
            let chunk = format.render(step_id, &page, first);
            first = false;
            drop(page);
            if tx.send(Bytes::from(chunk)).await.is_err() {
                // The client went away.
                return;
            }
        }
        let _ = tx.send(Bytes::from_static(format.end())).await;
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: i64, kind: LineKind, text: &str) -> StoredLine {
        StoredLine {
            id: 100 + n,
            line: n,
            time: n,
            kind,
            data: text.as_bytes().to_vec(),
        }
    }

    #[test]
    fn pages_join_into_one_json_array_and_one_text() {
        let a = [
            line(0, LineKind::Stdout, "one"),
            line(1, LineKind::Stdout, "two"),
        ];
        let b = [
            line(2, LineKind::Stdout, "three"),
            line(3, LineKind::ExitCode, "0"),
        ];
        let mut json = Format::Json.start().to_vec();
        json.extend(Format::Json.render(7, &a, true));
        json.extend(Format::Json.render(7, &b, false));
        json.extend(Format::Json.end());
        let parsed: Vec<LogEntry> = serde_json::from_slice(&json).unwrap();
        let whole: Vec<LogEntry> = a
            .iter()
            .chain(&b)
            .map(|l| LogEntry::new(l.id, 7, l.time, l.line, l.kind, &l.data))
            .collect();
        assert_eq!(parsed, whole);
        let mut text = Format::Text.render(7, &a, true);
        text.extend(Format::Text.render(7, &b, false));
        assert_eq!(text, b"one\ntwo\nthree\n");
    }
}
