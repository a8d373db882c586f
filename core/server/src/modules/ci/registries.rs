//! Registry credentials at three scopes: `/registries` (instance admins; any signed-in user
//! lists and gets them, without passwords, as upstream), `/orgs/{org_id}/registries` (org
//! admins) and `/repos/{repo_id}/registries` (repo admins), keyed by `address` (the
//! `{registry}` path parameter, percent-decoded).
//!
//! Passwords are sealed before they reach the store and always render as `""`. Create needs
//! `address`, `username` and `password` (422 otherwise); duplicates are 409. PATCH changes
//! the non-empty fields it is given (a new `address` renames the entry, as upstream);
//! `readonly` is not writable (it marks registries from outside the database).

use crate::store::Tx;
use serde::Deserialize;

use super::scoped::{self, ScopedResource};
use crate::ci::scoped::ScopedRecord;
use crate::http::{ApiError, Request, Scope};
use crate::state::Ctx;
use crate::store::StoreResult;
use crate::store::registries::{
    self, MAX_FIELD, NewRegistry, Registry, RegistryChange, SEAL_PURPOSE, validate_address,
};
use crate::store::secrets::ResourceScope;

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

/// Registries as a [`ScopedResource`]: keyed by address, password sealed on the way in.
struct Registries;

impl ScopedResource for Registries {
    const COLLECTION: &'static str = "registries";
    const KEY_PARAM: &'static str = "registry";
    const NOT_FOUND: &'static str = "Registry not found";

    /// Create needs `address`, `username` and `password`.
    fn new_from(ctx: &Ctx, req: &Request) -> Result<NewRegistry, ApiError> {
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
        Ok(NewRegistry {
            address,
            username,
            sealed_password: ctx.ci.seal.seal(SEAL_PURPOSE, password.as_bytes()),
        })
    }

    /// Changes the non-empty fields given; a new `address` renames the entry.
    fn change_from(ctx: &Ctx, req: &Request) -> Result<RegistryChange, ApiError> {
        let body: RegistryIn = req.json()?;
        let address = body.address.filter(|a| !a.is_empty());
        if let Some(a) = &address {
            validate_address(a).map_err(ApiError::unprocessable)?;
        }
        let username = body.username.filter(|u| !u.is_empty());
        if let Some(u) = &username {
            check_username(u)?;
        }
        Ok(RegistryChange {
            address,
            username,
            sealed_password: body
                .password
                .filter(|p| !p.is_empty())
                .map(|p| ctx.ci.seal.seal(SEAL_PURPOSE, p.as_bytes())),
        })
    }
}

impl ScopedRecord for Registries {
    const NOUN: &'static str = "registry";

    type Item = Registry;
    type New = NewRegistry;
    type Change = RegistryChange;

    fn key(item: &Registry) -> &str {
        &item.address
    }

    fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<Registry>> {
        registries::list(c, scope, page, per)
    }

    fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Registry> {
        Ok(registries::find(c, scope, key)?.registry)
    }

    fn create(c: &Tx, scope: ResourceScope, new: &NewRegistry) -> StoreResult<Registry> {
        registries::create(c, scope, new)
    }

    fn update(
        c: &Tx,
        scope: ResourceScope,
        key: &str,
        change: &RegistryChange,
    ) -> StoreResult<Registry> {
        registries::update(c, scope, key, change)
    }

    fn delete(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Registry> {
        registries::delete(c, scope, key)
    }
}
