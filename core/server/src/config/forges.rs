//! `[[forges]]`: forges the operator declares, applied at every start under the id they name.
//!
//! A configured forge is the operator's: the API shows it read-only (a write answers 409
//! naming where it is configured), and a forge that leaves the file stays as an ordinary
//! forge the API may change or remove. Its OAuth secret comes from a file or an environment
//! variable, never from the file itself (config files end up in repositories and tickets);
//! both are read when the configuration is loaded, so a missing file stops start-up with
//! the key that names it.
//!
//! ```toml
//! [[forges]]
//! id = 1
//! type = "github"
//! url = "https://github.example.com"     # the type's public instance when left out
//! client = "Iv1.0123456789abcdef"
//! client_secret_file = "/run/secrets/github-oauth"   # or client_secret_env = "GH_SECRET"
//! webhook_secret_file = "/run/secrets/github-hooks"  # else generated once and kept
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::forges::{API_URL_OPTION, Forge, ForgeKind, PLUGIN_OPTION};

/// One `[[forges]]` entry (or the forge Woodpecker's environment variables describe).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgeConfig {
    /// The forge's id, kept across starts (repositories and webhooks name it).
    pub id: i64,
    /// `github`, `gitlab`, `gitea`, `forgejo`, `bitbucket`, `bitbucket-dc`, `addon` (a
    /// third-party adapter, named by `plugin`) or `git` (Woodlark's local repositories).
    #[serde(rename = "type")]
    pub kind: String,
    /// The forge's web root; left out: the type's public instance (github.com, gitlab.com,
    /// …), as Woodpecker assumes.
    #[serde(default)]
    pub url: String,
    /// The OAuth application's client id; empty: no sign-in through this forge, and the
    /// secret is an API token the server calls the forge with.
    #[serde(default)]
    pub client: String,
    /// A file holding the client id (Woodpecker's `*_CLIENT_FILE`), instead of `client`.
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub client_file: PathBuf,
    /// A file holding the OAuth client secret (or API token).
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub client_secret_file: PathBuf,
    /// An environment variable holding the OAuth client secret (or API token).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_secret_env: String,
    /// Refused with a message pointing at the two keys above.
    #[serde(default, skip_serializing)]
    pub client_secret: Option<String>,
    /// Where browsers sign in when the forge's `url` is not reachable by them.
    #[serde(default)]
    pub oauth_host: String,
    /// Do not verify the forge's TLS certificate (self-signed forges).
    #[serde(default)]
    pub skip_verify: bool,
    /// Only members of these organisations may sign in through the forge.
    #[serde(default)]
    pub orgs: Vec<String>,
    /// The forge-adapter plugin instance that serves the forge; empty: the one named like
    /// the type (`github` or `forge-github`).
    #[serde(default)]
    pub plugin: String,
    /// The forge's REST API root when it is not where the adapter looks by default.
    #[serde(default)]
    pub api_url: String,
    /// A file holding the secret the forge signs webhooks with (at least 16 characters);
    /// empty: one generated at the first start and kept.
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub webhook_secret_file: PathBuf,
    /// Type-specific options, as the API's `additional_options` (e.g. `merge-ref`).
    #[serde(default)]
    pub additional_options: Map<String, Value>,
    /// Where it was declared, for messages (not a key).
    #[serde(skip)]
    pub origin: ForgeOrigin,
    /// The client id and secrets read from their files or variables (not keys).
    #[serde(skip)]
    pub secrets: ForgeSecrets,
}

fn is_empty_path(p: &Path) -> bool {
    p.as_os_str().is_empty()
}

/// Where a configured forge was declared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ForgeOrigin {
    #[default]
    ConfigFile,
    /// Woodpecker's `WOODPECKER_*` server variables (see [`super::woodpecker`]).
    WoodpeckerEnv,
}

impl ForgeOrigin {
    /// What a refused API write names as the place to change the forge.
    pub fn describe(self) -> &'static str {
        match self {
            ForgeOrigin::ConfigFile => "config.toml ([[forges]])",
            ForgeOrigin::WoodpeckerEnv => "the WOODPECKER_* environment variables",
        }
    }
}

/// Values read from files and the environment at load time; never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ForgeSecrets {
    pub client_secret: String,
    /// `None`: keep the stored one (or generate one for a new forge).
    pub webhook_secret: Option<String>,
}

impl std::fmt::Debug for ForgeSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForgeSecrets(<redacted>)")
    }
}

/// A problem with one entry: the key (below `forges[<n>]`) and what is wrong.
pub type Problem = (String, String);

impl ForgeConfig {
    /// The stored forge type this entry names.
    pub fn forge_kind(&self) -> Option<ForgeKind> {
        ForgeKind::parse(&self.kind)
    }

    /// Checks the entry and reads its secrets (files, and `env` for variables).
    pub fn load(&mut self, env: &[(String, String)]) -> Result<(), Problem> {
        let bad = |key: &str, msg: String| Err((key.to_string(), msg));
        if self.id < 1 {
            return bad("id", "a positive integer".into());
        }
        let Some(kind) = self.forge_kind() else {
            let names = ForgeKind::ALL.map(ForgeKind::as_str).join(", ");
            return bad("type", format!("{:?} is not one of {names}", self.kind));
        };
        if self.client_secret.is_some() {
            return bad(
                "client_secret",
                "not read from the file itself: use client_secret_file (a file holding it) or client_secret_env (the environment variable holding it)".into(),
            );
        }
        if self.url.is_empty() {
            self.url = default_url(kind).to_string();
        }
        self.url = self.url.trim_end_matches('/').to_string();
        if self.url.is_empty() {
            return bad("url", format!("required for a {kind} forge"));
        }
        let web = self.url.starts_with("https://") || self.url.starts_with("http://");
        // A git forge needs a file:// URL, every other one a web URL.
        if kind.is_builtin() == web {
            let want = if kind.is_builtin() {
                "a file:// URL of the repositories' directory"
            } else {
                "an http:// or https:// URL"
            };
            return bad("url", format!("{:?}: expected {want}", self.url));
        }
        if kind == ForgeKind::Addon && self.plugin.is_empty() {
            return bad(
                "plugin",
                "an addon forge names the forge-adapter plugin that serves it".into(),
            );
        }
        for (key, url) in [("oauth_host", &self.oauth_host), ("api_url", &self.api_url)] {
            if !(url.is_empty() || url.starts_with("https://") || url.starts_with("http://")) {
                return bad(key, format!("{url:?}: expected an http:// or https:// URL"));
            }
        }
        if !is_empty_path(&self.client_file) {
            self.client =
                read_secret_file(&self.client_file).map_err(|m| ("client_file".into(), m))?;
        }
        self.secrets.client_secret = match (
            is_empty_path(&self.client_secret_file),
            self.client_secret_env.is_empty(),
        ) {
            (false, false) => {
                return bad(
                    "client_secret_file",
                    "give client_secret_file or client_secret_env, not both".into(),
                );
            }
            (false, true) => read_secret_file(&self.client_secret_file)
                .map_err(|m| ("client_secret_file".to_string(), m))?,
            (true, false) => super::env_value(env, &self.client_secret_env)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    (
                        "client_secret_env".to_string(),
                        format!(
                            "the environment variable {} is not set",
                            self.client_secret_env
                        ),
                    )
                })?,
            (true, true) => String::new(),
        };
        if !self.client.is_empty() && self.secrets.client_secret.is_empty() {
            return bad(
                "client_secret_file",
                "a forge with an OAuth client needs its secret: client_secret_file or client_secret_env".into(),
            );
        }
        if !is_empty_path(&self.webhook_secret_file) {
            let secret = read_secret_file(&self.webhook_secret_file)
                .map_err(|m| ("webhook_secret_file".to_string(), m))?;
            if secret.len() < 16 {
                return bad(
                    "webhook_secret_file",
                    "the secret must be at least 16 characters".into(),
                );
            }
            self.secrets.webhook_secret = Some(secret);
        }
        Ok(())
    }

    /// What the CI services apply at start: the record, its secrets and where it was
    /// configured.
    pub fn configured(&self) -> crate::ci::forges::ConfiguredForge {
        crate::ci::forges::ConfiguredForge {
            forge: self.forge(),
            client_secret: self.secrets.client_secret.clone(),
            webhook_secret: self.secrets.webhook_secret.clone(),
            origin: self.origin.describe(),
        }
    }

    /// The forge record this entry describes.
    pub fn forge(&self) -> Forge {
        let mut additional_options = self.additional_options.clone();
        if !self.plugin.is_empty() {
            additional_options.insert(PLUGIN_OPTION.into(), Value::String(self.plugin.clone()));
        }
        if !self.api_url.is_empty() {
            additional_options.insert(
                API_URL_OPTION.into(),
                Value::String(self.api_url.trim_end_matches('/').to_string()),
            );
        }
        Forge {
            id: self.id,
            kind: self.forge_kind().unwrap_or_default(),
            url: self.url.clone(),
            client: self.client.clone(),
            skip_verify: self.skip_verify,
            oauth_host: self.oauth_host.trim_end_matches('/').to_string(),
            orgs: self.orgs.clone(),
            additional_options,
        }
    }
}

/// The URL Woodpecker assumes for a forge type when none is given (`server/services/setup.go`).
pub fn default_url(kind: ForgeKind) -> &'static str {
    match kind {
        ForgeKind::Github => "https://github.com",
        ForgeKind::Gitlab => "https://gitlab.com",
        ForgeKind::Gitea => "https://try.gitea.com",
        ForgeKind::Forgejo => "https://next.forgejo.org",
        ForgeKind::Bitbucket => "https://bitbucket.org",
        ForgeKind::BitbucketDc | ForgeKind::Addon | ForgeKind::Git => "",
    }
}

/// A secret kept in a file: its content without surrounding whitespace (a trailing newline
/// is how editors and `echo` leave it), which must not be empty.
fn read_secret_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value = text.trim();
    if value.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(value.to_string())
}

/// Checks every entry (ids unique) and reads their secrets.
pub fn load_all(forges: &mut [ForgeConfig], env: &[(String, String)]) -> Result<(), Problem> {
    let mut seen = std::collections::BTreeSet::new();
    for (n, forge) in forges.iter_mut().enumerate() {
        // An operator who set Woodpecker's variables never wrote `forges[n]`: name those.
        let origin = forge.origin;
        let at = |(key, msg): Problem| match origin {
            ForgeOrigin::ConfigFile => (format!("forges[{n}].{key}"), msg),
            ForgeOrigin::WoodpeckerEnv => (
                "WOODPECKER_* forge variables".to_string(),
                format!("{key}: {msg} (Woodpecker's WOODPECKER_<FORGE>_SECRET or its _FILE form)"),
            ),
        };
        if !seen.insert(forge.id) {
            return Err(at((
                "id".into(),
                format!("forge {} is declared twice", forge.id),
            )));
        }
        forge.load(env).map_err(at)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> ForgeConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_github_forge_gets_github_com_and_its_secret_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("s");
        std::fs::write(&secret, "shh-oauth\n").unwrap();
        let mut f = entry(&format!(
            "id = 1\ntype = 'github'\nclient = 'Iv1'\nclient_secret_file = {:?}",
            secret
        ));
        f.load(&[]).unwrap();
        assert_eq!(f.url, "https://github.com");
        assert_eq!(f.secrets.client_secret, "shh-oauth");
        assert!(!format!("{f:?}").contains("shh-oauth"), "never printed");
        let forge = f.forge();
        assert_eq!((forge.id, forge.kind), (1, ForgeKind::Github));
    }

    #[test]
    fn the_secret_may_come_from_a_variable_but_never_inline() {
        let mut f = entry(
            "id = 2\ntype = 'gitea'\nurl = 'https://git.example.com/'\nclient = 'c'\nclient_secret_env = 'GITEA_SECRET'",
        );
        let env = [("GITEA_SECRET".to_string(), "from-env".to_string())];
        f.load(&env).unwrap();
        assert_eq!(f.secrets.client_secret, "from-env");
        assert_eq!(f.url, "https://git.example.com");
        let err = entry("id = 2\ntype = 'gitea'\nclient = 'c'\nclient_secret_env = 'GITEA_SECRET'")
            .load(&[])
            .unwrap_err();
        assert_eq!(err.0, "client_secret_env");
        let err = entry("id = 2\ntype = 'gitea'\nclient = 'c'\nclient_secret = 'inline'")
            .load(&[])
            .unwrap_err();
        assert_eq!(err.0, "client_secret");
        assert!(err.1.contains("client_secret_file"), "{}", err.1);
        let err = entry("id = 2\ntype = 'gitea'\nclient = 'c'")
            .load(&[])
            .unwrap_err();
        assert!(err.1.contains("needs its secret"), "{}", err.1);
    }

    #[test]
    fn bad_entries_name_their_key() {
        let cases = [
            ("id = 0\ntype = 'github'", "id"),
            ("id = 1\ntype = 'svn'", "type"),
            ("id = 1\ntype = 'bitbucket-dc'", "url"),
            ("id = 1\ntype = 'git'\nurl = 'https://x'", "url"),
            ("id = 1\ntype = 'addon'\nurl = 'https://x'", "plugin"),
            ("id = 1\ntype = 'github'\napi_url = 'ftp://x'", "api_url"),
            (
                "id = 1\ntype = 'github'\nwebhook_secret_file = '/nonexistent/x'",
                "webhook_secret_file",
            ),
        ];
        for (text, key) in cases {
            let err = entry(text).load(&[]).unwrap_err();
            assert_eq!(err.0, key, "{text}: {err:?}");
        }
        let mut two = vec![
            entry("id = 1\ntype = 'github'"),
            entry("id = 1\ntype = 'gitlab'"),
        ];
        let err = load_all(&mut two, &[]).unwrap_err();
        assert_eq!(err.0, "forges[1].id");
    }

    #[test]
    fn an_addon_forge_names_its_plugin_and_api_root_in_its_options() {
        let mut f = entry(
            "id = 3\ntype = 'addon'\nurl = 'https://scm.example.com'\nplugin = 'my-scm'\napi_url = 'https://api.scm.example.com/'",
        );
        f.load(&[]).unwrap();
        let forge = f.forge();
        assert_eq!(forge.kind, ForgeKind::Addon);
        assert_eq!(forge.additional_options["plugin"], "my-scm");
        assert_eq!(
            forge.additional_options["api_url"],
            "https://api.scm.example.com"
        );
    }
}
