//! The compiler's behaviour as a table of configs and the exact results they give, plus a
//! property test: random bytes and random YAML never panic and keep the result's invariants.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::event::WebhookEvent;
use crate::types::{Commit, Metadata, SecretValue, Trust};

// ---------------------------------------------------------------------------------------
// Builders for inputs and expected outputs.

pub(crate) fn meta() -> Metadata {
    Metadata {
        event: WebhookEvent::Push,
        commit: Commit {
            sha: "abc123".into(),
            branch: "main".into(),
            git_ref: "refs/heads/main".into(),
            message: "change things".into(),
            ..Commit::default()
        },
        repo: "alice/hello".into(),
        pipeline_number: 7,
        env: BTreeMap::from([
            ("CI".into(), "woodpecker".into()),
            ("CI_COMMIT_BRANCH".into(), "main".into()),
        ]),
        ..Metadata::default()
    }
}

fn file(name: &str, data: &str) -> ConfigFile {
    ConfigFile {
        name: name.into(),
        data: data.into(),
    }
}

fn secret(name: &str, value: &str, events: &[&str], images: &[&str]) -> SecretValue {
    SecretValue {
        name: name.into(),
        value: value.into(),
        events: events.iter().map(|s| s.to_string()).collect(),
        images: images.iter().map(|s| s.to_string()).collect(),
    }
}

fn run(files: &[ConfigFile], meta: Metadata, secrets: Vec<SecretValue>) -> CompileResult {
    compile(&CompileInput {
        files: files.to_vec(),
        meta,
        secrets,
        ..CompileInput::default()
    })
}

fn one(data: &str) -> CompileResult {
    run(&[file(".woodpecker.yaml", data)], meta(), Vec::new())
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The environment the compiler gives a step of the default `meta()`.
fn env(
    wf: &str,
    wf_no: usize,
    step: &str,
    step_no: usize,
    extra: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut e: BTreeMap<String, String> = BTreeMap::from([
        ("CI".into(), "woodpecker".into()),
        ("CI_COMMIT_BRANCH".into(), "main".into()),
        ("CI_WORKFLOW_NAME".into(), wf.into()),
        ("CI_WORKFLOW_NUMBER".into(), wf_no.to_string()),
        ("CI_STEP_NAME".into(), step.into()),
        ("CI_STEP_NUMBER".into(), step_no.to_string()),
    ]);
    for (k, v) in extra {
        e.insert(k.to_string(), v.to_string());
    }
    e
}

fn clone(wf: &str, wf_no: usize) -> CompiledStep {
    CompiledStep {
        name: "clone".into(),
        kind: StepKind::Clone,
        image: "git".into(),
        environment: env(wf, wf_no, "clone", 1, &[("PLUGIN_DEPTH", "0")]),
        when_status: vec![RunOn::Success],
        hardened: true,
        ..CompiledStep::default()
    }
}

/// A commands step of workflow `wf` number `wf_no`, at position `no` (1-based, clone = 1).
fn cmd(
    wf: (&str, usize),
    no: usize,
    name: &str,
    image: &str,
    commands: &[&str],
    deps: &[&str],
) -> CompiledStep {
    CompiledStep {
        name: name.into(),
        kind: StepKind::Commands,
        image: image.into(),
        commands: strings(commands),
        environment: env(wf.0, wf.1, name, no, &[]),
        depends_on: strings(deps),
        when_status: vec![RunOn::Success],
        hardened: true,
        ..CompiledStep::default()
    }
}

fn workflow(name: &str, steps: Vec<CompiledStep>) -> CompiledWorkflow {
    CompiledWorkflow {
        name: name.into(),
        labels: BTreeMap::from([("repo".into(), "alice/hello".into())]),
        runs_on: strings(&["success"]),
        steps,
        ..CompiledWorkflow::default()
    }
}

fn ok(workflows: Vec<CompiledWorkflow>) -> CompileResult {
    CompileResult {
        workflows,
        errors: Vec::new(),
    }
}

/// `(type, file, field, is_warning)` of each error, for compact assertions.
fn error_keys(r: &CompileResult) -> Vec<(String, String, String, bool)> {
    r.errors
        .iter()
        .map(|e| {
            (
                e.kind.clone(),
                e.data["file"].as_str().unwrap_or("").to_string(),
                e.data["field"].as_str().unwrap_or("").to_string(),
                e.is_warning,
            )
        })
        .collect()
}

fn key(kind: &str, file: &str, field: &str) -> (String, String, String, bool) {
    (kind.into(), file.into(), field.into(), false)
}

fn warning_key(kind: &str, file: &str, field: &str) -> (String, String, String, bool) {
    (kind.into(), file.into(), field.into(), true)
}

const W: (&str, usize) = ("woodpecker", 1);

// ---------------------------------------------------------------------------------------
// Successful compiles, compared in full.

#[test]
fn list_steps_run_in_sequence_after_clone() {
    let got = one(
        "steps:\n  - name: build\n    image: sh\n    commands: [echo build]\n  - name: test\n    image: bash\n    commands: echo test\n",
    );
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![
                clone("woodpecker", 1),
                cmd(W, 2, "build", "sh", &["echo build"], &["clone"]),
                cmd(W, 3, "test", "bash", &["echo test"], &["build"]),
            ]
        )])
    );
}

#[test]
fn map_steps_keep_order_and_skip_clone() {
    let got = one(
        "skip_clone: true\nsteps:\n  zeta:\n    image: sh\n    commands: [z]\n  alpha:\n    image: sh\n    commands: [a]\n",
    );
    let mut wf = workflow(
        "woodpecker",
        vec![
            cmd(W, 1, "zeta", "sh", &["z"], &[]),
            cmd(W, 2, "alpha", "sh", &["a"], &["zeta"]),
        ],
    );
    wf.skip_clone = true;
    assert_eq!(got, ok(vec![wf]));
}

#[test]
fn without_clone_drops_the_clone_step_and_the_waits_for_it() {
    let got = one(
        "steps:\n  a: {image: sh, commands: [a]}\n  b: {image: sh, commands: [b], depends_on: [a]}\n",
    );
    let wf = got.workflows[0].clone();
    assert!(wf.steps[0].kind == StepKind::Clone && !wf.skip_clone);
    let wf = wf.without_clone();
    assert!(wf.skip_clone);
    let names: Vec<(&str, &[String])> = wf
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.depends_on.as_slice()))
        .collect();
    assert_eq!(names, [("a", &[][..]), ("b", &["a".to_string()][..])]);
}

#[test]
fn depends_on_makes_a_dag() {
    let got = one(
        "steps:\n  a: {image: sh, commands: [a]}\n  b: {image: sh, commands: [b], depends_on: [a]}\n  c: {image: sh, commands: [c], depends_on: []}\n  d: {image: sh, commands: [d], depends_on: [b, c]}\n",
    );
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![
                clone("woodpecker", 1),
                cmd(W, 2, "a", "sh", &["a"], &["clone"]),
                cmd(W, 3, "b", "sh", &["b"], &["a"]),
                cmd(W, 4, "c", "sh", &["c"], &["clone"]),
                cmd(W, 5, "d", "sh", &["d"], &["b", "c"]),
            ]
        )])
    );
}

#[test]
fn services_are_detached_and_precede_the_steps() {
    let got = one(
        "services:\n  db:\n    image: postgres\n    environment: {POSTGRES_PASSWORD: pw}\nsteps:\n  test: {image: sh, commands: [psql]}\n",
    );
    let mut db = cmd(W, 2, "db", "postgres", &[], &["clone"]);
    db.kind = StepKind::Service;
    db.detach = true;
    db.environment
        .insert("POSTGRES_PASSWORD".into(), "pw".into());
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![
                clone("woodpecker", 1),
                db,
                cmd(W, 3, "test", "sh", &["psql"], &["clone", "db"]),
            ]
        )])
    );
}

#[test]
fn matrix_makes_one_workflow_per_combination() {
    let got = run(
        &[file(
            ".woodpecker/go.yaml",
            "matrix:\n  GO: ['1.21', '1.22']\nsteps:\n  test:\n    image: golang:${GO}\n    commands: [go test]\n  only-new:\n    image: sh\n    commands: [echo new]\n    when:\n      matrix: {GO: '1.22'}\n",
        )],
        meta(),
        Vec::new(),
    );
    let mk = |no: usize, go: &str, extra_step: bool| {
        let wf = ("go", no);
        let mut steps = vec![
            clone("go", no),
            cmd(
                wf,
                2,
                "test",
                &format!("golang:{go}"),
                &["go test"],
                &["clone"],
            ),
        ];
        if extra_step {
            steps.push(cmd(wf, 3, "only-new", "sh", &["echo new"], &["test"]));
        }
        for s in &mut steps {
            s.environment.insert("GO".into(), go.into());
        }
        let mut w = workflow("go", steps);
        w.environ = BTreeMap::from([("GO".into(), go.into())]);
        w
    };
    assert_eq!(got, ok(vec![mk(1, "1.21", false), mk(2, "1.22", true)]));
}

#[test]
fn workflow_when_filters_everything_out() {
    let got = one("when:\n  event: tag\nsteps:\n  a: {image: sh, commands: [a]}\n");
    assert_eq!(got, ok(vec![]));
    // A workflow whose steps are all filtered out is dropped too.
    let got = one("steps:\n  a: {image: sh, commands: [a], when: {branch: dev}}\n");
    assert_eq!(got, ok(vec![]));
}

#[test]
fn step_filters_by_event_branch_and_path() {
    let config = "steps:\n  on-main: {image: sh, commands: [m], when: {branch: main}}\n  on-tag: {image: sh, commands: [t], when: {event: tag}}\n  docs: {image: sh, commands: [d], when: {path: 'docs/**'}}\n  either: {image: sh, commands: [e], when: [{event: tag}, {branch: 'release/*'}]}\n";
    let names = |r: &CompileResult| -> Vec<String> {
        r.workflows[0]
            .steps
            .iter()
            .map(|s| s.name.clone())
            .collect()
    };
    let mut m = meta();
    m.commit.changed_files = strings(&["src/lib.rs"]);
    let r = run(&[file(".woodpecker.yml", config)], m.clone(), Vec::new());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(names(&r), ["clone", "on-main"]);

    m.commit.changed_files = strings(&["docs/index.md"]);
    let r = run(&[file(".woodpecker.yml", config)], m.clone(), Vec::new());
    assert_eq!(names(&r), ["clone", "on-main", "docs"]);

    // Tags: branch filters are ignored, path filters do not apply.
    let mut tag = Metadata {
        event: WebhookEvent::Tag,
        ..m
    };
    tag.commit.git_ref = "refs/tags/v1".into();
    tag.commit.branch = "dev".into();
    let r = run(&[file(".woodpecker.yml", config)], tag, Vec::new());
    assert_eq!(names(&r), ["clone", "on-main", "on-tag", "docs", "either"]);
    let r = &r.workflows[0].steps;
    assert_eq!(r[4].depends_on, ["docs"]);
    assert_eq!(r[0].environment["PLUGIN_TAGS"], "true");
}

#[test]
fn status_and_failure() {
    let got = one(
        "steps:\n  build: {image: sh, commands: [make], failure: ignore}\n  notify:\n    image: sh\n    commands: [notify]\n    when:\n      status: [success, failure]\n  on-fail: {image: sh, commands: [x], failure: cancel, when: {status: failure}}\n",
    );
    let mut build = cmd(W, 2, "build", "sh", &["make"], &["clone"]);
    build.failure = OnFailure::Ignore;
    let mut notify = cmd(W, 3, "notify", "sh", &["notify"], &["build"]);
    notify.when_status = vec![RunOn::Success, RunOn::Failure];
    let mut on_fail = cmd(W, 4, "on-fail", "sh", &["x"], &["notify"]);
    on_fail.failure = OnFailure::Cancel;
    on_fail.when_status = vec![RunOn::Failure];
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![clone("woodpecker", 1), build, notify, on_fail]
        )])
    );
}

#[test]
fn anchors_aliases_and_merge_keys() {
    let got = one(
        "variables:\n  - &image golang:1.22\n  - &env\n    A: 1\n    B: one\nsteps:\n  build:\n    image: *image\n    commands: &cmds [go build]\n    environment:\n      <<: *env\n      B: two\n  again:\n    image: *image\n    commands: *cmds\n",
    );
    let mut build = cmd(W, 2, "build", "golang:1.22", &["go build"], &["clone"]);
    build.environment.insert("A".into(), "1".into());
    build.environment.insert("B".into(), "two".into());
    let again = cmd(W, 3, "again", "golang:1.22", &["go build"], &["build"]);
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![clone("woodpecker", 1), build, again]
        )])
    );
}

#[test]
fn secrets_and_plugin_settings() {
    let secrets = vec![
        secret("token", "t0k3n", &["push"], &[]),
        secret("s3_key", "k3y", &[], &["plugins/s3"]),
    ];
    let got = run(
        &[file(
            ".woodpecker.yaml",
            "steps:\n  use:\n    image: sh\n    commands: [./deploy]\n    environment:\n      TOKEN: {from_secret: TOKEN}\n      LEVEL: 3\n  upload:\n    image: plugins/s3:1\n    settings:\n      access-key: {from_secret: s3_key}\n      source: [a, b]\n      tags: {k: v}\n      dry_run: false\n",
        )],
        meta(),
        secrets,
    );
    let mut using = cmd(W, 2, "use", "sh", &["./deploy"], &["clone"]);
    using.environment.insert("TOKEN".into(), "t0k3n".into());
    using.environment.insert("LEVEL".into(), "3".into());
    using.secrets = strings(&["t0k3n"]);
    let mut upload = cmd(W, 3, "upload", "plugins/s3:1", &[], &["use"]);
    upload.kind = StepKind::Plugin;
    for (k, v) in [
        ("PLUGIN_ACCESS_KEY", "k3y"),
        ("PLUGIN_SOURCE", "a,b"),
        ("PLUGIN_TAGS", r#"{"k":"v"}"#),
        ("PLUGIN_DRY_RUN", "false"),
    ] {
        upload.environment.insert(k.into(), v.into());
    }
    upload.secrets = strings(&["k3y"]);
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![clone("woodpecker", 1), using, upload]
        )])
    );
}

/// Upstream's linter only warns about `settings` beside `environment`, and its compiler runs
/// such a step as a commands step (its plugin rule needs no environment): the settings still
/// become `PLUGIN_*` variables, but plugin-only secrets, privileged plugins and the plugin
/// treatment of pipeline variables do not apply.
#[test]
fn settings_with_environment_warn_and_run_as_a_commands_step() {
    let config = "steps:\n  publish:\n    image: plugins/s3\n    settings: {target: prod}\n    environment: {REGION: eu}\n";
    let mut m = meta();
    m.variables = BTreeMap::from([("NOTE".into(), "from-the-run".into())]);
    let got = run(&[file(".woodpecker.yaml", config)], m, Vec::new());
    assert_eq!(
        error_keys(&got),
        [warning_key("linter", ".woodpecker.yaml", "steps.publish")]
    );
    let mut publish = cmd(W, 2, "publish", "plugins/s3", &[], &["clone"]);
    for (k, v) in [
        ("PLUGIN_TARGET", "prod"),
        ("REGION", "eu"),
        ("NOTE", "from-the-run"),
    ] {
        publish.environment.insert(k.into(), v.into());
    }
    assert_eq!(
        got.workflows,
        [workflow(
            "woodpecker",
            vec![clone("woodpecker", 1), publish]
        )]
    );

    // A secret for the plugin's image only, and the image listed as a privileged plugin.
    let config = "steps:\n  publish:\n    image: plugins/s3\n    privileged: true\n    settings: {key: {from_secret: s3_key}}\n    environment: {REGION: eu}\n";
    let got = compile(&CompileInput {
        files: vec![file(".woodpecker.yaml", config)],
        meta: meta(),
        secrets: vec![secret("s3_key", "k3y", &[], &["plugins/s3"])],
        privileged_plugins: vec!["plugins/s3".into()],
        ..CompileInput::default()
    });
    assert_eq!(
        error_keys(&got),
        [
            warning_key("linter", ".woodpecker.yaml", "steps.publish"),
            key("compiler", ".woodpecker.yaml", "steps.publish.settings.key"),
            key("linter", ".woodpecker.yaml", "steps.publish.privileged"),
        ]
    );
}

#[test]
fn variables_substitution_and_precedence() {
    let mut m = meta();
    m.variables = BTreeMap::from([
        ("DEPLOY".into(), "yes".into()),
        ("CI_COMMIT_BRANCH".into(), "overridden".into()),
    ]);
    let got = run(
        &[file(
            ".woodpecker.yml",
            "steps:\n  a:\n    image: sh\n    commands:\n      - echo ${CI_COMMIT_BRANCH} $${HOME} ${DEPLOY}\n    environment:\n      DEPLOY: no-from-step\n",
        )],
        m,
        Vec::new(),
    );
    // Substitution: CI_* win over pipeline variables. The step environment: pipeline variables
    // never replace a run variable, and the step's own `environment` wins over them. The
    // clone gets none of them.
    let mut a = cmd(W, 2, "a", "sh", &["echo main ${HOME} yes"], &["clone"]);
    a.environment.insert("DEPLOY".into(), "no-from-step".into());
    let c = clone("woodpecker", 1);
    assert_eq!(got, ok(vec![workflow("woodpecker", vec![c, a])]));
}

#[test]
fn several_files_with_workflow_dependencies() {
    let files = [
        file(
            ".woodpecker/test.yaml",
            "steps:\n  t: {image: sh, commands: [t]}\n",
        ),
        file(
            ".woodpecker/deploy.yaml",
            "depends_on: [test]\nruns_on: [success, failure]\nlabels: {platform: linux/amd64}\nsteps:\n  d: {image: sh, commands: [d]}\n",
        ),
    ];
    let got = run(&files, meta(), Vec::new());
    // Files are taken in name order: deploy is workflow 1.
    let mut deploy = workflow(
        "deploy",
        vec![
            clone("deploy", 1),
            cmd(("deploy", 1), 2, "d", "sh", &["d"], &["clone"]),
        ],
    );
    deploy.depends_on = strings(&["test"]);
    deploy.runs_on = strings(&["success", "failure"]);
    deploy
        .labels
        .insert("platform".into(), "linux/amd64".into());
    let test = workflow(
        "test",
        vec![
            clone("test", 2),
            cmd(("test", 2), 2, "t", "sh", &["t"], &["clone"]),
        ],
    );
    assert_eq!(got, ok(vec![deploy, test]));

    // `test` filtered out: `deploy` depends on it, so it is dropped too.
    let files = [
        file(
            ".woodpecker/test.yaml",
            "when: {event: tag}\nsteps:\n  t: {image: sh, commands: [t]}\n",
        ),
        files[1].clone(),
    ];
    assert_eq!(run(&files, meta(), Vec::new()), ok(vec![]));
}

/// Upstream's optional workflow dependencies: dropped when the workflow they name was
/// filtered out or is not defined at all (with a warning); a required one still drops its
/// dependant.
#[test]
fn optional_workflow_dependencies_are_dropped_when_missing() {
    let test = file(
        ".woodpecker/test.yaml",
        "when: {event: tag}\nsteps:\n  t: {image: sh, commands: [t]}\n",
    );
    let deploy = file(
        ".woodpecker/deploy.yaml",
        "depends_on:\n  - name: test\n    optional: true\n  - {name: lint, optional: true}\nsteps:\n  d: {image: sh, commands: [d]}\n",
    );
    let got = run(&[test.clone(), deploy], meta(), Vec::new());
    // Only the name no file defines is pointed out; `test` was merely filtered out.
    assert_eq!(
        error_keys(&got),
        [warning_key(
            "compiler",
            ".woodpecker/deploy.yaml",
            "depends_on"
        )]
    );
    assert!(got.errors[0].message.contains("`lint` is left out"));
    let names: Vec<(&str, &Vec<String>)> = got
        .workflows
        .iter()
        .map(|w| (w.name.as_str(), &w.depends_on))
        .collect();
    assert_eq!(names, [("deploy", &Vec::<String>::new())]);

    // Present, the optional dependency is an ordinary one.
    let test_runs = file(
        ".woodpecker/test.yaml",
        "steps:\n  t: {image: sh, commands: [t]}\n",
    );
    let deploy = file(
        ".woodpecker/deploy.yaml",
        "depends_on: [{name: test, optional: true}]\nsteps:\n  d: {image: sh, commands: [d]}\n",
    );
    let got = run(&[test_runs, deploy], meta(), Vec::new());
    let deploy = got.workflows.iter().find(|w| w.name == "deploy").unwrap();
    assert_eq!(deploy.depends_on, strings(&["test"]));

    // A required dependency on an unknown workflow drops the workflow, with a warning; a name
    // listed both ways is required.
    for deps in [
        "[test, {name: lint}]",
        "[{name: lint, optional: true}, lint]",
    ] {
        let deploy = file(
            ".woodpecker/deploy.yaml",
            &format!("depends_on: {deps}\nsteps:\n  d: {{image: sh, commands: [d]}}\n"),
        );
        let got = run(&[test.clone(), deploy], meta(), Vec::new());
        assert_eq!(got.workflows, Vec::new(), "{deps}");
        assert_eq!(
            error_keys(&got),
            [warning_key(
                "compiler",
                ".woodpecker/deploy.yaml",
                "depends_on"
            )],
            "{deps}"
        );
        assert!(
            got.errors[0]
                .message
                .contains("depends on `lint`, which no workflow file defines"),
            "{:?}",
            got.errors
        );
    }
}

/// Upstream's builder tests of workflow `depends_on` (TestDependsOn, TestMissingWorkflowDeps,
/// TestZeroStepsAsMultiPipelineTransitiveDeps, TestDependsOnOptionalFlag): each set of files
/// with the workflows upstream keeps and their dependencies. Upstream warns about none of
/// these; we warn where a name no file defines.
#[test]
fn upstream_workflow_dependency_cases() {
    let runs = "when: {event: push}\nsteps: [{name: build, image: scratch}]\n";
    let runs_on_tag = "when: {event: tag}\nsteps: [{name: build, image: scratch}]\n";
    let no_steps = "when: {event: push}\nskip_clone: true\nsteps: [{name: build, image: scratch, when: {branch: notdev}}]\n";
    let needs = |deps: &str| format!("{runs}depends_on: {deps}\n");
    // Files (workflow name, text); the workflows kept with their dependencies; the warnings.
    type Files = Vec<(&'static str, String)>;
    type Kept = &'static [(&'static str, &'static [&'static str])];
    let cases: Vec<(&str, Files, Kept, usize)> = vec![
        (
            "TestDependsOn",
            vec![
                ("lint", runs.into()),
                ("test", runs.into()),
                ("deploy", needs("[lint, test]")),
                ("missing dependencies", needs("[missing]")),
            ],
            &[("deploy", &["lint", "test"]), ("lint", &[]), ("test", &[])],
            1,
        ),
        (
            "TestMissingWorkflowDeps",
            vec![("workflow-with-missing-deps", needs("[non-existing]"))],
            &[],
            1,
        ),
        (
            "TestZeroStepsAsMultiPipelineTransitiveDeps",
            vec![
                ("zerostep", no_steps.into()),
                ("justastep", runs.into()),
                ("shouldbefiltered", needs("[zerostep]")),
                ("shouldbefilteredtoo", needs("[shouldbefiltered]")),
            ],
            &[("justastep", &[])],
            0,
        ),
        (
            "missing optional dep is dropped",
            vec![
                ("check-a", runs.into()),
                (
                    "deploy",
                    needs("[check-a, {name: check-b, optional: true}]"),
                ),
            ],
            &[("check-a", &[]), ("deploy", &["check-a"])],
            1,
        ),
        (
            "present optional dep is promoted",
            vec![
                ("check-a", runs.into()),
                ("check-b", runs.into()),
                (
                    "deploy",
                    needs("[check-a, {name: check-b, optional: true}]"),
                ),
            ],
            &[
                ("check-a", &[]),
                ("check-b", &[]),
                ("deploy", &["check-a", "check-b"]),
            ],
            0,
        ),
        (
            "missing required dep still removes workflow",
            vec![
                ("check-a", runs.into()),
                (
                    "deploy",
                    needs("[missing, {name: check-a, optional: true}]"),
                ),
            ],
            &[("check-a", &[])],
            1,
        ),
        (
            "optional dep filtered by when is dropped",
            vec![
                ("check-a", runs.into()),
                ("check-b", runs_on_tag.into()),
                (
                    "deploy",
                    needs("[check-a, {name: check-b, optional: true}]"),
                ),
            ],
            &[("check-a", &[]), ("deploy", &["check-a"])],
            0,
        ),
        (
            "optional dep on workflow removed for own missing required dep is dropped",
            vec![
                ("broken", needs("[missing]")),
                ("deploy", needs("[{name: broken, optional: true}]")),
            ],
            &[("deploy", &[])],
            1,
        ),
    ];
    for (name, files, want, warnings) in cases {
        let files: Vec<ConfigFile> = files
            .iter()
            .map(|(n, data)| file(&format!(".woodpecker/{n}.yaml"), data))
            .collect();
        let got = run(&files, meta(), Vec::new());
        let kept: Vec<(&str, Vec<&str>)> = got
            .workflows
            .iter()
            .map(|w| {
                let deps = w.depends_on.iter().map(String::as_str).collect();
                (w.name.as_str(), deps)
            })
            .collect();
        let want: Vec<(&str, Vec<&str>)> = want.iter().map(|(n, d)| (*n, d.to_vec())).collect();
        assert_eq!(kept, want, "{name}");
        assert!(
            got.errors.iter().all(|e| e.is_warning),
            "{name}: {:?}",
            got.errors
        );
        assert_eq!(got.errors.len(), warnings, "{name}: {:?}", got.errors);
    }
}

#[test]
fn evaluate_and_warnings_keep_workflows() {
    let got = one(
        "clone:\n  git: {image: woodpeckerci/plugin-git}\nsteps:\n  a: {image: sh, commands: [a], when: {evaluate: 'CI_COMMIT_BRANCH == \"main\"'}}\n  b: {image: sh, commands: [b], when: {evaluate: 'CI_COMMIT_BRANCH != \"main\"', event: [push, deploy]}}\n",
    );
    assert_eq!(
        got.workflows,
        vec![workflow(
            "woodpecker",
            vec![
                clone("woodpecker", 1),
                cmd(W, 2, "a", "sh", &["a"], &["clone"])
            ]
        )]
    );
    assert_eq!(
        error_keys(&got),
        [
            (
                "linter".into(),
                ".woodpecker.yaml".into(),
                "clone".into(),
                true
            ),
            (
                "linter".into(),
                ".woodpecker.yaml".into(),
                "steps.b.when.event".into(),
                true
            ),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Errors: never a workflow, always file + field.

#[test]
fn error_table() {
    let secrets = || {
        vec![
            secret("deploy", "d", &["deployment"], &[]),
            secret("plugin", "p", &[], &["plugins/s3"]),
        ]
    };
    // (what, config, [(type, field)], a piece of the first message)
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        (
            "bad yaml",
            "steps:\n  a: [unclosed\n",
            &[("compiler", "")],
            "invalid YAML on line",
        ),
        (
            "tabs",
            "steps:\n\t- a\n",
            &[("compiler", "")],
            "invalid YAML",
        ),
        ("not a map", "just text", &[("linter", "")], "must be a map"),
        ("empty", "", &[("linter", "")], "empty"),
        (
            "unknown top key",
            "steps: {a: {image: sh}}\nstepz: 1\n",
            &[("linter", "stepz")],
            "unknown key `stepz`",
        ),
        (
            "old pipeline key",
            "pipeline:\n  a: {image: sh}\n",
            &[("linter", "pipeline"), ("linter", "steps")],
            "rename it to `steps:`",
        ),
        (
            "unknown step key",
            "steps: {a: {image: sh, command: [x]}}",
            &[("linter", "steps.a.command")],
            "unknown key",
        ),
        (
            "missing image",
            "steps: {a: {commands: [x]}}",
            &[("linter", "steps.a.image")],
            "missing `image`",
        ),
        (
            "wrong type",
            "steps: {a: {image: sh, commands: {x: 1}}}",
            &[("linter", "steps.a.commands")],
            "found a map",
        ),
        (
            "bad when",
            "steps: {a: {image: sh, when: {branch: {only: x}}}}",
            &[("linter", "steps.a.when.branch.only")],
            "unknown key",
        ),
        (
            "cycle",
            "steps:\n  a: {image: sh, depends_on: b}\n  b: {image: sh, depends_on: a}\n",
            &[("compiler", "steps.a.depends_on")],
            "dependency cycle: a -> b -> a",
        ),
        (
            "unknown dep",
            "steps:\n  a: {image: sh, depends_on: nope}\n",
            &[("compiler", "steps.a.depends_on")],
            "unknown step `nope`",
        ),
        (
            "filtered dep",
            "steps:\n  a: {image: sh, when: {event: tag}}\n  b: {image: sh, depends_on: a}\n",
            &[("compiler", "steps.b.depends_on")],
            "optional: true",
        ),
        (
            "reserved clone",
            "steps:\n  clone: {image: sh}\n",
            &[("linter", "steps.clone.name")],
            "reserved",
        ),
        (
            "missing secret",
            "steps: {a: {image: sh, environment: {X: {from_secret: nope}}}}",
            &[("compiler", "steps.a.environment.X")],
            "secret `nope` not found",
        ),
        (
            "secret event",
            "steps: {a: {image: sh, environment: {X: {from_secret: deploy}}}}",
            &[("compiler", "steps.a.environment.X")],
            "`push` events",
        ),
        (
            "secret image on commands",
            "steps: {a: {image: plugins/s3, commands: [x], environment: {X: {from_secret: plugin}}}}",
            &[("compiler", "steps.a.environment.X")],
            "only be used by plugin steps",
        ),
        (
            "secret image mismatch",
            "steps: {a: {image: plugins/gcs, settings: {x: {from_secret: plugin}}}}",
            &[("compiler", "steps.a.settings.x")],
            "image `plugins/gcs`",
        ),
        (
            "unterminated subst",
            "steps: {a: {image: sh}}\n# ${X\n",
            &[("generic", "")],
            "unterminated",
        ),
        (
            "bad evaluate",
            "when: {evaluate: 'len(x) > 1'}\nsteps: {a: {image: sh}}",
            &[("compiler", "when")],
            "not supported",
        ),
        (
            "bad matrix",
            "matrix: [1]\nsteps: {a: {image: sh}}",
            &[("linter", "matrix")],
            "expected a map",
        ),
        (
            "duplicate key",
            "steps: {a: {image: sh}}\nsteps: {}\n",
            &[("compiler", "")],
            "more than once",
        ),
    ];
    for (what, config, want, needle) in cases {
        let got = run(&[file(".woodpecker.yaml", config)], meta(), secrets());
        let want: Vec<_> = want
            .iter()
            .map(|(kind, field)| key(kind, ".woodpecker.yaml", field))
            .collect();
        assert_eq!(error_keys(&got), want, "{what}: {:?}", got.errors);
        assert!(got.workflows.is_empty(), "{what}");
        assert!(
            got.errors[0].message.contains(needle),
            "{what}: {:?}",
            got.errors[0].message
        );
        assert!(
            got.errors[0].message.starts_with(".woodpecker.yaml: "),
            "{what}"
        );
    }
}

#[test]
fn error_shape_is_exact() {
    let got = one("steps: {a: {image: sh}}\nfoo: 1\n");
    assert_eq!(
        got,
        CompileResult {
            workflows: vec![],
            errors: vec![PipelineError {
                kind: "linter".into(),
                message: ".woodpecker.yaml: foo: unknown key `foo`".into(),
                is_warning: false,
                data: json!({"file": ".woodpecker.yaml", "field": "foo"}),
            }],
        }
    );
}

#[test]
fn errors_in_one_file_block_all_and_are_not_repeated_per_matrix_entry() {
    let files = [
        file(
            ".woodpecker/a.yaml",
            "matrix: {X: [1, 2, 3]}\nsteps: {a: {image: sh, bogus: 1}}\n",
        ),
        file(
            ".woodpecker/b.yaml",
            "steps: {b: {image: sh, commands: [b]}}\n",
        ),
    ];
    let got = run(&files, meta(), Vec::new());
    assert!(got.workflows.is_empty());
    assert_eq!(
        error_keys(&got),
        [key("linter", ".woodpecker/a.yaml", "steps.a.bogus")]
    );
}

#[test]
fn pull_request_variants_count_as_pull_request_for_secrets() {
    let m = Metadata {
        event: WebhookEvent::PullRequestClosed,
        ..meta()
    };
    let got = run(
        &[file(
            ".woodpecker.yml",
            "steps: {a: {image: sh, commands: [x], environment: {T: {from_secret: t}}}}",
        )],
        m,
        vec![secret("t", "v", &["pull_request"], &[])],
    );
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    assert_eq!(got.workflows[0].steps[1].secrets, ["v"]);
}

// ---------------------------------------------------------------------------------------
// Property test: garbage in, no panic, invariants out.

/// xorshift64*: deterministic, dependency-free randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const WORDS: &[&str] = &[
    "steps",
    "services",
    "when",
    "depends_on",
    "runs_on",
    "matrix",
    "include",
    "exclude",
    "labels",
    "skip_clone",
    "clone",
    "image",
    "commands",
    "environment",
    "settings",
    "name",
    "event",
    "branch",
    "path",
    "status",
    "failure",
    "detach",
    "from_secret",
    "evaluate",
    "on_empty",
    "optional",
    "a",
    "b",
    "clone",
    "push",
    "tag",
    "main",
    "sh",
    "${CI}",
    "$${X}",
    "true",
    "~",
    "1.10",
    "'q'",
    "\"d\"",
    "<<",
    "*x",
    "&x",
    "!!str",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "- ",
    "---",
    "#",
    "|",
    ">",
    "\t",
    "\\",
    "**",
    "failure",
    "success",
];

fn random_yaml(rng: &mut Rng, depth: usize, out: &mut String, indent: usize) {
    let pad = " ".repeat(indent);
    match if depth > 4 { 3 } else { rng.below(5) } {
        0 => {
            for _ in 0..1 + rng.below(4) {
                out.push_str(&format!("\n{pad}{}:", rng.pick(WORDS)));
                random_yaml(rng, depth + 1, out, indent + 2);
            }
        }
        1 => {
            for _ in 0..1 + rng.below(4) {
                out.push_str(&format!("\n{pad}- "));
                random_yaml(rng, depth + 1, out, indent + 2);
            }
        }
        2 => {
            out.push_str(" {");
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&format!("{}: {}", rng.pick(WORDS), rng.pick(WORDS)));
            }
            out.push('}');
        }
        _ => {
            out.push(' ');
            out.push_str(rng.pick(WORDS));
        }
    }
}

fn check_invariants(r: &CompileResult) {
    if r.errors.iter().any(|e| !e.is_warning) {
        assert!(r.workflows.is_empty());
    }
    for e in &r.errors {
        assert!(e.data.get("file").is_some() && e.data.get("field").is_some());
    }
    for w in &r.workflows {
        let names: Vec<&str> = w.steps.iter().map(|s| s.name.as_str()).collect();
        if !w.skip_clone {
            assert_eq!(names.first(), Some(&"clone"));
        }
        for s in &w.steps {
            for d in &s.depends_on {
                assert!(names.contains(&d.as_str()), "{d} not in {names:?}");
            }
        }
    }
}

#[test]
fn random_input_never_panics() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let m = meta();
    for round in 0..3000 {
        let data = if round % 3 == 0 {
            let len = rng.below(300);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let mut doc = String::from("steps:");
            if round % 3 == 1 {
                doc.clear();
            }
            random_yaml(&mut rng, 0, &mut doc, 0);
            doc
        };
        let r = run(&[file(".woodpecker.yaml", &data)], m.clone(), Vec::new());
        check_invariants(&r);
    }
}

#[test]
fn structured_random_configs_keep_invariants() {
    // Valid-looking configs with random filters and dependencies.
    let mut rng = Rng(42);
    let conds = [
        "",
        "when: {event: push}",
        "when: {branch: dev}",
        "when: [{event: tag}, {status: failure}]",
        "when: {path: 'src/**'}",
    ];
    for _ in 0..500 {
        let n = 1 + rng.below(5);
        let mut doc = String::new();
        if rng.below(2) == 0 {
            doc.push_str("skip_clone: true\n");
        }
        if rng.below(3) == 0 {
            doc.push_str("matrix: {X: [1, 2]}\n");
        }
        doc.push_str("steps:\n");
        for i in 0..n {
            doc.push_str(&format!(
                "  s{i}:\n    image: sh\n    commands: [echo {i}]\n"
            ));
            let c = conds[rng.below(conds.len())];
            if !c.is_empty() {
                doc.push_str(&format!("    {c}\n"));
            }
            if rng.below(3) == 0 {
                let d = rng.below(n);
                doc.push_str(&format!("    depends_on: [s{d}]\n"));
            }
        }
        let r = run(&[file(".woodpecker.yaml", &doc)], meta(), Vec::new());
        check_invariants(&r);
    }
}

#[test]
fn huge_and_deep_documents_are_errors_not_crashes() {
    let deep = format!("steps: {}{}", "[".repeat(5000), "]".repeat(5000));
    assert!(!one(&deep).errors.is_empty());
    let wide = format!(
        "steps:\n{}",
        "  - {image: sh, commands: [x]}\n".repeat(40_000)
    );
    let r = one(&wide);
    assert!(!r.errors.is_empty());
    assert!(r.workflows.is_empty());
}

#[test]
fn step_templates_with_merge_keys_and_when_lists() {
    let got = one(
        "variables:\n  - &go_step\n    image: golang:1.22\n    environment:\n      CGO_ENABLED: 0\nsteps:\n  lint:\n    <<: *go_step\n    commands: [make lint]\n  test:\n    <<: *go_step\n    commands: [make test]\n    when:\n      - event: push\n        branch: main\n      - event: pull_request\n",
    );
    let mut lint = cmd(W, 2, "lint", "golang:1.22", &["make lint"], &["clone"]);
    lint.environment.insert("CGO_ENABLED".into(), "0".into());
    let mut test = cmd(W, 3, "test", "golang:1.22", &["make test"], &["lint"]);
    test.environment.insert("CGO_ENABLED".into(), "0".into());
    assert_eq!(
        got,
        ok(vec![workflow(
            "woodpecker",
            vec![clone("woodpecker", 1), lint, test]
        )])
    );
}

#[test]
fn container_options_need_the_repository_trust() {
    let config = "steps:\n  root:\n    image: busybox\n    privileged: true\n    commands: [id]\n  host:\n    image: busybox\n    volumes: [\"/etc:/host-etc\"]\n    devices: [/dev/fuse]\n    network_mode: host\n    commands: [ls]\n  plugin:\n    image: plugins/docker:1\n    privileged: true\n    pull: true\n    backend_options:\n      docker:\n        user: \"1000\"\n";
    let files = [file(".woodpecker.yaml", config)];
    let untrusted = run(&files, meta(), Vec::new());
    assert!(untrusted.workflows.is_empty());
    let fields: Vec<String> = error_keys(&untrusted)
        .into_iter()
        .map(|(_, _, field, _)| field)
        .collect();
    assert_eq!(
        fields,
        [
            "steps.root.privileged",
            "steps.host.devices",
            "steps.host.volumes",
            "steps.host.network_mode",
            "steps.plugin.privileged",
        ]
    );

    // Trusted for everything, with `plugins/docker` a privileged plugin: it compiles.
    let trusted = compile(&CompileInput {
        files: files.to_vec(),
        meta: meta(),
        secrets: Vec::new(),
        trust: Trust {
            security: true,
            volumes: true,
            network: true,
        },
        privileged_plugins: Vec::new(),
    });
    assert!(trusted.errors.is_empty(), "{:?}", trusted.errors);
    let steps = &trusted.workflows[0].steps;
    assert!(steps[1].privileged);
    assert_eq!(steps[2].volumes, ["/etc:/host-etc"]);
    assert_eq!(steps[2].network_mode, "host");
    assert!(steps[3].pull);
    assert_eq!(steps[3].user, "1000");

    // A privileged plugin needs no trust; a commands step with the same image does.
    let plugin_only = "steps:\n  plugin:\n    image: plugins/docker:1\n    privileged: true\n  cmds:\n    image: plugins/docker\n    privileged: true\n    commands: [id]\n";
    let r = compile(&CompileInput {
        files: vec![file(".woodpecker.yaml", plugin_only)],
        meta: meta(),
        privileged_plugins: vec!["plugins/docker".into()],
        ..CompileInput::default()
    });
    let fields: Vec<String> = error_keys(&r).into_iter().map(|(_, _, f, _)| f).collect();
    assert_eq!(fields, ["steps.cmds.privileged"]);
}

#[test]
fn pipeline_variables_reach_command_steps_only_and_never_replace_run_variables() {
    let mut m = meta();
    m.variables = BTreeMap::from([
        ("PATH".into(), "/workspace/evil".into()),
        ("PLUGIN_TARGET".into(), "evil".into()),
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("CI_COMMIT_BRANCH".into(), "main".into()),
    ]);
    m.commit.branch = "feature".into();
    m.env.insert("CI_COMMIT_BRANCH".into(), "feature".into());
    let got = run(
        &[file(
            ".woodpecker.yml",
            "steps:\n  build:\n    image: sh\n    commands: [make]\n  publish:\n    image: plugins/x\n    settings:\n      target: prod\n  deploy:\n    image: sh\n    commands: [deploy]\n    when:\n      evaluate: 'CI_COMMIT_BRANCH == \"main\"'\n",
        )],
        m,
        Vec::new(),
    );
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    let steps = &got.workflows[0].steps;
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["clone", "build", "publish"],
        "a variable cannot pass a filter"
    );
    let env = |name: &str| &steps.iter().find(|s| s.name == name).unwrap().environment;
    assert_eq!(env("build")["PATH"], "/workspace/evil");
    assert_eq!(env("build")["GIT_CONFIG_COUNT"], "1");
    assert_eq!(env("build")["CI_COMMIT_BRANCH"], "feature");
    for step in ["clone", "publish"] {
        assert!(!env(step).contains_key("PATH"), "{step}");
        assert!(!env(step).contains_key("GIT_CONFIG_COUNT"), "{step}");
    }
    assert_eq!(env("publish")["PLUGIN_TARGET"], "prod");
}
