//! A forge's sealed credentials in clear: its `oauth_client_secret` (the OAuth app's secret,
//! or, for a forge without an OAuth `client`, an API token the server calls the forge with)
//! and the secret it signs webhook deliveries with.

use crate::auth::sealing::{SealError, SealKey};
use crate::store::forges::ForgeRow;

/// Sealing purposes (bound into the ciphertext).
pub const SEAL_CLIENT_SECRET: &str = "forge-client-secret";
pub const SEAL_WEBHOOK_SECRET: &str = "forge-webhook-secret";

/// A sealed forge secret in clear, `""` when none was set.
fn open_secret(seal: &SealKey, purpose: &str, sealed: &str) -> Result<String, SealError> {
    if sealed.is_empty() {
        return Ok(String::new());
    }
    seal.open(purpose, sealed)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The forge's `oauth_client_secret` in clear, `""` when none was set.
pub fn api_token(seal: &SealKey, row: &ForgeRow) -> Result<String, SealError> {
    open_secret(seal, SEAL_CLIENT_SECRET, &row.sealed_client_secret)
}

/// The secret the forge signs webhook deliveries with.
pub fn webhook_secret(seal: &SealKey, row: &ForgeRow) -> Result<String, SealError> {
    open_secret(seal, SEAL_WEBHOOK_SECRET, &row.sealed_webhook_secret)
}
