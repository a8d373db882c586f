//! Secrets at three scopes: `/secrets` (instance admins; any signed-in user lists and gets
//! them, without values, as upstream), `/orgs/{org_id}/secrets` (org admins) and
//! `/repos/{repo_id}/secrets` (repo admins), each with list / create / get / update / delete
//! by name.
//!
//! Values are sealed by the service (`ci::scoped`) before they reach the store and never
//! come back: the API rendering has
//! no `value` field (upstream omits it the same way), nothing here logs one. Validation
//! failures are 422 (`invalid secret name|event|image|value: …`), duplicates 409, unknown
//! names 404, unparsable bodies 400. PATCH changes only what it is given; an empty `value`
//! keeps the stored one; `name` cannot be changed (as upstream).

use serde::Deserialize;

use super::scoped::{self, ScopedResource};
use crate::ci::scoped::Secrets;
use crate::http::{ApiError, Request, Scope};
use crate::state::Ctx;
use crate::store::secrets::{
    MAX_NOTE, NewSecret, SecretChange, validate_events, validate_images, validate_name,
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

/// Secrets as a [`ScopedResource`]: keyed by name, the value in clear for the service to
/// seal.
impl ScopedResource for Secrets {
    const COLLECTION: &'static str = "secrets";
    const KEY_PARAM: &'static str = "secret";
    const NOT_FOUND: &'static str = "Secret not found";

    /// Create needs a valid name and a non-empty value; events and images default to none.
    fn new_from(req: &Request) -> Result<(NewSecret, String), ApiError> {
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
        let new = NewSecret {
            name,
            sealed_value: String::new(),
            images,
            events,
            note,
        };
        Ok((new, value))
    }

    /// Changes `value` (when non-empty), `events`, `images`, `note`.
    fn change_from(req: &Request) -> Result<(SecretChange, Option<String>), ApiError> {
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
        let change = SecretChange {
            sealed_value: None,
            images: body.images,
            events,
            note: body.note,
        };
        Ok((change, body.value))
    }
}
