//! Problems found while compiling, before they become [`PipelineError`]s.
//!
//! The parsing helpers only know *where* in a document they are (`steps.build.when[0].event`),
//! not which file; [`Issue`] carries the field path and the compile driver adds the file when
//! it turns issues into `errors[]` entries (`data: {"file": …, "field": …}`).

use serde_json::json;

use super::types::PipelineError;

/// Woodpecker's error types (the `type` of a `PipelineError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The config's shape: unknown keys, wrong types, missing fields.
    Linter,
    /// The config is well-formed but cannot be turned into a pipeline (YAML syntax, secrets,
    /// dependency problems).
    Compiler,
    /// Anything else (e.g. variable substitution).
    Generic,
    /// A key or variable that still works but is going away (always a warning).
    Deprecation,
    /// Valid but likely not meant, e.g. a step that runs on every event (always a warning).
    BadHabit,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Linter => "linter",
            Kind::Compiler => "compiler",
            Kind::Generic => "generic",
            Kind::Deprecation => "deprecation",
            Kind::BadHabit => "bad_habit",
        }
    }
}

/// One problem at one place in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub kind: Kind,
    /// Dotted path of the offending key, e.g. `steps.build.image`; empty for the whole file.
    pub field: String,
    pub message: String,
    pub warning: bool,
}

impl Issue {
    pub fn linter(field: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue {
            kind: Kind::Linter,
            field: field.into(),
            message: message.into(),
            warning: false,
        }
    }

    pub fn compiler(field: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue {
            kind: Kind::Compiler,
            ..Issue::linter(field, message)
        }
    }

    pub fn generic(field: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue {
            kind: Kind::Generic,
            ..Issue::linter(field, message)
        }
    }

    pub fn warning(mut self) -> Issue {
        self.warning = true;
        self
    }

    /// The API shape, naming `file` (the config path) in the message and in `data`.
    pub fn into_error(self, file: &str) -> PipelineError {
        let message = if self.field.is_empty() {
            format!("{file}: {}", self.message)
        } else {
            format!("{file}: {}: {}", self.field, self.message)
        };
        PipelineError {
            kind: self.kind.as_str().to_string(),
            message,
            is_warning: self.warning,
            data: json!({"file": file, "field": self.field}),
        }
    }
}

/// Join a field path: `field("steps", "build")` → `steps.build`.
pub fn field(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// Join a list index: `index("when", 2)` → `when[2]`.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}
