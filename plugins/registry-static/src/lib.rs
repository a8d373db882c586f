//! Static registry credentials from the plugin instance's config block.
//!
//! `credential-for(image, repo)` takes the image's registry host by Docker's rule (the first
//! path component when it has a `.` or `:` or is `localhost`, else `docker.io`; see the
//! `image-ref` crate) and answers with the login configured for that host, or none.
//!
//! Config keys, per registry host (lower-case, with the port if the image names one):
//! - `registry.<host>.username` and `registry.<host>.password`; or
//! - the compact `registry.<host>` = `username:password` (split at the first `:`).
//!
//! Docker Hub images (`alpine`, `acme/app`, `docker.io/...`) match `registry.docker.io.*`
//! (also accepted: `index.docker.io`, `registry-1.docker.io`). The credential's `address` is
//! the matched host as the image spells it after normalisation (`docker.io` for the Hub).

use woodlark_plugin_sdk::config;
use woodlark_plugin_sdk::registry::*;

struct StaticRegistry;

woodlark_plugin_sdk::registry_auth!(StaticRegistry);

impl RegistryAuth for StaticRegistry {
    fn credential_for(image: String, _repo: String) -> Result<Option<Credential>, PluginError> {
        let Some(img) = image_ref::parse(&image) else {
            return Err(invalid(format!("not an image reference: {image:?}")));
        };
        let aliases: &[&str] = if img.host == image_ref::DOCKER_HUB {
            &["docker.io", "index.docker.io", "registry-1.docker.io"]
        } else {
            &[img.host.as_str()]
        };
        for host in aliases {
            if let Some((username, password)) = login(host)? {
                return Ok(Some(Credential {
                    address: img.host.clone(),
                    username,
                    password,
                }));
            }
        }
        Ok(None)
    }
}

/// The login configured for `host`, from the long or the compact form.
fn login(host: &str) -> Result<Option<(String, String)>, PluginError> {
    let user = config::get(&format!("registry.{host}.username"));
    let pass = config::get(&format!("registry.{host}.password"));
    match (user, pass) {
        (Some(u), Some(p)) => return Ok(Some((u, p))),
        (Some(_), None) | (None, Some(_)) => {
            return Err(invalid(format!(
                "registry {host}: set both `registry.{host}.username` and `registry.{host}.password`"
            )));
        }
        (None, None) => {}
    }
    match config::get(&format!("registry.{host}")) {
        Some(compact) => match compact.split_once(':') {
            Some((u, p)) => Ok(Some((u.to_string(), p.to_string()))),
            None => Err(invalid(format!(
                "registry {host}: `registry.{host}` must be `username:password`"
            ))),
        },
        None => Ok(None),
    }
}
