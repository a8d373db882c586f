//! Parity with upstream Woodpecker's linter: every case of its schema test (the YAML files in
//! `lint_cases/`, copied unchanged) and of its linter test table, with upstream's verdict,
//! checked against what [`compile`](fn@crate::compile) and [`crate::advice`] report.
//!
//! Fields are written in our path convention: a list item is `services[1]`, where upstream
//! names it by its name; our issue may also name a key under the expected field
//! (`steps.build.image` for upstream's `steps.build`).

use crate::compile;
use crate::compile::tests::meta;
use crate::types::{CompileInput, ConfigFile, Trust};

/// What upstream says about a config.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// No error and no warning at all.
    Clean,
    /// Valid for upstream's schema: no error. Warnings are allowed: upstream's linter gives some
    /// for valid configs too (clone image, formerly privileged plugin, no event filter).
    Pass,
    /// Invalid for upstream's schema: an error or a warning at this field (upstream's linter
    /// reports schema violations as warnings, its schema test as failures).
    Fail(&'static str),
    /// An error at this field.
    Error(&'static str),
    /// A warning of this type at this field, and no error.
    Warning(&'static str, &'static str),
    /// No issue of this type.
    No(&'static str),
}

#[derive(Debug, Clone, Copy)]
enum Trusted {
    Nothing,
    Everything,
}

struct Case {
    name: &'static str,
    config: &'static str,
    trust: Trusted,
    expect: Expect,
    /// Other workflows the config depends on (their files are added as plain workflows).
    with: &'static [&'static str],
    /// Set where our policy deliberately differs: why.
    differs: Option<&'static str>,
}

const fn case(name: &'static str, config: &'static str, expect: Expect) -> Case {
    Case {
        name,
        config,
        trust: Trusted::Nothing,
        expect,
        with: &[],
        differs: None,
    }
}

const fn trusted(mut c: Case) -> Case {
    c.trust = Trusted::Everything;
    c
}

// Two of upstream's configs end with one `}` too many, after the document: upstream's YAML
// library stops reading at the end of the first document, and so does ours. Each is also
// listed without the brace.

macro_rules! fixture {
    ($file:literal) => {
        include_str!(concat!("lint_cases/", $file))
    };
}

/// Upstream's schema test: each file passes or fails the schema. The schema knows no trust, so
/// these run for a repository trusted with everything.
fn schema_cases() -> Vec<Case> {
    use Expect::*;
    let mut multi = case("multi pipeline", fixture!("test-multi.yaml"), Pass);
    multi.with = &["lint", "build", "test"];
    vec![
        case("clone", fixture!("test-clone.yaml"), Pass),
        case("clone skip", fixture!("test-clone-skip.yaml"), Pass),
        case("matrix", fixture!("test-matrix.yaml"), Pass),
        multi,
        case("plugin", fixture!("test-plugin.yaml"), Pass),
        case("run on", fixture!("test-run-on.yaml"), Pass),
        case("service", fixture!("test-service.yaml"), Pass),
        case("step", fixture!("test-step.yaml"), Pass),
        case("when", fixture!("test-when.yaml"), Pass),
        case("workspace", fixture!("test-workspace.yaml"), Pass),
        case("labels", fixture!("test-labels.yaml"), Pass),
        case(
            "map and sequence merge",
            fixture!("test-merge-map-and-sequence.yaml"),
            Pass,
        ),
        case(
            "backend options",
            fixture!("test-backend-options.yaml"),
            Pass,
        ),
        // With no matrix, `golang:${GO_VERSION}` becomes `golang:`, a YAML syntax error before
        // any key is read (upstream's builder substitutes first too).
        case("broken config", fixture!("test-broken.yaml"), Fail("")),
        case("array syntax", fixture!("test-array-syntax.yaml"), Pass),
        case("step DAG syntax", fixture!("test-dag.yaml"), Pass),
        case("custom backend", fixture!("test-custom-backend.yaml"), Pass),
        case(
            "broken plugin by environment",
            fixture!("test-broken-plugin.yaml"),
            Fail("steps.publish"),
        ),
        case(
            "broken plugin by commands",
            fixture!("test-broken-plugin2.yaml"),
            Fail("steps.publish"),
        ),
        case(
            "kubernetes backend tolerations",
            fixture!("test-kubernetes-backend-tolerations.yaml"),
            Pass,
        ),
        case("concurrency", fixture!("test-concurrency.yaml"), Pass),
        case(
            "concurrency shorthand",
            fixture!("test-concurrency-shorthand.yaml"),
            Pass,
        ),
        case(
            "concurrency invalid",
            fixture!("test-concurrency-invalid.yaml"),
            Fail("concurrency"),
        ),
        case(
            "service without name in array syntax",
            fixture!("test-broken-service-without-name.yaml"),
            Fail("services[0]"),
        ),
        // The schema test's two inline configs.
        case(
            "schema errors name the plugin's settings",
            fixture!("test-broken-plugin.yaml"),
            Fail("steps.publish"),
        ),
        case(
            "concurrent lint",
            "steps:\n  test:\n    image: alpine\n    commands:\n      - echo hello\n",
            Pass,
        ),
        // In upstream's fixture folder but not in its test table: its schema has no `tag`
        // condition, so the file fails.
        case(
            "workflow when",
            fixture!("test-pipeline-when.yaml"),
            Fail("when[1].tag"),
        ),
    ]
    .into_iter()
    .map(trusted)
    .collect()
}

/// Upstream's linter test tables (TestLint, TestLintDeeplyNestedBackendOptions,
/// TestLintErrors, TestDeprecations, TestBadHabits).
fn linter_cases() -> Vec<Case> {
    use Expect::*;
    let mut cases = vec![
        trusted(case(
            "map form, trusted",
            "when:\n  event: push\n\nsteps:\n  build:\n    image: docker\n    volumes:\n      - /tmp:/tmp\n    commands:\n      - go build\n      - go test\n  publish:\n    image: woodpeckerci/plugin-kaniko\n    settings:\n      repo: foo/bar\n      foo: bar\nservices:\n  redis:\n    image: redis\n",
            Clean,
        )),
        trusted(case(
            "list form, trusted",
            "when:\n  event: push\n\nsteps:\n  - name: build\n    image: docker\n    volumes:\n      - /tmp:/tmp\n    commands:\n      - go build\n      - go test\n  - name: publish\n    image: woodpeckerci/plugin-kaniko\n    settings:\n      repo: foo/bar\n      foo: bar\nservices:\n  - name: redis\n    image: redis\n",
            Clean,
        )),
        trusted(case(
            "merged maps",
            "when:\n  event: push\n\nvariables:\n  step_template: &base-step\n    image: golang:1.19\n    commands:\n      - go version\n\nsteps:\n  test base step:\n    <<: *base-step\n  test base step with latest image:\n    <<: *base-step\n    image: golang:latest\n",
            Clean,
        )),
        trusted(case(
            "privileged plugin, trusted",
            "{steps: { build: { image: plugins/docker, privileged: true, settings: { test: 'true' } } }, when: { branch: main, event: push } } }",
            Clean,
        )),
        trusted(case(
            "privileged plugin, trusted (without the stray brace)",
            "{steps: { build: { image: plugins/docker, privileged: true, settings: { test: 'true' } } }, when: { branch: main, event: push } }",
            Clean,
        )),
        case(
            "deeply nested backend options",
            "when:\n  event: push\nsteps:\n  test:\n    image: golang\n    backend_options:\n      kubernetes:\n        affinity:\n          nodeAffinity:\n            requiredDuringSchedulingIgnoredDuringExecution:\n              nodeSelectorTerms:\n                - matchExpressions:\n                    - key: accelerator\n                      operator: In\n                      values:\n                        - nvidia-tesla-v100\n",
            Clean,
        ),
        case("empty config", "", Error("")),
        case(
            "empty image",
            "steps: { build: { image: '' }  }",
            Error("steps.build"),
        ),
        case(
            "privileged, untrusted",
            "steps: { build: { image: golang, privileged: true }  }",
            Error("steps.build"),
        ),
        case(
            "dns, untrusted",
            "steps: { build: { image: golang, dns: [ 8.8.8.8 ] }  }",
            Error("steps.build"),
        ),
        case(
            "dns_search, untrusted",
            "steps: { build: { image: golang, dns_search: [ example.com ] }  }",
            Error("steps.build"),
        ),
        case(
            "devices, untrusted",
            "steps: { build: { image: golang, devices: [ '/dev/tty0:/dev/tty0' ] }  }",
            Error("steps.build"),
        ),
        case(
            "extra_hosts, untrusted",
            "steps: { build: { image: golang, extra_hosts: [ 'somehost:162.242.195.82' ] }  }",
            Error("steps.build"),
        ),
        case(
            "network_mode host, untrusted",
            "steps: { build: { image: golang, network_mode: host }  }",
            Error("steps.build"),
        ),
        case(
            "volumes, untrusted",
            "steps: { build: { image: golang, volumes: [ '/opt/data:/var/lib/mysql' ] }  }",
            Error("steps.build"),
        ),
        case(
            "network_mode container, untrusted",
            "steps: { build: { image: golang, network_mode: 'container:name' }  }",
            Error("steps.build"),
        ),
        case(
            "settings with commands",
            "steps: { build: { image: golang, settings: { test: 'true' }, commands: [ 'echo ja', 'echo nein' ] } }",
            Error("steps.build"),
        ),
        case(
            "settings with entrypoint",
            "steps: { build: { image: golang, settings: { test: 'true' }, entrypoint: [ '/bin/fish' ] } }",
            Error("steps.build"),
        ),
        case(
            "settings with environment",
            "steps: { build: { image: golang, settings: { test: 'true' }, environment: { 'TEST': 'true' } } }",
            Warning("linter", "steps.build"),
        ),
        case(
            "the old pipeline key",
            "{pipeline: { build: { image: golang, settings: { test: 'true' } } }, when: { branch: main, event: push } }",
            Fail("pipeline"),
        ),
        case(
            "formerly privileged plugin",
            "{steps: { build: { image: plugins/docker, settings: { test: 'true' } } }, when: { branch: main, event: push } } }",
            Warning("linter", "steps.build"),
        ),
        case(
            "formerly privileged plugin (without the stray brace)",
            "{steps: { build: { image: plugins/docker, settings: { test: 'true' } } }, when: { branch: main, event: push } }",
            Warning("linter", "steps.build"),
        ),
        case(
            "clone image not allowed",
            "{steps: { build: { image: golang, settings: { test: 'true' } } }, when: { branch: main, event: push }, clone: { git: { image: some-other/plugin-git:v1.1.0 } } }",
            // Upstream names the clone step (`clone.git`); we warn once for the section, which
            // we do not run (the built-in clone is used).
            Warning("linter", "clone"),
        ),
        case(
            "unknown dependency",
            "steps: { build: { image: golang }, publish: { image: golang, depends_on: [ binary ] } }",
            Error("steps.publish.depends_on"),
        ),
        case(
            "duplicate service name",
            "{steps: { build: { image: golang } }, services: [ { name: database, image: mysql }, { name: database, image: postgres } ] }",
            Error("services[1]"),
        ),
    ];
    let deprecated = |var: &str| -> &'static str {
        let text = format!("steps: {{ build: {{ image: golang, commands: [\"echo {var}\"] }} }}");
        Box::leak(text.into_boxed_str())
    };
    for (var, warns) in [
        ("$CI_COMMIT_PRERELEASE", true),
        ("$$CI_COMMIT_PRERELEASE", true),
        ("${CI_COMMIT_PRERELEASE}", true),
        ("${CI_COMMIT_AUTHOR_AVATAR}", true),
        ("$CI_PREV_COMMIT_AUTHOR_AVATAR", true),
        ("$CI_PIPELINE_RELEASE_PRE", false),
        ("$CI_PIPELINE_AVATAR", false),
        ("$CI_COMMIT_PRERELEASE_FOO", false),
        // Upstream lists this one twice: the second time to check that only the `PREV` name
        // is reported (see `advice`'s own tests).
        ("$CI_PREV_COMMIT_AUTHOR_AVATAR", true),
    ] {
        let expect = if warns {
            Warning("deprecation", "")
        } else {
            No("deprecation")
        };
        cases.push(case(
            Box::leak(format!("deprecated variable {var}").into_boxed_str()),
            deprecated(var),
            expect,
        ));
    }
    cases.extend([
        case(
            "no event filter",
            "steps: { build: { image: golang } }",
            Warning("bad_habit", "steps.build"),
        ),
        case(
            "workflow when without event on one item",
            "when: [{branch: xyz}, {event: push}]\nsteps: { build: { image: golang } }",
            Warning("bad_habit", "steps.build"),
        ),
        case(
            "step when without event",
            "steps: { build: { image: golang, when: [{branch: main}] } }",
            Warning("bad_habit", "steps.build.when[0]"),
        ),
    ]);
    cases
}

/// One issue we report: `(type, field, is_warning)`.
type Seen = (String, String, bool);

/// Everything we report for a case: the compiler's errors and warnings plus the advice.
fn ours(c: &Case) -> Vec<Seen> {
    let mut files = vec![ConfigFile {
        name: ".woodpecker/case.yaml".into(),
        data: c.config.into(),
    }];
    for name in c.with {
        files.push(ConfigFile {
            name: format!(".woodpecker/{name}.yaml"),
            data: "steps: {a: {image: sh, commands: [true]}}\nwhen: {event: push}\n".into(),
        });
    }
    let all = matches!(c.trust, Trusted::Everything);
    let result = compile(&CompileInput {
        files,
        meta: meta(),
        trust: Trust {
            security: all,
            volumes: all,
            network: all,
        },
        ..CompileInput::default()
    });
    let mut seen: Vec<Seen> = result
        .errors
        .iter()
        .map(|e| {
            let field = e.data["field"].as_str().unwrap_or_default().to_string();
            (e.kind.clone(), field, e.is_warning)
        })
        .collect();
    seen.extend(
        crate::advice::advise(c.config)
            .into_iter()
            .map(|i| (i.kind.as_str().to_string(), i.field, i.warning)),
    );
    seen
}

/// `field` is `want` or a key or item under it; `""` (the whole file) matches only itself.
fn names(field: &str, want: &str) -> bool {
    field == want
        || (!want.is_empty()
            && field
                .strip_prefix(want)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('[')))
}

fn agrees(expect: Expect, seen: &[Seen]) -> bool {
    let no_error = !seen.iter().any(|(_, _, warning)| !warning);
    match expect {
        Expect::Clean => seen.is_empty(),
        Expect::Pass => no_error,
        Expect::Fail(want) => seen.iter().any(|(_, f, _)| names(f, want)),
        Expect::Error(want) => seen
            .iter()
            .any(|(_, f, warning)| !warning && names(f, want)),
        Expect::Warning(kind, want) => {
            no_error
                && seen
                    .iter()
                    .any(|(k, f, w)| *w && k == kind && names(f, want))
        }
        Expect::No(kind) => !seen.iter().any(|(k, _, _)| k == kind),
    }
}

#[test]
fn verdicts_match_upstream() {
    let cases: Vec<Case> = schema_cases().into_iter().chain(linter_cases()).collect();
    let mut disagree = Vec::new();
    let mut still_differ = Vec::new();
    for c in &cases {
        let seen = ours(c);
        let ok = agrees(c.expect, &seen);
        match (ok, c.differs) {
            (false, None) => {
                disagree.push(format!("{}: want {:?}, got {seen:?}", c.name, c.expect))
            }
            (true, Some(_)) => {
                still_differ.push(format!("{}: marked as differing but agrees", c.name))
            }
            _ => {}
        }
    }
    let agreed =
        cases.len() - disagree.len() - cases.iter().filter(|c| c.differs.is_some()).count();
    assert!(
        disagree.is_empty() && still_differ.is_empty(),
        "{agreed} of {} cases agree;\n{}\n{}",
        cases.len(),
        disagree.join("\n"),
        still_differ.join("\n")
    );
}
