//! The config compiler: config files + run metadata + secrets → [`CompileResult`].
//!
//! For each file (sorted by path, as upstream), in order:
//! 1. parse the raw text once to read `matrix:` ([`super::matrix`]); no matrix = one
//!    combination with no values;
//! 2. for each combination: substitute `${VAR}`s into the text ([`super::subst`]) with the
//!    run's `CI_*` variables, `CI_WORKFLOW_NAME`/`CI_WORKFLOW_NUMBER`, the matrix values and
//!    the pipeline variables; parse it ([`super::yaml`]) and lint it ([`super::workflow`]);
//! 3. drop the workflow if its `when` does not match ([`super::when`]); drop the steps whose
//!    `when` does not match; drop the workflow if no step is left;
//! 4. build each step: kind, environment ([`super::env`], secrets checked and collected for
//!    masking), `when_status`, and its full `depends_on` list ([`super::dag`]); the clone step
//!    comes first unless `skip_clone`.
//!
//! Then across workflows, as upstream: a workflow whose required `depends_on` names one that
//! does not run (filtered out, or defined by no file) is dropped, transitively; an optional
//! one that does not run is left out of its list. A name no file defines is also a warning
//! (upstream says nothing). A cycle is an error.
//!
//! Every problem becomes a [`PipelineError`] naming the file and field; identical errors from
//! several matrix combinations are reported once. If any error is not a warning, `workflows`
//! is empty (the pipeline gets status `error`). Nothing here does I/O or panics on input.

use std::collections::BTreeMap;

use super::dag;
use super::diag::{Issue, field};
use super::env::{Consumer, Converter, SecretScope, settings_key};
use super::lookup::workflow_name;
use super::matrix::{self, Axis};
use super::subst;
use super::types::{
    CompileInput, CompileResult, CompiledStep, CompiledWorkflow, ConfigFile, OnFailure,
    PipelineError, RunOn, StepKind,
};
use super::when::Facts;
use super::workflow::{self, StepSpec, WorkflowSpec};
use super::yaml;

/// Name of the built-in clone step.
pub const CLONE_STEP: &str = "clone";

/// Compile a pipeline's config files. See the module documentation for the rules.
pub fn compile(input: &CompileInput) -> CompileResult {
    let mut files: Vec<&ConfigFile> = input.files.iter().collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let defined: Vec<String> = files.iter().map(|f| workflow_name(&f.name)).collect();

    let mut errors = Errors::default();
    let mut built: Vec<Built> = Vec::new();
    for file in files {
        compile_file(input, file, &mut built, &mut errors);
    }
    let workflows = link_workflows(built, &defined, &mut errors);
    let blocked = errors.list.iter().any(|e| !e.is_warning);
    CompileResult {
        workflows: if blocked { Vec::new() } else { workflows },
        errors: errors.list,
    }
}

/// Errors of the whole compile, de-duplicated.
#[derive(Default)]
struct Errors {
    list: Vec<PipelineError>,
}

impl Errors {
    fn add(&mut self, file: &str, issue: Issue) {
        let error = issue.into_error(file);
        if !self.list.contains(&error) {
            self.list.push(error);
        }
    }

    /// Add all; true when one of them blocks.
    fn add_all(&mut self, file: &str, issues: Vec<Issue>) -> bool {
        let blocking = issues.iter().any(|i| !i.warning);
        for issue in issues {
            self.add(file, issue);
        }
        blocking
    }
}

/// A compiled workflow and where it came from, before cross-workflow linking.
struct Built {
    file: String,
    workflow: CompiledWorkflow,
    /// The workflows of `workflow.depends_on` it may do without (`optional: true`).
    optional: Vec<String>,
}

fn compile_file(
    input: &CompileInput,
    file: &ConfigFile,
    built: &mut Vec<Built>,
    errors: &mut Errors,
) {
    let name = workflow_name(&file.name);
    let raw = match yaml::parse(&file.data) {
        Ok(raw) => raw,
        Err(e) => {
            errors.add(&file.name, yaml_issue(e));
            return;
        }
    };
    let mut issues = Vec::new();
    let mut axes = matrix::parse(raw.get("matrix"), &mut issues);
    if errors.add_all(&file.name, issues) {
        return;
    }
    if axes.is_empty() {
        axes.push(Axis::new());
    }
    for axis in axes {
        let number = built.len() + 1;
        match compile_workflow(input, file, &name, number, &axis) {
            Outcome::Built(workflow, optional, issues) => {
                errors.add_all(&file.name, issues);
                built.push(Built {
                    file: file.name.clone(),
                    workflow: *workflow,
                    optional,
                });
            }
            Outcome::Filtered(issues) | Outcome::Failed(issues) => {
                errors.add_all(&file.name, issues);
            }
        }
    }
}

enum Outcome {
    /// Compiled, with its optional dependencies (the issues are warnings).
    Built(Box<CompiledWorkflow>, Vec<String>, Vec<Issue>),
    /// Filtered out by `when` or left without steps.
    Filtered(Vec<Issue>),
    /// Blocking problems.
    Failed(Vec<Issue>),
}

fn yaml_issue(e: yaml::YamlError) -> Issue {
    let message = if e.line > 0 {
        format!("invalid YAML on line {}: {}", e.line, e.message)
    } else {
        format!("invalid YAML: {}", e.message)
    };
    Issue::compiler("", message)
}

/// The variables of one workflow: `CI_*`, the workflow's own, the matrix values.
fn workflow_vars(
    input: &CompileInput,
    name: &str,
    number: usize,
    axis: &Axis,
) -> BTreeMap<String, String> {
    let mut vars = input.meta.env.clone();
    vars.insert("CI_WORKFLOW_NAME".into(), name.to_string());
    vars.insert("CI_WORKFLOW_NUMBER".into(), number.to_string());
    vars.extend(axis.iter().map(|(k, v)| (k.clone(), v.clone())));
    vars
}

fn compile_workflow(
    input: &CompileInput,
    file: &ConfigFile,
    name: &str,
    number: usize,
    axis: &Axis,
) -> Outcome {
    let meta = &input.meta;
    let vars = workflow_vars(input, name, number, axis);
    // Substitution sees pipeline variables only where no other variable has the name.
    let mut subst_vars = vars.clone();
    for (k, v) in &meta.variables {
        subst_vars.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let text = match subst::substitute(&file.data, &subst_vars) {
        Ok(text) => text,
        Err(e) => return Outcome::Failed(vec![Issue::generic("", e.to_string())]),
    };
    let root = match yaml::parse(&text) {
        Ok(root) => root,
        Err(e) => return Outcome::Failed(vec![yaml_issue(e)]),
    };
    let mut issues = Vec::new();
    let spec = workflow::parse(&root, &mut issues);
    if issues.iter().any(|i| !i.warning) {
        return Outcome::Failed(issues);
    }
    issues.extend(unprivileged_docker_plugins(&spec));

    // Filters see the pipeline variables too, but never in place of a run variable: a manual
    // run cannot make `evaluate: CI_COMMIT_BRANCH == "main"` true on another branch.
    let mut filter_env = vars.clone();
    add_pipeline_variables(&mut filter_env, &meta.variables, &vars);
    let facts = Facts {
        meta,
        matrix: axis,
        env: &filter_env,
    };
    match spec.when.matches(&facts, false) {
        Ok(true) => {}
        Ok(false) => return Outcome::Filtered(issues),
        Err(e) => {
            issues.push(Issue::compiler("when", e));
            return Outcome::Failed(issues);
        }
    }

    // Steps whose `when` passes, services first.
    let mut chosen: Vec<(&StepSpec, bool)> = Vec::new();
    for (spec_step, service) in spec
        .services
        .iter()
        .map(|s| (s, true))
        .chain(spec.steps.iter().map(|s| (s, false)))
    {
        match spec_step.when.matches(&facts, true) {
            Ok(true) => chosen.push((spec_step, service)),
            Ok(false) => {}
            Err(e) => issues.push(Issue::compiler(field(&spec_step.field, "when"), e)),
        }
    }
    if issues.iter().any(|i| !i.warning) {
        return Outcome::Failed(issues);
    }
    if !chosen.iter().any(|(_, service)| !service) {
        return Outcome::Filtered(issues);
    }

    match build_steps(input, &spec, &chosen, &vars, &facts, &mut issues) {
        Some(steps) => {
            let mut labels = spec.labels.clone();
            if !meta.repo.is_empty() {
                labels.insert("repo".into(), meta.repo.clone());
            }
            Outcome::Built(
                Box::new(CompiledWorkflow {
                    name: name.to_string(),
                    environ: axis.clone(),
                    labels,
                    depends_on: spec.depends_on.iter().map(|d| d.name.clone()).collect(),
                    runs_on: spec.runs_on.clone(),
                    skip_clone: spec.skip_clone,
                    steps,
                    concurrency: spec.concurrency.clone(),
                }),
                // A name also listed as required is required.
                spec.depends_on
                    .iter()
                    .filter(|d| {
                        d.optional
                            && !spec
                                .depends_on
                                .iter()
                                .any(|r| r.name == d.name && !r.optional)
                    })
                    .map(|d| d.name.clone())
                    .collect(),
                issues,
            )
        }
        None => Outcome::Failed(issues),
    }
}

/// The compiled steps (clone first), or `None` after pushing the problems to `issues`.
fn build_steps(
    input: &CompileInput,
    spec: &WorkflowSpec,
    chosen: &[(&StepSpec, bool)],
    vars: &BTreeMap<String, String>,
    facts: &Facts<'_>,
    issues: &mut Vec<Issue>,
) -> Option<Vec<CompiledStep>> {
    let clone = (!spec.skip_clone).then_some(CLONE_STEP);
    if clone.is_some()
        && let Some((s, _)) = chosen.iter().find(|(s, _)| s.name == CLONE_STEP)
    {
        issues.push(Issue::linter(
            field(&s.field, "name"),
            "the step name `clone` is reserved for the built-in clone step (or set `skip_clone: true`)",
        ));
        return None;
    }

    let items: Vec<dag::Item<'_>> = chosen
        .iter()
        .map(|(s, service)| dag::Item {
            name: &s.name,
            field: &s.field,
            declared: s.depends_on.as_deref(),
            service: *service,
        })
        .collect();
    let defined: Vec<&str> = spec
        .services
        .iter()
        .chain(&spec.steps)
        .map(|s| s.name.as_str())
        .collect();
    let deps = match dag::resolve(&items, &defined, clone) {
        Ok(deps) => deps,
        Err(found) => {
            issues.extend(found);
            return None;
        }
    };

    let scope = SecretScope {
        secrets: &input.secrets,
        event: input.meta.event.as_str(),
    };
    let mut steps = Vec::with_capacity(chosen.len() + 1);
    if clone.is_some() {
        steps.push(clone_step(input, vars));
    }
    let mut failed = false;
    for ((s, service), depends_on) in chosen.iter().zip(deps) {
        let number = steps.len() + 1;
        match build_step(input, s, *service, number, vars, &scope, facts) {
            Ok(mut step) => {
                step.depends_on = depends_on;
                steps.push(step);
            }
            Err(found) => {
                issues.extend(found);
                failed = true;
            }
        }
    }
    (!failed).then_some(steps)
}

/// The environment every step starts from: run, workflow and step variables.
fn base_env(
    vars: &BTreeMap<String, String>,
    step_name: &str,
    number: usize,
) -> BTreeMap<String, String> {
    let mut env = vars.clone();
    env.insert("CI_STEP_NAME".into(), step_name.to_string());
    env.insert("CI_STEP_NUMBER".into(), number.to_string());
    if let Some(pipeline) = vars.get("CI_PIPELINE_URL").filter(|u| !u.is_empty()) {
        env.insert("CI_STEP_URL".into(), format!("{pipeline}/{number}"));
    }
    env
}

/// Adds the pipeline variables (a manual run's, a restart's, a cron job's) to `env`, except
/// where the run already set the name (`CI_*`, the workflow's, the matrix values): what the
/// person asking for a run types never stands in for what the server computed.
///
/// Only steps that run the author's commands get them (upstream's "non-plugin" environment):
/// the clone and plugin steps run images whose behaviour depends on their environment
/// (`PATH`, `GIT_*`, `PLUGIN_*`), and with `privileged_plugins` a plugin is a privileged
/// container.
fn add_pipeline_variables(
    env: &mut BTreeMap<String, String>,
    variables: &BTreeMap<String, String>,
    run: &BTreeMap<String, String>,
) {
    for (k, v) in variables {
        if !run.contains_key(k) && !crate::variables::is_reserved(k) {
            env.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

fn clone_step(input: &CompileInput, vars: &BTreeMap<String, String>) -> CompiledStep {
    let mut environment = base_env(vars, CLONE_STEP, 1);
    // The settings upstream gives its clone plugin.
    environment.insert("PLUGIN_DEPTH".into(), "0".into());
    if input.meta.event == crate::event::WebhookEvent::Tag {
        environment.insert("PLUGIN_TAGS".into(), "true".into());
    }
    CompiledStep {
        name: CLONE_STEP.to_string(),
        kind: StepKind::Clone,
        image: "git".to_string(),
        environment,
        when_status: vec![RunOn::Success],
        failure: OnFailure::Fail,
        hardened: true,
        ..CompiledStep::default()
    }
}

fn build_step(
    input: &CompileInput,
    s: &StepSpec,
    service: bool,
    number: usize,
    vars: &BTreeMap<String, String>,
    scope: &SecretScope<'_>,
    facts: &Facts<'_>,
) -> Result<CompiledStep, Vec<Issue>> {
    let is_plugin = s.is_plugin();
    let kind = if service {
        StepKind::Service
    } else if is_plugin {
        StepKind::Plugin
    } else {
        StepKind::Commands
    };
    let mut environment = base_env(vars, &s.name, number);
    if !is_plugin {
        add_pipeline_variables(&mut environment, &input.meta.variables, vars);
    }
    let mut conv = Converter {
        scope,
        step: Consumer {
            name: &s.name,
            image: &s.image,
            is_plugin,
        },
        used: Vec::new(),
    };
    let mut issues = Vec::new();
    let settings_at = field(&s.field, "settings");
    for (key, value) in &s.settings {
        match conv.value(value, &field(&settings_at, key)) {
            Ok(Some(v)) if !key.is_empty() => {
                environment.insert(settings_key(key), v);
            }
            Ok(_) => {}
            Err(e) => issues.push(e),
        }
    }
    let env_at = field(&s.field, "environment");
    for (key, value) in &s.environment {
        match conv.value(value, &field(&env_at, key)) {
            Ok(Some(v)) if !key.is_empty() => {
                environment.insert(key.clone(), v);
            }
            Ok(_) => {}
            Err(e) => issues.push(e),
        }
    }
    issues.extend(untrusted_options(input, s, is_plugin));
    if !issues.is_empty() {
        return Err(issues);
    }
    let c = &s.container;
    Ok(CompiledStep {
        name: s.name.clone(),
        kind,
        image: s.image.clone(),
        commands: s.commands.clone(),
        entrypoint: s.entrypoint.clone(),
        environment,
        secrets: conv.used,
        depends_on: Vec::new(),
        failure: s.failure,
        when_status: s.when.statuses(facts),
        detach: service || s.detach,
        directory: s.directory.clone(),
        registries: Vec::new(),
        pull: c.pull,
        privileged: c.privileged,
        volumes: c.volumes.clone(),
        devices: c.devices.clone(),
        network_mode: c.network_mode.clone(),
        dns: c.dns.clone(),
        dns_search: c.dns_search.clone(),
        extra_hosts: c.extra_hosts.clone(),
        tmpfs: c.tmpfs.clone(),
        user: c.user.clone(),
        hardened: !input.trust.security && !c.privileged,
    })
}

/// Options that reach the host need the repository's matching trust (set by an instance
/// admin): `privileged` and `devices` need `trusted.security` (or, for `privileged`, a plugin
/// image the admin listed in `pipeline.privileged_plugins`), host `volumes` and `tmpfs` need
/// `trusted.volumes`, `network_mode` (except `none`, which only takes the network away),
/// `dns`, `dns_search` and `extra_hosts` need `trusted.network`. Otherwise the pipeline errors
/// before anything runs.
fn untrusted_options(input: &CompileInput, s: &StepSpec, is_plugin: bool) -> Vec<Issue> {
    let c = &s.container;
    let trust = input.trust;
    let privileged_plugin = is_plugin && privileged_image(&input.privileged_plugins, &s.image);
    let mut found = Vec::new();
    let mut refuse = |key: &str, flag: &str| {
        found.push(Issue::linter(
            field(&s.field, key),
            format!(
                "`{key}` needs a repository trusted for {flag} (an instance admin sets \
                 `trusted.{flag}` on the repository)"
            ),
        ));
    };
    if c.privileged && !trust.security && !privileged_plugin {
        refuse("privileged", "security");
    }
    if !c.devices.is_empty() && !trust.security {
        refuse("devices", "security");
    }
    if !c.volumes.is_empty() && !trust.volumes {
        refuse("volumes", "volumes");
    }
    if !c.tmpfs.is_empty() && !trust.volumes {
        refuse("tmpfs", "volumes");
    }
    if !c.network_mode.is_empty() && c.network_mode != "none" && !trust.network {
        refuse("network_mode", "network");
    }
    for (key, set) in [
        ("dns", &c.dns),
        ("dns_search", &c.dns_search),
        ("extra_hosts", &c.extra_hosts),
    ] {
        if !set.is_empty() && !trust.network {
            refuse(key, "network");
        }
    }
    found
}

/// Images that older Woodpecker versions ran privileged by default.
const FORMERLY_PRIVILEGED: &[&str] = &[
    "plugins/docker",
    "plugins/gcr",
    "plugins/ecr",
    "woodpeckerci/plugin-docker-buildx",
];

/// A warning for each step using a formerly privileged plugin without `privileged: true`: it
/// runs unprivileged here, as in upstream since 2.x, and a docker build inside usually fails.
fn unprivileged_docker_plugins(spec: &WorkflowSpec) -> Vec<Issue> {
    let formerly: Vec<String> = FORMERLY_PRIVILEGED.iter().map(|i| i.to_string()).collect();
    spec.services
        .iter()
        .chain(&spec.steps)
        .filter(|s| !s.container.privileged && privileged_image(&formerly, &s.image))
        .map(|s| {
            Issue::linter(
                &s.field,
                format!(
                    "the formerly privileged plugin `{}` is no longer privileged by default; if \
                     it needs to be, set `privileged: true` (allowed for images an admin lists \
                     in `pipeline.privileged_plugins`)",
                    s.image
                ),
            )
            .warning()
        })
        .collect()
}

/// Whether `image` is one of `allowed` (compared without the tag and a `docker.io/` prefix).
fn privileged_image(allowed: &[String], image: &str) -> bool {
    let name = |i: &str| {
        let i = i.strip_prefix("docker.io/").unwrap_or(i);
        let last = i.rsplit('/').next().unwrap_or(i);
        match last.find([':', '@']) {
            Some(at) => i[..i.len() - last.len() + at].to_string(),
            None => i.to_string(),
        }
    };
    let wanted = name(image);
    allowed.iter().any(|a| name(a) == wanted)
}

/// Cross-workflow `depends_on`, as upstream's builder: drop every workflow with a required
/// dependency that is not among the workflows left, until none is dropped (so one that
/// required a dropped workflow goes too), then remove the optional dependencies that are not
/// left from the lists. A cycle is an error. A name no file defines is likely a typo: a warning.
fn link_workflows(
    built: Vec<Built>,
    defined: &[String],
    errors: &mut Errors,
) -> Vec<CompiledWorkflow> {
    for b in &built {
        for dep in b
            .workflow
            .depends_on
            .iter()
            .filter(|d| !defined.contains(d))
        {
            let message = if b.optional.contains(dep) {
                format!("optional dependency `{dep}` is left out: no workflow file defines it")
            } else {
                format!(
                    "depends on `{dep}`, which no workflow file defines: this workflow is not \
                     run, nor any that requires it"
                )
            };
            errors.add(&b.file, Issue::compiler("depends_on", message).warning());
        }
    }
    let mut kept: Vec<Built> = built;
    loop {
        let names: Vec<String> = kept.iter().map(|b| b.workflow.name.clone()).collect();
        let before = kept.len();
        kept.retain(|b| {
            b.workflow
                .depends_on
                .iter()
                .all(|d| names.contains(d) || b.optional.contains(d))
        });
        if kept.len() == before {
            break;
        }
    }
    let names: Vec<String> = kept.iter().map(|b| b.workflow.name.clone()).collect();
    for b in &mut kept {
        b.workflow.depends_on.retain(|d| names.contains(d));
    }
    if let Some((file, cycle)) = workflow_cycle(&kept) {
        errors.add(
            &file,
            Issue::compiler(
                "depends_on",
                format!("workflow dependency cycle: {}", cycle.join(" -> ")),
            ),
        );
    }
    kept.into_iter().map(|b| b.workflow).collect()
}

fn workflow_cycle(kept: &[Built]) -> Option<(String, Vec<String>)> {
    let items: Vec<dag::Item<'_>> = kept
        .iter()
        .map(|b| dag::Item {
            name: &b.workflow.name,
            field: "",
            declared: None,
            service: false,
        })
        .collect();
    let deps: Vec<Vec<String>> = kept.iter().map(|b| b.workflow.depends_on.clone()).collect();
    let cycle = dag::find_cycle(&items, &deps)?;
    let file = kept
        .iter()
        .find(|b| b.workflow.name == cycle[0])
        .map(|b| b.file.clone())
        .unwrap_or_default();
    Some((file, cycle))
}

#[cfg(test)]
#[path = "compile_tests.rs"]
pub(crate) mod tests;
