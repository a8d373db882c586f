//! A step's output → masked log lines, the same on every backend.
//!
//! A backend hands a step's output over as a stream of byte chunks ([`Output`]: a pipe read
//! by the runtime, a container's log stream) and knows nothing of lines or secrets. This
//! module alone cuts the chunks into lines of at most [`MAX_LINE_BYTES`] (an endless line
//! can neither exhaust memory nor exceed the log upload limit), never inside a secret or a
//! UTF-8 character, and replaces every secret value with `********`: a line reads the same
//! whichever backend ran the step.

use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;

/// A step's output (stdout and stderr merged) as chunks of bytes; ends when the step's
/// output does.
pub type Output = BoxStream<'static, Bytes>;

/// Longest log line handed on; longer output without a newline becomes several lines.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The pieces of the secrets that are masked: each line of a value, if at least 2 bytes.
fn mask_parts(secrets: &[String]) -> impl Iterator<Item = &str> {
    secrets
        .iter()
        .flat_map(|s| s.lines())
        .filter(|p| p.len() >= 2)
}

/// Replaces every secret value in `line` with `********`.
pub fn mask(line: &str, secrets: &[String]) -> String {
    let mut out = line.to_string();
    for part in mask_parts(secrets) {
        if out.contains(part) {
            out = out.replace(part, "********");
        }
    }
    out
}

/// Where to cut an over-long line `buf`: as late as possible, but never inside an occurrence
/// of a secret (each half would escape masking) nor inside a UTF-8 character. The tail from
/// the cut on is carried into the next line.
fn split_point(buf: &[u8], secrets: &[String]) -> usize {
    let parts: Vec<&[u8]> = mask_parts(secrets).map(str::as_bytes).collect();
    let longest = parts.iter().map(|p| p.len()).max().unwrap_or(1);
    // Keep back enough that a secret starting near the end is seen whole next time.
    let mut cut = buf.len() - (longest - 1).min(buf.len() / 2);
    loop {
        let straddled = parts.iter().find_map(|part| {
            let from = cut.saturating_sub(part.len() - 1);
            let window = &buf[from..(cut + part.len() - 1).min(buf.len())];
            window
                .windows(part.len())
                .position(|w| w == *part)
                .map(|i| from + i)
                .filter(|&start| start < cut && start + part.len() > cut)
        });
        match straddled {
            Some(start) => cut = start,
            None => break,
        }
    }
    let continuation = |b: u8| (b & 0b1100_0000) == 0b1000_0000;
    if cut == buf.len() {
        // Cutting at the end: step back over a character whose last bytes are still unread.
        let start = (0..buf.len())
            .rev()
            .take(4)
            .find(|&i| !continuation(buf[i]))
            .unwrap_or(buf.len());
        let width = match buf.get(start) {
            Some(b) if *b >= 0xF0 => 4,
            Some(b) if *b >= 0xE0 => 3,
            Some(b) if *b >= 0xC0 => 2,
            _ => 1,
        };
        if start + width > buf.len() {
            cut = start;
        }
    }
    while cut > 0 && cut < buf.len() && continuation(buf[cut]) {
        cut -= 1;
    }
    if cut == 0 { buf.len() } else { cut }
}

/// One line as it is logged: without its line break, masked, invalid UTF-8 replaced.
fn finish_line(bytes: &[u8], secrets: &[String]) -> String {
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    mask(&String::from_utf8_lossy(&bytes[..end]), secrets)
}

/// Cuts a byte stream fed in chunks of any size into masked lines.
#[derive(Debug)]
pub struct LineSplitter {
    pending: Vec<u8>,
    /// How many bytes at the start of `pending` are known to hold no newline: a line that
    /// arrives in many small chunks is searched once, not once per chunk.
    searched: usize,
    secrets: Vec<String>,
}

impl LineSplitter {
    pub fn new(secrets: Vec<String>) -> LineSplitter {
        LineSplitter {
            pending: Vec::new(),
            searched: 0,
            secrets,
        }
    }

    /// Takes in `chunk`; appends the lines it completed to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<String>) {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        let mut searched = self.searched;
        loop {
            let rest = &self.pending[start..];
            let window = &rest[..rest.len().min(MAX_LINE_BYTES)];
            let newline = window[searched..].iter().position(|b| *b == b'\n');
            if let Some(newline) = newline.map(|at| searched + at) {
                out.push(finish_line(&window[..=newline], &self.secrets));
                start += newline + 1;
                searched = 0;
            } else if rest.len() >= MAX_LINE_BYTES {
                let cut = split_point(window, &self.secrets);
                out.push(finish_line(&window[..cut], &self.secrets));
                start += cut;
                // The tail carried into the next line has no newline either.
                searched = window.len() - cut;
            } else {
                searched = window.len();
                break;
            }
        }
        self.searched = searched;
        self.pending.drain(..start);
    }

    /// The end of the output: appends the last, unterminated line (if any) to `out`.
    pub fn finish(self, out: &mut Vec<String>) {
        if !self.pending.is_empty() {
            out.push(finish_line(&self.pending, &self.secrets));
        }
    }
}

/// Reads `output` to its end and sends its masked lines to `lines`, each with the seconds
/// since the pump started (the step's start); stops early once `lines` is closed.
pub async fn pump(
    mut output: Output,
    secrets: Vec<String>,
    lines: mpsc::UnboundedSender<(i64, String)>,
) {
    let started = Instant::now();
    let mut splitter = LineSplitter::new(secrets);
    let mut done = Vec::new();
    let send = |done: &mut Vec<String>| {
        let time = started.elapsed().as_secs() as i64;
        done.drain(..).all(|line| lines.send((time, line)).is_ok())
    };
    while let Some(chunk) = output.next().await {
        splitter.push(&chunk, &mut done);
        if !send(&mut done) {
            return;
        }
    }
    splitter.finish(&mut done);
    send(&mut done);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `input` fed in chunks of `size` bytes.
    fn split(input: &[u8], size: usize, secrets: &[&str]) -> Vec<String> {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let mut splitter = LineSplitter::new(secrets);
        let mut out = Vec::new();
        for chunk in input.chunks(size.max(1)) {
            splitter.push(chunk, &mut out);
        }
        splitter.finish(&mut out);
        out
    }

    fn lines_of(input: &[u8], secrets: &[&str]) -> Vec<String> {
        let whole = split(input, input.len(), secrets);
        // However the output arrives, the lines are the same.
        for size in [1, 7, 4096, MAX_LINE_BYTES + 3] {
            assert_eq!(split(input, size, secrets), whole, "chunks of {size}");
        }
        whole
    }

    #[test]
    fn long_lines_are_split_without_losing_bytes_or_unmasking() {
        assert_eq!(lines_of(b"a\nb\r\n\nlast", &[]), ["a", "b", "", "last"]);
        assert!(lines_of(b"", &[]).is_empty());
        // An endless line becomes bounded lines that add up to the input.
        let long = "x".repeat(MAX_LINE_BYTES * 2 + 10);
        let got = lines_of(format!("{long}\nend\n").as_bytes(), &[]);
        assert!(got.iter().all(|l| l.len() <= MAX_LINE_BYTES));
        assert_eq!(got[..got.len() - 1].concat(), long);
        assert_eq!(got.last().unwrap(), "end");
        // A secret across every possible cut is masked whole.
        let secret = "s3cr3t-v4lue";
        for offset in 0..secret.len() + 2 {
            let mut line = "y".repeat(MAX_LINE_BYTES - offset);
            line.push_str(secret);
            line.push_str("zz");
            let got = split(line.as_bytes(), 1000, &[secret]);
            let all = got.concat();
            assert!(!all.contains("s3cr"), "offset {offset}");
            assert!(!all.contains("v4lue"), "offset {offset}");
            assert!(all.contains("********"), "offset {offset}");
        }
        // Multi-byte characters are not cut in half.
        // (one ASCII byte first, so the byte limit falls inside a character)
        let wide = format!("a{}", "é".repeat(MAX_LINE_BYTES));
        let got = split(wide.as_bytes(), 999, &[]);
        assert!(got.iter().all(|l| !l.contains('\u{FFFD}')));
        assert_eq!(got.concat(), wide);
    }

    #[test]
    fn masking() {
        let secrets = vec!["hunter2".to_string(), "a\nbc".to_string()];
        assert_eq!(mask("pw=hunter2!", &secrets), "pw=********!");
        assert_eq!(mask("bc and a", &secrets), "******** and a");
        assert_eq!(mask("nothing", &secrets), "nothing");
    }

    #[tokio::test]
    async fn the_pump_masks_lines_of_a_chunk_stream() {
        let chunks = ["hel", "lo s3", "cret\nsec", "ond\nno newline"]
            .map(|c| Bytes::from_static(c.as_bytes()));
        let output: Output = futures_util::stream::iter(chunks).boxed();
        let (tx, mut rx) = mpsc::unbounded_channel();
        pump(output, vec!["s3cret".into()], tx).await;
        let mut got = Vec::new();
        while let Some((_, line)) = rx.recv().await {
            got.push(line);
        }
        assert_eq!(got, ["hello ********", "second", "no newline"]);
    }

    #[tokio::test]
    async fn the_pump_stops_when_nobody_listens() {
        let output: Output = futures_util::stream::repeat(Bytes::from_static(b"y\n")).boxed();
        let (tx, rx) = mpsc::unbounded_channel();
        drop(rx);
        // An endless stream: returns only because the receiver is gone.
        pump(output, Vec::new(), tx).await;
    }
}
