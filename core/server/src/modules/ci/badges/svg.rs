//! The flat, shields-style SVG badge, byte for byte as upstream draws it: a grey subject
//! ("pipeline", or a workflow's or step's name) beside a coloured status word.
//!
//! Upstream sizes each half by measuring its text in DejaVu Sans, 11 px (its renderer's
//! whole-pixel advances and kerning, plus 5 px), so a badge for a workflow named `lint` is
//! narrower than one for `build: test`. [`text_width`] gives the same widths from tables
//! generated off upstream's renderer (`metrics.rs`, from `metrics.go`): exact for the
//! characters the tables cover (U+0020 to U+052F, kerning between printable ASCII
//! characters); any other character counts as the font's missing-glyph width, which is what
//! upstream gives the characters DejaVu Sans lacks (most scripts outside Latin, Greek and
//! Cyrillic).

use super::metrics::{ADVANCES, FIRST, KERNING, MISSING};
use crate::pipeline::status::Status;

/// What upstream adds to a text's measured width, in pixels.
const PADDING: u32 = 5;

/// The status word and its colour (upstream's mapping: anything not started, finished or
/// failed is "none").
fn word_and_colour(status: Option<Status>) -> (&'static str, &'static str) {
    match status {
        Some(Status::Success) => ("success", "#44cc11"),
        Some(Status::Failure) => ("failure", "#e05d44"),
        Some(Status::Pending | Status::Running) => ("started", "#dfb317"),
        Some(Status::Error | Status::Killed) => ("error", "#9f9f9f"),
        _ => ("none", "#9f9f9f"),
    }
}

/// The width, in pixels, upstream gives `text` in a badge.
pub fn text_width(text: &str) -> u32 {
    let mut width: u32 = 0;
    let mut before = None;
    for c in text.chars() {
        if let Some(b) = before {
            width = width.saturating_add_signed(kerning(b, c).into());
        }
        width = width.saturating_add(advance(c).into());
        before = Some(c);
    }
    width + PADDING
}

fn advance(c: char) -> u8 {
    let index = (c as u32).wrapping_sub(FIRST) as usize;
    ADVANCES.get(index).copied().unwrap_or(MISSING)
}

fn kerning(a: char, b: char) -> i8 {
    let (Ok(a), Ok(b)) = (u8::try_from(a), u8::try_from(b)) else {
        return 0;
    };
    KERNING
        .binary_search_by(|&(x, y, _)| (x, y).cmp(&(a, b)))
        .map_or(0, |i| KERNING[i].2)
}

/// `12.5` or `12`: the shortest form, as upstream prints the text's centre.
fn number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// `text` escaped as upstream's template escapes it (Go's `html`).
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// The badge of `subject` (upstream: "pipeline" unless a workflow or step was asked for)
/// showing `status` (`None`: no pipeline, or none of the workflow or step asked for).
pub fn render(subject: &str, status: Option<Status>) -> String {
    let (word, colour) = word_and_colour(status);
    let left = text_width(subject);
    let right = text_width(word);
    let total = left + right;
    let left_x = number(f64::from(left) / 2.0 + 1.0);
    let right_x = number(f64::from(left) + f64::from(right) / 2.0 - 1.0);
    let subject = escaped(subject);
    format!(
        concat!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="{total}" height="20">"##,
            r##"<linearGradient id="smooth" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>"##,
            r##"<mask id="round"><rect width="{total}" height="20" rx="3" fill="#fff"/></mask>"##,
            r##"<g mask="url(#round)"><rect width="{left}" height="20" fill="#555"/><rect x="{left}" width="{right}" height="20" fill="{colour}"/><rect width="{total}" height="20" fill="url(#smooth)"/></g>"##,
            r##"<g fill="#fff" text-anchor="middle" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11">"##,
            r##"<text x="{left_x}" y="15" fill="#010101" fill-opacity=".3">{subject}</text><text x="{left_x}" y="14">{subject}</text>"##,
            r##"<text x="{right_x}" y="15" fill="#010101" fill-opacity=".3">{word}</text><text x="{right_x}" y="14">{word}</text></g></svg>"##
        ),
        total = total,
        left = left,
        right = right,
        colour = colour,
        left_x = left_x,
        right_x = right_x,
        subject = subject,
        word = word,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Widths upstream's renderer gives these texts (`font.MeasureString` on its face, plus
    /// 5), measured with the program in `metrics.go` run on the same font.
    #[test]
    fn widths_are_upstreams() {
        for (text, width) in [
            ("pipeline", 49),
            ("none", 33),
            ("success", 49),
            ("failure", 40),
            ("started", 45),
            ("error", 32),
            ("build: test", 61),
            ("lint", 22),
            ("Ünïcödé", 50),
            ("AVATAR", 44),
            ("To", 14),
            ("a<b>&'\"+", 63),
            ("", 5),
        ] {
            assert_eq!(text_width(text), width, "{text:?}");
        }
        // Characters the font lacks take its missing glyph's 7 px; so do control characters.
        assert_eq!(text_width("构建"), 5 + 14);
        assert_eq!(text_width("a\u{1}"), text_width("a") + 7);
    }

    #[test]
    fn the_five_badges_match_upstreams_geometry() {
        let s = render("pipeline", Some(Status::Failure));
        assert!(s.contains(r#"width="89" height="20""#));
        assert!(s.contains(r#"<text x="68" y="14">failure</text>"#));
        assert!(render("pipeline", Some(Status::Running)).contains(">started<"));
        assert!(render("pipeline", Some(Status::Blocked)).contains(">none<"));
        assert!(render("pipeline", None).contains(r#"<text x="64.5" y="14">none</text>"#));
    }

    /// Upstream's rendering of a step's badge (its template and renderer, run on these
    /// values), to the byte.
    #[test]
    fn a_steps_badge_is_upstreams() {
        let expected = concat!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="110" height="20">"##,
            r##"<linearGradient id="smooth" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>"##,
            r##"<mask id="round"><rect width="110" height="20" rx="3" fill="#fff"/></mask>"##,
            r##"<g mask="url(#round)"><rect width="61" height="20" fill="#555"/><rect x="61" width="49" height="20" fill="#44cc11"/><rect width="110" height="20" fill="url(#smooth)"/></g>"##,
            r##"<g fill="#fff" text-anchor="middle" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11">"##,
            r##"<text x="31.5" y="15" fill="#010101" fill-opacity=".3">build: test</text><text x="31.5" y="14">build: test</text>"##,
            r##"<text x="84.5" y="15" fill="#010101" fill-opacity=".3">success</text><text x="84.5" y="14">success</text></g></svg>"##
        );
        assert_eq!(render("build: test", Some(Status::Success)), expected);
    }

    #[test]
    fn a_subject_is_escaped_as_upstreams_template_does() {
        let s = render("a<b>&'\"+\0", None);
        assert!(
            s.contains(">a&lt;b&gt;&amp;&#39;&#34;+\u{FFFD}</text>"),
            "{s}"
        );
        // The width is the text's, not its escaped form's.
        assert!(s.contains(&format!(
            r##"<rect width="{}" height="20" fill="#555"/>"##,
            text_width("a<b>&'\"+\0")
        )));
    }
}
