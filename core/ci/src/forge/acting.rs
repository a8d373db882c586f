//! Acting as a user on their forge: their tokens, kept sealed, refreshed before they expire.
//!
//! A user who signed in through a forge left the server their OAuth tokens; calls made for
//! them (their repositories, permissions) or for their repositories (config files of a push,
//! clone credentials, webhooks, commit statuses: the repository owner's) use those tokens,
//! through [`ForgeDriver::acting_as`]. A token that expires within [`REFRESH_AHEAD_SECS`] is
//! refreshed first, as upstream does. Whoever has no forge token (the built-in `git` forge,
//! a user made by `woodlark user add`) falls back to the forge's own driver.

use std::sync::Arc;

use super::drivers::ForgeHandle;
use super::{ForgeDriver, ForgeError, ForgeTokens};
use crate::Error;
use crate::auth::sealing::SealKey;
use crate::store::Store;
use crate::store::forge_tokens::{self, SealedTokens};
use crate::store::now_unix;
use crate::store::repos::{self, RepoRow};

/// Sealing purpose of users' forge tokens (bound into the ciphertext).
pub const SEAL_FORGE_TOKEN: &str = "user-forge-token";

/// Tokens expiring sooner than this are refreshed before use.
pub const REFRESH_AHEAD_SECS: i64 = 30 * 60;

/// Users' forge tokens: where they are kept and the key that seals them.
#[derive(Clone)]
pub struct Tokens {
    store: Store,
    seal: SealKey,
}

impl Tokens {
    pub fn new(store: Store, seal: SealKey) -> Tokens {
        Tokens { store, seal }
    }

    /// Stores user `user_id`'s tokens from forge `forge_id`, sealed.
    pub async fn save(
        &self,
        user_id: i64,
        forge_id: i64,
        tokens: &ForgeTokens,
    ) -> Result<(), Error> {
        let sealed = seal(&self.seal, forge_id, tokens);
        self.store
            .write(move |c| forge_tokens::set(c, user_id, &sealed))
            .await?;
        Ok(())
    }

    /// `forge`'s driver acting as user `user_id`, their token refreshed if it is about to
    /// expire; `None` when the user has no token from this forge (a token is never sent to
    /// another forge than the one that issued it).
    pub async fn as_user(
        &self,
        forge: &ForgeHandle,
        user_id: i64,
    ) -> Result<Option<Arc<dyn ForgeDriver>>, Error> {
        let Some(sealed) = self
            .store
            .read(move |c| forge_tokens::get(c, user_id))
            .await?
        else {
            return Ok(None);
        };
        if sealed.forge_id != forge.row.forge.id {
            return Ok(None);
        }
        let mut tokens = open(&self.seal, &sealed)?;
        if needs_refresh(&tokens, now_unix()) {
            match forge.driver.refresh(&tokens.refresh).await {
                Ok(fresh) => {
                    tracing::info!(
                        user = user_id,
                        forge = forge.row.forge.id,
                        "forge token refreshed"
                    );
                    self.save(user_id, sealed.forge_id, &fresh).await?;
                    tokens = fresh;
                }
                // Still valid for a while: use it and try again next time.
                Err(err) if tokens.expiry > now_unix() => {
                    tracing::warn!(user = user_id, error = %err, "forge token not refreshed; using it until it expires");
                }
                Err(err) => {
                    if matches!(err, ForgeError::Refused(_)) {
                        self.forget(user_id, sealed.forge_id).await;
                    }
                    return Err(err.into());
                }
            }
        }
        Ok(Some(forge.driver.acting_as(&tokens.access)))
    }

    /// Forge `forge_id` refused user `user_id`'s token (HTTP 401: revoked or expired for
    /// good): their tokens go, which ends the browser sessions they signed in with, and so
    /// does every permission that forge granted them. Failing to write it is logged: the
    /// next refusal tries again.
    pub async fn forget(&self, user_id: i64, forge_id: i64) {
        let forgotten = self
            .store
            .write(move |c| {
                let tokens = forge_tokens::delete(c, user_id, forge_id)?;
                let perms = repos::drop_forge_perms(c, user_id, forge_id)?;
                Ok((tokens, perms))
            })
            .await;
        match forgotten {
            Ok((tokens, perms)) => tracing::info!(
                user = user_id,
                forge = forge_id,
                tokens,
                perms,
                "the forge refused the user's token: their forge session and permissions end"
            ),
            Err(err) => tracing::warn!(
                user = user_id,
                forge = forge_id,
                error = %err,
                "the forge refused the user's token, and forgetting it failed"
            ),
        }
    }

    /// The driver acting as user `user_id`, else (no token, or it cannot be read or
    /// refreshed: logged) the forge's own: the call may still work with it.
    pub async fn for_user(&self, forge: &ForgeHandle, user_id: i64) -> Arc<dyn ForgeDriver> {
        match self.as_user(forge, user_id).await {
            Ok(Some(driver)) => driver,
            Ok(None) => forge.driver.clone(),
            Err(err) => {
                tracing::warn!(user = user_id, error = %err, "forge token unusable; calling as the forge");
                forge.driver.clone()
            }
        }
    }

    /// The driver for a caller's reads of `repo`: as the caller when they signed in through
    /// the forge (so they see what the forge lets them see), else as the repository's owner.
    pub async fn for_caller(
        &self,
        forge: &ForgeHandle,
        caller: Option<i64>,
        repo: &RepoRow,
    ) -> Arc<dyn ForgeDriver> {
        if let Some(user_id) = caller
            && let Ok(Some(driver)) = self.as_user(forge, user_id).await
        {
            return driver;
        }
        self.for_repo(forge, repo).await
    }

    /// The driver for calls about `repo`: as its owner (see [`Tokens::for_user`]).
    pub async fn for_repo(&self, forge: &ForgeHandle, repo: &RepoRow) -> Arc<dyn ForgeDriver> {
        self.for_user(forge, repo.user_id).await
    }
}

/// A token with a refresh token that expires within [`REFRESH_AHEAD_SECS`] of `now`.
fn needs_refresh(tokens: &ForgeTokens, now: i64) -> bool {
    !tokens.refresh.is_empty() && tokens.expiry != 0 && tokens.expiry - now < REFRESH_AHEAD_SECS
}

/// `tokens` from forge `forge_id`, sealed for the store.
pub fn seal(key: &SealKey, forge_id: i64, tokens: &ForgeTokens) -> SealedTokens {
    let seal_one = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            key.seal(SEAL_FORGE_TOKEN, s.as_bytes())
        }
    };
    SealedTokens {
        forge_id,
        access: seal_one(&tokens.access),
        refresh: seal_one(&tokens.refresh),
        expiry: tokens.expiry,
    }
}

fn open(key: &SealKey, sealed: &SealedTokens) -> Result<ForgeTokens, Error> {
    let open_one = |s: &str| -> Result<String, Error> {
        if s.is_empty() {
            return Ok(String::new());
        }
        let clear = key
            .open(SEAL_FORGE_TOKEN, s)
            .map_err(|e| Error::Forge(ForgeError::Failed(format!("forge token: {e}"))))?;
        Ok(String::from_utf8_lossy(&clear).into_owned())
    };
    Ok(ForgeTokens {
        access: open_one(&sealed.access)?,
        refresh: open_one(&sealed.refresh)?,
        expiry: sealed.expiry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_expiring_refreshable_tokens_are_refreshed() {
        let now = 1_000_000;
        let token = |refresh: &str, expiry| ForgeTokens {
            access: "a".into(),
            refresh: refresh.into(),
            expiry,
        };
        assert!(!needs_refresh(&token("r", 0), now), "never expires");
        assert!(
            !needs_refresh(&token("", now + 10), now),
            "nothing to refresh with"
        );
        assert!(!needs_refresh(
            &token("r", now + REFRESH_AHEAD_SECS + 1),
            now
        ));
        assert!(needs_refresh(
            &token("r", now + REFRESH_AHEAD_SECS - 1),
            now
        ));
        assert!(needs_refresh(&token("r", now - 5), now), "expired already");
    }

    #[test]
    fn tokens_are_sealed_and_open_again() {
        let key = SealKey::from_bytes(&[7; 32]);
        let tokens = ForgeTokens {
            access: "gho_secret".into(),
            refresh: String::new(),
            expiry: 12,
        };
        let sealed = seal(&key, 4, &tokens);
        assert!(!sealed.access.contains("gho_secret"));
        assert_eq!(sealed.refresh, "");
        assert_eq!(open(&key, &sealed).unwrap(), tokens);
    }
}
