//! Forge records: registering a forge (its secrets sealed), changing and removing it, and
//! applying the forges the operator configured at start. The secrets in clear are
//! `forge_secrets`; the drivers that talk to forges are `forge`, kept per forge until a
//! change here drops them.

use super::forge_secrets::{self, SEAL_CLIENT_SECRET, SEAL_WEBHOOK_SECRET};
use super::{Error, Services};
use crate::store::StoreError;
use crate::store::forges::{self, Forge};

/// Stores `forge` with its API token (`client_secret`, may be empty) and `webhook_secret`
/// sealed; returns the stored forge.
pub async fn create(
    ci: &Services,
    forge: Forge,
    client_secret: &str,
    webhook_secret: &str,
) -> Result<Forge, Error> {
    let sealed_client = seal_client(ci, client_secret);
    let sealed_webhook = ci.seal.seal(SEAL_WEBHOOK_SECRET, webhook_secret.as_bytes());
    let created = ci
        .store
        .write(move |c| forges::create(c, &forge, &sealed_client, &sealed_webhook))
        .await?;
    tracing::info!(forge = created.id, kind = %created.kind, "forge created");
    ci.status_targets.refresh(&ci.store).await;
    Ok(created)
}

/// Stores `forge`'s new settings; a non-empty `client_secret` replaces the sealed client
/// secret, a `webhook_secret` the one deliveries are signed with.
pub async fn update(
    ci: &Services,
    forge: Forge,
    client_secret: Option<&str>,
    webhook_secret: Option<&str>,
) -> Result<Forge, Error> {
    let sealed_client = client_secret
        .filter(|s| !s.is_empty())
        .map(|s| ci.seal.seal(SEAL_CLIENT_SECRET, s.as_bytes()));
    let sealed_webhook = webhook_secret.map(|s| ci.seal.seal(SEAL_WEBHOOK_SECRET, s.as_bytes()));
    let id = forge.id;
    let updated = ci
        .store
        .write(move |c| {
            forges::update(
                c,
                &forge,
                sealed_client.as_deref(),
                sealed_webhook.as_deref(),
            )
        })
        .await;
    ci.drivers.forget(id);
    ci.status_targets.refresh(&ci.store).await;
    Ok(updated?)
}

/// Removes forge `id`.
pub async fn delete(ci: &Services, id: i64) -> Result<(), Error> {
    let deleted = ci.store.write(move |c| forges::delete(c, id)).await;
    ci.drivers.forget(id);
    ci.status_targets.refresh(&ci.store).await;
    Ok(deleted?)
}

/// A forge the operator configured (`[[forges]]`, Woodpecker's variables), as the server's
/// configuration describes it.
pub struct ConfiguredForge {
    pub forge: Forge,
    /// The API token or OAuth client secret, in clear (may be empty).
    pub client_secret: String,
    /// `None`: keep the stored one (or generate one for a new forge).
    pub webhook_secret: Option<String>,
    /// Where it was configured, as messages name it.
    pub origin: &'static str,
}

/// Makes the stored forges match the configured ones, each under its id: a missing one is
/// created (with its webhook secret, or a generated one), a changed one updated, an
/// unchanged one left alone (no event on every start). Forges the configuration does not
/// name are not touched. Start-up code: blocks until each change has committed.
pub fn configure_now(ci: &Services, configured: &[ConfiguredForge]) -> Result<(), Error> {
    for entry in configured {
        let wanted = entry.forge.clone();
        let (id, kind) = (wanted.id, wanted.kind);
        let stored = match ci.store.write_now(move |c| forges::by_id(c, id)) {
            Ok(row) => Some(row),
            Err(StoreError::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let client_secret = &entry.client_secret;
        let webhook_secret = entry.webhook_secret.clone();
        let Some(row) = stored else {
            let webhook = webhook_secret.unwrap_or_else(crate::auth::random_secret);
            let sealed_client = seal_client(ci, client_secret);
            let sealed_webhook = ci.seal.seal(SEAL_WEBHOOK_SECRET, webhook.as_bytes());
            let created = ci.store.write_now(move |c| {
                forges::create_with_id(c, &wanted, &sealed_client, &sealed_webhook)
            })?;
            // `None`: a replica starting beside this one created it from the same entry.
            if created.is_some() {
                tracing::info!(forge = id, %kind, from = entry.origin, "configured forge created");
            }
            continue;
        };
        let unsealed = |e: crate::auth::sealing::SealError| {
            Error::Forge(super::forge::ForgeError::Failed(format!(
                "forge {id}'s stored secrets: {e}"
            )))
        };
        let client_changed =
            forge_secrets::api_token(&ci.seal, &row).map_err(unsealed)? != *client_secret;
        let webhook_changed = match &webhook_secret {
            Some(given) => {
                forge_secrets::webhook_secret(&ci.seal, &row).map_err(unsealed)? != *given
            }
            None => false,
        };
        if row.forge == wanted && !client_changed && !webhook_changed {
            continue;
        }
        let sealed_client = client_changed.then(|| seal_client(ci, client_secret));
        let sealed_webhook = webhook_secret
            .filter(|_| webhook_changed)
            .map(|s| ci.seal.seal(SEAL_WEBHOOK_SECRET, s.as_bytes()));
        ci.store.write_now(move |c| {
            forges::update(
                c,
                &wanted,
                sealed_client.as_deref(),
                sealed_webhook.as_deref(),
            )
        })?;
        ci.drivers.forget(id);
        tracing::info!(forge = id, %kind, from = entry.origin, "configured forge updated");
    }
    Ok(())
}

/// The sealed API token / OAuth secret, or `""` for none (as `create` stores it).
fn seal_client(ci: &Services, secret: &str) -> String {
    if secret.is_empty() {
        String::new()
    } else {
        ci.seal.seal(SEAL_CLIENT_SECRET, secret.as_bytes())
    }
}
