//! Woodpecker's own server variables, so an existing deployment's environment starts
//! Woodlark against the same forge and with the same admins.
//!
//! What upstream reads (`cmd/server/flags.go`, `server/services/setup.go`) and where it lands:
//!
//! | variable                                   | Woodlark key                        |
//! |--------------------------------------------|-------------------------------------|
//! | `WOODPECKER_HOST`                          | `server.public_url`                 |
//! | `WOODPECKER_OPEN`                          | `auth.open`                         |
//! | `WOODPECKER_ADMIN`                         | `auth.admins`                       |
//! | `WOODPECKER_GITHUB`, `_GITLAB`, `_GITEA`, `_FORGEJO`, `_BITBUCKET`, `_BITBUCKET_DC`, `WOODPECKER_ADDON_FORGE` | forge 1's type (the first set, in upstream's order: addon first) |
//! | `WOODPECKER_FORGE_URL`, `WOODPECKER_<FORGE>_URL` | forge 1's `url` (upstream's defaults when unset) |
//! | `…_CLIENT`, `…_CLIENT_FILE`                | forge 1's `client`                  |
//! | `…_SECRET`, `…_SECRET_FILE`                | forge 1's OAuth secret              |
//! | `WOODPECKER_FORGE_SKIP_VERIFY`, `WOODPECKER_<FORGE>_SKIP_VERIFY` | forge 1's `skip_verify` |
//! | `WOODPECKER_EXPERT_FORGE_OAUTH_HOST`       | forge 1's `oauth_host`              |
//! | `WOODPECKER_ORGS`                          | forge 1's `orgs`                    |
//! | `WOODPECKER_GITHUB_MERGE_REF`, `_PUBLIC_ONLY` | forge 1's `additional_options`   |
//!
//! Woodlark's own keys win: a key set in `config.toml` or by its `WOODLARK_*` variable, or a
//! `[[forges]]` entry with id 1, leaves the Woodpecker variable unused. Each variable used or
//! left unused is reported as a note, which the server logs at start.

use super::forges::{ForgeConfig, ForgeOrigin};
use super::{Config, env_value};
use woodlark_stdx::go_bool;

/// The forge types upstream's switches enable, in the order upstream checks them.
const SWITCHES: [(&str, &str, &str); 6] = [
    ("WOODPECKER_GITHUB", "github", "GITHUB"),
    ("WOODPECKER_GITLAB", "gitlab", "GITLAB"),
    ("WOODPECKER_GITEA", "gitea", "GITEA"),
    ("WOODPECKER_FORGEJO", "forgejo", "FORGEJO"),
    ("WOODPECKER_BITBUCKET", "bitbucket", "BITBUCKET"),
    ("WOODPECKER_BITBUCKET_DC", "bitbucket-dc", "BITBUCKET_DC"),
];

/// Upstream's lists of variables for one setting: the generic one, then each forge's.
fn per_forge(generic: &str, suffix: &str, dc_suffix: &str) -> Vec<String> {
    let mut names = vec![generic.to_string()];
    for (_, _, stem) in SWITCHES {
        let suffix = if stem == "BITBUCKET_DC" {
            dc_suffix
        } else {
            suffix
        };
        names.push(format!("WOODPECKER_{stem}_{suffix}"));
    }
    names
}

/// Applies the Woodpecker variables of `env` that no Woodlark key overrides; `file_sets`
/// tells whether `config.toml` itself sets a dotted key.
pub(super) fn apply(
    config: &mut Config,
    env: &[(String, String)],
    file_sets: &dyn Fn(&str) -> bool,
) -> Result<(), (String, String)> {
    let get = |name: &str| env_value(env, name).filter(|v| !v.is_empty());
    let mut notes = Vec::new();
    let woodlark_sets = |key: &str, var: &str| file_sets(key) || env_value(env, var).is_some();

    if let Some(host) = get("WOODPECKER_HOST") {
        if woodlark_sets("server.public_url", "WOODLARK_PUBLIC_URL") {
            notes.push("WOODPECKER_HOST unused: server.public_url is set".to_string());
        } else {
            config.server.public_url = host.trim_end_matches('/').to_string();
            notes.push("WOODPECKER_HOST gives server.public_url".to_string());
        }
    }
    if let Some(open) = get("WOODPECKER_OPEN") {
        let value = go_bool(&open).ok_or_else(|| {
            (
                "WOODPECKER_OPEN".to_string(),
                format!("expected true or false, got {open:?}"),
            )
        })?;
        if woodlark_sets("auth.open", "WOODLARK_OPEN") {
            notes.push("WOODPECKER_OPEN unused: auth.open is set".to_string());
        } else {
            config.auth.open = value;
            notes.push("WOODPECKER_OPEN gives auth.open".to_string());
        }
    }
    if let Some(admins) = get("WOODPECKER_ADMIN") {
        if woodlark_sets("auth.admins", "WOODLARK_ADMINS") {
            notes.push("WOODPECKER_ADMIN unused: auth.admins is set".to_string());
        } else {
            config.auth.admins = list(&admins);
            notes.push("WOODPECKER_ADMIN gives auth.admins".to_string());
        }
    }
    if let Some(mut forge) = forge_of(env)? {
        if config.forges.iter().any(|f| f.id == 1) {
            notes.push(
                "WOODPECKER_* forge variables unused: config.toml declares forge 1".to_string(),
            );
        } else {
            if let Some(orgs) = get("WOODPECKER_ORGS") {
                forge.orgs = list(&orgs);
            }
            notes.push(format!(
                "forge 1 ({}) comes from the WOODPECKER_* variables; it is read-only through the API",
                forge.kind
            ));
            config.forges.push(forge);
        }
    } else if get("WOODPECKER_ORGS").is_some() {
        notes.push("WOODPECKER_ORGS unused: no forge is set by WOODPECKER_* variables".into());
    }
    config.notes.extend(notes);
    Ok(())
}

/// A comma-separated list, as upstream's string-slice flags read one.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Forge 1 as the Woodpecker variables describe it, if any forge switch is on.
fn forge_of(env: &[(String, String)]) -> Result<Option<ForgeConfig>, (String, String)> {
    let get = |name: &str| env_value(env, name).filter(|v| !v.is_empty());
    let first = |names: &[String]| names.iter().find_map(|n| get(n).map(|v| (n.clone(), v)));
    let mut options = serde_json::Map::new();
    let (kind, plugin) = if let Some(addon) = get("WOODPECKER_ADDON_FORGE") {
        // Upstream names an executable; here it names a WASM adapter, by its instance
        // name or its file (`/plugins/my-forge.wasm` → `my-forge`).
        let stem = std::path::Path::new(&addon)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or(addon);
        ("addon", stem)
    } else {
        let mut on = None;
        for (var, kind, _) in SWITCHES {
            if let Some(value) = get(var) {
                let enabled = go_bool(&value).ok_or_else(|| {
                    (
                        var.to_string(),
                        format!("expected true or false, got {value:?}"),
                    )
                })?;
                if enabled {
                    on = Some(kind);
                    break;
                }
            }
        }
        let Some(kind) = on else {
            return Ok(None);
        };
        if kind == "github" {
            let flag = |var: &str, default: bool| match get(var) {
                None => Ok(default),
                Some(v) => go_bool(&v).ok_or_else(|| {
                    (
                        var.to_string(),
                        format!("expected true or false, got {v:?}"),
                    )
                }),
            };
            options.insert(
                "merge-ref".into(),
                flag("WOODPECKER_GITHUB_MERGE_REF", true)?.into(),
            );
            options.insert(
                "public-only".into(),
                flag("WOODPECKER_GITHUB_PUBLIC_ONLY", false)?.into(),
            );
        }
        (kind, String::new())
    };
    let url = first(&per_forge("WOODPECKER_FORGE_URL", "URL", "URL"))
        .map(|(_, v)| v)
        .unwrap_or_default();
    let client_files: Vec<String> = per_forge(
        "WOODPECKER_FORGE_CLIENT_FILE",
        "CLIENT_FILE",
        "CLIENT_ID_FILE",
    );
    let secret_files: Vec<String> = per_forge(
        "WOODPECKER_FORGE_SECRET_FILE",
        "SECRET_FILE",
        "CLIENT_SECRET_FILE",
    );
    // A file wins over a value, as upstream's value-source chains read them.
    let (client, client_file) = match first(&client_files) {
        Some((_, path)) => (String::new(), path.into()),
        None => (
            first(&per_forge("WOODPECKER_FORGE_CLIENT", "CLIENT", "CLIENT_ID"))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default(),
            std::path::PathBuf::new(),
        ),
    };
    let (client_secret_env, client_secret_file) = match first(&secret_files) {
        Some((_, path)) => (String::new(), path.into()),
        None => (
            first(&per_forge(
                "WOODPECKER_FORGE_SECRET",
                "SECRET",
                "CLIENT_SECRET",
            ))
            .map(|(name, _)| name)
            .unwrap_or_default(),
            std::path::PathBuf::new(),
        ),
    };
    let skip_verify = match first(
        &per_forge("WOODPECKER_FORGE_SKIP_VERIFY", "SKIP_VERIFY", "SKIP_VERIFY")[..6],
    ) {
        None => false,
        Some((name, value)) => go_bool(&value)
            .ok_or_else(|| (name, format!("expected true or false, got {value:?}")))?,
    };
    Ok(Some(ForgeConfig {
        id: 1,
        kind: kind.to_string(),
        url,
        client,
        client_file,
        client_secret_file,
        client_secret_env,
        client_secret: None,
        oauth_host: get("WOODPECKER_EXPERT_FORGE_OAUTH_HOST").unwrap_or_default(),
        skip_verify,
        orgs: Vec::new(),
        plugin,
        api_url: String::new(),
        webhook_secret_file: Default::default(),
        additional_options: options,
        origin: ForgeOrigin::WoodpeckerEnv,
        secrets: Default::default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load(text: &str, pairs: &[(&str, &str)]) -> Result<Config, super::super::ConfigError> {
        Config::from_toml(text, "test.toml", &env(pairs))
    }

    #[test]
    fn a_github_deployment_becomes_forge_one() {
        let config = load(
            "",
            &[
                ("WOODPECKER_HOST", "https://ci.example.com/"),
                ("WOODPECKER_OPEN", "true"),
                ("WOODPECKER_ADMIN", "ann, bob"),
                ("WOODPECKER_ORGS", "acme"),
                ("WOODPECKER_GITHUB", "true"),
                ("WOODPECKER_GITHUB_CLIENT", "Iv1.abc"),
                ("WOODPECKER_GITHUB_SECRET", "shh"),
            ],
        )
        .unwrap();
        assert_eq!(config.server.public_url, "https://ci.example.com");
        assert!(config.auth.open);
        assert_eq!(config.auth.admins, ["ann", "bob"]);
        let forge = &config.forges[0];
        assert_eq!((forge.id, forge.kind.as_str()), (1, "github"));
        assert_eq!(forge.url, "https://github.com", "upstream's default");
        assert_eq!(forge.client, "Iv1.abc");
        assert_eq!(forge.secrets.client_secret, "shh");
        assert_eq!(forge.orgs, ["acme"]);
        assert_eq!(forge.origin, ForgeOrigin::WoodpeckerEnv);
        assert_eq!(forge.additional_options["merge-ref"], true);
    }

    #[test]
    fn files_win_over_values_and_the_generic_url_over_the_forges() {
        let dir = tempfile::tempdir().unwrap();
        let (client, secret) = (dir.path().join("c"), dir.path().join("s"));
        std::fs::write(&client, "client-from-file\n").unwrap();
        std::fs::write(&secret, "secret-from-file\n").unwrap();
        let config = load(
            "",
            &[
                ("WOODPECKER_GITEA", "1"),
                ("WOODPECKER_FORGE_URL", "https://git.example.com"),
                ("WOODPECKER_GITEA_URL", "https://other.example.com"),
                ("WOODPECKER_GITEA_CLIENT", "client-value"),
                ("WOODPECKER_GITEA_CLIENT_FILE", client.to_str().unwrap()),
                ("WOODPECKER_GITEA_SECRET", "secret-value"),
                ("WOODPECKER_GITEA_SECRET_FILE", secret.to_str().unwrap()),
                ("WOODPECKER_GITEA_SKIP_VERIFY", "true"),
                (
                    "WOODPECKER_EXPERT_FORGE_OAUTH_HOST",
                    "https://public.example.com",
                ),
            ],
        )
        .unwrap();
        let forge = &config.forges[0];
        assert_eq!(forge.kind, "gitea");
        assert_eq!(forge.url, "https://git.example.com");
        assert_eq!(forge.client, "client-from-file");
        assert_eq!(forge.secrets.client_secret, "secret-from-file");
        assert!(forge.skip_verify);
        assert_eq!(forge.oauth_host, "https://public.example.com");
    }

    #[test]
    fn woodlarks_own_keys_win_and_say_so() {
        let config = load(
            "[server]\npublic_url = 'https://mine.example.com'\n[auth]\nopen = false\n\n[[forges]]\nid = 1\ntype = 'gitlab'\n",
            &[
                ("WOODPECKER_HOST", "https://theirs.example.com"),
                ("WOODPECKER_OPEN", "true"),
                ("WOODPECKER_ADMIN", "eve"),
                ("WOODLARK_ADMINS", "ann"),
                ("WOODPECKER_GITHUB", "true"),
            ],
        )
        .unwrap();
        assert_eq!(config.server.public_url, "https://mine.example.com");
        assert!(!config.auth.open);
        assert_eq!(config.auth.admins, ["ann"]);
        assert_eq!(config.forges.len(), 1);
        assert_eq!(config.forges[0].kind, "gitlab");
        let notes = config.notes.join("\n");
        for unused in [
            "WOODPECKER_HOST unused",
            "WOODPECKER_OPEN unused",
            "WOODPECKER_ADMIN unused",
            "config.toml declares forge 1",
        ] {
            assert!(notes.contains(unused), "{notes}");
        }
    }

    #[test]
    fn an_addon_forge_names_its_adapter_and_bad_switches_are_refused() {
        let config = load(
            "",
            &[
                ("WOODPECKER_ADDON_FORGE", "/opt/forges/my-scm.wasm"),
                ("WOODPECKER_FORGE_URL", "https://scm.example.com"),
                ("WOODPECKER_GITHUB", "true"),
            ],
        )
        .unwrap();
        assert_eq!(config.forges[0].kind, "addon", "addon is checked first");
        assert_eq!(config.forges[0].plugin, "my-scm");
        let err = load("", &[("WOODPECKER_GITHUB", "yes")]).unwrap_err();
        assert!(err.to_string().contains("WOODPECKER_GITHUB"), "{err}");
        let err = load(
            "",
            &[
                ("WOODPECKER_GITHUB", "true"),
                ("WOODPECKER_GITHUB_CLIENT", "c"),
            ],
        )
        .unwrap_err();
        assert!(err.to_string().contains("needs its secret"), "{err}");
        assert!(
            err.to_string().contains("WOODPECKER_<FORGE>_SECRET"),
            "{err}"
        );
        assert!(!err.to_string().contains("forges[0]"), "{err}");
    }
}
