//! `woodlark lint [PATH…]`: the compiler's verdicts on config files, like a compiler's
//! messages (`file:line: error: message [field]`) or as JSON, for editors and pre-commit
//! hooks. What it checks is exactly what a push checks ([`crate::pipeline::lint`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::pipeline::lint::{Finding, lint};
use crate::pipeline::types::ConfigFile;

/// How findings are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `file:line: error: message [field]`, one per line.
    Text,
    /// A JSON array of `{file, line, field, kind, message, warning}`.
    Json,
}

/// Lints `paths` (files, or folders whose `.yaml`/`.yml` files are linted; none: the
/// repository config in the current directory) and prints the findings. Errors make it
/// fail; warnings alone do not.
pub fn run(paths: &[PathBuf], format: Format) -> anyhow::Result<()> {
    let files = config_files(paths)?;
    // A workflow file given alone is linted with its siblings, as the server would see
    // them (its `depends_on` names them), but only its own findings are shown.
    let mut with_context = files.clone();
    for file in &files {
        for sibling in siblings(Path::new(&file.name))? {
            if !with_context.iter().any(|f| f.name == sibling.name) {
                with_context.push(sibling);
            }
        }
    }
    let findings: Vec<Finding> = lint(&with_context)
        .into_iter()
        .filter(|f| files.iter().any(|x| x.name == f.file))
        .collect();
    let out = match format {
        Format::Json => serde_json::to_string_pretty(&findings)?,
        Format::Text => findings
            .iter()
            .map(text_line)
            .collect::<Vec<_>>()
            .join("\n"),
    };
    if !out.is_empty() {
        super::print_out(&out)?;
    }
    let errors = findings.iter().filter(|f| !f.warning).count();
    if errors > 0 {
        bail!(
            "{errors} error{} in {} file{}",
            if errors == 1 { "" } else { "s" },
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

fn text_line(f: &Finding) -> String {
    let place = if f.line > 0 {
        format!("{}:{}", f.file, f.line)
    } else {
        f.file.clone()
    };
    let severity = if f.warning { "warning" } else { "error" };
    let field = if f.field.is_empty() {
        String::new()
    } else {
        format!(" [{}]", f.field)
    };
    format!("{place}: {severity}: {}{field}", f.message)
}

/// The files to lint, named as given: each path, a folder's YAML files (sorted), or by
/// default `.woodpecker/` when it exists, else `.woodpecker.yaml` or `.woodpecker.yml`.
pub(super) fn config_files(paths: &[PathBuf]) -> anyhow::Result<Vec<ConfigFile>> {
    let paths = if paths.is_empty() {
        default_paths()?
    } else {
        paths.to_vec()
    };
    let mut files = Vec::new();
    for path in &paths {
        if path.is_dir() {
            let inside = yaml_files(path)?;
            if inside.is_empty() {
                bail!("{} holds no .yaml or .yml file", path.display());
            }
            for file in inside {
                files.push(read(&file)?);
            }
        } else {
            files.push(read(path)?);
        }
    }
    Ok(files)
}

/// The other workflow files of the `.woodpecker/` folder `path` is in (none elsewhere).
fn siblings(path: &Path) -> anyhow::Result<Vec<ConfigFile>> {
    let Some(dir) = path
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == ".woodpecker"))
    else {
        return Ok(Vec::new());
    };
    yaml_files(dir)?
        .into_iter()
        .filter(|p| p != path)
        .map(|p| read(&p))
        .collect()
}

/// The `.yaml` and `.yml` files directly in `dir`, sorted.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut inside: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    inside.sort();
    Ok(inside)
}

fn default_paths() -> anyhow::Result<Vec<PathBuf>> {
    for candidate in [".woodpecker", ".woodpecker.yaml", ".woodpecker.yml"] {
        let path = PathBuf::from(candidate);
        if path.exists() {
            return Ok(vec![path]);
        }
    }
    bail!("no config here: give a path, or run it where .woodpecker/ or .woodpecker.yaml is")
}

fn read(path: &Path) -> anyhow::Result<ConfigFile> {
    let data =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(ConfigFile {
        name: path.display().to_string(),
        data,
    })
}
