//! Forge records: registering a forge (its secrets sealed), changing and removing it. The
//! secrets in clear are `forge_secrets`; the drivers that talk to forges are `forge`, kept
//! per forge until a change here drops them.

use super::forge_secrets::{SEAL_CLIENT_SECRET, SEAL_WEBHOOK_SECRET};
use super::{Error, Services};
use crate::store::forges::{self, Forge};

/// Stores `forge` with its API token (`client_secret`, may be empty) and `webhook_secret`
/// sealed; returns the stored forge.
pub async fn create(
    ci: &Services,
    forge: Forge,
    client_secret: &str,
    webhook_secret: &str,
) -> Result<Forge, Error> {
    let sealed_client = if client_secret.is_empty() {
        String::new()
    } else {
        ci.seal.seal(SEAL_CLIENT_SECRET, client_secret.as_bytes())
    };
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
