//! A log line as HTML: its text escaped (log text is anyone's: a pipeline author's, a
//! dependency's), its ANSI colours and weights as `<span class>`es the stylesheet colours,
//! every other escape sequence and control character dropped.
//!
//! Classes: `f0`–`f15` foreground, `g0`–`g15` background (the 16 terminal colours; a
//! 256-colour index below 16 maps to them, others and true colours are left plain), `b`
//! bold, `d` dim, `i` italic, `u` underline.

use crate::http::browser::push_escaped;

/// The display state SGR sequences change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Style {
    fg: Option<u8>,
    bg: Option<u8>,
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
}

impl Style {
    fn is_plain(&self) -> bool {
        *self == Style::default()
    }

    fn classes(&self) -> String {
        let mut c = Vec::new();
        let fg = self.fg.map(|n| format!("f{n}"));
        let bg = self.bg.map(|n| format!("g{n}"));
        c.extend(fg.as_deref());
        c.extend(bg.as_deref());
        for (on, name) in [
            (self.bold, "b"),
            (self.dim, "d"),
            (self.italic, "i"),
            (self.underline, "u"),
        ] {
            if on {
                c.push(name);
            }
        }
        c.join(" ")
    }

    /// Applies one SGR sequence's parameters (`1;31`, `38;5;9`, `` = reset).
    fn apply(&mut self, params: &str) {
        let codes: Vec<u16> = params
            .split([';', ':'])
            .map(|p| p.parse().unwrap_or(0))
            .collect();
        let mut i = 0;
        while i < codes.len() {
            match codes[i] {
                0 => *self = Style::default(),
                1 => self.bold = true,
                2 => self.dim = true,
                3 => self.italic = true,
                4 => self.underline = true,
                22 => (self.bold, self.dim) = (false, false),
                23 => self.italic = false,
                24 => self.underline = false,
                n @ 30..=37 => self.fg = Some((n - 30) as u8),
                n @ 90..=97 => self.fg = Some((n - 90 + 8) as u8),
                39 => self.fg = None,
                n @ 40..=47 => self.bg = Some((n - 40) as u8),
                n @ 100..=107 => self.bg = Some((n - 100 + 8) as u8),
                49 => self.bg = None,
                n @ (38 | 48) => {
                    // 38;5;N (256 colours) or 38;2;R;G;B (true colour).
                    let colour = match codes.get(i + 1) {
                        Some(5) => {
                            let index = codes.get(i + 2).copied();
                            i += 2;
                            index.filter(|n| *n < 16).map(|n| n as u8)
                        }
                        Some(2) => {
                            i += 4;
                            None
                        }
                        _ => None,
                    };
                    if n == 38 {
                        self.fg = colour;
                    } else {
                        self.bg = colour;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// One log line (bytes as stored; invalid UTF-8 shown as U+FFFD) as HTML. A carriage return
/// starts the line over, as on a terminal: what follows the last one is shown.
pub fn line_to_html(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let text = text.trim_end_matches(['\r', '\n']);
    let text = text.rsplit('\r').next().unwrap_or(text);
    let mut out = String::with_capacity(text.len() + 16);
    let mut style = Style::default();
    let mut open = false;
    let mut rest = text;
    while !rest.is_empty() {
        let (plain, after) = match rest.find('\x1b') {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        if !plain.is_empty() {
            if !open && !style.is_plain() {
                out.push_str("<span class=\"");
                out.push_str(&style.classes());
                out.push_str("\">");
                open = true;
            }
            push_escaped(&mut out, plain);
        }
        let Some(after) = after else { break };
        let (sgr, next) = escape_sequence(after);
        if let Some(params) = sgr {
            let before = style;
            style.apply(params);
            if open && style != before {
                out.push_str("</span>");
                open = false;
            }
        }
        rest = next;
    }
    if open {
        out.push_str("</span>");
    }
    out
}

/// The escape sequence at the start of `s` (just past an ESC): the parameters if it is an
/// SGR (`[…m`), and what follows it. CSI sequences end at their final byte, OSC ones at BEL
/// or ST; any other escape takes one character.
fn escape_sequence(s: &str) -> (Option<&str>, &str) {
    if let Some(csi) = s.strip_prefix('[') {
        let end = csi
            .char_indices()
            .find(|(_, c)| ('\u{40}'..='\u{7e}').contains(c));
        return match end {
            Some((at, 'm')) => (Some(&csi[..at]), &csi[at + 1..]),
            Some((at, c)) => (None, &csi[at + c.len_utf8()..]),
            None => (None, ""),
        };
    }
    if let Some(osc) = s.strip_prefix(']') {
        let end = osc
            .find('\x07')
            .map(|at| at + 1)
            .or_else(|| osc.find("\x1b\\").map(|at| at + 2));
        return (None, end.map_or("", |at| &osc[at..]));
    }
    let mut chars = s.chars();
    chars.next();
    (None, chars.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn html(s: &str) -> String {
        line_to_html(s.as_bytes())
    }

    #[test]
    fn colours_become_classes_and_text_is_escaped() {
        assert_eq!(html("plain"), "plain");
        assert_eq!(
            html("\x1b[31mred\x1b[0m done"),
            "<span class=\"f1\">red</span> done"
        );
        assert_eq!(
            html("\x1b[1;92;44mok\x1b[39m!"),
            "<span class=\"f10 g4 b\">ok</span><span class=\"g4 b\">!</span>"
        );
        assert_eq!(html("\x1b[38;5;9mx\x1b[m"), "<span class=\"f9\">x</span>");
        assert_eq!(html("\x1b[38;2;1;2;3mx"), "x", "true colour is left plain");
        assert_eq!(
            html("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(
            html("\x1b[31m<img src=x onerror=alert(1)>"),
            "<span class=\"f1\">&lt;img src=x onerror=alert(1)&gt;</span>"
        );
    }

    #[test]
    fn other_sequences_and_controls_are_dropped() {
        assert_eq!(html("a\x1b[2Kb\x1b[1Gc"), "abc");
        assert_eq!(html("\x1b]0;title\x07text"), "text");
        assert_eq!(html("\x1b]8;;http://x\x1b\\link"), "link");
        assert_eq!(html("trailing\x1b["), "trailing");
        assert_eq!(html("x\x1b"), "x");
        assert_eq!(html("bell\x07 nul\0"), "bell nul");
        assert_eq!(html("10%\r50%\r100%"), "100%");
        assert_eq!(html("line\r\n"), "line");
        assert_eq!(line_to_html(b"bad \xff byte"), "bad \u{fffd} byte");
        assert_eq!(html("\x1b[31m\x1b[0m"), "", "no empty spans");
    }
}
