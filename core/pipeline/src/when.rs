//! `when:` filters: parsing and evaluation (Woodpecker's `constraint` package).
//!
//! A `when` is one condition (a map) or a list of them. The list is OR-ed: the filter passes
//! when any condition passes (an empty `when` always passes). Inside a condition the keys are
//! AND-ed. Each key compares one fact about the run with a condition value that is a string,
//! a list of strings, or `{include: …, exclude: …}`; patterns are globs ([`super::glob`]):
//!
//! | key | compared with | notes |
//! |---|---|---|
//! | `event` | `meta.event` | |
//! | `branch` | `meta.commit.branch` | ignored for tag events |
//! | `ref` | `meta.commit.git_ref` | |
//! | `repo` | `meta.repo` (`owner/name`) | |
//! | `platform` | `meta.platform` | ignored while the platform is unknown (empty) |
//! | `cron` | `meta.cron` | only for cron events |
//! | `path` | `meta.commit.changed_files` | push and pull-request events only; see [`PathFilter`] |
//! | `matrix` | the workflow's matrix values | steps only |
//! | `evaluate` | an expression over the environment | [`super::expr`] |
//! | `status` | — | not a filter: decides when the step runs ([`When::statuses`]) |
//! | `instance`, `local` | — | accepted and ignored |
//!
//! A list condition passes when the value matches no `exclude` pattern and either matches an
//! `include` pattern or there are no include patterns.

use std::collections::BTreeMap;

use super::diag::{Issue, field, index};
use super::event::WebhookEvent;
use super::types::{Metadata, RunOn};
use super::yaml::Node;
use super::{expr, glob, read};

const KEYS: &[&str] = &[
    "event", "branch", "ref", "repo", "instance", "platform", "cron", "status", "matrix", "path",
    "evaluate", "local",
];

/// Include/exclude glob lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct List {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl List {
    pub fn matches(&self, value: &str) -> bool {
        if self.exclude.iter().any(|p| glob::matches(p, value)) {
            return false;
        }
        self.include.is_empty() || self.include.iter().any(|p| glob::matches(p, value))
    }
}

/// `matrix:` condition: each key's pattern against the workflow's matrix value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MapFilter {
    pub include: Vec<(String, String)>,
    pub exclude: Vec<(String, String)>,
}

impl MapFilter {
    /// Fails when *all* exclude entries match, or when any include entry does not.
    pub fn matches(&self, values: &BTreeMap<String, String>) -> bool {
        let get = |k: &str| values.get(k).map(String::as_str).unwrap_or("");
        if !self.exclude.is_empty() && self.exclude.iter().all(|(k, p)| glob::matches(p, get(k))) {
            return false;
        }
        self.include.iter().all(|(k, p)| glob::matches(p, get(k)))
    }
}

/// `path:` condition over the changed files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathFilter {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// A commit message containing this (case-insensitive) makes the filter pass.
    pub ignore_message: String,
    /// Result when no changed files are known; default `true`.
    pub on_empty: Option<bool>,
}

impl PathFilter {
    pub fn matches(&self, files: &[String], message: &str) -> bool {
        if !self.ignore_message.is_empty()
            && message
                .to_lowercase()
                .contains(&self.ignore_message.to_lowercase())
        {
            return true;
        }
        if files.is_empty() {
            return self.on_empty.unwrap_or(true);
        }
        let hit = |patterns: &[String], f: &str| patterns.iter().any(|p| glob::matches(p, f));
        // Excluded only when every changed file is excluded.
        if !self.exclude.is_empty() && files.iter().all(|f| hit(&self.exclude, f)) {
            return false;
        }
        self.include.is_empty() || files.iter().any(|f| hit(&self.include, f))
    }
}

/// One condition (the keys of one map, AND-ed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    pub event: List,
    pub branch: List,
    pub git_ref: List,
    pub repo: List,
    pub platform: List,
    pub cron: List,
    pub status: Vec<RunOn>,
    pub matrix: MapFilter,
    pub path: PathFilter,
    pub evaluate: String,
}

/// What a filter is evaluated against.
pub struct Facts<'a> {
    pub meta: &'a Metadata,
    /// The workflow's matrix values.
    pub matrix: &'a BTreeMap<String, String>,
    /// Variables for `evaluate:`.
    pub env: &'a BTreeMap<String, String>,
}

impl Condition {
    /// `step`: apply step-only keys (`matrix`). `Err` only from `evaluate`.
    pub fn matches(&self, facts: &Facts<'_>, step: bool) -> Result<bool, String> {
        let m = facts.meta;
        let mut ok = (!step || self.matrix.matches(facts.matrix))
            && (m.platform.is_empty() || self.platform.matches(&m.platform))
            && self.event.matches(m.event.as_str())
            && self.repo.matches(&m.repo)
            && self.git_ref.matches(&m.commit.git_ref);
        if m.event == WebhookEvent::Push || m.event.is_pull_request() {
            ok = ok
                && self
                    .path
                    .matches(&m.commit.changed_files, &m.commit.message);
        }
        if m.event != WebhookEvent::Tag {
            ok = ok && self.branch.matches(&m.commit.branch);
        }
        if m.event == WebhookEvent::Cron {
            ok = ok && self.cron.matches(&m.cron);
        }
        if ok && !self.evaluate.is_empty() {
            ok = expr::evaluate(&self.evaluate, facts.env)
                .map_err(|e| format!("evaluate `{}`: {e}", self.evaluate))?;
        }
        Ok(ok)
    }
}

/// A whole `when:` (conditions OR-ed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct When {
    pub conditions: Vec<Condition>,
}

impl When {
    pub fn matches(&self, facts: &Facts<'_>, step: bool) -> Result<bool, String> {
        if self.conditions.is_empty() {
            return Ok(true);
        }
        for c in &self.conditions {
            if c.matches(facts, step)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The workflow states in which a step runs (`when_status`), from the `status:` of the
    /// conditions that pass: `success` unless a passing condition lists statuses without it;
    /// `failure` when a passing condition lists it.
    pub fn statuses(&self, facts: &Facts<'_>) -> Vec<RunOn> {
        let passing: Vec<&Condition> = self
            .conditions
            .iter()
            .filter(|c| c.matches(facts, true).unwrap_or(false))
            .collect();
        let success = passing
            .iter()
            .all(|c| c.status.is_empty() || c.status.contains(&RunOn::Success));
        let failure = passing.iter().any(|c| c.status.contains(&RunOn::Failure));
        let mut out = Vec::new();
        if success {
            out.push(RunOn::Success);
        }
        if failure {
            out.push(RunOn::Failure);
        }
        out
    }
}

/// Parse a `when:` node found at `at` (e.g. `steps.build.when`). Problems are collected in
/// `issues`; the result holds whatever could be read.
pub fn parse(node: &Node, at: &str, issues: &mut Vec<Issue>) -> When {
    if node.is_null() {
        return When::default();
    }
    let items: Vec<(String, &Node)> = match node.as_seq() {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, n)| (index(at, i), n))
            .collect(),
        None => vec![(at.to_string(), node)],
    };
    let mut conditions = Vec::new();
    for (at, item) in items {
        if let Some(c) = parse_condition(item, &at, issues) {
            conditions.push(c);
        }
    }
    When { conditions }
}

fn parse_condition(node: &Node, at: &str, issues: &mut Vec<Issue>) -> Option<Condition> {
    let entries = match read::map(node, at) {
        Ok(entries) => entries,
        Err(e) => {
            issues.push(e);
            return None;
        }
    };
    issues.extend(read::unknown_keys(entries, KEYS, at));
    let mut c = Condition::default();
    for (key, value) in entries {
        let here = field(at, key);
        let result = match key.as_str() {
            "event" => parse_list(value, &here).map(|l| {
                for e in l.include.iter().chain(&l.exclude) {
                    if !WebhookEvent::is_known(e) {
                        issues.push(Issue::linter(&here, format!("unknown event `{e}`")).warning());
                    }
                }
                c.event = l;
            }),
            "branch" => parse_list(value, &here).map(|l| c.branch = l),
            "ref" => parse_list(value, &here).map(|l| c.git_ref = l),
            "repo" => parse_list(value, &here).map(|l| c.repo = l),
            "platform" => parse_list(value, &here).map(|l| c.platform = l),
            "cron" => parse_list(value, &here).map(|l| c.cron = l),
            "instance" => parse_list(value, &here).map(|_| ()),
            "local" => read::boolean(value, &here).map(|_| ()),
            "status" => read::string_list(value, &here).and_then(|s| {
                let parsed: Result<Vec<RunOn>, Issue> = s
                    .iter()
                    .map(|text| {
                        RunOn::parse(text).ok_or_else(|| {
                            Issue::linter(
                                &here,
                                format!("status must be success or failure, not `{text}`"),
                            )
                        })
                    })
                    .collect();
                c.status = parsed?;
                Ok(())
            }),
            "matrix" => parse_map_filter(value, &here).map(|m| c.matrix = m),
            "path" => parse_path(value, &here).map(|p| c.path = p),
            "evaluate" => read::string(value, &here).map(|s| c.evaluate = s),
            _ => Ok(()),
        };
        if let Err(e) = result {
            issues.push(e);
        }
    }
    Some(c)
}

/// A condition value: `"x"`, `[x, y]` or `{include: …, exclude: …}`.
pub fn parse_list(node: &Node, at: &str) -> Result<List, Issue> {
    if let Some(entries) = node.as_map() {
        let mut list = List::default();
        for (k, v) in entries {
            let here = field(at, k);
            match k.as_str() {
                "include" => list.include = read::string_list(v, &here)?,
                "exclude" => list.exclude = read::string_list(v, &here)?,
                _ => {
                    return Err(Issue::linter(
                        here,
                        format!("unknown key `{k}` (expected include or exclude)"),
                    ));
                }
            }
        }
        return Ok(list);
    }
    Ok(List {
        include: read::string_list(node, at)?,
        exclude: Vec::new(),
    })
}

fn parse_map_filter(node: &Node, at: &str) -> Result<MapFilter, Issue> {
    let entries = read::map(node, at)?;
    let structured = !entries.is_empty()
        && entries
            .iter()
            .all(|(k, v)| (k == "include" || k == "exclude") && v.as_map().is_some());
    if structured {
        let mut m = MapFilter::default();
        for (k, v) in entries {
            let pairs = read::string_map(v, &field(at, k))?;
            if k == "include" {
                m.include = pairs;
            } else {
                m.exclude = pairs;
            }
        }
        return Ok(m);
    }
    Ok(MapFilter {
        include: read::string_map(node, at)?,
        exclude: Vec::new(),
    })
}

fn parse_path(node: &Node, at: &str) -> Result<PathFilter, Issue> {
    let Some(entries) = node.as_map() else {
        return Ok(PathFilter {
            include: read::string_list(node, at)?,
            ..PathFilter::default()
        });
    };
    let mut p = PathFilter::default();
    for (k, v) in entries {
        let here = field(at, k);
        match k.as_str() {
            "include" => p.include = read::string_list(v, &here)?,
            "exclude" => p.exclude = read::string_list(v, &here)?,
            "ignore_message" => p.ignore_message = read::string(v, &here)?,
            "on_empty" => p.on_empty = Some(read::boolean(v, &here)?),
            _ => return Err(Issue::linter(here, format!("unknown key `{k}`"))),
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Commit;
    use crate::yaml;

    fn meta(event: &str, branch: &str, files: &[&str]) -> Metadata {
        Metadata {
            event: WebhookEvent::parse(event).expect("a known event"),
            commit: Commit {
                branch: branch.into(),
                git_ref: format!("refs/heads/{branch}"),
                changed_files: files.iter().map(|f| f.to_string()).collect(),
                message: "update docs".into(),
                ..Commit::default()
            },
            repo: "alice/hello".into(),
            ..Metadata::default()
        }
    }

    fn check(when_yaml: &str, m: &Metadata, matrix: &[(&str, &str)]) -> bool {
        let node = yaml::parse(when_yaml).unwrap();
        let mut issues = Vec::new();
        let w = parse(&node, "when", &mut issues);
        assert!(issues.is_empty(), "{issues:?}");
        let matrix: BTreeMap<String, String> = matrix
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = BTreeMap::from([("CI_COMMIT_BRANCH".to_string(), m.commit.branch.clone())]);
        let facts = Facts {
            meta: m,
            matrix: &matrix,
            env: &env,
        };
        w.matches(&facts, true).unwrap()
    }

    #[test]
    fn table() {
        let push_main = meta("push", "main", &["src/a.rs", "README.md"]);
        let push_docs = meta("push", "main", &["docs/a.md"]);
        let push_none = meta("push", "main", &[]);
        let mut tag = meta("tag", "main", &[]);
        tag.commit.git_ref = "refs/tags/v1.2".into();
        let cron = Metadata {
            cron: "nightly".into(),
            ..meta("cron", "main", &[])
        };
        let cases: &[(&str, &Metadata, bool)] = &[
            ("", &push_main, true),
            ("event: push", &push_main, true),
            ("event: [tag, pull_request]", &push_main, false),
            ("branch: main", &push_main, true),
            ("branch: [dev, 'release/*']", &push_main, false),
            ("branch: {exclude: main}", &push_main, false),
            ("branch: {include: 'm*', exclude: 'ma'}", &push_main, true),
            ("{event: push, branch: dev}", &push_main, false),
            ("[{event: tag}, {branch: main}]", &push_main, true),
            ("[{event: tag}, {branch: dev}]", &push_main, false),
            ("{event: tag, branch: dev}", &tag, true),
            ("ref: refs/tags/v*", &tag, true),
            ("ref: refs/tags/v*", &push_main, false),
            ("repo: alice/*", &push_main, true),
            ("repo: bob/*", &push_main, false),
            ("path: 'src/**'", &push_main, true),
            ("path: 'src/**'", &push_docs, false),
            ("path: {exclude: ['docs/**']}", &push_docs, false),
            ("path: {exclude: ['docs/**']}", &push_main, true),
            ("path: 'src/**'", &push_none, true),
            (
                "path: {include: 'src/**', on_empty: false}",
                &push_none,
                false,
            ),
            (
                "path: {include: 'src/**', ignore_message: 'UPDATE'}",
                &push_docs,
                true,
            ),
            ("path: 'src/**'", &tag, true),
            ("cron: nightly", &cron, true),
            ("cron: weekly", &cron, false),
            ("cron: weekly", &push_main, true),
            ("matrix: {GO: '1.2*'}", &push_main, true),
            ("matrix: {GO: '1.3'}", &push_main, false),
            (
                "matrix: {exclude: {GO: '1.22', OS: linux}}",
                &push_main,
                false,
            ),
            ("matrix: {exclude: {GO: '1.22', OS: mac}}", &push_main, true),
            ("status: [failure]", &push_main, true),
            ("instance: ci.example.com", &push_main, true),
            ("platform: linux/*", &push_main, true),
            ("evaluate: 'CI_COMMIT_BRANCH == \"main\"'", &push_main, true),
            (
                "evaluate: 'CI_COMMIT_BRANCH != \"main\"'",
                &push_main,
                false,
            ),
        ];
        for (w, m, want) in cases {
            assert_eq!(
                check(w, m, &[("GO", "1.22"), ("OS", "linux")]),
                *want,
                "{w} / {}",
                m.event
            );
        }
    }

    #[test]
    fn statuses() {
        let m = meta("push", "main", &[]);
        let empty = BTreeMap::new();
        let facts = Facts {
            meta: &m,
            matrix: &empty,
            env: &empty,
        };
        let cases: &[(&str, &[&str])] = &[
            ("", &["success"]),
            ("status: failure", &["failure"]),
            ("status: [success, failure]", &["success", "failure"]),
            (
                "[{status: failure}, {event: tag, status: success}]",
                &["failure"],
            ),
            ("{event: tag, status: failure}", &["success"]),
        ];
        for (w, want) in cases {
            let mut issues = Vec::new();
            let when = parse(&yaml::parse(w).unwrap(), "when", &mut issues);
            assert!(issues.is_empty());
            let got: Vec<&str> = when.statuses(&facts).iter().map(|r| r.as_str()).collect();
            assert_eq!(got, *want, "{w}");
        }
    }

    #[test]
    fn parse_errors() {
        let cases: &[(&str, &str)] = &[
            ("when: 5", "when"),
            ("when: {evnt: push}", "when.evnt"),
            ("when: {status: maybe}", "when.status"),
            ("when: [{branch: {only: x}}]", "when[0].branch.only"),
            ("when: {path: {include: [[x]]}}", "when.path.include[0]"),
            ("when: {local: maybe}", "when.local"),
        ];
        for (doc, field) in cases {
            let node = yaml::parse(doc).unwrap();
            let mut issues = Vec::new();
            parse(node.get("when").unwrap(), "when", &mut issues);
            assert_eq!(issues.len(), 1, "{doc}: {issues:?}");
            assert_eq!(issues[0].field, *field, "{doc}");
            assert!(!issues[0].warning);
        }
        let mut issues = Vec::new();
        parse(&yaml::parse("event: deploy").unwrap(), "when", &mut issues);
        assert!(issues[0].warning);
    }
}
