//! `matrix:`: one workflow per combination of values.
//!
//! Two forms, as upstream:
//! ```yaml
//! matrix:            # axes: the cartesian product, first axis varying slowest
//!   GO: [1.21, 1.22]
//!   DB: [postgres, mysql]
//! ---
//! matrix:            # an explicit list of combinations
//!   include:
//!     - {GO: 1.22, DB: postgres}
//!     - {GO: 1.21, DB: mysql}
//! ```
//! Each combination becomes the workflow's `environ`, is substituted into the file text
//! (`${GO}`), exported to the steps' environment and tested by step-level `when: matrix:`.
//! Upstream stops after a fixed number of combinations; we keep the first
//! [`MAX_COMBINATIONS`] and add a warning saying so.

use std::collections::BTreeMap;

use super::diag::{Issue, field, index};
use super::read;
use super::yaml::Node;

/// Most workflows one file's matrix may produce.
pub const MAX_COMBINATIONS: usize = 25;

/// One combination: axis name → value.
pub type Axis = BTreeMap<String, String>;

/// The combinations of a `matrix:` node (`None` or null: no matrix → empty list).
pub fn parse(node: Option<&Node>, issues: &mut Vec<Issue>) -> Vec<Axis> {
    let Some(node) = node.filter(|n| !n.is_null()) else {
        return Vec::new();
    };
    let at = "matrix";
    let entries = match read::map(node, at) {
        Ok(e) => e,
        Err(e) => {
            issues.push(e);
            return Vec::new();
        }
    };
    let (mut out, total) = match node.get("include") {
        Some(include) => {
            let out = parse_include(include, &field(at, "include"), issues);
            let total = out.len();
            (out, total)
        }
        None => product(entries, at, issues),
    };
    if total > MAX_COMBINATIONS {
        issues.push(
            Issue::linter(
                at,
                format!(
                    "the matrix has {total} combinations; only the first {MAX_COMBINATIONS} are run"
                ),
            )
            .warning(),
        );
        out.truncate(MAX_COMBINATIONS);
    }
    out
}

fn parse_include(node: &Node, at: &str, issues: &mut Vec<Issue>) -> Vec<Axis> {
    let Some(items) = node.as_seq() else {
        issues.push(Issue::linter(
            at,
            format!("expected a list of maps, found {}", node.kind_name()),
        ));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match read::string_map(item, &index(at, i)) {
            Ok(pairs) => out.push(pairs.into_iter().collect()),
            Err(e) => issues.push(e),
        }
    }
    out
}

/// The first [`MAX_COMBINATIONS`] combinations of the axes, and how many there are in all.
fn product(entries: &[(String, Node)], at: &str, issues: &mut Vec<Issue>) -> (Vec<Axis>, usize) {
    let mut axes: Vec<(String, Vec<String>)> = Vec::new();
    for (name, values) in entries {
        let here = field(at, name);
        let Some(items) = values.as_seq() else {
            issues.push(Issue::linter(
                here,
                format!("expected a list of values, found {}", values.kind_name()),
            ));
            continue;
        };
        if items.is_empty() {
            issues.push(Issue::linter(
                here,
                "a matrix axis needs at least one value",
            ));
            continue;
        }
        match read::string_list(values, &here) {
            Ok(v) => axes.push((name.clone(), v)),
            Err(e) => issues.push(e),
        }
    }
    if axes.is_empty() {
        return (Vec::new(), 0);
    }
    let total = axes
        .iter()
        .map(|(_, v)| v.len())
        .fold(1usize, usize::saturating_mul);
    // Odometer over the axes, last axis fastest; stop at the cap.
    let mut out = Vec::new();
    let mut counters = vec![0usize; axes.len()];
    loop {
        out.push(
            axes.iter()
                .zip(&counters)
                .map(|((name, values), &i)| (name.clone(), values[i].clone()))
                .collect(),
        );
        if out.len() >= MAX_COMBINATIONS {
            return (out, total);
        }
        let mut k = axes.len();
        loop {
            if k == 0 {
                return (out, total);
            }
            k -= 1;
            counters[k] += 1;
            if counters[k] < axes[k].1.len() {
                break;
            }
            counters[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml;

    fn axes(doc: &str) -> (Vec<Axis>, Vec<Issue>) {
        let node = yaml::parse(doc).unwrap();
        let mut issues = Vec::new();
        let out = parse(node.get("matrix"), &mut issues);
        (out, issues)
    }

    fn axis(pairs: &[(&str, &str)]) -> Axis {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn product_in_document_order() {
        let (out, issues) = axes("matrix:\n  GO: [1.21, '1.22']\n  DB: [pg, my]\n");
        assert!(issues.is_empty());
        assert_eq!(
            out,
            vec![
                axis(&[("GO", "1.21"), ("DB", "pg")]),
                axis(&[("GO", "1.21"), ("DB", "my")]),
                axis(&[("GO", "1.22"), ("DB", "pg")]),
                axis(&[("GO", "1.22"), ("DB", "my")]),
            ]
        );
    }

    #[test]
    fn include_list() {
        let (out, issues) = axes("matrix:\n  include:\n    - {GO: 1, DB: pg}\n    - {GO: 2}\n");
        assert!(issues.is_empty());
        assert_eq!(
            out,
            vec![axis(&[("GO", "1"), ("DB", "pg")]), axis(&[("GO", "2")])]
        );
    }

    #[test]
    fn none_and_errors() {
        assert_eq!(axes("steps: []").0, Vec::<Axis>::new());
        let (_, issues) = axes("matrix: [1, 2]");
        assert_eq!(issues[0].field, "matrix");
        let (_, issues) = axes("matrix: {GO: 1}");
        assert_eq!(issues[0].field, "matrix.GO");
        let (_, issues) = axes("matrix: {GO: []}");
        assert_eq!(issues[0].field, "matrix.GO");
        let (_, issues) = axes("matrix: {include: [[1]]}");
        assert_eq!(issues[0].field, "matrix.include[0]");
    }

    #[test]
    fn capped_with_a_warning() {
        let (out, issues) = axes(
            "matrix:\n  A: [1,2,3,4,5,6,7,8,9,10]\n  B: [1,2,3,4,5,6,7,8,9,10]\n  C: [1,2,3,4,5,6,7,8,9,10]\n",
        );
        assert_eq!(out.len(), MAX_COMBINATIONS);
        assert_eq!(out[0], axis(&[("A", "1"), ("B", "1"), ("C", "1")]));
        assert_eq!(issues.len(), 1);
        assert!(issues[0].warning);
        assert!(
            issues[0].message.contains("1000 combinations"),
            "{issues:?}"
        );
    }
}
