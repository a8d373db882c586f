//! Docker image references, split the way Docker (`distribution/reference`) does it.
//!
//! The first path component is the registry host when it contains `.` or `:`, is
//! `localhost`, or has an upper-case letter; otherwise the image is on Docker Hub
//! (`docker.io`). `index.docker.io` is normalised to `docker.io`, and single-component Hub
//! images get the `library/` prefix (`alpine` → `docker.io/library/alpine`).

/// Docker Hub's canonical host.
pub const DOCKER_HUB: &str = "docker.io";

/// A parsed image reference without its tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host (with port if any), lower-cased: `ghcr.io`, `localhost:5000`, `docker.io`.
    pub host: String,
    /// Repository path inside the registry: `acme/tool`, `library/alpine`.
    pub path: String,
}

/// Splits `image` (`ghcr.io/acme/tool:1`, `alpine@sha256:…`, `localhost:5000/x`) into its
/// registry host and repository path. `None` for an empty reference.
pub fn parse(image: &str) -> Option<ImageRef> {
    let image = image.trim();
    // The digest, then the tag (a `:` after the last `/`; a `:` before it is a port).
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let name = match (name.rfind(':'), name.rfind('/')) {
        (Some(c), Some(s)) if c > s => &name[..c],
        (Some(c), None) => &name[..c],
        _ => name,
    };
    if name.is_empty() {
        return None;
    }
    let (host, path) = match name.split_once('/') {
        Some((first, rest)) if is_host(first) => (first.to_ascii_lowercase(), rest.to_string()),
        _ => (DOCKER_HUB.to_string(), name.to_string()),
    };
    let host = if host == "index.docker.io" {
        DOCKER_HUB.to_string()
    } else {
        host
    };
    let path = if host == DOCKER_HUB && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    if path.is_empty() {
        return None;
    }
    Some(ImageRef { host, path })
}

fn is_host(component: &str) -> bool {
    component.contains(['.', ':'])
        || component == "localhost"
        || component.chars().any(|c| c.is_ascii_uppercase())
}

/// `host` as written in a config key, normalised like image hosts: lower-case, no scheme,
/// no trailing `/`, `index.docker.io` → `docker.io`.
pub fn normalize_host(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    let h = h
        .strip_prefix("https://")
        .or_else(|| h.strip_prefix("http://"))
        .unwrap_or(&h);
    let h = h.split('/').next().unwrap_or_default();
    if h == "index.docker.io" || h == "registry-1.docker.io" {
        DOCKER_HUB.to_string()
    } else {
        h.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(image: &str) -> (String, String) {
        let r = parse(image).unwrap();
        (r.host, r.path)
    }

    #[test]
    fn docker_rules() {
        let cases = [
            ("alpine", "docker.io", "library/alpine"),
            ("alpine:3.20", "docker.io", "library/alpine"),
            ("library/alpine@sha256:abc", "docker.io", "library/alpine"),
            (
                "woodpeckerci/plugin-git:2",
                "docker.io",
                "woodpeckerci/plugin-git",
            ),
            ("docker.io/alpine", "docker.io", "library/alpine"),
            ("index.docker.io/acme/app", "docker.io", "acme/app"),
            ("ghcr.io/acme/tool:1", "ghcr.io", "acme/tool"),
            ("GHCR.io/acme/tool", "ghcr.io", "acme/tool"),
            ("localhost/app", "localhost", "app"),
            ("localhost:5000/a/b:dev", "localhost:5000", "a/b"),
            ("127.0.0.1:5001/acme/app", "127.0.0.1:5001", "acme/app"),
            ("Registry/app", "registry", "app"),
            ("quay.io/a/b@sha256:0123", "quay.io", "a/b"),
        ];
        for (image, host, path) in cases {
            assert_eq!(hp(image), (host.to_string(), path.to_string()), "{image}");
        }
        assert_eq!(parse(""), None);
        assert_eq!(parse("ghcr.io/"), None);
    }

    #[test]
    fn config_hosts() {
        assert_eq!(normalize_host("GHCR.io"), "ghcr.io");
        assert_eq!(normalize_host("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(normalize_host("localhost:5000"), "localhost:5000");
    }
}
