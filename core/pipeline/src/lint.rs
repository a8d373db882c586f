//! Linting config files outside the server (`woodlark lint`): the compiler's own verdicts,
//! placed on the line they are about.
//!
//! There is no second checker: the files go through [`compile`](fn@crate::compile) as a
//! push to the default branch of a repository trusted with everything (trust is server
//! policy, not a property of the file), with every secret they name present (secrets live on
//! the server). So whatever `lint` reports as an error, a push reports too; upstream's
//! advice ([`crate::advice`]: a step without an `event` filter, deprecated keys) comes as
//! warnings, as upstream's `lint` shows it. Each finding's field path
//! (`steps.build.image`, `services[0]`) is looked up in the file's YAML for its line.

use std::collections::BTreeMap;

use crate::event::WebhookEvent;
use crate::types::{Commit, CompileInput, ConfigFile, Metadata, SecretValue, Trust};
use crate::yaml::{self, Node, Value};

/// One problem in one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub file: String,
    /// 1-based; 0 when the finding is about the whole file.
    pub line: usize,
    /// Dotted path of the key, e.g. `steps.build.image`; empty for the whole file.
    pub field: String,
    /// `linter`, `compiler`, `generic`, … (the `type` of the API's `errors[]`).
    pub kind: String,
    pub message: String,
    pub warning: bool,
}

/// The findings of `files`, linted together (workflows may depend on each other), in file
/// and line order.
pub fn lint(files: &[ConfigFile]) -> Vec<Finding> {
    let trees: BTreeMap<&str, Node> = files
        .iter()
        .filter_map(|f| Some((f.name.as_str(), yaml::parse(&f.data).ok()?)))
        .collect();
    let mut names = Vec::new();
    for tree in trees.values() {
        secret_names(tree, &mut names);
    }
    names.sort();
    names.dedup();
    let secrets = names
        .into_iter()
        .map(|name| SecretValue {
            name,
            value: "lint-placeholder".into(),
            events: Vec::new(),
            images: Vec::new(),
        })
        .collect();
    let result = crate::compile(&CompileInput {
        files: files.to_vec(),
        meta: push_meta(),
        secrets,
        trust: Trust {
            security: true,
            volumes: true,
            network: true,
        },
        privileged_plugins: Vec::new(),
    });
    // Upstream's advice (steps without an event filter, deprecated keys) comes with it.
    let advice = crate::advice::advise_files(files);
    let mut findings: Vec<Finding> = result
        .errors
        .into_iter()
        .chain(advice)
        .map(|e| {
            let file = e.data["file"].as_str().unwrap_or("").to_string();
            let field = e.data["field"].as_str().unwrap_or("").to_string();
            let line = trees
                .get(file.as_str())
                .map_or(0, |tree| line_of(tree, &field));
            // The API's message names the file and field; a finding carries them apart.
            let message = e
                .message
                .strip_prefix(&format!("{file}: "))
                .unwrap_or(&e.message);
            let message = message
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(message)
                .to_string();
            Finding {
                file,
                line,
                field,
                kind: e.kind,
                message,
                warning: e.is_warning,
            }
        })
        .collect();
    findings.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    findings
}

/// A push of a placeholder commit to `main`, the default branch.
fn push_meta() -> Metadata {
    let commit = Commit {
        sha: "0".repeat(40),
        branch: "main".into(),
        git_ref: "refs/heads/main".into(),
        message: "lint".into(),
        ..Commit::default()
    };
    let env = [
        ("CI", "woodpecker"),
        ("CI_PIPELINE_EVENT", "push"),
        ("CI_COMMIT_BRANCH", "main"),
        ("CI_COMMIT_REF", "refs/heads/main"),
        ("CI_REPO_DEFAULT_BRANCH", "main"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Metadata {
        event: WebhookEvent::Push,
        commit,
        default_branch: "main".into(),
        pipeline_number: 1,
        env,
        ..Metadata::default()
    }
}

/// Every name a `from_secret:` in `node` asks for.
fn secret_names(node: &Node, out: &mut Vec<String>) {
    match &node.value {
        Value::Map(entries) => {
            for (key, value) in entries {
                if key == "from_secret"
                    && let Some(name) = value.as_str()
                {
                    out.push(name.to_string());
                }
                secret_names(value, out);
            }
        }
        Value::Seq(items) => items.iter().for_each(|i| secret_names(i, out)),
        Value::Scalar { .. } => {}
    }
}

/// The line of the node at `field` (`a.b[2].c`), or of the deepest one that exists on the
/// way there; 0 for the whole file.
pub fn line_of(root: &Node, field: &str) -> usize {
    if field.is_empty() {
        return 0;
    }
    let mut node = root;
    for segment in field.split('.') {
        let (key, indexes) = match segment.find('[') {
            Some(at) => (&segment[..at], &segment[at..]),
            None => (segment, ""),
        };
        if !key.is_empty() {
            match node.get(key) {
                Some(next) => node = next,
                None => return node.line,
            }
        }
        for index in indexes.split(['[', ']']).filter(|s| !s.is_empty()) {
            let next = index
                .parse::<usize>()
                .ok()
                .and_then(|i| node.as_seq()?.get(i));
            match next {
                Some(next) => node = next,
                None => return node.line,
            }
        }
    }
    node.line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, data: &str) -> ConfigFile {
        ConfigFile {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn findings_name_their_file_and_line() {
        let found = lint(&[file(
            ".woodpecker.yaml",
            "steps:\n  build:\n    image: sh\n    commands: [make]\n    bogus: 1\n  test:\n    commands: [t]\n",
        )]);
        let lines: Vec<(usize, bool)> = found.iter().map(|f| (f.line, f.warning)).collect();
        assert!(
            found
                .iter()
                .any(|f| f.line == 5 && f.message.contains("bogus")),
            "{found:?}"
        );
        // A missing key is placed at the map that lacks it.
        assert!(
            found.iter().any(|f| f.line == 7
                && f.field == "steps.test.image"
                && f.message.starts_with("missing `image`")),
            "a step without an image: {found:?}"
        );
        assert!(lines.iter().all(|(l, _)| *l > 0), "{found:?}");
    }

    #[test]
    fn secrets_and_trust_are_the_servers_business() {
        let found = lint(&[file(
            ".woodpecker.yaml",
            "steps:\n  deploy:\n    image: sh\n    privileged: true\n    environment:\n      TOKEN:\n        from_secret: deploy_token\n    commands: [deploy]\n",
        )]);
        let errors: Vec<&Finding> = found.iter().filter(|f| !f.warning).collect();
        assert_eq!(errors, Vec::<&Finding>::new());
        // Upstream's advice is a warning on the step's line.
        assert!(
            found
                .iter()
                .any(|f| f.warning && f.kind == "bad_habit" && f.line == 3),
            "{found:?}"
        );
    }

    #[test]
    fn cross_file_dependencies_and_yaml_errors() {
        let found = lint(&[
            file(
                ".woodpecker/a.yaml",
                "depends_on: [missing]\nsteps:\n  a: {image: sh, commands: [a]}\n",
            ),
            file(".woodpecker/b.yaml", "steps: [\n"),
        ]);
        assert!(
            found.iter().any(|f| f.file == ".woodpecker/a.yaml"
                && f.message.contains("missing")
                && f.warning),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.file == ".woodpecker/b.yaml" && f.message.contains("invalid YAML")),
            "{found:?}"
        );
    }

    #[test]
    fn field_paths_find_their_lines() {
        let tree = yaml::parse(
            "steps:\n  - name: a\n    image: sh\n  - name: b\n    when:\n      - event: push\n",
        )
        .unwrap();
        assert_eq!(line_of(&tree, "steps[1].when[0].event"), 6);
        assert_eq!(line_of(&tree, "steps[1]"), 4);
        assert_eq!(line_of(&tree, "steps[7].x"), 2);
        assert_eq!(line_of(&tree, ""), 0);
    }
}
