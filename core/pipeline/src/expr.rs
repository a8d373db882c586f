//! A small subset of expr-lang, for `when: evaluate:` filters.
//!
//! Woodpecker evaluates `evaluate:` with expr-lang over the run's environment (`CI_*`, matrix
//! values, pipeline variables; all strings, undefined names are `nil`). The expressions people
//! write are comparisons joined by boolean operators, so that is what we support:
//! - literals: `"text"`, `'text'`, numbers, `true`, `false`, `nil`, lists `["a", "b"]`;
//! - names: a variable's value, or `nil` when it is not set;
//! - `==`, `!=`, `<`, `<=`, `>`, `>=` (numbers compare as numbers, strings as strings);
//! - `in` / `not in` (list membership), `contains`, `startsWith`, `endsWith` (strings);
//! - `!`/`not`, `&&`/`and`, `||`/`or`, parentheses.
//!
//! Anything else (function calls, `matches`, arithmetic) is an error naming what is not
//! supported, so a config never silently takes the wrong branch. The result must be a boolean.

use std::collections::BTreeMap;

/// Longest expression we accept.
const MAX_LEN: usize = 4096;
/// Deepest nesting of parentheses / unary operators.
const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq)]
enum V {
    Nil,
    Bool(bool),
    Num(f64),
    Str(String),
    List(Vec<V>),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(f64),
    Op(&'static str),
}

/// Evaluate `source` against `env`; `Err` explains a syntax or type problem.
pub fn evaluate(source: &str, env: &BTreeMap<String, String>) -> Result<bool, String> {
    if source.len() > MAX_LEN {
        return Err("expression too long".into());
    }
    let tokens = lex(source)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        env,
        depth: 0,
    };
    let value = p.or()?;
    if p.pos != p.tokens.len() {
        return Err(format!("unexpected `{}`", show(&p.tokens[p.pos])));
    }
    match value {
        V::Bool(b) => Ok(b),
        other => Err(format!(
            "expression must be true or false, got {}",
            type_name(&other)
        )),
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.clone(),
        Tok::Str(s) => format!("{s:?}"),
        Tok::Num(n) => n.to_string(),
        Tok::Op(o) => (*o).to_string(),
    }
}

fn type_name(v: &V) -> &'static str {
    match v {
        V::Nil => "nil",
        V::Bool(_) => "a boolean",
        V::Num(_) => "a number",
        V::Str(_) => "a string",
        V::List(_) => "a list",
    }
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    const OPS: [&str; 16] = [
        "==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "(", ")", "[", "]", ",", "+", "-",
    ];
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            let mut s = String::new();
            i += 1;
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err("unterminated string".into());
                };
                i += 1;
                if d == c {
                    break;
                }
                if d == '\\' && c != '`' {
                    let Some(&e) = chars.get(i) else {
                        return Err("unterminated string".into());
                    };
                    i += 1;
                    s.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                } else {
                    s.push(d);
                }
            }
            out.push(Tok::Str(s));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            out.push(Tok::Num(
                text.parse().map_err(|_| format!("bad number `{text}`"))?,
            ));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let Some(op) = OPS.iter().find(|op| rest.starts_with(**op)) else {
                return Err(format!("unexpected character `{c}`"));
            };
            i += op.chars().count();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: Vec<Tok>,
    pos: usize,
    env: &'a BTreeMap<String, String>,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Op(o)) if *o == op) {
            self.pos += 1;
            return true;
        }
        false
    }

    fn eat_word(&mut self, word: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident(w)) if w == word) {
            self.pos += 1;
            return true;
        }
        false
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("expression nested too deeply".into());
        }
        Ok(())
    }

    fn or(&mut self) -> Result<V, String> {
        let mut left = self.and()?;
        while self.eat_op("||") || self.eat_word("or") {
            let right = self.and()?;
            left = V::Bool(truthy(&left)? || truthy(&right)?);
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<V, String> {
        let mut left = self.compare()?;
        while self.eat_op("&&") || self.eat_word("and") {
            let right = self.compare()?;
            left = V::Bool(truthy(&left)? && truthy(&right)?);
        }
        Ok(left)
    }

    fn compare(&mut self) -> Result<V, String> {
        let left = self.unary()?;
        let op = match self.peek() {
            Some(Tok::Op(o)) if ["==", "!=", "<", "<=", ">", ">="].contains(o) => o.to_string(),
            Some(Tok::Ident(w))
                if ["in", "contains", "startsWith", "endsWith", "matches"]
                    .contains(&w.as_str()) =>
            {
                w.clone()
            }
            Some(Tok::Ident(w)) if w == "not" => {
                if matches!(self.tokens.get(self.pos + 1), Some(Tok::Ident(n)) if n == "in") {
                    self.pos += 1;
                    "not in".to_string()
                } else {
                    return Ok(left);
                }
            }
            _ => return Ok(left),
        };
        self.pos += 1;
        let right = self.unary()?;
        Ok(V::Bool(match op.as_str() {
            "==" => left == right,
            "!=" => left != right,
            "in" => member(&left, &right)?,
            "not in" => !member(&left, &right)?,
            "contains" => {
                let (a, b) = strings(&left, &right, &op)?;
                a.contains(b)
            }
            "startsWith" => {
                let (a, b) = strings(&left, &right, &op)?;
                a.starts_with(b)
            }
            "endsWith" => {
                let (a, b) = strings(&left, &right, &op)?;
                a.ends_with(b)
            }
            "matches" => return Err("`matches` (regular expressions) is not supported".into()),
            _ => order(&left, &right, &op)?,
        }))
    }

    fn unary(&mut self) -> Result<V, String> {
        if self.eat_op("!") || self.eat_word("not") {
            self.enter()?;
            let v = self.unary()?;
            self.depth -= 1;
            return Ok(V::Bool(!truthy(&v)?));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<V, String> {
        let Some(tok) = self.peek().cloned() else {
            return Err("unexpected end of expression".into());
        };
        self.pos += 1;
        match tok {
            Tok::Str(s) => Ok(V::Str(s)),
            Tok::Num(n) => Ok(V::Num(n)),
            Tok::Op("-") => {
                self.enter()?;
                let v = self.primary()?;
                self.depth -= 1;
                match v {
                    V::Num(n) => Ok(V::Num(-n)),
                    other => Err(format!("cannot negate {}", type_name(&other))),
                }
            }
            Tok::Op("(") => {
                self.enter()?;
                let v = self.or()?;
                self.depth -= 1;
                if !self.eat_op(")") {
                    return Err("missing `)`".into());
                }
                Ok(v)
            }
            Tok::Op("[") => {
                let mut items = Vec::new();
                if self.eat_op("]") {
                    return Ok(V::List(items));
                }
                self.enter()?;
                loop {
                    items.push(self.or()?);
                    if self.eat_op("]") {
                        break;
                    }
                    if !self.eat_op(",") {
                        return Err("expected `,` or `]` in list".into());
                    }
                }
                self.depth -= 1;
                Ok(V::List(items))
            }
            Tok::Ident(name) => match name.as_str() {
                "true" => Ok(V::Bool(true)),
                "false" => Ok(V::Bool(false)),
                "nil" => Ok(V::Nil),
                _ if matches!(self.peek(), Some(Tok::Op("("))) => {
                    Err(format!("function `{name}()` is not supported"))
                }
                _ => Ok(self.env.get(&name).map_or(V::Nil, |v| V::Str(v.clone()))),
            },
            Tok::Op(o) => Err(format!("unexpected `{o}`")),
        }
    }
}

fn truthy(v: &V) -> Result<bool, String> {
    match v {
        V::Bool(b) => Ok(*b),
        other => Err(format!("expected true or false, got {}", type_name(other))),
    }
}

fn member(needle: &V, list: &V) -> Result<bool, String> {
    match list {
        V::List(items) => Ok(items.contains(needle)),
        V::Nil => Ok(false),
        other => Err(format!("`in` needs a list, got {}", type_name(other))),
    }
}

fn strings<'v>(a: &'v V, b: &'v V, op: &str) -> Result<(&'v str, &'v str), String> {
    match (a, b) {
        (V::Str(a), V::Str(b)) => Ok((a, b)),
        (V::Nil, V::Str(b)) => Ok(("", b)),
        _ => Err(format!(
            "`{op}` needs strings, got {} and {}",
            type_name(a),
            type_name(b)
        )),
    }
}

fn order(a: &V, b: &V, op: &str) -> Result<bool, String> {
    let ord = match (a, b) {
        (V::Num(x), V::Num(y)) => x.partial_cmp(y),
        (V::Str(x), V::Str(y)) => Some(x.cmp(y)),
        _ => None,
    }
    .ok_or_else(|| {
        format!(
            "cannot compare {} and {} with `{op}`",
            type_name(a),
            type_name(b)
        )
    })?;
    Ok(match op {
        "<" => ord.is_lt(),
        "<=" => ord.is_le(),
        ">" => ord.is_gt(),
        _ => ord.is_ge(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        [
            ("CI_COMMIT_BRANCH", "main"),
            ("CI_PIPELINE_EVENT", "push"),
            ("CI_COMMIT_MESSAGE", "fix: thing [deploy]"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn table() {
        let cases: &[(&str, Result<bool, ()>)] = &[
            (r#"CI_COMMIT_BRANCH == "main""#, Ok(true)),
            (r#"CI_COMMIT_BRANCH != 'main'"#, Ok(false)),
            (
                r#"CI_PIPELINE_EVENT == "push" && CI_COMMIT_BRANCH == "dev""#,
                Ok(false),
            ),
            (
                r#"CI_PIPELINE_EVENT == "push" or CI_COMMIT_BRANCH == "dev""#,
                Ok(true),
            ),
            (r#"CI_COMMIT_BRANCH in ["main", "dev"]"#, Ok(true)),
            (r#"CI_COMMIT_BRANCH not in ["main", "dev"]"#, Ok(false)),
            (r#"CI_COMMIT_MESSAGE contains "[deploy]""#, Ok(true)),
            (r#"CI_COMMIT_MESSAGE startsWith "fix""#, Ok(true)),
            (r#"not (CI_COMMIT_MESSAGE endsWith "x")"#, Ok(true)),
            (r#"!(UNSET == nil)"#, Ok(false)),
            (r#"UNSET == "x""#, Ok(false)),
            ("2 > 10", Ok(false)),
            ("true", Ok(true)),
            (r#"CI_COMMIT_BRANCH"#, Err(())),
            (r#"CI_COMMIT_BRANCH matches "^m""#, Err(())),
            (r#"len(CI_COMMIT_BRANCH) > 1"#, Err(())),
            (r#"CI_COMMIT_BRANCH == "#, Err(())),
            (r#"("a" == "a""#, Err(())),
            (r#""unterminated"#, Err(())),
            ("1 2", Err(())),
            ("#", Err(())),
        ];
        for (src, want) in cases {
            let got = evaluate(src, &env()).map_err(|_| ());
            assert_eq!(&got, want, "{src}");
        }
        let deep = "(".repeat(100) + "true" + &")".repeat(100);
        assert!(evaluate(&deep, &env()).is_err());
        let nots = "!".repeat(100) + "true";
        assert!(evaluate(&nots, &env()).is_err());
    }
}
