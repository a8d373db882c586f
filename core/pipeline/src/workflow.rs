//! One workflow document (after `${VAR}` substitution) → [`WorkflowSpec`], with linting.
//!
//! This is the "schema" layer: it knows which keys exist, their types and their forms (steps
//! as a list or a map, `depends_on` as a string, a list or `{name, optional}` objects, …) and
//! reports every problem as an [`Issue`] with the field path. It does not look at the run
//! (filters, secrets, `CI_*`): [`super::compile`](fn@super::compile) does that with the spec.
//!
//! The container options (`pull`, `privileged`, `volumes`, `devices`, `network_mode`, `dns`,
//! `dns_search`, `extra_hosts`, `tmpfs`, `backend_options.docker.user`) are read here and used
//! by the docker backend; the local backend ignores them. The ones that reach the host
//! (`privileged`, `volumes`, `devices`, `tmpfs`, `network_mode`, `dns`, `dns_search`,
//! `extra_hosts`) are checked against the repository's trust by the compiler. `concurrency` is read here and applied by the server's queue.
//! Accepted and ignored: `workspace`, `variables` (a holder for YAML anchors), `ports`. A custom `clone:` section is accepted with a warning: the
//! built-in git clone is used instead.

use std::collections::BTreeMap;

use super::diag::{Issue, field, index};
use super::read;
use super::types::{Concurrency, OnFailure};
use super::when::{self, When};
use super::yaml::Node;

const TOP_KEYS: &[&str] = &[
    "steps",
    "services",
    "when",
    "depends_on",
    "runs_on",
    "matrix",
    "labels",
    "skip_clone",
    "clone",
    "workspace",
    "variables",
    "concurrency",
];

const STEP_KEYS: &[&str] = &[
    "name",
    "image",
    "commands",
    "entrypoint",
    "environment",
    "settings",
    "when",
    "depends_on",
    "failure",
    "detach",
    "directory",
    "volumes",
    "ports",
    "privileged",
    "pull",
    "backend_options",
    "devices",
    "dns",
    "dns_search",
    "extra_hosts",
    "network_mode",
    "tmpfs",
];

/// Keys that existed in older Woodpecker versions, with what to do instead.
const REMOVED_TOP_KEYS: &[(&str, &str)] = &[
    (
        "pipeline",
        "`pipeline:` is the old name of this section: rename it to `steps:`",
    ),
    (
        "platform",
        "`platform:` was removed: use `labels: {platform: …}`",
    ),
    (
        "branches",
        "`branches:` was removed: use `when: {branch: …}`",
    ),
];

const REMOVED_STEP_KEYS: &[(&str, &str)] = &[
    (
        "secrets",
        "`secrets:` was removed: use `environment: {NAME: {from_secret: name}}`",
    ),
    ("group", "`group:` was removed: use `depends_on:`"),
];

/// A dependency on another step or workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    /// Dropped silently when the target is absent (filtered out or not defined).
    pub optional: bool,
}

/// A step or service as written.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpec {
    pub name: String,
    /// Where it is in the document, e.g. `steps.build` or `services[0]`.
    pub field: String,
    pub image: String,
    pub commands: Vec<String>,
    pub entrypoint: Vec<String>,
    /// Raw values; resolved (secrets, JSON) by [`super::env`].
    pub environment: Vec<(String, Node)>,
    pub settings: Vec<(String, Node)>,
    pub when: When,
    /// `None`: the key is absent (sequential unless another step uses it).
    pub depends_on: Option<Vec<Dep>>,
    pub failure: OnFailure,
    pub detach: bool,
    pub directory: String,
    /// The container options of the docker backend.
    pub container: ContainerSpec,
}

/// Per-step container options (docker backend).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerSpec {
    pub pull: bool,
    pub privileged: bool,
    pub volumes: Vec<String>,
    pub devices: Vec<String>,
    pub network_mode: String,
    pub dns: Vec<String>,
    pub dns_search: Vec<String>,
    pub extra_hosts: Vec<String>,
    pub tmpfs: Vec<String>,
    /// `backend_options.docker.user`.
    pub user: String,
}

impl StepSpec {
    /// Upstream's rule: a step without commands, entrypoint and environment is a plugin.
    pub fn is_plugin(&self) -> bool {
        self.commands.is_empty() && self.entrypoint.is_empty() && self.environment.is_empty()
    }
}

/// A workflow file as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowSpec {
    pub when: When,
    pub depends_on: Vec<Dep>,
    pub concurrency: Option<Concurrency>,
    pub runs_on: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub skip_clone: bool,
    pub steps: Vec<StepSpec>,
    pub services: Vec<StepSpec>,
}

/// Read a workflow document. Every problem is pushed to `issues`; the spec holds what could
/// be read (callers stop on blocking issues).
pub fn parse(root: &Node, issues: &mut Vec<Issue>) -> WorkflowSpec {
    let mut spec = WorkflowSpec {
        runs_on: vec!["success".to_string()],
        ..WorkflowSpec::default()
    };
    if root.is_null() {
        issues.push(Issue::linter("", "the config is empty"));
        return spec;
    }
    let Some(entries) = root.as_map() else {
        issues.push(Issue::linter(
            "",
            format!(
                "the config must be a map of keys, found {}",
                root.kind_name()
            ),
        ));
        return spec;
    };
    for (key, value) in entries {
        if let Some((_, hint)) = REMOVED_TOP_KEYS.iter().find(|(k, _)| k == key) {
            issues.push(Issue::linter(key.as_str(), *hint));
            continue;
        }
        if !TOP_KEYS.contains(&key.as_str()) {
            issues.push(Issue::linter(key.as_str(), format!("unknown key `{key}`")));
            continue;
        }
        let result = match key.as_str() {
            "steps" => {
                spec.steps = parse_steps(value, "steps", issues);
                Ok(())
            }
            "services" => {
                spec.services = parse_steps(value, "services", issues);
                Ok(())
            }
            "when" => {
                spec.when = when::parse(value, "when", issues);
                Ok(())
            }
            "depends_on" => parse_deps(value, "depends_on").map(|d| spec.depends_on = d),
            "runs_on" => read::string_list(value, "runs_on").and_then(|r| {
                if let Some(bad) = r.iter().find(|s| *s != "success" && *s != "failure") {
                    return Err(Issue::linter(
                        "runs_on",
                        format!("runs_on takes success and/or failure, not `{bad}`"),
                    ));
                }
                if !r.is_empty() {
                    spec.runs_on = r;
                }
                Ok(())
            }),
            "labels" => {
                read::string_map(value, "labels").map(|l| spec.labels = l.into_iter().collect())
            }
            "skip_clone" => read::boolean(value, "skip_clone").map(|b| spec.skip_clone = b),
            "concurrency" => parse_concurrency(value).map(|c| spec.concurrency = c),
            "clone" => {
                if !value.is_null() {
                    issues.push(
                        Issue::linter(
                            "clone",
                            "custom clone steps are not supported; the built-in git clone is used",
                        )
                        .warning(),
                    );
                }
                Ok(())
            }
            // Validated by the matrix module before substitution; the rest are ignored.
            _ => Ok(()),
        };
        if let Err(e) = result {
            issues.push(e);
        }
    }
    if spec.steps.is_empty() && root.get("steps").is_none_or(|s| !has_entries(s)) {
        issues.push(Issue::linter("steps", "missing or empty `steps` section"));
    }
    check_unique(&spec, issues);
    spec
}

/// `concurrency: N` or `concurrency: {limit: N, group: name}` (N ≥ 1), as upstream's
/// schema has it; null is no limit.
fn parse_concurrency(node: &Node) -> Result<Option<Concurrency>, Issue> {
    if node.is_null() {
        return Ok(None);
    }
    let limit_of = |n: &Node, at: &str| -> Result<u32, Issue> {
        match n.as_str().map(str::parse::<u32>) {
            Some(Ok(limit)) if limit >= 1 && n.as_seq().is_none() => Ok(limit),
            _ => Err(Issue::linter(
                at,
                format!("`{at}` must be a whole number of at least 1"),
            )),
        }
    };
    if node.as_map().is_none() {
        let limit = limit_of(node, "concurrency")?;
        return Ok(Some(Concurrency {
            limit,
            group: String::new(),
        }));
    }
    let mut limit = None;
    let mut group = String::new();
    for (key, value) in node.as_map().into_iter().flatten() {
        match key.as_str() {
            "limit" => limit = Some(limit_of(value, "concurrency.limit")?),
            "group" => group = read::string(value, "concurrency.group")?,
            other => {
                return Err(Issue::linter(
                    field("concurrency", other),
                    format!("unknown key `{other}` (concurrency takes `limit` and `group`)"),
                ));
            }
        }
    }
    let limit =
        limit.ok_or_else(|| Issue::linter("concurrency", "`concurrency` needs a `limit`"))?;
    Ok(Some(Concurrency { limit, group }))
}

fn has_entries(node: &Node) -> bool {
    node.as_seq().is_some_and(|s| !s.is_empty()) || node.as_map().is_some_and(|m| !m.is_empty())
}

/// Step and service names must be unique within a workflow (dependencies refer to them).
fn check_unique(spec: &WorkflowSpec, issues: &mut Vec<Issue>) {
    let mut seen: Vec<&str> = Vec::new();
    for s in spec.services.iter().chain(&spec.steps) {
        if seen.contains(&s.name.as_str()) {
            issues.push(Issue::linter(
                field(&s.field, "name"),
                format!("step name `{}` is used more than once", s.name),
            ));
        }
        seen.push(&s.name);
    }
}

/// `steps:`/`services:` as a list of `{name, …}` or a map name → step.
fn parse_steps(node: &Node, area: &str, issues: &mut Vec<Issue>) -> Vec<StepSpec> {
    if node.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(items) = node.as_seq() {
        for (i, item) in items.iter().enumerate() {
            let at = index(area, i);
            let default_name = match area {
                "steps" => format!("step-{i}"),
                _ => format!("service-{i}"),
            };
            if let Some(step) = parse_step(item, &at, default_name, issues) {
                if area == "services"
                    && item
                        .get("name")
                        .and_then(Node::as_str)
                        .is_none_or(str::is_empty)
                {
                    issues.push(Issue::linter(
                        &at,
                        "a service in a list needs a `name`: other containers reach it by that name",
                    ));
                }
                out.push(step);
            }
        }
    } else if let Some(entries) = node.as_map() {
        for (name, item) in entries {
            let at = field(area, name);
            if let Some(step) = parse_step(item, &at, name.clone(), issues) {
                out.push(step);
            }
        }
    } else {
        issues.push(Issue::linter(
            area,
            format!(
                "expected a list or a map of steps, found {}",
                node.kind_name()
            ),
        ));
    }
    out
}

fn parse_step(
    node: &Node,
    at: &str,
    default_name: String,
    issues: &mut Vec<Issue>,
) -> Option<StepSpec> {
    let entries = match node.as_map() {
        Some(e) => e,
        None => {
            issues.push(Issue::linter(
                at,
                format!("a step must be a map, found {}", node.kind_name()),
            ));
            return None;
        }
    };
    let mut step = StepSpec {
        name: default_name,
        field: at.to_string(),
        image: String::new(),
        commands: Vec::new(),
        entrypoint: Vec::new(),
        environment: Vec::new(),
        settings: Vec::new(),
        when: When::default(),
        depends_on: None,
        failure: OnFailure::Fail,
        detach: false,
        directory: String::new(),
        container: ContainerSpec::default(),
    };
    for (key, value) in entries {
        let here = field(at, key);
        if let Some((_, hint)) = REMOVED_STEP_KEYS.iter().find(|(k, _)| k == key) {
            issues.push(Issue::linter(here, *hint));
            continue;
        }
        if !STEP_KEYS.contains(&key.as_str()) {
            issues.push(Issue::linter(here, format!("unknown key `{key}`")));
            continue;
        }
        let result = match key.as_str() {
            "name" => read::string(value, &here).map(|n| {
                if !n.is_empty() {
                    step.name = n;
                }
            }),
            "image" => read::string(value, &here).map(|v| step.image = v),
            "commands" => read::string_list(value, &here).map(|v| step.commands = v),
            "entrypoint" => read::string_list(value, &here).map(|v| step.entrypoint = v),
            "environment" => read::map(value, &here).map(|m| step.environment = m.to_vec()),
            "settings" => read::map(value, &here).map(|m| step.settings = m.to_vec()),
            "when" => {
                step.when = when::parse(value, &here, issues);
                Ok(())
            }
            "depends_on" => parse_deps(value, &here).map(|d| step.depends_on = Some(d)),
            "failure" => read::string(value, &here).and_then(|f| {
                step.failure = match f.as_str() {
                    "" | "fail" => OnFailure::Fail,
                    "ignore" => OnFailure::Ignore,
                    "cancel" => OnFailure::Cancel,
                    other => {
                        return Err(Issue::linter(
                            &here,
                            format!("failure must be fail, ignore or cancel, not `{other}`"),
                        ));
                    }
                };
                Ok(())
            }),
            "detach" => read::boolean(value, &here).map(|b| step.detach = b),
            "directory" => read::string(value, &here).map(|d| step.directory = d),
            "pull" => read::boolean(value, &here).map(|b| step.container.pull = b),
            "privileged" => read::boolean(value, &here).map(|b| step.container.privileged = b),
            "volumes" => read::string_list(value, &here).map(|v| step.container.volumes = v),
            "devices" => read::string_list(value, &here).map(|v| step.container.devices = v),
            "network_mode" => read::string(value, &here).map(|v| step.container.network_mode = v),
            "dns" => read::string_list(value, &here).map(|v| step.container.dns = v),
            "dns_search" => read::string_list(value, &here).map(|v| step.container.dns_search = v),
            "extra_hosts" => {
                read::string_list(value, &here).map(|v| step.container.extra_hosts = v)
            }
            "tmpfs" => read::string_list(value, &here).map(|v| step.container.tmpfs = v),
            "backend_options" => docker_user(value, &here).map(|u| step.container.user = u),
            _ => Ok(()),
        };
        if let Err(e) = result {
            issues.push(e);
        }
    }
    let image_has_wrong_type = node.get("image").is_some_and(|v| v.as_str().is_none());
    if step.image.is_empty() && !image_has_wrong_type {
        issues.push(Issue::linter(
            field(at, "image"),
            "missing `image` (for the local backend: the shell, e.g. sh or bash)",
        ));
    }
    if !step.settings.is_empty() {
        if !step.commands.is_empty() {
            issues.push(Issue::linter(
                at,
                "cannot configure both commands and settings",
            ));
        }
        if !step.entrypoint.is_empty() {
            issues.push(Issue::linter(
                at,
                "cannot configure both entrypoint and settings",
            ));
        }
        if !step.environment.is_empty() {
            issues.push(
                Issue::linter(at, "should not configure both environment and settings").warning(),
            );
        }
    }
    Some(step)
}

/// `backend_options`: `{docker: {user: …}}` is read; other backends' options are accepted.
fn docker_user(node: &Node, at: &str) -> Result<String, Issue> {
    if node.is_null() {
        return Ok(String::new());
    }
    read::map(node, at)?;
    let Some(docker) = node.get("docker").filter(|d| !d.is_null()) else {
        return Ok(String::new());
    };
    let here = field(at, "docker");
    let entries = read::map(docker, &here)?;
    if let Some(issue) = read::unknown_keys(entries, &["user"], &here)
        .into_iter()
        .next()
    {
        return Err(issue);
    }
    match docker.get("user") {
        Some(user) => read::string(user, &field(&here, "user")),
        None => Ok(String::new()),
    }
}

/// `depends_on`: a name, a list of names, or `{name, optional}` objects (mixed allowed).
pub fn parse_deps(node: &Node, at: &str) -> Result<Vec<Dep>, Issue> {
    if node.is_null() {
        return Ok(Vec::new());
    }
    if let Some(name) = node.as_str()
        && node.as_seq().is_none()
    {
        return Ok(vec![Dep {
            name: name.to_string(),
            optional: false,
        }]);
    }
    let Some(items) = node.as_seq() else {
        return Err(Issue::linter(
            at,
            format!("expected a step name or a list, found {}", node.kind_name()),
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let here = index(at, i);
        if let Some(object) = item.as_map() {
            for (k, _) in object {
                if k != "name" && k != "optional" {
                    return Err(Issue::linter(field(&here, k), format!("unknown key `{k}`")));
                }
            }
            let name = item
                .get("name")
                .map(|n| read::string(n, &field(&here, "name")))
                .transpose()?
                .filter(|n| !n.is_empty())
                .ok_or_else(|| Issue::linter(&here, "a dependency object needs a `name`"))?;
            let optional = item
                .get("optional")
                .map(|o| read::boolean(o, &field(&here, "optional")))
                .transpose()?
                .unwrap_or(false);
            out.push(Dep { name, optional });
        } else {
            out.push(Dep {
                name: read::string(item, &here)?,
                optional: false,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml;

    fn spec(doc: &str) -> (WorkflowSpec, Vec<Issue>) {
        let mut issues = Vec::new();
        let s = parse(&yaml::parse(doc).unwrap(), &mut issues);
        (s, issues)
    }

    fn fields(issues: &[Issue]) -> Vec<&str> {
        issues.iter().map(|i| i.field.as_str()).collect()
    }

    #[test]
    fn list_and_map_forms() {
        let (s, issues) = spec(
            "steps:\n  - name: a\n    image: sh\n    commands: echo a\n  - image: sh\n    commands: [x, 1]\n",
        );
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(s.steps[0].name, "a");
        assert_eq!(s.steps[0].commands, ["echo a"]);
        assert_eq!(s.steps[1].name, "step-1");
        assert_eq!(s.steps[1].commands, ["x", "1"]);
        let (s, issues) =
            spec("steps:\n  z: {image: sh, commands: [z]}\n  a: {name: renamed, image: sh}\n");
        assert!(issues.is_empty(), "{issues:?}");
        let names: Vec<&str> = s.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["z", "renamed"]);
        assert!(!s.steps[0].is_plugin());
        assert!(s.steps[1].is_plugin());
    }

    #[test]
    fn lint_errors_name_their_field() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[""]),
            ("- a", &[""]),
            ("pipeline: {a: {image: sh}}", &["pipeline", "steps"]),
            ("steps: {a: {image: sh}}\nfoo: 1", &["foo"]),
            (
                "steps: {a: {image: sh, comands: [x]}}",
                &["steps.a.comands"],
            ),
            (
                "steps: {a: {image: sh, secrets: [x]}}",
                &["steps.a.secrets"],
            ),
            ("steps: {a: {commands: [x]}}", &["steps.a.image"]),
            ("steps: {a: {image: [sh]}}", &["steps.a.image"]),
            (
                "steps: {a: {image: sh, failure: sometimes}}",
                &["steps.a.failure"],
            ),
            (
                "steps: {a: {image: sh, detach: maybe}}",
                &["steps.a.detach"],
            ),
            (
                "steps: {a: {image: sh, depends_on: {x: 1}}}",
                &["steps.a.depends_on"],
            ),
            (
                "steps: {a: {image: sh, depends_on: [{optional: true}]}}",
                &["steps.a.depends_on[0]"],
            ),
            (
                "steps: [{name: a, image: sh}, {name: a, image: sh}]",
                &["steps[1].name"],
            ),
            ("steps: {a: 5}", &["steps.a"]),
            ("steps: 5", &["steps", "steps"]),
            ("steps: []", &["steps"]),
            (
                "steps: {a: {image: sh, commands: x, settings: {a: 1}}}",
                &["steps.a"],
            ),
            ("steps: {a: {image: sh}}\nruns_on: [always]", &["runs_on"]),
            ("steps: {a: {image: sh}}\nlabels: [x]", &["labels"]),
            ("steps: {a: {image: sh}}\nskip_clone: 3", &["skip_clone"]),
        ];
        for (doc, want) in cases {
            let (_, issues) = spec(doc);
            assert_eq!(fields(&issues), *want, "{doc}: {issues:?}");
            assert!(issues.iter().all(|i| !i.warning), "{doc}");
        }
    }

    #[test]
    fn concurrency_forms() {
        let steps = "steps:\n  a: {image: sh}\n";
        let limit = |text: &str| {
            let (s, issues) = spec(&format!("{text}\n{steps}"));
            (s.concurrency, issues.len())
        };
        let c = |limit: u32, group: &str| {
            Some(Concurrency {
                limit,
                group: group.into(),
            })
        };
        assert_eq!(limit("concurrency: 1"), (c(1, ""), 0));
        assert_eq!(limit("concurrency: {limit: 2}"), (c(2, ""), 0));
        assert_eq!(
            limit("concurrency: {limit: 1, group: deploy-main}"),
            (c(1, "deploy-main"), 0)
        );
        assert_eq!(limit("concurrency:"), (None, 0));
        for bad in [
            "concurrency: 0",
            "concurrency: -1",
            "concurrency: many",
            "concurrency: {group: x}",
            "concurrency: {limit: 1, max: 2}",
            "concurrency: [1]",
        ] {
            assert_eq!(limit(bad), (None, 1), "{bad}");
        }
    }

    #[test]
    fn deps_forms() {
        let (s, _) = spec(
            "steps:\n  a: {image: sh, depends_on: b}\n  b: {image: sh, depends_on: [c, {name: d, optional: true}]}\n  c: {image: sh, depends_on: []}\n  d: {image: sh}\n",
        );
        let deps: Vec<Option<Vec<Dep>>> = s.steps.iter().map(|s| s.depends_on.clone()).collect();
        let dep = |n: &str, o: bool| Dep {
            name: n.into(),
            optional: o,
        };
        assert_eq!(
            deps,
            vec![
                Some(vec![dep("b", false)]),
                Some(vec![dep("c", false), dep("d", true)]),
                Some(vec![]),
                None
            ]
        );
    }

    #[test]
    fn warnings_do_not_block() {
        let (_, issues) = spec("steps: {a: {image: sh}}\nclone: {git: {image: x}}\n");
        assert_eq!(fields(&issues), ["clone"]);
        assert!(issues[0].warning);
    }
}
