//! Secrets and registries as the settings pages list them (a repository's, an
//! organisation's, the instance's): names, events, images, addresses and user names only.
//! The store's renderings carry no value or password (`store::secrets::Secret` has no value
//! field; `Registry::password` is always empty), and these rows copy none either.

use std::sync::Arc;

use super::host::UiHost;
use crate::ci::scoped::{Registries, ScopedRecord, Secrets};
use crate::http::ApiError;
use crate::http::paging::MAX_PER_PAGE;
use crate::store::registries::Registry;
use crate::store::secrets::{ResourceScope, Secret};
use woodlark_pipeline::event::WebhookEvent;

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
    woodlark_pipeline::event::WebhookEvent::ALL
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

/// The first page (the API's largest, [`MAX_PER_PAGE`]) of `scope`'s `R`s in key order, as
/// rows. The caller has already been authorised for the scope as the API's list route is.
async fn first_page<H: UiHost, R: ScopedRecord, Row>(
    host: &Arc<H>,
    scope: ResourceScope,
    row: fn(R::Item) -> Row,
) -> Result<Vec<Row>, ApiError> {
    let list = host
        .services()
        .reads
        .read(move |c| R::list(c, scope, 1, MAX_PER_PAGE))
        .await?;
    Ok(list.into_iter().map(row).collect())
}

/// A wider scope whose secrets and registries a settings page lists, read-only, beside its
/// own: the page's pipelines get them too.
pub struct Wider {
    /// How the page names the scope's owner ("organisation", "instance").
    pub owner: &'static str,
    pub secrets: Vec<SecretItem>,
    pub registries: Vec<RegistryItem>,
}

/// What a settings page shows of secrets and registries (`scoped.html`'s `secrets_section`
/// and `registries_section`): its scope's own, with their forms, and each wider scope's.
pub struct ScopedLists {
    pub secrets: Vec<SecretItem>,
    pub registries: Vec<RegistryItem>,
    /// Every event, `push` checked: the new secret form's boxes.
    pub new_secret_events: Vec<(&'static str, bool)>,
    /// Narrowest first.
    pub wider: Vec<Wider>,
}

impl ScopedLists {
    /// The lists of `here` and of each `(owner, scope)` of `wider`; the caller has been
    /// authorised for each as the API's list routes are.
    pub async fn of<H: UiHost>(
        host: &Arc<H>,
        here: ResourceScope,
        wider: &[(&'static str, ResourceScope)],
    ) -> Result<ScopedLists, ApiError> {
        let mut lists = Vec::with_capacity(wider.len());
        for &(owner, scope) in wider {
            lists.push(Wider {
                owner,
                secrets: first_page::<H, Secrets, _>(host, scope, SecretItem::of).await?,
                registries: first_page::<H, Registries, _>(host, scope, RegistryItem::of).await?,
            });
        }
        Ok(ScopedLists {
            secrets: first_page::<H, Secrets, _>(host, here, SecretItem::of).await?,
            registries: first_page::<H, Registries, _>(host, here, RegistryItem::of).await?,
            new_secret_events: event_choices(&[WebhookEvent::Push.as_str().to_string()]),
            wider: lists,
        })
    }
}
