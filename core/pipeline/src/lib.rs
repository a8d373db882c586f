//! Pipelines as data: the config compiler and the types shared with the runner.
//!
//! - [`status`]: status values and their roll-up; [`labels`]: matching tasks to agents.
//! - [`types`]: config files, metadata, compiled workflows and steps (also the agent
//!   protocol's payload).
//! - `compile`: Woodpecker YAML → [`types::CompiledWorkflow`]s (`when` filters, matrix,
//!   `depends_on`, secrets, `CI_*` variables); never panics on input, reports `errors[]`.
//!   Its parts: [`yaml`] (hardened YAML → tree, anchors and merge keys), [`subst`] (`${VAR}`),
//!   [`matrix`], [`workflow`] (schema and lint), [`when`] with [`glob`] and [`expr`],
//!   [`env`](mod@env) (environment, settings, secrets), [`dag`] (step dependencies), [`read`] and
//!   [`diag`] (typed reads, issues); [`lookup`]: config file order, workflow names, skip-ci;
//!   [`variables`]: the checks and placement rules for pipeline variables; [`lint`]: the
//!   compiler's verdicts on files outside the server, by line (`woodlark lint`).
//! - [`advice`]: upstream's non-blocking advice on a config (steps without an `event` filter,
//!   deprecated keys and variables), beside the compiler's own issues.

pub mod advice;
pub mod compile;
pub mod dag;
pub mod diag;
pub mod env;
pub mod event;
pub mod expr;
pub mod glob;
pub mod labels;
pub mod lint;
pub mod lookup;
pub mod matrix;
pub mod read;
pub mod registry;
pub mod status;
pub mod subst;
pub mod types;
pub mod variables;
pub mod when;
pub mod workflow;
pub mod yaml;

pub use compile::compile;

#[cfg(test)]
mod lint_parity_tests;
pub use lookup::{config_paths_in_order, skip_ci, workflow_name};
