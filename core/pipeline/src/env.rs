//! `environment:` and `settings:` values → environment variables, with secrets resolved.
//!
//! Conversion follows upstream's `ParamsToEnv`:
//! - a scalar becomes its text (YAML booleans in lower case: `true`/`false`); null is skipped;
//! - `{from_secret: NAME}` becomes the secret's value, after the secret's filters allowed it
//!   ([`SecretScope::resolve`]);
//! - a list of scalars becomes the values joined with `,`;
//! - anything else (maps, lists with maps) becomes JSON, with `from_secret` maps inside it
//!   resolved too.
//!
//! `settings:` keys become `PLUGIN_<KEY>` in upper case with `.` and `-` turned into `_`
//! ([`settings_key`]); `environment:` keys are kept as written.
//!
//! Every secret value handed out is recorded, so the step's log can mask it.

use super::diag::{Issue, field, index};
use super::types::SecretValue;
use super::yaml::{Node, Value};

/// The secrets of a run and the facts their filters look at.
pub struct SecretScope<'a> {
    pub secrets: &'a [SecretValue],
    pub event: &'a str,
}

/// The step asking for a secret.
pub struct Consumer<'a> {
    pub name: &'a str,
    pub image: &'a str,
    /// Upstream's plugin rule (no commands, entrypoint or environment).
    pub is_plugin: bool,
}

impl SecretScope<'_> {
    /// The value of secret `name` (case-insensitive) if `step` may use it in this run.
    pub fn resolve(&self, name: &str, step: &Consumer<'_>) -> Result<String, String> {
        let secret = self
            .secrets
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("secret `{name}` not found"))?;
        if !secret.images.is_empty() {
            if !step.is_plugin {
                return Err(format!(
                    "secret `{name}` may only be used by plugin steps (it has an image filter); \
                     step `{}` is not a plugin",
                    step.name
                ));
            }
            if !secret.images.iter().any(|i| image_matches(i, step.image)) {
                return Err(format!(
                    "secret `{name}` may not be used with image `{}` (step `{}`)",
                    step.image, step.name
                ));
            }
        }
        if !event_allowed(&secret.events, self.event) {
            return Err(format!(
                "secret `{name}` may not be used by `{}` events",
                self.event
            ));
        }
        Ok(secret.value.clone())
    }
}

/// Empty = any event; every pull-request variant counts as `pull_request`.
fn event_allowed(events: &[String], event: &str) -> bool {
    events.is_empty()
        || events.iter().any(|e| e == event)
        || (event.starts_with("pull_request") && events.iter().any(|e| e == "pull_request"))
}

/// Compare images ignoring the default registry (`docker.io/`, `library/`); the tag (and
/// digest) is compared only when the allowed entry has one.
pub fn image_matches(allowed: &str, image: &str) -> bool {
    let (allowed_name, allowed_tag) = split_image(allowed);
    let (name, tag) = split_image(image);
    allowed_name == name && (allowed_tag.is_empty() || allowed_tag == tag)
}

fn split_image(image: &str) -> (String, String) {
    let image = image.trim();
    let (rest, digest) = image.split_once('@').unwrap_or((image, ""));
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[slash..].find(':') {
        Some(i) => (&rest[..slash + i], &rest[slash + i + 1..]),
        None => (rest, ""),
    };
    let mut name = name;
    for prefix in ["docker.io/", "index.docker.io/"] {
        name = name.strip_prefix(prefix).unwrap_or(name);
    }
    let name = name.strip_prefix("library/").unwrap_or(name);
    let tag = if digest.is_empty() {
        tag.to_string()
    } else {
        format!("{tag}@{digest}")
    };
    (name.to_string(), tag)
}

/// `PLUGIN_` + the key upper-cased, `.` and `-` replaced by `_`.
pub fn settings_key(key: &str) -> String {
    format!("PLUGIN_{}", key.replace(['.', '-'], "_").to_uppercase())
}

/// Converts values for one step, remembering the secret values it hands out.
pub struct Converter<'a> {
    pub scope: &'a SecretScope<'a>,
    pub step: Consumer<'a>,
    pub used: Vec<String>,
}

impl Converter<'_> {
    /// The environment value for `node` at `at`; `None` for null (the variable is not set).
    pub fn value(&mut self, node: &Node, at: &str) -> Result<Option<String>, Issue> {
        if node.is_null() {
            return Ok(None);
        }
        match &node.value {
            Value::Scalar { text, plain } => Ok(Some(scalar(text, *plain))),
            Value::Map(_) => match self.secret_ref(node, at)? {
                Some(value) => Ok(Some(value)),
                None => Ok(Some(self.json(node, at)?.to_string())),
            },
            Value::Seq(items) => {
                if items
                    .iter()
                    .all(|i| matches!(i.value, Value::Scalar { .. }))
                {
                    let parts: Vec<String> = items
                        .iter()
                        .filter(|i| !i.is_null())
                        .map(|i| match &i.value {
                            Value::Scalar { text, plain } => scalar(text, *plain),
                            _ => String::new(),
                        })
                        .collect();
                    Ok(Some(parts.join(",")))
                } else {
                    Ok(Some(self.json(node, at)?.to_string()))
                }
            }
        }
    }

    /// `Some(value)` when `node` is `{from_secret: NAME}`.
    fn secret_ref(&mut self, node: &Node, at: &str) -> Result<Option<String>, Issue> {
        let Some(name_node) = node.get("from_secret") else {
            return Ok(None);
        };
        let here = field(at, "from_secret");
        let Some(name) = name_node.as_str().filter(|_| name_node.as_seq().is_none()) else {
            return Err(Issue::linter(here, "from_secret needs a secret name"));
        };
        if node.as_map().is_some_and(|m| m.len() > 1) {
            return Err(Issue::linter(
                at,
                "a `from_secret` map cannot have other keys",
            ));
        }
        let value = self
            .scope
            .resolve(name, &self.step)
            .map_err(|e| Issue::compiler(at, e))?;
        if !value.is_empty() && !self.used.contains(&value) {
            self.used.push(value.clone());
        }
        Ok(Some(value))
    }

    /// JSON of a complex value, secrets inside resolved.
    fn json(&mut self, node: &Node, at: &str) -> Result<serde_json::Value, Issue> {
        match &node.value {
            Value::Map(entries) => {
                if let Some(v) = self.secret_ref(node, at)? {
                    return Ok(serde_json::Value::String(v));
                }
                let mut object = serde_json::Map::new();
                for (k, v) in entries {
                    object.insert(k.clone(), self.json(v, &field(at, k))?);
                }
                Ok(serde_json::Value::Object(object))
            }
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.json(item, &index(at, i)))
                .collect::<Result<Vec<_>, _>>()
                .map(serde_json::Value::Array),
            Value::Scalar { .. } => Ok(node.to_json()),
        }
    }
}

/// A scalar's text; YAML 1.2 booleans are normalised to `true`/`false`.
fn scalar(text: &str, plain: bool) -> String {
    if plain && matches!(text, "true" | "True" | "TRUE" | "false" | "False" | "FALSE") {
        text.to_ascii_lowercase()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml;

    fn secret(name: &str, value: &str, events: &[&str], images: &[&str]) -> SecretValue {
        SecretValue {
            name: name.into(),
            value: value.into(),
            events: events.iter().map(|s| s.to_string()).collect(),
            images: images.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn images() {
        assert!(image_matches("plugins/s3", "plugins/s3:1.2"));
        assert!(image_matches("docker.io/plugins/s3", "plugins/s3"));
        assert!(image_matches("alpine", "docker.io/library/alpine:3"));
        assert!(image_matches("plugins/s3:1", "plugins/s3:1"));
        assert!(!image_matches("plugins/s3:1", "plugins/s3:2"));
        assert!(!image_matches("plugins/s3", "plugins/s3x"));
        assert!(image_matches("registry:5000/x", "registry:5000/x:tag"));
        assert!(!image_matches("registry:5000/x", "registry:5001/x"));
    }

    #[test]
    fn conversion_and_secrets() {
        let secrets = vec![
            secret("token", "s3cr3t", &[], &[]),
            secret("deploy_key", "k3y", &["deployment"], &[]),
            secret("pr_ok", "pr", &["pull_request"], &[]),
            secret("plugin_only", "p", &[], &["plugins/s3"]),
        ];
        let doc = yaml::parse(
            "a: 1.10\nb: True\nc: ~\nd: [x, 2, ~]\ne: {from_secret: TOKEN}\nf: {k: [1, {from_secret: token}], t: true}\ng: yes\n",
        )
        .unwrap();
        let scope = SecretScope {
            secrets: &secrets,
            event: "pull_request_closed",
        };
        let mut conv = Converter {
            scope: &scope,
            step: Consumer {
                name: "s",
                image: "alpine",
                is_plugin: false,
            },
            used: Vec::new(),
        };
        let got: Vec<(String, Option<String>)> = doc
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), conv.value(v, k).unwrap()))
            .collect();
        let want: Vec<(String, Option<String>)> = [
            ("a", Some("1.10")),
            ("b", Some("true")),
            ("c", None),
            ("d", Some("x,2")),
            ("e", Some("s3cr3t")),
            ("f", Some(r#"{"k":[1,"s3cr3t"],"t":true}"#)),
            ("g", Some("yes")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        .collect();
        assert_eq!(got, want);
        assert_eq!(conv.used, ["s3cr3t"]);

        let mut err = |yaml_text: &str| {
            let n = yaml::parse(yaml_text).unwrap();
            conv.value(&n, "x").unwrap_err().message
        };
        assert!(err("{from_secret: missing}").contains("not found"));
        assert!(err("{from_secret: deploy_key}").contains("events"));
        assert!(err("{from_secret: plugin_only}").contains("plugin"));
        assert!(err("{from_secret: [a]}").contains("name"));
        assert!(err("{from_secret: token, other: 1}").contains("other keys"));
        assert!(
            conv.value(&yaml::parse("{from_secret: pr_ok}").unwrap(), "x")
                .is_ok()
        );

        let mut plugin = Converter {
            scope: &scope,
            step: Consumer {
                name: "p",
                image: "plugins/s3:1",
                is_plugin: true,
            },
            used: Vec::new(),
        };
        let n = yaml::parse("{from_secret: plugin_only}").unwrap();
        assert_eq!(plugin.value(&n, "x").unwrap().as_deref(), Some("p"));
        plugin.step.image = "plugins/gcs";
        assert!(plugin.value(&n, "x").unwrap_err().message.contains("image"));
    }

    #[test]
    fn keys() {
        assert_eq!(settings_key("dry-run.mode"), "PLUGIN_DRY_RUN_MODE");
        assert_eq!(settings_key("Target"), "PLUGIN_TARGET");
    }
}
