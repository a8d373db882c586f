//! Organisations: removing one with what it holds (its secrets, registries and agents; never
//! while it has repositories — the store refuses), and a user's membership as their forge
//! says it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::forge::{ForgeError, Membership};
use super::{Error, Services};
use crate::store::orgs::{self, Org};
use crate::store::users::User;

/// How long a membership read from the forge is kept for reads (upstream caches them too).
pub const MEMBERSHIP_TTL: Duration = Duration::from_secs(10 * 60);

/// How old a membership may be for what matters (the organisation's secrets, registries and
/// agents): as old as a repository permission may be for writes.
pub const MEMBERSHIP_RECHECK: Duration =
    Duration::from_secs(super::repos::RECHECK_SECS.unsigned_abs());

/// Memberships read from forges, by (user, organisation).
#[derive(Default)]
pub struct MembershipCache {
    kept: Mutex<HashMap<(i64, i64), (Membership, Instant)>>,
}

impl MembershipCache {
    /// The membership kept for `key`, if read less than `max_age` ago.
    fn get(&self, key: (i64, i64), max_age: Duration) -> Option<Membership> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(&key)
            .filter(|(_, at)| at.elapsed() < max_age)
            .map(|(m, _)| *m)
    }

    fn put(&self, key: (i64, i64), membership: Membership) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|_, (_, at)| at.elapsed() < MEMBERSHIP_TTL);
        kept.insert(key, (membership, Instant::now()));
    }

    /// Drops what is kept for user `user_id` (they signed in again, or listed their
    /// repositories: the forge is asked afresh).
    pub fn forget_user(&self, user_id: i64) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|(user, _), _| *user != user_id);
    }
}

/// `user`'s membership of `org` as the forge says, asked as them, kept for `max_age`
/// ([`MEMBERSHIP_TTL`] for reads, [`MEMBERSHIP_RECHECK`] for what matters): `None` when the
/// forge cannot say (another forge's user, no token, no support, an error: logged). A forge
/// that refuses the user's token makes the server forget it
/// (`forge::acting::Tokens::forget`). A user's own organisation is not asked about.
pub async fn forge_membership(
    ci: &Services,
    user: &User,
    org: &Org,
    max_age: Duration,
) -> Option<Membership> {
    if org.is_user || user.forge_id != org.forge_id || user.forge_remote_id.is_empty() {
        return None;
    }
    let key = (user.id, org.id);
    if let Some(known) = ci.memberships.get(key, max_age) {
        return Some(known);
    }
    let forge = ci.drivers.get(org.forge_id).await.ok()?;
    if forge.kind().is_builtin() {
        return None;
    }
    let driver = ci.tokens.as_user(&forge, user.id).await.ok().flatten()?;
    match driver.org_membership(&org.name, &user.login).await {
        Ok(membership) => {
            ci.memberships.put(key, membership);
            Some(membership)
        }
        Err(ForgeError::Refused(_)) => {
            ci.memberships.forget_user(user.id);
            ci.tokens.forget(user.id, org.forge_id).await;
            None
        }
        Err(err) => {
            tracing::warn!(user = user.login, org = org.name, error = %err, "membership not read from the forge");
            None
        }
    }
}

/// Removes organisation `id` and its contents.
pub async fn delete(ci: &Services, id: i64) -> Result<(), Error> {
    ci.store
        .write(move |c| orgs::delete_with_contents(c, id))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_membership_is_kept_for_reads_longer_than_for_what_matters() {
        let cache = MembershipCache::default();
        let admin = Membership {
            member: true,
            admin: true,
        };
        cache.put((1, 7), admin);
        cache.put((2, 7), admin);
        assert_eq!(cache.get((1, 7), MEMBERSHIP_TTL), Some(admin));
        assert!(MEMBERSHIP_RECHECK < MEMBERSHIP_TTL);
        // Older than a write allows: asked again.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(cache.get((1, 7), Duration::from_millis(1)), None);
        // Signing in again forgets that user's, not another's.
        cache.forget_user(1);
        assert_eq!(cache.get((1, 7), MEMBERSHIP_TTL), None);
        assert_eq!(cache.get((2, 7), MEMBERSHIP_TTL), Some(admin));
    }
}
