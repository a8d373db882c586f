//! `${VAR}` substitution in the config text, before it is parsed, with the forms and results
//! of `drone/envsubst`, which Woodpecker runs over every config.
//!
//! Every workflow's file text is expanded with the run's variables (`CI_*`, the workflow's
//! matrix values, pipeline variables). What is expanded, exactly as upstream:
//! - only the braced form `${…}`: a bare `$NAME`, `$(cmd)` or a lone `$` stays as written, so
//!   `export PATH=$(go env GOPATH)/bin:$PATH` reaches the shell untouched;
//! - `$$` is a literal `$` (so `$${HOME}` leaves `${HOME}` for the shell);
//! - `${NAME}`; `${#NAME}` (length); `${NAME^}`, `${NAME^^}`, `${NAME,}`, `${NAME,,}` (case);
//!   `${NAME:pos}`, `${NAME:pos:len}` (substring; a negative `pos` counts from the end);
//!   `${NAME#glob}`, `${NAME##glob}`, `${NAME%glob}`, `${NAME%%glob}` (shortest or longest
//!   prefix or suffix matching a `path.Match` glob removed); `${NAME/old/new}`,
//!   `${NAME//old/new}`, `${NAME/#old/new}`, `${NAME/%old/new}` (literal replacement; in
//!   these two arguments `$$`, `\\` and `\/` are escapes);
//! - `${NAME=word}` and `${NAME:=word}`, `${NAME:-word}`, `${NAME:?word}`, `${NAME:+word}`: all
//!   of them give `word` when the value is empty and the value otherwise (upstream's
//!   `toDefault` for every one); `word` may hold `${…}` forms, expanded too.
//!
//! An unknown variable is empty. A value containing a newline is inserted as a double-quoted
//! string (upstream quotes it with Go's `%q` before any function sees it), so a multi-line
//! value cannot break the YAML structure. A malformed `${…}` is an error naming its line.

use std::collections::BTreeMap;

/// Why a text could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstError {
    #[error("unterminated `${{` (a `${{` without its `}}`) on line {line}")]
    Unterminated { line: usize },
    #[error("bad substitution `${{{expr}}}` on line {line}: {reason}")]
    Bad {
        expr: String,
        line: usize,
        reason: &'static str,
    },
}

/// Most nested `${…}` inside one another we expand.
const MAX_NESTING: usize = 16;

/// Expand `text` with `vars`.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> Result<String, SubstError> {
    let mut s = Scanner {
        chars: text.chars().collect(),
        pos: 0,
        line: 1,
        vars,
    };
    let mut out = String::with_capacity(text.len());
    while let Some(c) = s.peek(0) {
        match (c, s.peek(1)) {
            ('$', Some('$')) => {
                out.push('$');
                s.pos += 2;
            }
            ('$', Some('{')) => {
                let start = s.pos;
                s.pos += 2;
                let value = s.func(0, start)?;
                out.push_str(&value);
            }
            _ => {
                s.bump();
                out.push(c);
            }
        }
    }
    Ok(out)
}

struct Scanner<'a> {
    chars: Vec<char>,
    pos: usize,
    /// The line of `pos`, for errors.
    line: usize,
    vars: &'a BTreeMap<String, String>,
}

impl Scanner<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        if c == '\n' {
            self.line += 1;
        }
        self.pos += 1;
        Some(c)
    }

    fn at_open(&self) -> bool {
        self.peek(0) == Some('$') && self.peek(1) == Some('{')
    }

    fn bad(&self, start: usize, reason: &'static str) -> SubstError {
        let closed_on_this_line = self.chars[self.pos.min(self.chars.len())..]
            .iter()
            .take_while(|&&c| c != '\n')
            .any(|&c| c == '}');
        if !closed_on_this_line {
            return SubstError::Unterminated { line: self.line };
        }
        let end = (self.pos + 1).min(self.chars.len());
        SubstError::Bad {
            expr: self.chars[start + 2..end].iter().take(80).collect(),
            line: self.line,
            reason,
        }
    }

    /// A variable's value as the functions see it: empty when unknown, Go-quoted when it
    /// holds a newline.
    fn value(&self, name: &str) -> String {
        let v = self.vars.get(name).map(String::as_str).unwrap_or("");
        if v.contains('\n') {
            go_quote(v)
        } else {
            v.to_string()
        }
    }

    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek(0).filter(|c| c.is_alphanumeric() || *c == '_') {
            name.push(c);
            self.pos += 1;
        }
        name
    }

    fn close(&mut self, start: usize) -> Result<(), SubstError> {
        if self.peek(0) == Some('}') {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.bad(start, "missing closing brace"))
        }
    }

    /// The inside of a `${…}` whose `${` (at `start`) was consumed, evaluated.
    fn func(&mut self, depth: usize, start: usize) -> Result<String, SubstError> {
        if depth > MAX_NESTING {
            return Err(self.bad(start, "nested too deeply"));
        }
        if self.peek(0) == Some('#') {
            self.pos += 1;
            let name = self.name();
            if name.is_empty() {
                return Err(self.bad(start, "a variable name must follow `#`"));
            }
            self.close(start)?;
            return Ok(self.value(&name).len().to_string());
        }
        let name = self.name();
        if name.is_empty() {
            return Err(self.bad(start, "unable to parse variable name"));
        }
        let v = self.value(&name);
        match self.peek(0) {
            Some(':') if matches!(self.peek(1), Some('=' | '-' | '?' | '+')) => {
                self.pos += 2;
                self.default(v, depth, start)
            }
            Some(':') => {
                self.pos += 1;
                let pos = self.param(&[':', '}'], false, depth, start)?;
                if self.peek(0) == Some(':') {
                    self.pos += 1;
                    let len = self.param(&['}'], false, depth, start)?;
                    self.close(start)?;
                    return Ok(substring(&v, &pos, Some(&len)));
                }
                self.close(start)?;
                Ok(substring(&v, &pos, None))
            }
            Some('=') => {
                self.pos += 1;
                self.default(v, depth, start)
            }
            Some(',' | '^') => {
                let mut op = String::new();
                while op.len() < 2
                    && let Some(c @ (',' | '^')) = self.peek(0)
                {
                    op.push(c);
                    self.pos += 1;
                }
                self.close(start)?;
                Ok(match op.as_str() {
                    "," => first_char(&v, false),
                    ",," => v.to_lowercase(),
                    "^" => first_char(&v, true),
                    "^^" => v.to_uppercase(),
                    _ => v,
                })
            }
            Some('/') => {
                self.pos += 1;
                let mode = match self.peek(0) {
                    Some(c @ ('/' | '#' | '%')) => {
                        self.pos += 1;
                        c
                    }
                    _ => '1',
                };
                let old = self.param(&['/'], true, depth, start)?;
                if self.peek(0) != Some('/') {
                    return Err(self.bad(start, "expected `/` between pattern and replacement"));
                }
                self.pos += 1;
                let new = if self.peek(0) == Some('}') {
                    None
                } else {
                    Some(self.param(&['}'], true, depth, start)?)
                };
                self.close(start)?;
                Ok(replace(&v, mode, &old, new.as_deref()))
            }
            Some(c @ ('#' | '%')) => {
                self.pos += 1;
                let longest = self.peek(0) == Some(c);
                if longest {
                    self.pos += 1;
                }
                let pattern = self.param(&['}'], false, depth, start)?;
                self.close(start)?;
                Ok(if c == '#' {
                    trim_prefix(&v, &pattern, longest)
                } else {
                    trim_suffix(&v, &pattern, longest)
                })
            }
            _ => {
                self.close(start)?;
                Ok(v)
            }
        }
    }

    /// `word` of a default form, up to the closing brace: the value when it is not empty,
    /// else the word.
    fn default(&mut self, v: String, depth: usize, start: usize) -> Result<String, SubstError> {
        let mut word = String::new();
        while self.peek(0) != Some('}') {
            word.push_str(&self.param(&['}'], false, depth, start)?);
        }
        self.pos += 1;
        Ok(if v.is_empty() { word } else { v })
    }

    /// One argument: a nested `${…}`, or text up to one of `stop` or a `${`. With `escapes`,
    /// `$$`, `\\` and `\/` stand for `$`, `\` and `/`.
    fn param(
        &mut self,
        stop: &[char],
        escapes: bool,
        depth: usize,
        start: usize,
    ) -> Result<String, SubstError> {
        if self.at_open() {
            let inner = self.pos;
            self.pos += 2;
            return self.func(depth + 1, inner);
        }
        let mut text = String::new();
        while let Some(c) = self.peek(0) {
            if stop.contains(&c) || self.at_open() {
                break;
            }
            match (c, self.peek(1)) {
                ('$', Some('$')) | ('\\', Some('\\' | '/')) if escapes => {
                    self.pos += 1;
                }
                _ => {}
            }
            text.push(self.bump().unwrap_or(c));
        }
        if text.is_empty() {
            return Err(self.bad(start, "unable to parse the substitution's argument"));
        }
        Ok(text)
    }
}

/// Double-quoted with Go's `%q` escapes (also a valid YAML double-quoted scalar).
fn go_quote(value: &str) -> String {
    let mut q = String::with_capacity(value.len() + 2);
    q.push('"');
    for c in value.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => q.push_str(&format!("\\x{:02x}", c as u32 & 0xff)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

fn first_char(v: &str, upper: bool) -> String {
    let mut chars = v.chars();
    match chars.next() {
        None => String::new(),
        Some(c) if upper => c.to_uppercase().chain(chars).collect(),
        Some(c) => c.to_lowercase().chain(chars).collect(),
    }
}

/// `${v:pos}` / `${v:pos:len}` as upstream: a position that is not a number gives the value
/// unchanged, a negative one counts from the end; past the end is empty.
fn substring(v: &str, pos: &str, len: Option<&str>) -> String {
    let chars: Vec<char> = v.chars().collect();
    let Ok(pos) = pos.parse::<i64>() else {
        return v.to_string();
    };
    let n = chars.len() as i64;
    let pos = if pos < 0 { (n + pos).max(0) } else { pos };
    if pos >= n {
        return String::new();
    }
    let end = match len {
        None => n,
        Some(len) => match len.parse::<i64>() {
            Ok(len) => (pos + len).clamp(pos, n),
            Err(_) => return v.to_string(),
        },
    };
    chars[pos as usize..end as usize].iter().collect()
}

/// `${v/old/new}` (`mode` `1`), `//` (`/`: all), `/#` (prefix) and `/%` (suffix).
fn replace(v: &str, mode: char, old: &str, new: Option<&str>) -> String {
    match (mode, new) {
        ('/', new) => v.replace(old, new.unwrap_or("")),
        ('1', new) => v.replacen(old, new.unwrap_or(""), 1),
        // Upstream changes nothing for a prefix or suffix form without a replacement.
        (_, None) => v.to_string(),
        ('#', Some(new)) => match v.strip_prefix(old) {
            Some(rest) => format!("{new}{rest}"),
            None => v.to_string(),
        },
        (_, Some(new)) => match v.strip_suffix(old) {
            Some(rest) => format!("{rest}{new}"),
            None => v.to_string(),
        },
    }
}

/// `v` without the shortest (or longest) prefix matching `pattern`.
fn trim_prefix(v: &str, pattern: &str, longest: bool) -> String {
    let chars: Vec<char> = v.chars().collect();
    let pattern: Vec<char> = pattern.chars().collect();
    let mut cut = None;
    // Longest first, as upstream tries them; the shortest is the last match.
    for end in (1..=chars.len()).rev() {
        match glob_match(&pattern, &chars[..end]) {
            Err(()) => return v.to_string(),
            Ok(true) => {
                cut = Some(end);
                if longest {
                    break;
                }
            }
            Ok(false) => {}
        }
    }
    match cut {
        Some(end) => chars[end..].iter().collect(),
        None => v.to_string(),
    }
}

/// `v` without the shortest (or longest) suffix matching `pattern` (upstream matches the
/// reversed pattern against the reversed value).
fn trim_suffix(v: &str, pattern: &str, longest: bool) -> String {
    let reversed: String = v.chars().rev().collect();
    let pattern: String = pattern.chars().rev().collect();
    trim_prefix(&reversed, &pattern, longest)
        .chars()
        .rev()
        .collect()
}

/// Go's `path.Match`: `*` any run of non-`/` characters, `?` one non-`/` character,
/// `[…]` / `[^…]` a class with ranges, `\` an escape. A malformed pattern is `Err`.
fn glob_match(pattern: &[char], name: &[char]) -> Result<bool, ()> {
    let (mut p, mut n) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, name index).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            match pattern[p] {
                '*' => {
                    star = Some((p + 1, n));
                    p += 1;
                    continue;
                }
                c if n < name.len() => {
                    let (matched, next) = match c {
                        '?' => (name[n] != '/', p + 1),
                        '[' => class(pattern, p, name[n])?,
                        '\\' => {
                            let escaped = *pattern.get(p + 1).ok_or(())?;
                            (name[n] == escaped, p + 2)
                        }
                        c => (name[n] == c, p + 1),
                    };
                    if matched {
                        p = next;
                        n += 1;
                        continue;
                    }
                }
                _ => {}
            }
        } else if n == name.len() {
            return Ok(true);
        }
        // Mismatch: let the last `*` take one more character (never a `/`).
        match star {
            Some((after, taken)) if taken < name.len() && name[taken] != '/' => {
                star = Some((after, taken + 1));
                p = after;
                n = taken + 1;
            }
            _ => {
                // Go checks the rest of the pattern for syntax even on a mismatch.
                check_syntax(&pattern[p.min(pattern.len())..])?;
                return Ok(false);
            }
        }
    }
}

/// The `[…]` class at `pattern[at]` against `c`: whether it matches, and the index after it.
fn class(pattern: &[char], at: usize, c: char) -> Result<(bool, usize), ()> {
    let mut i = at + 1;
    let negated = pattern.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let lo = match pattern.get(i) {
            None => return Err(()),
            Some(']') if !first => break,
            Some('\\') => {
                i += 1;
                *pattern.get(i).ok_or(())?
            }
            Some(&lo) => lo,
        };
        first = false;
        i += 1;
        let hi = if pattern.get(i) == Some(&'-') && pattern.get(i + 1).is_some_and(|&h| h != ']') {
            i += 1;
            let hi = match pattern[i] {
                '\\' => {
                    i += 1;
                    *pattern.get(i).ok_or(())?
                }
                hi => hi,
            };
            i += 1;
            hi
        } else {
            lo
        };
        if lo <= c && c <= hi {
            matched = true;
        }
    }
    Ok((matched != negated, i + 1))
}

/// `Err` when the rest of a pattern is malformed (an unclosed class or a trailing `\`).
fn check_syntax(pattern: &[char]) -> Result<(), ()> {
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            '\\' => {
                pattern.get(i + 1).ok_or(())?;
                i += 2;
            }
            '[' => i = class(pattern, i, '\0')?.1,
            _ => i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [
            ("GO", "1.22"),
            ("NAME", "Woodlark"),
            ("BRANCH", "feature/x"),
            ("FILE", "archive.tar.gz"),
            ("EMPTY", ""),
            ("MULTI", "a\nb \"c\""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Expected results as `drone/envsubst` gives them.
    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("image: golang:${GO}", "image: golang:1.22"),
            // Only the braced form is expanded.
            ("$GO-$NAME", "$GO-$NAME"),
            (
                "export PATH=$(go env GOPATH)/bin:$PATH",
                "export PATH=$(go env GOPATH)/bin:$PATH",
            ),
            ("echo $${HOME} $$PATH $$", "echo ${HOME} $PATH $"),
            ("${MISSING}x", "x"),
            ("cost: 5$ or $ alone or $", "cost: 5$ or $ alone or $"),
            (
                "${NAME^^} ${NAME,,} ${NAME^} ${NAME,}",
                "WOODLARK woodlark Woodlark woodlark",
            ),
            ("${#NAME} ${#MISSING}", "8 0"),
            ("${NAME:4} ${NAME:0:4} ${NAME:-3}", "lark Wood Woodlark"),
            ("${NAME:20} ${NAME:x} ${NAME:2:x}", " Woodlark Woodlark"),
            ("${BRANCH#feature/} ${BRANCH%/x}", "x feature"),
            (
                "${FILE#*.} ${FILE##*.} ${FILE%.*} ${FILE%%.*}",
                "tar.gz gz archive.tar archive",
            ),
            ("${FILE#[a-c]r} ${FILE#x*}", "chive.tar.gz archive.tar.gz"),
            (
                "${BRANCH/feature/f} ${BRANCH/e/} ${BRANCH//e/E}",
                "f/x fature/x fEaturE/x",
            ),
            (
                "${BRANCH/#feat/F} ${BRANCH/%x/y} ${BRANCH/#x/y}",
                "Fure/x feature/y feature/x",
            ),
            ("${BRANCH/\\//-}", "feature-x"),
            // Every default form: the word when the value is empty.
            (
                "${MISSING:-dflt} ${EMPTY:-e} ${EMPTY=keep} ${MISSING=m} ${GO=no}",
                "dflt e keep m 1.22",
            ),
            (
                "${EMPTY:+p} ${GO:+p} ${EMPTY:?q} ${MISSING:=r}",
                "p 1.22 q r",
            ),
            ("${MISSING:-${GO}} ${MISSING:-v${GO}-x}", "1.22 v1.22-x"),
            (
                "image: repo/app:${CI_COMMIT_TAG=latest}",
                "image: repo/app:latest",
            ),
            (
                "image: repo/app:${CI_COMMIT_TAG:-dev-${GO}}",
                "image: repo/app:dev-1.22",
            ),
            ("v: ${MULTI}", "v: \"a\\nb \\\"c\\\"\""),
        ];
        for (input, want) in cases {
            assert_eq!(substitute(input, &vars()).unwrap(), *want, "{input}");
        }
    }

    #[test]
    fn errors() {
        assert_eq!(
            substitute("a\nb ${GO", &vars()),
            Err(SubstError::Unterminated { line: 2 })
        );
        for bad in [
            "${GO?x}", "${}", "${GO:}", "${GO/x}", "${#}", "${-x}", "${GO x}",
        ] {
            assert!(substitute(bad, &vars()).is_err(), "{bad}");
        }
        let deep = "${A:-".repeat(40) + &"}".repeat(40);
        assert!(substitute(&deep, &vars()).is_err());
    }

    #[test]
    fn globs_as_go_path_match() {
        let m = |p: &str, n: &str| {
            glob_match(
                &p.chars().collect::<Vec<_>>(),
                &n.chars().collect::<Vec<_>>(),
            )
        };
        assert_eq!(m("a*", "abc"), Ok(true));
        assert_eq!(m("a*", "a/c"), Ok(false));
        assert_eq!(m("a?c", "abc"), Ok(true));
        assert_eq!(m("[^a]bc", "xbc"), Ok(true));
        assert_eq!(m("[a-c]*", "cat"), Ok(true));
        assert_eq!(m("\\*", "*"), Ok(true));
        assert_eq!(m("[a", "a"), Err(()));
        assert_eq!(m("x[", "y"), Err(()));
    }
}
