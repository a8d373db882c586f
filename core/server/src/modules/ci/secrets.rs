//! Secrets at three scopes: `/secrets` (instance admins; any signed-in user lists and gets
//! them, without values, as upstream), `/orgs/{org_id}/secrets` (org admins) and
//! `/repos/{repo_id}/secrets` (repo admins), each with list / create / get / update / delete
//! by name.
//!
//! Values are sealed before they reach the store and never come back: the API rendering has
//! no `value` field (upstream omits it the same way), nothing here logs one. Validation
//! failures are 422 (`invalid secret name|event|image|value: …`), duplicates 409, unknown
//! names 404, unparsable bodies 400. PATCH changes only what it is given; an empty `value`
//! keeps the stored one; `name` cannot be changed (as upstream).

use crate::store::Tx;
use serde::Deserialize;

use super::scoped::{self, ScopedResource};
use crate::ci::scoped::ScopedRecord;
use crate::http::{ApiError, Request, Scope};
use crate::state::Ctx;
use crate::store::StoreResult;
use crate::store::secrets::{
    self, MAX_NOTE, NewSecret, ResourceScope, SEAL_PURPOSE, Secret, SecretChange, validate_events,
    validate_images, validate_name,
};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scoped::routes::<Secrets>(scope);
}

fn unprocessable(message: String) -> ApiError {
    ApiError::unprocessable(message)
}

/// The body of create and update (Woodpecker's `Secret` / `SecretPatch`). Unknown fields are
/// ignored; `null` counts as absent.
#[derive(Debug, Default, Deserialize)]
struct SecretIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    images: Option<Vec<String>>,
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    note: Option<String>,
}

fn check_note(note: &str) -> Result<(), ApiError> {
    if note.len() > MAX_NOTE {
        return Err(unprocessable(format!(
            "invalid secret note: longer than {MAX_NOTE} characters"
        )));
    }
    Ok(())
}

/// Secrets as a [`ScopedResource`]: keyed by name, value sealed on the way in.
struct Secrets;

impl ScopedResource for Secrets {
    const COLLECTION: &'static str = "secrets";
    const KEY_PARAM: &'static str = "secret";
    const NOT_FOUND: &'static str = "Secret not found";

    /// Create needs a valid name and a non-empty value; events and images default to none.
    fn new_from(ctx: &Ctx, req: &Request) -> Result<NewSecret, ApiError> {
        let body: SecretIn = req.json()?;
        let events = validate_events(&body.events.unwrap_or_default()).map_err(unprocessable)?;
        let images = body.images.unwrap_or_default();
        validate_images(&images).map_err(unprocessable)?;
        let name = body.name.unwrap_or_default();
        validate_name(&name).map_err(unprocessable)?;
        let value = body.value.unwrap_or_default();
        if value.is_empty() {
            return Err(unprocessable("invalid secret value: empty value".into()));
        }
        let note = body.note.unwrap_or_default();
        check_note(&note)?;
        Ok(NewSecret {
            name,
            sealed_value: ctx.ci.seal.seal(SEAL_PURPOSE, value.as_bytes()),
            images,
            events,
            note,
        })
    }

    /// Changes `value` (when non-empty), `events`, `images`, `note`.
    fn change_from(ctx: &Ctx, req: &Request) -> Result<SecretChange, ApiError> {
        let body: SecretIn = req.json()?;
        let events = body
            .events
            .map(|e| validate_events(&e))
            .transpose()
            .map_err(unprocessable)?;
        if let Some(images) = &body.images {
            validate_images(images).map_err(unprocessable)?;
        }
        if let Some(note) = &body.note {
            check_note(note)?;
        }
        Ok(SecretChange {
            sealed_value: body
                .value
                .filter(|v| !v.is_empty())
                .map(|v| ctx.ci.seal.seal(SEAL_PURPOSE, v.as_bytes())),
            images: body.images,
            events,
            note: body.note,
        })
    }
}

impl ScopedRecord for Secrets {
    const NOUN: &'static str = "secret";

    type Item = Secret;
    type New = NewSecret;
    type Change = SecretChange;

    fn key(item: &Secret) -> &str {
        &item.name
    }

    fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<Secret>> {
        secrets::list(c, scope, page, per)
    }

    fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Secret> {
        Ok(secrets::find(c, scope, key)?.secret)
    }

    fn create(c: &Tx, scope: ResourceScope, new: &NewSecret) -> StoreResult<Secret> {
        secrets::create(c, scope, new)
    }

    fn update(
        c: &Tx,
        scope: ResourceScope,
        key: &str,
        change: &SecretChange,
    ) -> StoreResult<Secret> {
        secrets::update(c, scope, key, change)
    }

    fn delete(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Secret> {
        secrets::delete(c, scope, key)
    }
}
