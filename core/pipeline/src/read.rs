//! Typed reads from the YAML tree, each failing with an [`Issue`] that names the field.
//!
//! Woodpecker's config types are lenient in the same few ways everywhere: a "string or list"
//! accepts one scalar or a list of scalars, a boolean accepts YAML's spellings, and a scalar
//! field accepts numbers and booleans as their text. These helpers implement exactly that and
//! nothing more, so the rest of the compiler never matches on raw nodes for simple fields.

use super::diag::Issue;
use super::yaml::{Node, Value};

/// A scalar as text (`""` for null). Lists and maps are an error.
pub fn string(node: &Node, field: &str) -> Result<String, Issue> {
    if node.is_null() {
        return Ok(String::new());
    }
    match &node.value {
        Value::Scalar { text, .. } => Ok(text.clone()),
        _ => Err(Issue::linter(
            field,
            format!("expected a string, found {}", node.kind_name()),
        )),
    }
}

/// One scalar or a list of scalars (null = empty).
pub fn string_list(node: &Node, field: &str) -> Result<Vec<String>, Issue> {
    if node.is_null() {
        return Ok(Vec::new());
    }
    match &node.value {
        Value::Scalar { text, .. } => Ok(vec![text.clone()]),
        Value::Seq(items) => items
            .iter()
            .enumerate()
            .filter(|(_, item)| !item.is_null())
            .map(|(i, item)| match &item.value {
                Value::Scalar { text, .. } => Ok(text.clone()),
                _ => Err(Issue::linter(
                    format!("{field}[{i}]"),
                    format!("expected a string, found {}", item.kind_name()),
                )),
            })
            .collect(),
        Value::Map(_) => Err(Issue::linter(
            field,
            "expected a string or a list of strings, found a map",
        )),
    }
}

/// A boolean (null = false).
pub fn boolean(node: &Node, field: &str) -> Result<bool, Issue> {
    if node.is_null() {
        return Ok(false);
    }
    node.as_bool().ok_or_else(|| {
        Issue::linter(
            field,
            format!("expected true or false, found {}", describe(node)),
        )
    })
}

/// The entries of a map (null = no entries).
pub fn map<'a>(node: &'a Node, field: &str) -> Result<&'a [(String, Node)], Issue> {
    if node.is_null() {
        return Ok(&[]);
    }
    node.as_map()
        .ok_or_else(|| Issue::linter(field, format!("expected a map, found {}", node.kind_name())))
}

/// A map of scalars → `(key, text)` pairs (null values skipped).
pub fn string_map(node: &Node, field: &str) -> Result<Vec<(String, String)>, Issue> {
    let mut out = Vec::new();
    for (k, v) in map(node, field)? {
        if v.is_null() {
            continue;
        }
        out.push((k.clone(), string(v, &format!("{field}.{k}"))?));
    }
    Ok(out)
}

/// One issue per key of `entries` not in `allowed`.
pub fn unknown_keys(entries: &[(String, Node)], allowed: &[&str], field: &str) -> Vec<Issue> {
    entries
        .iter()
        .filter(|(k, _)| !allowed.contains(&k.as_str()))
        .map(|(k, _)| {
            let at = if field.is_empty() {
                k.clone()
            } else {
                format!("{field}.{k}")
            };
            Issue::linter(at, format!("unknown key `{k}`"))
        })
        .collect()
}

/// A short rendering of a node for messages (`"maybe"`, `a list`, …).
pub fn describe(node: &Node) -> String {
    match &node.value {
        Value::Scalar { text, .. } if !node.is_null() => {
            let short: String = text.chars().take(40).collect();
            format!("`{short}`")
        }
        _ => node.kind_name().to_string(),
    }
}
