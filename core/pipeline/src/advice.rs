//! Advice on a config that may well be valid: upstream's "bad habit" and deprecation warnings.
//!
//! They never block a pipeline, and unlike [`super::workflow`]'s issues they are not about
//! the config's shape: a step that runs on every event (no `event` filter on it or on the
//! whole workflow), `runs_on` (use `when.status`), and references to deprecated `CI_*`
//! variables. [`advise`] reads the raw text before `${VAR}` substitution, as upstream does;
//! a document that does not parse gets no advice (the compiler reports why).

use super::diag::{Issue, Kind, field, index};
use super::workflow;
use super::yaml;

/// Deprecated variables that are still set, with their replacement.
const DEPRECATED_VARIABLES: &[(&str, &str)] = &[
    ("CI_COMMIT_PRERELEASE", "CI_PIPELINE_RELEASE_PRE"),
    ("CI_COMMIT_AUTHOR_AVATAR", "CI_PIPELINE_AVATAR"),
    ("CI_PREV_COMMIT_AUTHOR_AVATAR", "CI_PREV_PIPELINE_AVATAR"),
];

/// The warnings for every file, as a pipeline's `errors[]` carries them (upstream's linter
/// adds them to every pipeline; they never block one).
pub fn advise_files(files: &[super::types::ConfigFile]) -> Vec<super::types::PipelineError> {
    files
        .iter()
        .flat_map(|f| {
            advise(&f.data)
                .into_iter()
                .map(|issue| issue.into_error(&f.name))
        })
        .collect()
}

/// The warnings for one config file's raw text.
pub fn advise(raw: &str) -> Vec<Issue> {
    let mut out: Vec<Issue> = DEPRECATED_VARIABLES
        .iter()
        .filter(|(old, _)| references(raw, old))
        .map(|(old, new)| deprecation("", format!("`{old}` is deprecated, use `{new}`")))
        .collect();
    let Ok(root) = yaml::parse(raw) else {
        return out;
    };
    if root.get("runs_on").is_some_and(|r| !r.is_null()) {
        out.push(deprecation(
            "runs_on",
            "`runs_on` is deprecated, use `when: {status: …}`".to_string(),
        ));
    }
    let spec = workflow::parse(&root, &mut Vec::new());
    let has_event =
        |c: &super::when::Condition| !c.event.include.is_empty() || !c.event.exclude.is_empty();
    let workflow_filters_events =
        !spec.when.conditions.is_empty() && spec.when.conditions.iter().all(has_event);
    if workflow_filters_events {
        return out;
    }
    for step in &spec.steps {
        let conditions = &step.when.conditions;
        let issue = if conditions.is_empty() {
            Some((
                step.field.clone(),
                "add a `when` block with an `event` filter to this step or to the whole workflow",
            ))
        } else {
            conditions.iter().position(|c| !has_event(c)).map(|i| {
                let at = field(&step.field, "when");
                // A single condition may be written without the list.
                let at = if conditions.len() == 1 && !is_list(&root, &step.field) {
                    at
                } else {
                    index(&at, i)
                };
                (
                    at,
                    "set an `event` filter on every item of the `when` block (or on the whole workflow)",
                )
            })
        };
        if let Some((at, message)) = issue {
            out.push(Issue {
                kind: Kind::BadHabit,
                ..Issue::linter(at, message).warning()
            });
        }
    }
    out
}

fn deprecation(at: &str, message: String) -> Issue {
    Issue {
        kind: Kind::Deprecation,
        ..Issue::linter(at, message).warning()
    }
}

/// Whether the step at `step_field` writes its `when` as a list.
fn is_list(root: &yaml::Node, step_field: &str) -> bool {
    let mut node = Some(root);
    for part in step_field.split('.') {
        let (key, item) = match part.split_once('[') {
            Some((key, rest)) => (key, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        node = node.and_then(|n| n.get(key));
        if let Some(i) = item {
            node = node.and_then(|n| n.as_seq()).and_then(|s| s.get(i));
        }
    }
    node.and_then(|n| n.get("when"))
        .is_some_and(|w| w.as_seq().is_some())
}

/// `$NAME`, `$$NAME` or `${NAME}` in `text`, not as the start of a longer name.
fn references(text: &str, name: &str) -> bool {
    text.match_indices('$').any(|(at, _)| {
        let rest = &text[at + 1..];
        if let Some(inner) = rest.strip_prefix('{') {
            return inner.strip_prefix(name).is_some_and(|r| r.starts_with('}'));
        }
        rest.strip_prefix(name)
            .is_some_and(|r| !r.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_references_match_whole_names() {
        assert!(references(
            "echo $CI_COMMIT_PRERELEASE",
            "CI_COMMIT_PRERELEASE"
        ));
        assert!(references(
            "echo ${CI_COMMIT_PRERELEASE}!",
            "CI_COMMIT_PRERELEASE"
        ));
        assert!(references(
            "echo $$CI_COMMIT_PRERELEASE",
            "CI_COMMIT_PRERELEASE"
        ));
        assert!(!references(
            "echo $CI_COMMIT_PRERELEASE_FOO",
            "CI_COMMIT_PRERELEASE"
        ));
        assert!(!references(
            "echo ${CI_COMMIT_PRERELEASE_FOO}",
            "CI_COMMIT_PRERELEASE"
        ));
        assert!(!references("CI_COMMIT_PRERELEASE", "CI_COMMIT_PRERELEASE"));
    }

    #[test]
    fn only_the_variable_used_is_reported() {
        let found =
            advise("steps: {a: {image: sh, commands: [echo $CI_PREV_COMMIT_AUTHOR_AVATAR]}}");
        let messages: Vec<&str> = found
            .iter()
            .filter(|i| i.kind == Kind::Deprecation)
            .map(|i| i.message.as_str())
            .collect();
        assert_eq!(
            messages,
            ["`CI_PREV_COMMIT_AUTHOR_AVATAR` is deprecated, use `CI_PREV_PIPELINE_AVATAR`"]
        );
    }

    #[test]
    fn steps_without_event_filters_are_pointed_out() {
        let fields =
            |doc: &str| -> Vec<String> { advise(doc).into_iter().map(|i| i.field).collect() };
        assert_eq!(
            fields("when: {event: push}\nsteps: {a: {image: sh}}"),
            Vec::<String>::new()
        );
        assert_eq!(
            fields("steps: {a: {image: sh, when: {event: push}}}"),
            Vec::<String>::new()
        );
        assert_eq!(fields("steps: [{image: sh}]"), ["steps[0]"]);
        assert_eq!(
            fields("steps: {a: {image: sh, when: {branch: main}}}"),
            ["steps.a.when"]
        );
        assert_eq!(
            fields("steps: {a: {image: sh, when: [{event: push}, {branch: main}]}}"),
            ["steps.a.when[1]"]
        );
        assert_eq!(
            fields("runs_on: [success]\nwhen: {event: push}\nsteps: {a: {image: sh}}"),
            ["runs_on"]
        );
    }
}
