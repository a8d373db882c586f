//! Which registry an image comes from, and the Docker `config.json` that logs a step in.
//!
//! Docker's rule: the first path component of an image reference is a registry host when it
//! contains a `.` or a `:` or is `localhost`; otherwise the image is on Docker Hub
//! (`docker.io`), whose `config.json` key is `https://index.docker.io/v1/`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::types::RegistryCredential;

pub const DOCKER_HUB: &str = "docker.io";

/// The registry host of an image reference (`docker.io` for Hub images).
pub fn registry_of(image: &str) -> String {
    let image = image.trim();
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            normalize(first)
        }
        _ => DOCKER_HUB.to_string(),
    }
}

/// A configured registry address as a host: scheme and path dropped, Hub aliases unified.
pub fn normalize(address: &str) -> String {
    let a = address
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = a.split('/').next().unwrap_or(a).to_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DOCKER_HUB.to_string()
        }
        _ => host,
    }
}

/// The Docker `config.json` for the given logins.
pub fn docker_config(creds: &[RegistryCredential]) -> String {
    let mut auths = Map::new();
    for c in creds {
        let key = if normalize(&c.address) == DOCKER_HUB {
            "https://index.docker.io/v1/".to_string()
        } else {
            normalize(&c.address)
        };
        let auth = STANDARD.encode(format!("{}:{}", c.username, c.password));
        auths.insert(key, json!({ "auth": auth }));
    }
    json!({ "auths": Value::Object(auths) }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts() {
        assert_eq!(registry_of("alpine"), "docker.io");
        assert_eq!(registry_of("library/alpine:3.20"), "docker.io");
        assert_eq!(registry_of("ghcr.io/org/app:1"), "ghcr.io");
        assert_eq!(registry_of("localhost:5000/app"), "localhost:5000");
        assert_eq!(
            registry_of("Registry.Example.com/x"),
            "registry.example.com"
        );
        assert_eq!(normalize("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(
            normalize("registry.example.com:443"),
            "registry.example.com:443"
        );
    }

    #[test]
    fn config_json() {
        let c = docker_config(&[
            RegistryCredential {
                address: "docker.io".into(),
                username: "u".into(),
                password: "p".into(),
            },
            RegistryCredential {
                address: "ghcr.io".into(),
                username: "a".into(),
                password: "b".into(),
            },
        ]);
        let v: Value = serde_json::from_str(&c).unwrap();
        assert_eq!(
            v["auths"]["https://index.docker.io/v1/"]["auth"],
            STANDARD.encode("u:p")
        );
        assert_eq!(v["auths"]["ghcr.io"]["auth"], STANDARD.encode("a:b"));
    }
}
