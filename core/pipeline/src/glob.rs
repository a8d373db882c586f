//! Glob patterns as Woodpecker's `when` filters use them (Go's `doublestar` semantics).
//!
//! - `*` matches any run of characters except `/`; `?` one character except `/`;
//! - `**` as a whole path segment matches any number of segments: `a/**` matches `a`, `a/b`
//!   and `a/b/c`; `**/x` matches `x` and `d/e/x`; `**` alone matches everything. Elsewhere
//!   (`a**b`) it is the same as `*`;
//! - `[abc]`, `[a-z]`, `[!a-z]`/`[^a-z]` character classes; `{a,b}` alternatives (nestable);
//!   `\x` matches `x` literally.
//!
//! A malformed pattern (unclosed `[` or `{`) matches nothing, as upstream ignores the error.
//! Matching is a dynamic program over (pattern position, text position), so no pattern can
//! make it take exponential time; brace expansion is capped.

/// Most alternatives a `{…}` expansion may produce.
const MAX_ALTERNATIVES: usize = 256;
/// Longest pattern or text we try to match.
const MAX_LEN: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Char(char),
    /// `*`: any run without `/`.
    Star,
    /// `?`: one character other than `/`.
    Any,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `**/` at a segment start: empty, or anything ending in `/`.
    DirsPrefix,
    /// `/**` at the end: empty, or `/` followed by anything.
    DirsSuffix,
    /// A lone `**`: anything.
    All,
}

/// Does `text` match `pattern`?
pub fn matches(pattern: &str, text: &str) -> bool {
    if pattern.len() > MAX_LEN || text.len() > MAX_LEN {
        return false;
    }
    let Some(alternatives) = expand_braces(pattern) else {
        return false;
    };
    let text: Vec<char> = text.chars().collect();
    alternatives.iter().any(|alt| match tokenize(alt) {
        Some(tokens) => run(&tokens, &text),
        None => false,
    })
}

/// Expand `{a,b}` groups (innermost syntax handled recursively). `None` on unbalanced braces
/// or too many alternatives.
fn expand_braces(pattern: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = pattern.chars().collect();
    // Find the first top-level `{` that is not escaped or inside a class.
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => break,
            '}' if !in_class => return None,
            _ => {}
        }
        i += 1;
    }
    if i >= chars.len() {
        return Some(vec![pattern.to_string()]);
    }
    // Find the matching `}` and split its body on top-level commas.
    let open = i;
    let mut depth = 0usize;
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut j = open + 1;
    let mut close = None;
    while j < chars.len() {
        let c = chars[j];
        match c {
            '\\' => {
                current.push(c);
                if let Some(&next) = chars.get(j + 1) {
                    current.push(next);
                }
                j += 2;
                continue;
            }
            '{' => depth += 1,
            '}' if depth == 0 => {
                close = Some(j);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                j += 1;
                continue;
            }
            _ => {}
        }
        current.push(c);
        j += 1;
    }
    let close = close?;
    parts.push(current);
    let prefix: String = chars[..open].iter().collect();
    let suffix: String = chars[close + 1..].iter().collect();
    let mut out = Vec::new();
    for part in parts {
        for expanded in expand_braces(&format!("{prefix}{part}{suffix}"))? {
            out.push(expanded);
            if out.len() > MAX_ALTERNATIVES {
                return None;
            }
        }
    }
    Some(out)
}

fn tokenize(pattern: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                tokens.push(Token::Char(*chars.get(i + 1)?));
                i += 2;
            }
            '*' => {
                let mut j = i;
                while j < chars.len() && chars[j] == '*' {
                    j += 1;
                }
                let segment_start = i == 0 || chars[i - 1] == '/';
                let segment_end = j == chars.len() || chars[j] == '/';
                if j - i >= 2 && segment_start && segment_end {
                    if j == chars.len() {
                        if i == 0 {
                            tokens.push(Token::All);
                        } else {
                            // `a/**`: replace the `/` we already emitted.
                            tokens.pop();
                            tokens.push(Token::DirsSuffix);
                        }
                        i = j;
                    } else {
                        // `**/`: consume the slash too.
                        tokens.push(Token::DirsPrefix);
                        i = j + 1;
                    }
                } else {
                    tokens.push(Token::Star);
                    i = j;
                }
            }
            '?' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('!' | '^'));
                if negated {
                    j += 1;
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let c = *chars.get(j)?;
                    if c == ']' && !first {
                        break;
                    }
                    first = false;
                    let lo = if c == '\\' {
                        j += 1;
                        *chars.get(j)?
                    } else {
                        c
                    };
                    j += 1;
                    if chars.get(j) == Some(&'-') && chars.get(j + 1).is_some_and(|&c| c != ']') {
                        let mut hi = chars[j + 1];
                        j += 2;
                        if hi == '\\' {
                            hi = *chars.get(j)?;
                            j += 1;
                        }
                        ranges.push((lo, hi));
                    } else {
                        ranges.push((lo, lo));
                    }
                }
                tokens.push(Token::Class { negated, ranges });
                i = j + 1;
            }
            _ => {
                tokens.push(Token::Char(c));
                i += 1;
            }
        }
    }
    Some(tokens)
}

/// `ok[t][s]`: do tokens `t..` match text `s..`? Filled from the end.
fn run(tokens: &[Token], text: &[char]) -> bool {
    let n = text.len();
    let width = n + 1;
    let mut next = vec![false; width];
    next[n] = true; // no tokens left: only the empty rest matches
    for token in tokens.iter().rev() {
        let mut cur = vec![false; width];
        // `any_next[s]`: is there k >= s with next[k]?
        let mut any_next = vec![false; width + 1];
        for s in (0..width).rev() {
            any_next[s] = any_next[s + 1] || next[s];
        }
        // `slash_then[s]`: is there k >= s with text[k] == '/' and next[k + 1]?
        let mut slash_then = vec![false; width + 1];
        for s in (0..n).rev() {
            slash_then[s] = slash_then[s + 1] || (text[s] == '/' && next[s + 1]);
        }
        for s in (0..width).rev() {
            cur[s] = match token {
                Token::Char(c) => s < n && text[s] == *c && next[s + 1],
                Token::Any => s < n && text[s] != '/' && next[s + 1],
                Token::Class { negated, ranges } => {
                    s < n
                        && text[s] != '/'
                        && ranges
                            .iter()
                            .any(|&(lo, hi)| lo <= text[s] && text[s] <= hi)
                            != *negated
                        && next[s + 1]
                }
                Token::Star => next[s] || (s < n && text[s] != '/' && cur[s + 1]),
                Token::All => any_next[s],
                Token::DirsPrefix => next[s] || slash_then[s],
                Token::DirsSuffix => next[s] || (s < n && text[s] == '/' && any_next[s + 1]),
            };
        }
        next = cur;
    }
    next[0]
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn table() {
        let cases: &[(&str, &str, bool)] = &[
            ("main", "main", true),
            ("main", "mainx", false),
            ("*", "main", true),
            ("*", "feature/x", false),
            ("feature/*", "feature/x", true),
            ("feature/*", "feature/x/y", false),
            ("feature/**", "feature/x/y", true),
            ("feature/**", "feature", true),
            ("feature/**", "featurex", false),
            ("**", "a/b/c", true),
            ("**", "", true),
            ("**/*.go", "main.go", true),
            ("**/*.go", "cmd/x/main.go", true),
            ("**/*.go", "cmd/x/main.rs", false),
            ("docs/**/*.md", "docs/a.md", true),
            ("docs/**/*.md", "docs/x/y/a.md", true),
            ("docs/**/*.md", "src/a.md", false),
            ("a**b", "axxb", true),
            ("a**b", "ax/xb", false),
            ("release-?", "release-1", true),
            ("release-?", "release-12", false),
            ("v[0-9]*", "v1.2", true),
            ("v[0-9]*", "vx", false),
            ("v[!0-9]*", "vx", true),
            ("v[^0-9]*", "v1", false),
            ("{main,develop}", "develop", true),
            ("{main,develop}", "dev", false),
            ("refs/tags/{v*,release-{a,b}}", "refs/tags/release-b", true),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("[", "[", false),
            ("{a,b", "a", false),
            ("", "", true),
            ("", "a", false),
            ("*.{yml,yaml}", "ci.yaml", true),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(matches(pattern, text), *want, "{pattern:?} vs {text:?}");
        }
    }

    #[test]
    fn adversarial_patterns_are_fast() {
        let pattern = "*a".repeat(200) + "b";
        let text = "a".repeat(3000);
        assert!(!matches(&pattern, &text));
        let braces = "{a,b}".repeat(20);
        assert!(!matches(&braces, "ab"));
    }
}
