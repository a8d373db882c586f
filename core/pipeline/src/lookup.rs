//! Before compiling: which files are the config, and is the commit asking to be skipped.
//!
//! Pure helpers for the code that fetches configs from a forge (no I/O here):
//! - [`config_paths_in_order`]: given the repository's file list at the commit and the repo's
//!   `config_file` setting, the config files to use, in Woodpecker's lookup order;
//! - [`workflow_name`]: the workflow name a config path gets (`.woodpecker/build.yaml` →
//!   `build`, `.woodpecker.yml` → `woodpecker`);
//! - [`skip_ci`]: the `[skip ci]` / `[ci skip]` commit-message rule.

/// Does the commit message ask to skip CI? `[ci skip]` or `[skip ci]`, any case, with any
/// number of spaces between the words (Woodpecker's `\[(?i:ci *skip|skip *ci)\]`). The caller
/// applies it to push and pull-request events only.
pub fn skip_ci(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut i = 0;
    while let Some(offset) = lower[i..].find('[') {
        let start = i + offset + 1;
        for (first, second) in [("ci", "skip"), ("skip", "ci")] {
            let rest = &bytes[start..];
            if let Some(after_first) = rest.strip_prefix(first.as_bytes()) {
                let spaces = after_first.iter().take_while(|&&b| b == b' ').count();
                let after_spaces = &after_first[spaces..];
                if after_spaces.starts_with(second.as_bytes())
                    && after_spaces.get(second.len()) == Some(&b']')
                {
                    return true;
                }
            }
        }
        i = start;
    }
    false
}

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml")
}

/// The config files among `available` (repository-relative paths, `/`-separated), in order.
///
/// - `config_file` set and ending in `/`: every `*.yaml`/`*.yml` directly in that folder;
/// - `config_file` set otherwise: that file, if present;
/// - not set: every `*.yaml`/`*.yml` directly in `.woodpecker/`; if there are none,
///   `.woodpecker.yaml`; else `.woodpecker.yml`.
///
/// Folder contents are sorted by name (the order workflows are numbered in). An empty result
/// means "no config": the caller drops the pipeline (upstream answers 204).
pub fn config_paths_in_order(config_file: &str, available: &[&str]) -> Vec<String> {
    let in_folder = |folder: &str| -> Vec<String> {
        let prefix = if folder.ends_with('/') {
            folder.to_string()
        } else {
            format!("{folder}/")
        };
        let mut files: Vec<String> = available
            .iter()
            .filter_map(|p| p.strip_prefix(prefix.as_str()))
            .filter(|rest| !rest.contains('/') && is_yaml(rest))
            .map(|rest| format!("{prefix}{rest}"))
            .collect();
        files.sort();
        files.dedup();
        files
    };
    let config_file = config_file.trim().trim_start_matches("./");
    if !config_file.is_empty() {
        if config_file.ends_with('/') {
            return in_folder(config_file);
        }
        return available
            .iter()
            .find(|p| **p == config_file)
            .map(|p| vec![p.to_string()])
            .unwrap_or_default();
    }
    let folder = in_folder(".woodpecker");
    if !folder.is_empty() {
        return folder;
    }
    for single in [".woodpecker.yaml", ".woodpecker.yml"] {
        if available.contains(&single) {
            return vec![single.to_string()];
        }
    }
    Vec::new()
}

/// The workflow name of a config path: the file name without `.yaml`/`.yml` and without a
/// leading dot (upstream's `SanitizePath`).
pub fn workflow_name(path: &str) -> String {
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let base = base
        .strip_suffix(".yml")
        .or_else(|| base.strip_suffix(".yaml"))
        .unwrap_or(base);
    let base = base.strip_prefix('.').unwrap_or(base);
    if base.is_empty() {
        "woodpecker".to_string()
    } else {
        base.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_ci_rule() {
        for (message, want) in [
            ("fix [skip ci]", true),
            ("[CI SKIP] docs", true),
            ("[ci  skip]", true),
            ("[skipci]", true),
            ("[skip-ci]", false),
            ("skip ci", false),
            ("[ci skip", false),
            ("[[skip ci]]", true),
            ("", false),
            ("[", false),
            ("ünïcode [Skip CI] ✓", true),
        ] {
            assert_eq!(skip_ci(message), want, "{message:?}");
        }
    }

    #[test]
    fn lookup_order() {
        let repo = [
            ".woodpecker/test.yml",
            ".woodpecker/build.yaml",
            ".woodpecker/notes.md",
            ".woodpecker/sub/deep.yaml",
            ".woodpecker.yml",
            ".woodpecker.yaml",
            "ci/a.yaml",
            "custom.yml",
        ];
        assert_eq!(
            config_paths_in_order("", &repo),
            [".woodpecker/build.yaml", ".woodpecker/test.yml"]
        );
        assert_eq!(config_paths_in_order("", &repo[4..]), [".woodpecker.yaml"]);
        assert_eq!(config_paths_in_order("", &repo[4..5]), [".woodpecker.yml"]);
        assert_eq!(config_paths_in_order("ci/", &repo), ["ci/a.yaml"]);
        assert_eq!(config_paths_in_order("custom.yml", &repo), ["custom.yml"]);
        assert!(config_paths_in_order("missing.yml", &repo).is_empty());
        assert!(config_paths_in_order("", &["README.md"]).is_empty());
    }

    #[test]
    fn names() {
        assert_eq!(workflow_name(".woodpecker/build.yaml"), "build");
        assert_eq!(workflow_name(".woodpecker.yml"), "woodpecker");
        assert_eq!(workflow_name("ci/test.yml"), "test");
        assert_eq!(workflow_name("x"), "x");
        assert_eq!(workflow_name(""), "woodpecker");
    }
}
