//! Registry credentials at three scopes: `/registries` (instance admins; any signed-in user
//! lists and gets them, without passwords, as upstream), `/orgs/{org_id}/registries` (org
//! admins) and `/repos/{repo_id}/registries` (repo admins), keyed by `address` (the
//! `{registry}` path parameter, percent-decoded).
//!
//! Passwords are sealed by the service (`ci::scoped`) before they reach the store and
//! always render as `""`. Create needs
//! `address`, `username` and `password` (422 otherwise); duplicates are 409. PATCH changes
//! the non-empty fields it is given (a new `address` renames the entry, as upstream);
//! `readonly` is not writable (it marks registries from outside the database).

use serde::Deserialize;

use super::scoped::{self, ScopedResource};
use crate::ci::scoped::Registries;
use crate::http::{ApiError, Request, Scope};
use crate::state::Ctx;
use crate::store::registries::{MAX_FIELD, NewRegistry, RegistryChange, validate_address};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scoped::routes::<Registries>(scope);
}

/// The body of create and update (Woodpecker's `Registry`); unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
struct RegistryIn {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

fn check_username(username: &str) -> Result<(), ApiError> {
    if username.is_empty() {
        return Err(ApiError::unprocessable(
            "invalid registry username: empty username",
        ));
    }
    if username.len() > MAX_FIELD || username.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(format!(
            "invalid registry username: at most {MAX_FIELD} characters, no control characters"
        )));
    }
    Ok(())
}

/// Registries as a [`ScopedResource`]: keyed by address, the password in clear for the
/// service to seal.
impl ScopedResource for Registries {
    const COLLECTION: &'static str = "registries";
    const KEY_PARAM: &'static str = "registry";
    const NOT_FOUND: &'static str = "Registry not found";

    /// Create needs `address`, `username` and `password`.
    fn new_from(req: &Request) -> Result<(NewRegistry, String), ApiError> {
        let body: RegistryIn = req.json()?;
        let address = body.address.unwrap_or_default();
        validate_address(&address).map_err(ApiError::unprocessable)?;
        let username = body.username.unwrap_or_default();
        check_username(&username)?;
        let password = body.password.unwrap_or_default();
        if password.is_empty() {
            return Err(ApiError::unprocessable(
                "invalid registry password: empty password",
            ));
        }
        let new = NewRegistry {
            address,
            username,
            sealed_password: String::new(),
        };
        Ok((new, password))
    }

    /// Changes the non-empty fields given; a new `address` renames the entry.
    fn change_from(req: &Request) -> Result<(RegistryChange, Option<String>), ApiError> {
        let body: RegistryIn = req.json()?;
        let address = body.address.filter(|a| !a.is_empty());
        if let Some(a) = &address {
            validate_address(a).map_err(ApiError::unprocessable)?;
        }
        let username = body.username.filter(|u| !u.is_empty());
        if let Some(u) = &username {
            check_username(u)?;
        }
        let change = RegistryChange {
            address,
            username,
            sealed_password: None,
        };
        Ok((change, body.password))
    }
}
