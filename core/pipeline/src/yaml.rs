//! YAML text → a small value tree ([`Node`]), hardened for untrusted input.
//!
//! Pipeline configs come from repositories, so anyone who can push can feed this parser. We use
//! `yaml-rust2`'s event parser (a heap-based state machine, no recursion on nesting) and build
//! the tree ourselves, which lets us:
//! - cap the input size ([`MAX_BYTES`]), the nesting depth ([`MAX_DEPTH`]) and the number of
//!   nodes *after* alias expansion ([`MAX_NODES`]) — the "billion laughs" document fails with
//!   a clear error instead of eating the machine;
//! - resolve aliases (`*anchor`) and merge keys (`<<: *anchor`, `<<: [*a, *b]`), which
//!   Woodpecker configs use a lot and which YAML 1.2 parsers do not do by themselves, and
//!   the sequence merges of upstream's YAML library: a list item `- <<: *list` (or
//!   `- <<: [*a, *b]`, lists of lists) is replaced by the items of the list(s);
//! - accept a leading UTF-8 byte-order mark, as Go's YAML library does;
//! - keep the source line of every node for error messages, and the exact text of scalars
//!   (`1.10` stays `1.10`; it is not turned into the float `1.1`).
//!
//! Scalars are not typed at parse time: a [`Value::Scalar`] keeps its text and whether it was
//! plain (unquoted, untagged). Readers ask for the type they need ([`Node::as_bool`],
//! [`Node::is_null`], [`Node::to_json`]), which is how YAML's core schema is meant to be applied.
//!
//! Mapping keys must be scalars; duplicate keys are an error (as in Go's yaml.v3, which
//! Woodpecker uses). Only the first document of a stream is accepted; a second one is an error.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;

/// Largest config file we parse.
pub const MAX_BYTES: usize = 1024 * 1024;
/// Deepest nesting of sequences and mappings.
pub const MAX_DEPTH: usize = 64;
/// Most nodes in one document, counting every copy an alias makes.
pub const MAX_NODES: usize = 200_000;

/// A parse failure with its 1-based source line (0 when unknown).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
    pub line: usize,
}

impl YamlError {
    fn new(message: impl Into<String>, line: usize) -> Self {
        YamlError {
            message: message.into(),
            line,
        }
    }
}

/// The shape of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar's text; `plain` means unquoted and untagged, so `true`, `12`, `null`, `~` and
    /// the empty text take their YAML core-schema meaning.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    /// Entries in document order (merge keys already applied).
    Map(Vec<(String, Node)>),
}

/// A value with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    /// 1-based line of the node's start in the source.
    pub line: usize,
    /// Number of nodes in this subtree (itself included); used for the alias budget.
    size: usize,
    /// A sequence merge (`- <<: *list`): its items go into the enclosing list in its place.
    splice: bool,
}

impl Node {
    /// A plain scalar (test and synthetic-node helper).
    pub fn scalar(text: &str) -> Node {
        Node {
            value: Value::Scalar {
                text: text.to_string(),
                plain: true,
            },
            line: 0,
            size: 1,
            splice: false,
        }
    }

    /// The null node (an empty document).
    pub fn null() -> Node {
        Node::scalar("")
    }

    /// Is this YAML null (`~`, `null`, an empty plain scalar)?
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// The text of any non-null scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } if !self.is_null() => Some(text),
            _ => None,
        }
    }

    /// A boolean (YAML 1.2 `true`/`false` in its three spellings, plus the YAML 1.1
    /// `yes`/`no`/`on`/`off` that Go's yaml.v3 still accepts for boolean fields).
    pub fn as_bool(&self) -> Option<bool> {
        match &self.value {
            Value::Scalar { text, plain: true } => match text.as_str() {
                "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
                "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
                    Some(false)
                }
                _ => None,
            },
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(String, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// Value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find_map(|(k, v)| (k == key).then_some(v))
    }

    /// "a string", "a list", … for error messages.
    pub fn kind_name(&self) -> &'static str {
        match &self.value {
            _ if self.is_null() => "null",
            Value::Scalar { .. } if self.as_bool().is_some() => "a boolean",
            Value::Scalar { .. } => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a map",
        }
    }

    /// The node as JSON, with plain scalars typed by the YAML core schema (null, booleans,
    /// integers, floats), everything else a string. Depth is bounded by [`MAX_DEPTH`].
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            _ if self.is_null() => J::Null,
            Value::Scalar { text, plain } => {
                if !plain {
                    return J::String(text.clone());
                }
                if let Some(b) = self.as_bool().filter(|_| core_bool(text)) {
                    return J::Bool(b);
                }
                if let Some(n) = parse_int(text) {
                    return J::Number(n.into());
                }
                if let Some(f) = parse_float(text)
                    && let Some(n) = serde_json::Number::from_f64(f)
                {
                    return J::Number(n);
                }
                J::String(text.clone())
            }
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => J::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// Only the YAML 1.2 spellings count as booleans when a value's type is free (JSON output).
fn core_bool(text: &str) -> bool {
    matches!(text, "true" | "True" | "TRUE" | "false" | "False" | "FALSE")
}

fn parse_int(text: &str) -> Option<i64> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let value = if let Some(hex) = body.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = body.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()?
    } else {
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        body.parse::<i64>().ok()?
    };
    Some(if neg { -value } else { value })
}

fn parse_float(text: &str) -> Option<f64> {
    // The core schema's float: digits with a dot and/or an exponent (no inf/nan: JSON has none).
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let ok = !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && body
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'.');
    if !ok {
        return None;
    }
    text.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// Parse one YAML document. Never panics: a panic inside the YAML library (it has a few
/// `unwrap`s) is caught and reported as an error.
pub fn parse(text: &str) -> Result<Node, YamlError> {
    if text.len() > MAX_BYTES {
        return Err(YamlError::new(
            format!(
                "config is too large ({} bytes, at most {MAX_BYTES})",
                text.len()
            ),
            0,
        ));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match catch_unwind(AssertUnwindSafe(|| Builder::default().run(text))) {
        Ok(result) => result,
        Err(_) => Err(YamlError::new("the YAML parser failed on this input", 0)),
    }
}

enum Frame {
    Seq {
        items: Vec<Node>,
        anchor: usize,
        line: usize,
    },
    Map {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
        anchor: usize,
        line: usize,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    nodes: usize,
    root: Option<Node>,
    documents: usize,
}

impl Builder {
    fn run(mut self, text: &str) -> Result<Node, YamlError> {
        let mut parser = Parser::new_from_str(text);
        loop {
            let (event, mark) = match parser.next_token() {
                Ok(next) => next,
                // Text after a complete document (upstream's own test configs end with a
                // stray `}`): upstream's YAML library stops at the end of the first
                // document and never reads it, so it is no error here either.
                Err(_) if self.stack.is_empty() && self.root.is_some() => break,
                Err(e) => return Err(YamlError::new(e.info().to_string(), e.marker().line())),
            };
            let line = mark.line();
            match event {
                Event::StreamEnd => break,
                Event::Nothing | Event::StreamStart | Event::DocumentEnd => {}
                Event::DocumentStart => {
                    self.documents += 1;
                    if self.documents > 1 {
                        return Err(YamlError::new(
                            "only one YAML document per config file is supported (found `---` starting another)",
                            line,
                        ));
                    }
                }
                Event::Alias(id) => {
                    let node = self
                        .anchors
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| YamlError::new("unknown alias", line))?;
                    self.count(node.size, line)?;
                    self.push(node, 0, line)?;
                }
                Event::Scalar(text, style, anchor, tag) => {
                    let plain = style == TScalarStyle::Plain && !is_str_tag(tag.as_ref());
                    self.count(1, line)?;
                    let node = Node {
                        value: Value::Scalar { text, plain },
                        line,
                        size: 1,
                        splice: false,
                    };
                    self.push(node, anchor, line)?;
                }
                Event::SequenceStart(anchor, _) => {
                    self.open(
                        Frame::Seq {
                            items: Vec::new(),
                            anchor,
                            line,
                        },
                        line,
                    )?;
                }
                Event::MappingStart(anchor, _) => {
                    self.open(
                        Frame::Map {
                            entries: Vec::new(),
                            key: None,
                            anchor,
                            line,
                        },
                        line,
                    )?;
                }
                Event::SequenceEnd => match self.stack.pop() {
                    Some(Frame::Seq {
                        items,
                        anchor,
                        line,
                    }) => {
                        let items = splice_merges(items);
                        let size = 1 + items.iter().map(|n| n.size).sum::<usize>();
                        let node = Node {
                            value: Value::Seq(items),
                            line,
                            size,
                            splice: false,
                        };
                        self.push(node, anchor, line)?;
                    }
                    _ => return Err(YamlError::new("unbalanced sequence", line)),
                },
                Event::MappingEnd => match self.stack.pop() {
                    Some(Frame::Map {
                        entries,
                        anchor,
                        line,
                        ..
                    }) => {
                        let node = finish_map(entries, line)?;
                        self.push(node, anchor, line)?;
                    }
                    _ => return Err(YamlError::new("unbalanced mapping", line)),
                },
            }
        }
        Ok(self.root.unwrap_or_else(Node::null))
    }

    fn count(&mut self, n: usize, line: usize) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(YamlError::new(
                format!("document too large: more than {MAX_NODES} values after expanding aliases"),
                line,
            ));
        }
        Ok(())
    }

    fn open(&mut self, frame: Frame, line: usize) -> Result<(), YamlError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlError::new(
                format!("document nested too deeply (more than {MAX_DEPTH} levels)"),
                line,
            ));
        }
        self.count(1, line)?;
        self.stack.push(frame);
        Ok(())
    }

    /// Attach a finished node to its parent (or make it the root).
    fn push(&mut self, node: Node, anchor: usize, line: usize) -> Result<(), YamlError> {
        if node.splice && !matches!(self.stack.last(), Some(Frame::Seq { .. })) {
            return Err(YamlError::new(
                "a sequence merge (`<<: *list`) must be an item of a list (`- <<: *list`)",
                node.line,
            ));
        }
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => {
                if self.root.is_some() {
                    return Err(YamlError::new("unexpected second root value", line));
                }
                self.root = Some(node);
            }
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
        Ok(())
    }
}

fn is_str_tag(tag: Option<&Tag>) -> bool {
    tag.is_some_and(|t| {
        t.suffix == "str" && (t.handle == "!!" || t.handle.contains("yaml.org,2002"))
    })
}

/// A list's items with each sequence merge replaced by the items it stands for.
fn splice_merges(items: Vec<Node>) -> Vec<Node> {
    if !items.iter().any(|n| n.splice) {
        return items;
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Node {
                splice: true,
                value: Value::Seq(merged),
                ..
            } => out.extend(merged),
            other => out.push(other),
        }
    }
    out
}

/// `{<<: list}` as a list item: the items of the list, or of each list when it holds lists
/// (upstream's sequence merge); `None` when the value is a map or a list of maps (a map
/// merge).
fn sequence_merge(value: &Node) -> Option<Vec<Node>> {
    let Value::Seq(items) = &value.value else {
        return None;
    };
    if items.iter().all(|i| matches!(i.value, Value::Map(_))) {
        return None;
    }
    if items.iter().all(|i| matches!(i.value, Value::Seq(_))) {
        return Some(
            items
                .iter()
                .flat_map(|i| match &i.value {
                    Value::Seq(inner) => inner.clone(),
                    _ => Vec::new(),
                })
                .collect(),
        );
    }
    Some(items.clone())
}

/// Turn raw entries into a mapping: keys must be scalars and unique; `<<` merge keys insert
/// the entries of the referenced map(s) at their position, never overriding an explicit key.
/// A map whose only key is `<<` with a list (of values or of lists) is a sequence merge: a
/// node its enclosing list replaces by those values.
fn finish_map(entries: Vec<(Node, Node)>, line: usize) -> Result<Node, YamlError> {
    if let [(key, value)] = entries.as_slice()
        && is_merge_key(key)
        && let Some(items) = sequence_merge(value)
    {
        let size = items.iter().map(|n| n.size).sum::<usize>();
        return Ok(Node {
            value: Value::Seq(items),
            line,
            size,
            splice: true,
        });
    }
    let explicit: Vec<&str> = entries
        .iter()
        .filter(|(k, _)| !is_merge_key(k))
        .filter_map(|(k, _)| scalar_text(k))
        .collect();
    let mut out: Vec<(String, Node)> = Vec::with_capacity(entries.len());
    let mut size = 1usize;
    let mut merged_keys: Vec<String> = Vec::new();
    for (key, value) in &entries {
        if is_merge_key(key) {
            let sources: Vec<&Node> = match &value.value {
                Value::Map(_) => vec![value],
                Value::Seq(items) => items.iter().collect(),
                _ => {
                    return Err(YamlError::new(
                        "`<<` (merge key) needs a map or a list of maps (a list merges into a list only as its own item: `- <<: *list`)",
                        key.line,
                    ));
                }
            };
            for source in sources {
                let Value::Map(source_entries) = &source.value else {
                    return Err(YamlError::new(
                        "`<<` (merge key) needs a map or a list of maps",
                        source.line,
                    ));
                };
                for (k, v) in source_entries {
                    if explicit.contains(&k.as_str()) || merged_keys.contains(k) {
                        continue;
                    }
                    merged_keys.push(k.clone());
                    size += v.size + 1;
                    out.push((k.clone(), v.clone()));
                }
            }
            continue;
        }
        let Some(text) = scalar_text(key) else {
            return Err(YamlError::new(
                "mapping keys must be plain values (strings), not lists or maps",
                key.line,
            ));
        };
        if out.iter().any(|(k, _)| k == text) && !merged_keys.iter().any(|m| m == text) {
            return Err(YamlError::new(
                format!("mapping key `{text}` is defined more than once"),
                key.line,
            ));
        }
        size += value.size + 1;
        out.push((text.to_string(), value.clone()));
    }
    Ok(Node {
        value: Value::Map(out),
        line,
        size,
        splice: false,
    })
}

fn is_merge_key(node: &Node) -> bool {
    matches!(&node.value, Value::Scalar { text, plain: true } if text == "<<")
}

fn scalar_text(node: &Node) -> Option<&str> {
    match &node.value {
        Value::Scalar { text, .. } => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::Scalar {
            text: text.into(),
            plain: true,
        }
    }

    #[test]
    fn scalars_keep_their_text_and_quoting() {
        let n = parse("a: 1.10\nb: '1.10'\nc: ~\nd: true\ne: !!str true\n").unwrap();
        assert_eq!(n.get("a").unwrap().value, s("1.10"));
        assert_eq!(
            n.get("b").unwrap().value,
            Value::Scalar {
                text: "1.10".into(),
                plain: false
            }
        );
        assert!(n.get("c").unwrap().is_null());
        assert_eq!(n.get("d").unwrap().as_bool(), Some(true));
        assert_eq!(n.get("e").unwrap().as_bool(), None);
        assert_eq!(
            n.to_json(),
            serde_json::json!({"a": 1.1, "b": "1.10", "c": null, "d": true, "e": "true"})
        );
    }

    #[test]
    fn anchors_aliases_and_merge_keys() {
        let text = "base: &b\n  image: sh\n  env: 1\nx:\n  <<: *b\n  env: 2\n  more: *b\ny:\n  <<: [{p: 1}, {p: 2, q: 3}]\n";
        let n = parse(text).unwrap();
        let x = n.get("x").unwrap().as_map().unwrap();
        let keys: Vec<&str> = x.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["image", "env", "more"]);
        assert_eq!(n.get("x").unwrap().get("env").unwrap().value, s("2"));
        assert_eq!(
            n.get("x")
                .unwrap()
                .get("more")
                .unwrap()
                .get("image")
                .unwrap()
                .value,
            s("sh")
        );
        assert_eq!(n.get("y").unwrap().get("p").unwrap().value, s("1"));
        assert_eq!(n.get("y").unwrap().get("q").unwrap().value, s("3"));
    }

    #[test]
    fn errors_have_lines() {
        let e = parse("a: 1\nb: [1, 2\n").unwrap_err();
        assert!(e.line >= 2, "{e:?}");
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("more than once"));
        assert!(parse("---\na: 1\n---\nb: 2\n").is_err());
        assert!(parse("[a]: 1\n").is_err());
        assert!(parse("<<: 1\n").is_err());
    }

    #[test]
    fn empty_documents_are_null() {
        assert!(parse("").unwrap().is_null());
        assert!(parse("# only a comment\n").unwrap().is_null());
    }

    #[test]
    fn billion_laughs_is_refused() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let e = parse(&doc).unwrap_err();
        assert!(e.message.contains("too large"), "{e:?}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(parse(&deep).is_err());
        let mut block = String::new();
        for i in 0..200 {
            block.push_str(&" ".repeat(i));
            block.push_str("k:\n");
        }
        let e = parse(&block).unwrap_err();
        assert!(e.message.contains("nested too deeply"), "{e:?}");
        assert!(parse(&"x".repeat(MAX_BYTES + 1)).is_err());
    }

    fn texts(node: &Node) -> Vec<String> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .map(|i| i.as_str().unwrap_or("?").to_string())
                .collect(),
            other => panic!("not a list: {other:?}"),
        }
    }

    /// Upstream's documented sequence merges (docs/20-usage/90-advanced-usage.md).
    #[test]
    fn sequence_merges_splice_lists_into_lists() {
        let doc = "variables:\n  pre_cmds: &pre_cmds\n    - echo start\n    - whoami\n  post_cmds: &post_cmds\n    - echo stop\n  hello_cmd: &hello_cmd\n    - echo hello\nsteps:\n  - name: step1\n    commands:\n      - <<: *pre_cmds\n      - echo exec\n      - <<: *post_cmds\n  - name: step2\n    commands:\n      - <<: [*pre_cmds, *hello_cmd]\n      - echo second\n      - <<: *post_cmds\n";
        let n = parse(doc).unwrap();
        let Value::Seq(steps) = &n.get("steps").unwrap().value else {
            panic!()
        };
        assert_eq!(
            texts(steps[0].get("commands").unwrap()),
            ["echo start", "whoami", "echo exec", "echo stop"]
        );
        assert_eq!(
            texts(steps[1].get("commands").unwrap()),
            [
                "echo start",
                "whoami",
                "echo hello",
                "echo second",
                "echo stop"
            ]
        );
        // Map merges are unchanged, and a list merged into a map is an error.
        let maps = parse("a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: [*a, *b]\n").unwrap();
        assert_eq!(
            maps.get("c").unwrap().to_json(),
            serde_json::json!({"x": 1, "y": 2})
        );
        let err = parse("l: &l [1, 2]\nm:\n  <<: *l\n").unwrap_err();
        assert!(err.message.contains("`- <<: *list`"), "{err:?}");
        let err = parse("l: &l [1, 2]\nm:\n  <<: *l\n  k: v\n").unwrap_err();
        assert!(err.message.contains("merge key"), "{err:?}");
    }

    #[test]
    fn a_byte_order_mark_is_accepted() {
        let n = parse("\u{feff}steps:\n  - name: a\n").unwrap();
        assert!(n.get("steps").is_some(), "{n:?}");
    }
}
