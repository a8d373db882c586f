//! Pipeline variables: the `name=value` pairs a person adds to a manual run, a restart or a
//! cron job (`PipelineOptions.variables` upstream).
//!
//! They come from whoever may trigger a run, not from the config's author, so the server
//! checks them where they enter (the API answers 400) and the compiler decides where they
//! go: only into the containers of steps that run the author's commands, never over a
//! variable the run sets (`CI_*`, workflow and matrix values), never into the clone or a
//! plugin step (see `compile::add_pipeline_variables`).

use std::collections::BTreeMap;

/// Most variables one run takes.
pub const MAX_COUNT: usize = 100;
/// Longest name.
pub const MAX_NAME: usize = 128;
/// Longest value: well below Linux's limit for one environment string (128 KiB).
pub const MAX_VALUE: usize = 32 * 1024;

/// Why a set of pipeline variables is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariableError {
    #[error("at most {MAX_COUNT} variables are allowed, got {0}")]
    TooMany(usize),
    #[error(
        "variable name {0:?} is not valid: use letters, digits and `_`, not starting with a digit, at most {MAX_NAME} characters"
    )]
    BadName(String),
    #[error("variable name {0:?} is reserved: `CI` and `CI_*` are set by the server")]
    Reserved(String),
    #[error("the value of variable {0:?} is longer than {MAX_VALUE} bytes")]
    TooLong(String),
    #[error("the value of variable {0:?} contains a NUL byte")]
    Nul(String),
}

/// Names the run itself sets: `CI` and `CI_*` (in any case, so that no spelling reads as
/// the server's).
pub fn is_reserved(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper == "CI" || upper.starts_with("CI_")
}

/// Whether `name` is a portable environment variable name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && name.len() <= MAX_NAME
}

/// Checks variables given to a run: count, names, values.
pub fn check(variables: &BTreeMap<String, String>) -> Result<(), VariableError> {
    if variables.len() > MAX_COUNT {
        return Err(VariableError::TooMany(variables.len()));
    }
    for (name, value) in variables {
        if !valid_name(name) {
            return Err(VariableError::BadName(name.clone()));
        }
        if is_reserved(name) {
            return Err(VariableError::Reserved(name.clone()));
        }
        if value.len() > MAX_VALUE {
            return Err(VariableError::TooLong(name.clone()));
        }
        if value.contains('\0') {
            return Err(VariableError::Nul(name.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, value: &str) -> Result<(), VariableError> {
        check(&BTreeMap::from([(name.to_string(), value.to_string())]))
    }

    #[test]
    fn names() {
        assert_eq!(one("DEPLOY_TO", "prod"), Ok(()));
        assert_eq!(one("_x1", ""), Ok(()));
        assert_eq!(
            one("GIT_CONFIG_COUNT", "1"),
            Ok(()),
            "reaches command steps only"
        );
        for bad in ["", "1A", "A-B", "A B", "A=B", "É", "A\nB"] {
            assert!(
                matches!(one(bad, "v"), Err(VariableError::BadName(_))),
                "{bad:?}"
            );
        }
        assert!(one(&"A".repeat(MAX_NAME + 1), "v").is_err());
    }

    #[test]
    fn reserved_names() {
        for name in ["CI", "CI_REPO", "ci_commit_sha", "Ci_Workspace"] {
            assert_eq!(
                one(name, "x"),
                Err(VariableError::Reserved(name.into())),
                "{name}"
            );
        }
        assert_eq!(one("CIRCLE", "x"), Ok(()));
    }

    #[test]
    fn values_and_count() {
        assert!(matches!(one("A", "a\0b"), Err(VariableError::Nul(_))));
        assert!(matches!(
            one("A", &"x".repeat(MAX_VALUE + 1)),
            Err(VariableError::TooLong(_))
        ));
        let many: BTreeMap<String, String> = (0..=MAX_COUNT)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert_eq!(check(&many), Err(VariableError::TooMany(MAX_COUNT + 1)));
    }
}
