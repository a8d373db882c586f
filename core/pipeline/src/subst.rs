//! `${VAR}` substitution in the config text, before it is parsed (as Woodpecker does with
//! `drone/envsubst`).
//!
//! Every workflow's file text is expanded with the run's variables (`CI_*`, the workflow's
//! matrix values, pipeline variables). That is why a shell variable in `commands:` must be
//! written `$${HOME}` or `$$HOME`: `$$` is the escape for a literal `$`.
//!
//! Supported: `$NAME`, `${NAME}`, `${#NAME}` (length), `${NAME^}`/`${NAME^^}` (upper-case first
//! or all), `${NAME,}`/`${NAME,,}` (lower-case), `${NAME:pos}`/`${NAME:pos:len}`,
//! `${NAME#pre}`/`${NAME##pre}`, `${NAME%suf}`/`${NAME%%suf}` (literal prefix/suffix removal),
//! `${NAME/old/new}`, `${NAME//old/new}`, `${NAME/#old/new}`, `${NAME/%old/new}`,
//! `${NAME=def}`, `${NAME:=def}`, `${NAME:-def}` (the default is expanded too).
//! Unknown variables expand to the empty string. A `$` not followed by a name or `{` stays.
//! A value containing a newline is inserted as a double-quoted string, so it cannot break the
//! YAML structure (upstream does the same with Go's `%q`).

use std::collections::BTreeMap;

/// Why a text could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstError {
    #[error("unterminated `${{` (a `${{` without its `}}`) on line {line}")]
    Unterminated { line: usize },
    #[error("bad substitution `${{{expr}}}` on line {line}")]
    Bad { expr: String, line: usize },
}

/// Most nested defaults (`${A:-${B:-${C}}}`) we expand.
const MAX_NESTING: usize = 16;

/// Expand `text` with `vars`.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> Result<String, SubstError> {
    expand(text, vars, 0, 1)
}

fn is_name_char(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric()
}

fn expand(
    text: &str,
    vars: &BTreeMap<String, String>,
    depth: usize,
    first_line: usize,
) -> Result<String, SubstError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut line = first_line;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
        }
        if c != '$' {
            out.push(c);
            i += 1;
            continue;
        }
        match chars.get(i + 1) {
            Some('$') => {
                out.push('$');
                i += 2;
            }
            Some('{') => {
                // Find the matching `}` (braces nest through defaults).
                let mut depth_here = 0usize;
                let mut j = i + 2;
                let mut close = None;
                while j < chars.len() {
                    match chars[j] {
                        '{' => depth_here += 1,
                        '}' if depth_here == 0 => {
                            close = Some(j);
                            break;
                        }
                        '}' => depth_here -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                let Some(close) = close else {
                    return Err(SubstError::Unterminated { line });
                };
                let inner: String = chars[i + 2..close].iter().collect();
                let value = braced(&inner, vars, depth, line)?;
                push_value(&mut out, &value);
                line += inner.matches('\n').count();
                i = close + 1;
            }
            Some(&n) if is_name_char(n) => {
                let mut j = i + 1;
                while j < chars.len() && is_name_char(chars[j]) {
                    j += 1;
                }
                let name: String = chars[i + 1..j].iter().collect();
                push_value(&mut out, vars.get(&name).map(String::as_str).unwrap_or(""));
                i = j;
            }
            _ => {
                out.push('$');
                i += 1;
            }
        }
    }
    Ok(out)
}

fn push_value(out: &mut String, value: &str) {
    if value.contains('\n') {
        out.push_str(&go_quote(value));
    } else {
        out.push_str(value);
    }
}

/// Double-quoted with Go-like escapes (a valid YAML double-quoted scalar).
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

/// Evaluate the inside of `${…}`.
fn braced(
    inner: &str,
    vars: &BTreeMap<String, String>,
    depth: usize,
    line: usize,
) -> Result<String, SubstError> {
    let bad = || SubstError::Bad {
        expr: inner.chars().take(80).collect(),
        line,
    };
    if depth > MAX_NESTING {
        return Err(bad());
    }
    if let Some(name) = inner.strip_prefix('#')
        && !name.is_empty()
        && name.chars().all(is_name_char)
    {
        let len = vars.get(name).map(|v| v.chars().count()).unwrap_or(0);
        return Ok(len.to_string());
    }
    let name_len = inner
        .char_indices()
        .find(|&(_, c)| !is_name_char(c))
        .map(|(i, _)| i)
        .unwrap_or(inner.len());
    if name_len == 0 {
        return Err(bad());
    }
    let (name, op) = inner.split_at(name_len);
    let value = vars.get(name).map(String::as_str);
    let v = value.unwrap_or("");
    let expand_default = |d: &str| expand(d, vars, depth + 1, line);
    Ok(match op {
        "" => v.to_string(),
        "^^" => v.to_uppercase(),
        ",," => v.to_lowercase(),
        "^" => first_char(v, true),
        "," => first_char(v, false),
        _ if op.starts_with(":-") || op.starts_with(":=") => {
            if v.is_empty() {
                expand_default(&op[2..])?
            } else {
                v.to_string()
            }
        }
        _ if op.starts_with('=') => match value {
            Some(v) => v.to_string(),
            None => expand_default(&op[1..])?,
        },
        _ if op.starts_with(':') => substring(v, &op[1..]).ok_or_else(bad)?,
        _ if op.starts_with("##") || op.starts_with('#') => {
            let pre = op.trim_start_matches('#');
            v.strip_prefix(pre).unwrap_or(v).to_string()
        }
        _ if op.starts_with("%%") || op.starts_with('%') => {
            let suf = op.trim_start_matches('%');
            v.strip_suffix(suf).unwrap_or(v).to_string()
        }
        _ if op.starts_with('/') => replace(v, &op[1..]),
        _ => return Err(bad()),
    })
}

fn first_char(v: &str, upper: bool) -> String {
    let mut chars = v.chars();
    match chars.next() {
        None => String::new(),
        Some(c) if upper => c.to_uppercase().chain(chars).collect(),
        Some(c) => c.to_lowercase().chain(chars).collect(),
    }
}

/// `pos` or `pos:len`, both non-negative integers.
fn substring(v: &str, spec: &str) -> Option<String> {
    let (pos, len) = match spec.split_once(':') {
        Some((p, l)) => (
            p.trim().parse::<usize>().ok()?,
            Some(l.trim().parse::<usize>().ok()?),
        ),
        None => (spec.trim().parse::<usize>().ok()?, None),
    };
    let rest = v.chars().skip(pos);
    Some(match len {
        Some(len) => rest.take(len).collect(),
        None => rest.collect(),
    })
}

/// `old/new`, `/old/new` (all), `#old/new` (prefix), `%old/new` (suffix).
fn replace(v: &str, spec: &str) -> String {
    let (mode, spec) = match spec.chars().next() {
        Some('/') => ('a', &spec[1..]),
        Some('#') => ('p', &spec[1..]),
        Some('%') => ('s', &spec[1..]),
        _ => ('1', spec),
    };
    let (old, new) = spec.split_once('/').unwrap_or((spec, ""));
    if old.is_empty() {
        return v.to_string();
    }
    match mode {
        'a' => v.replace(old, new),
        'p' => match v.strip_prefix(old) {
            Some(rest) => format!("{new}{rest}"),
            None => v.to_string(),
        },
        's' => match v.strip_suffix(old) {
            Some(rest) => format!("{rest}{new}"),
            None => v.to_string(),
        },
        _ => v.replacen(old, new, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [
            ("GO", "1.22"),
            ("NAME", "Woodlark"),
            ("BRANCH", "feature/x"),
            ("EMPTY", ""),
            ("MULTI", "a\nb \"c\""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("image: golang:${GO}", "image: golang:1.22"),
            ("$GO-$NAME", "1.22-Woodlark"),
            ("echo $${HOME} $$PATH $$", "echo ${HOME} $PATH $"),
            ("${MISSING}x", "x"),
            (
                "cost: 5$ or $(cmd) or $ alone",
                "cost: 5$ or $(cmd) or $ alone",
            ),
            (
                "${NAME^^} ${NAME,,} ${NAME^} ${NAME,}",
                "WOODLARK woodlark Woodlark woodlark",
            ),
            ("${#NAME}", "8"),
            ("${NAME:4} ${NAME:0:4}", "lark Wood"),
            ("${BRANCH#feature/} ${BRANCH%/x}", "x feature"),
            ("${BRANCH/feature/f}", "f/x"),
            (
                "${MISSING:-dflt} ${EMPTY:-e} ${EMPTY=keep} ${MISSING=m}",
                "dflt e  m",
            ),
            ("${MISSING:-${GO}}", "1.22"),
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
        assert!(matches!(
            substitute("${GO?x}", &vars()),
            Err(SubstError::Bad { .. })
        ));
        assert!(matches!(
            substitute("${}", &vars()),
            Err(SubstError::Bad { .. })
        ));
        let deep = "${A:-".repeat(40) + &"}".repeat(40);
        assert!(substitute(&deep, &vars()).is_err());
    }
}
