//! Organisations: removing one with what it holds (its secrets, registries and agents; never
//! while it has repositories — the store refuses), and a user's membership as their forge
//! says it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::forge::Membership;
use super::{Error, Services};
use crate::store::orgs::{self, Org};
use crate::store::users::User;

/// How long a membership read from the forge is kept (upstream caches them too).
pub const MEMBERSHIP_TTL: Duration = Duration::from_secs(10 * 60);

/// Memberships read from forges, by (user, organisation).
#[derive(Default)]
pub struct MembershipCache {
    kept: Mutex<HashMap<(i64, i64), (Membership, Instant)>>,
}

impl MembershipCache {
    fn get(&self, key: (i64, i64)) -> Option<Membership> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(&key)
            .filter(|(_, at)| at.elapsed() < MEMBERSHIP_TTL)
            .map(|(m, _)| *m)
    }

    fn put(&self, key: (i64, i64), membership: Membership) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|_, (_, at)| at.elapsed() < MEMBERSHIP_TTL);
        kept.insert(key, (membership, Instant::now()));
    }
}

/// `user`'s membership of `org` as the forge says, asked as them: `None` when the forge
/// cannot say (another forge's user, no token, no support, an error: logged). A user's own
/// organisation is not asked about.
pub async fn forge_membership(ci: &Services, user: &User, org: &Org) -> Option<Membership> {
    if org.is_user || user.forge_id != org.forge_id || user.forge_remote_id.is_empty() {
        return None;
    }
    let key = (user.id, org.id);
    if let Some(known) = ci.memberships.get(key) {
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
        Err(err) => {
            tracing::debug!(user = user.login, org = org.name, error = %err, "membership not read from the forge");
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
