//! Secrets and registries as the settings pages list them (a repository's, an
//! organisation's, the instance's): names, events, images, addresses and user names only.
//! The store's renderings carry no value or password (`store::secrets::Secret` has no value
//! field; `Registry::password` is always empty), and these rows copy none either.

use crate::ci::scoped::{Registries, ScopedRecord, Secrets};
use crate::http::ApiError;
use crate::modules::ci::pagination::MAX_PER_PAGE;
use crate::state::Ctx;
use crate::store::registries::Registry;
use crate::store::secrets::{ResourceScope, Secret};

/// A secret as a row: never its value.
pub struct SecretItem {
    pub name: String,
    /// Its events, comma-separated.
    pub events: String,
    /// Its images, comma-separated ("" = any image).
    pub images: String,
    pub note: String,
    /// Each event the API accepts, and whether this secret has it (the edit form's boxes).
    pub event_choices: Vec<(&'static str, bool)>,
}

impl SecretItem {
    fn of(s: Secret) -> SecretItem {
        SecretItem {
            event_choices: event_choices(&s.events),
            events: s.events.join(", "),
            images: s.images.join(", "),
            note: s.note,
            name: s.name,
        }
    }
}

/// Every pipeline event, checked where `chosen` has it.
pub fn event_choices(chosen: &[String]) -> Vec<(&'static str, bool)> {
    crate::pipeline::event::WebhookEvent::ALL
        .iter()
        .map(|e| (e.as_str(), chosen.iter().any(|c| c == e.as_str())))
        .collect()
}

/// A registry as a row: never its password.
pub struct RegistryItem {
    pub address: String,
    pub username: String,
    /// From outside the database: listed, not changeable here.
    pub readonly: bool,
}

impl RegistryItem {
    fn of(r: Registry) -> RegistryItem {
        RegistryItem {
            address: r.address,
            username: r.username,
            readonly: r.readonly,
        }
    }
}

/// The first page (the API's largest, [`MAX_PER_PAGE`]) of `scope`'s secrets, by name.
/// The caller has already been authorised for the scope as the API's list route is.
pub async fn secrets(ctx: &Ctx, scope: ResourceScope) -> Result<Vec<SecretItem>, ApiError> {
    let list = ctx
        .ci
        .reads
        .read(move |c| Secrets::list(c, scope, 1, MAX_PER_PAGE))
        .await?;
    Ok(list.into_iter().map(SecretItem::of).collect())
}

/// The first page of `scope`'s registries, by address (authorised as for [`secrets`]).
pub async fn registries(ctx: &Ctx, scope: ResourceScope) -> Result<Vec<RegistryItem>, ApiError> {
    let list = ctx
        .ci
        .reads
        .read(move |c| Registries::list(c, scope, 1, MAX_PER_PAGE))
        .await?;
    Ok(list.into_iter().map(RegistryItem::of).collect())
}
