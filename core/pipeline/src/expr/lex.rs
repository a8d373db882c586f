//! Tokens of expr-lang: names, strings (`"…"`, `'…'` with Go escapes, raw `` `…` ``), numbers
//! (`1_000`, `0x1F`, `0o17`, `0b101`, `1.5e3`), `#`-pointers, operators; `//` and `/* */`
//! comments are skipped.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Str(String),
    Int(i64),
    Float(f64),
    /// `#` (empty name) or `#index` inside a predicate.
    Pointer(String),
    Op(&'static str),
}

/// Longest first, so `**` wins over `*` and `?.` over `?`.
const OPS: &[&str] = &[
    "**", "..", "??", "?.", "==", "!=", "<=", ">=", "&&", "||", "=", "!", "<", ">", "+", "-", "*",
    "/", "%", "^", "?", ":", "|", "(", ")", "[", "]", "{", "}", ",", ".", ";",
];

pub(super) fn show(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.clone(),
        Tok::Str(s) => format!("{s:?}"),
        Tok::Int(n) => n.to_string(),
        Tok::Float(n) => n.to_string(),
        Tok::Pointer(p) => format!("#{p}"),
        Tok::Op(o) => (*o).to_string(),
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

pub(super) fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            loop {
                if i + 1 >= chars.len() {
                    return Err("unterminated comment".into());
                }
                if chars[i] == '*' && chars[i + 1] == '/' {
                    i += 2;
                    break;
                }
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            let (s, end) = string(&chars, i)?;
            out.push(Tok::Str(s));
            i = end;
        } else if c.is_ascii_digit() || (c == '.' && next.is_some_and(|d| d.is_ascii_digit())) {
            let (tok, end) = number(&chars, i)?;
            out.push(tok);
            i = end;
        } else if c == '#' {
            let start = i + 1;
            i = start;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            out.push(Tok::Pointer(chars[start..i].iter().collect()));
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let Some(op) = OPS.iter().find(|op| rest.starts_with(**op)) else {
                return Err(format!("unexpected character `{c}`"));
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

/// A string literal starting at `chars[start]` (the quote); returns it and the index after it.
fn string(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let quote = chars[start];
    let mut s = String::new();
    let mut i = start + 1;
    loop {
        let Some(&d) = chars.get(i) else {
            return Err("unterminated string".into());
        };
        i += 1;
        if d == quote {
            return Ok((s, i));
        }
        if d != '\\' || quote == '`' {
            s.push(d);
            continue;
        }
        let Some(&e) = chars.get(i) else {
            return Err("unterminated string".into());
        };
        i += 1;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            s.push(c);
            continue;
        }
        let (len, radix) = match e {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => {
                i -= 1;
                (3, 8)
            }
            _ => return Err(format!("invalid escape `\\{e}` in string")),
        };
        let digits: String = chars.get(i..i + len).unwrap_or_default().iter().collect();
        let code = u32::from_str_radix(&digits, radix)
            .ok()
            .filter(|_| digits.len() == len)
            .ok_or_else(|| format!("invalid escape `\\{e}{digits}` in string"))?;
        i += len;
        if e == 'x' || radix == 8 {
            // Go: \x and octal escapes are bytes; only ASCII ones make sense in a UTF-8 string.
            if code > 0x7f {
                return Err(format!("non-ASCII byte escape `\\{e}{digits}` in string"));
            }
        }
        s.push(
            char::from_u32(code).ok_or_else(|| format!("invalid code point in `\\{e}{digits}`"))?,
        );
    }
}

/// A number literal starting at `chars[start]` (a digit, or `.` before one); integers too big
/// for 64 bits become floats.
fn number(chars: &[char], start: usize) -> Result<(Tok, usize), String> {
    let mut i = start;
    let digit_run = |i: &mut usize, ok: fn(char) -> bool| {
        while *i < chars.len() && (ok(chars[*i]) || chars[*i] == '_') {
            *i += 1;
        }
    };
    let prefixed = chars[start] == '0'
        && matches!(
            chars.get(start + 1),
            Some('x' | 'X' | 'o' | 'O' | 'b' | 'B')
        );
    if prefixed {
        let radix = match chars[start + 1].to_ascii_lowercase() {
            'x' => 16,
            'o' => 8,
            _ => 2,
        };
        i += 2;
        digit_run(&mut i, |c| c.is_ascii_alphanumeric());
        let text: String = chars[start + 2..i].iter().filter(|c| **c != '_').collect();
        let n = i64::from_str_radix(&text, radix).map_err(|_| {
            format!(
                "bad number `{}`",
                chars[start..i].iter().collect::<String>()
            )
        })?;
        return Ok((Tok::Int(n), i));
    }
    digit_run(&mut i, |c| c.is_ascii_digit());
    let mut float = false;
    if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
        float = true;
        i += 1;
        digit_run(&mut i, |c| c.is_ascii_digit());
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if chars.get(j).is_some_and(|c| c.is_ascii_digit()) {
            float = true;
            i = j;
            digit_run(&mut i, |c| c.is_ascii_digit());
        }
    }
    if chars.get(i).is_some_and(|c| is_ident_char(*c)) {
        return Err(format!(
            "bad number `{}`",
            chars[start..=i].iter().collect::<String>()
        ));
    }
    let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
    if let (false, Ok(n)) = (float, text.parse::<i64>()) {
        return Ok((Tok::Int(n), i));
    }
    let f = text
        .parse::<f64>()
        .map_err(|_| format!("bad number `{text}`"))?;
    Ok((Tok::Float(f), i))
}
