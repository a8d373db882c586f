//! Access decisions: what a caller may do on a repository or an organisation, from store
//! reads and plain values, with no HTTP in sight. The server's `modules::ci::access` finds
//! the caller (token, session, CSRF), keeps answers in the [`crate::access_cache`], and turns
//! a [`RepoDecision`] or [`OrgDecision`] into a status; the rules themselves live here, so the
//! API, the events feed and the web UI decide alike.
//!
//! The rules (the `git` forge has no accounts of its own, so they are local): instance admins
//! may do everything; a user is admin of every repository in their own namespace (their
//! personal org); the user who activated a repository is its admin (a `perms` row); public
//! repositories can be pulled by anyone, internal ones by any signed-in user. Org membership:
//! own namespace → admin; push or admin on any repository of the org → member. **Org admin is
//! never derived from a permission on one repository**: such a row can come from activating or
//! moving a single repository, and org admins read and overwrite the org's secrets and
//! register agents that receive every workflow of the org. Only instance admins and the
//! namespace's own user administer an organisation; the same right is needed to activate a
//! repository in it or move one into it ([`may_activate_in`]).
//!
//! A caller who may not pull a repository is told it does not exist when signed in
//! ([`RepoDecision::Hidden`]), so private repositories do not leak, and asked to sign in when
//! anonymous ([`RepoDecision::SignIn`]).

use std::sync::Arc;

use std::time::Duration;

use serde::Serialize;

use crate::Services;
use crate::store::orgs::{self, Org};
use crate::store::repos::{self, Perm, RepoRow, Visibility};
use crate::store::users::{Account, User};
use crate::store::{StoreResult, Tx, now_unix};

/// A user's permission on a repository, by the rules in the module docs.
pub fn repo_perm(conn: &Tx, user: Option<&User>, row: &RepoRow) -> StoreResult<Perm> {
    let repo = &row.repo;
    let public = match repo.visibility {
        Visibility::Public => Perm::pull_only(),
        Visibility::Internal if user.is_some() => Perm::pull_only(),
        _ => Perm::default(),
    };
    let Some(user) = user else {
        return Ok(public);
    };
    if user.admin || user.org_id == repo.org_id {
        return Ok(Perm::all());
    }
    let stored = repos::perm(conn, user.id, repo.id)?.unwrap_or_default();
    Ok(Perm {
        pull: stored.pull || stored.push || stored.admin || public.pull,
        ..stored
    })
}

/// The repository `find` names and `user`'s permission on it, in one read.
pub fn repo_with_perm(
    conn: &Tx,
    user: Option<&User>,
    find: impl FnOnce(&Tx) -> StoreResult<RepoRow>,
) -> StoreResult<(RepoRow, Perm)> {
    let row = find(conn)?;
    let perm = repo_perm(conn, user, &row)?;
    Ok((row, perm))
}

/// `found`, its permission read from the forge first when the stored one is `max_age`
/// seconds old (`repos::perm_is_stale`): a user who lost access on the forge loses it here.
pub async fn with_synced_perm(
    ci: &Services,
    user: Option<&User>,
    found: StoreResult<(Arc<RepoRow>, Perm)>,
    max_age: i64,
) -> StoreResult<(Arc<RepoRow>, Perm)> {
    let (Some(user), Ok((row, perm))) = (user, &found) else {
        return found;
    };
    if !crate::repos::perm_is_stale(user, row, perm, now_unix(), max_age)
        || !crate::repos::sync_perm(ci, user.id, row).await
    {
        return found;
    }
    let (u, id) = (user.clone(), row.repo.id);
    let (row, perm) = ci
        .reads
        .read(move |c| repo_with_perm(c, Some(&u), |c| repos::by_id(c, id)))
        .await?;
    Ok((Arc::new(row), perm))
}

/// What a route needs of its caller on a repository.
/// A repository the caller may at least pull, with the caller and their permission: the
/// answer of the server's access check (`modules::ci::access::repo`), which the REST API's
/// handlers and the built-in UI (`woodlark-ui`) both act on.
///
/// The caller and the repository are shared with the access cache: a request that hits it
/// copies neither (issue 50's profile found those copies on every repository read).
pub struct RepoAccess {
    pub user: Option<Arc<Account>>,
    pub row: Arc<RepoRow>,
    pub perm: Perm,
}

impl RepoAccess {
    /// Whether the caller may do what `need` names here ([`decide_repo`]).
    pub fn decide(&self, need: RepoNeed) -> RepoDecision {
        decide_repo(self.user.is_some(), &self.perm, need)
    }

    /// Whether [`RepoAccess::decide`] allows `need`.
    pub fn allows(&self, need: RepoNeed) -> bool {
        self.decide(need) == RepoDecision::Allowed
    }
}

/// An organisation and the signed-in caller's standing in it (`modules::ci::access::org`).
pub struct OrgAccess {
    pub user: Arc<Account>,
    pub org: Org,
    pub perm: OrgPerm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoNeed {
    /// Read it (every repository route).
    Pull,
    /// Run, restart, cancel, approve or decline its pipelines; a signed-in caller only.
    Push,
    /// Its secrets, registries, crons and settings; a signed-in caller only.
    Admin,
}

/// The answer to "may this caller do that on this repository?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoDecision {
    Allowed,
    /// An anonymous caller who may not: signing in might help.
    SignIn,
    /// A signed-in caller who may not even pull: as if the repository did not exist.
    Hidden,
    /// A caller who may pull but lacks what the route needs (push or admin).
    Denied(RepoNeed),
}

/// Whether a caller (`signed_in` or not) holding `perm` may do what `need` asks.
pub fn decide_repo(signed_in: bool, perm: &Perm, need: RepoNeed) -> RepoDecision {
    if !perm.pull {
        return if signed_in {
            RepoDecision::Hidden
        } else {
            RepoDecision::SignIn
        };
    }
    let enough = match need {
        RepoNeed::Pull => return RepoDecision::Allowed,
        RepoNeed::Push => perm.push || perm.admin,
        RepoNeed::Admin => perm.admin,
    };
    if !signed_in {
        RepoDecision::SignIn
    } else if enough {
        RepoDecision::Allowed
    } else {
        RepoDecision::Denied(need)
    }
}

/// Woodpecker's `OrgPerm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OrgPerm {
    pub member: bool,
    pub admin: bool,
}

/// A user's standing in an organisation, by the rules in the module docs.
pub fn org_perm(conn: &Tx, user: Option<&User>, org: &Org) -> StoreResult<OrgPerm> {
    let Some(user) = user else {
        return Ok(OrgPerm::default());
    };
    if user.admin || user.org_id == org.id {
        return Ok(OrgPerm {
            member: true,
            admin: true,
        });
    }
    let best = repos::best_perm_in_org(conn, user.id, org.id)?;
    Ok(OrgPerm {
        member: best.push || best.admin,
        admin: false,
    })
}

/// `perm`, with what the user's forge says of their membership of `org` added (never taken
/// away: an instance admin stays one; see `orgs::forge_membership`), read from the forge
/// again when `max_age` old.
pub async fn with_forge_membership(
    ci: &Services,
    user: Option<&User>,
    org: &Org,
    mut perm: OrgPerm,
    max_age: Duration,
) -> OrgPerm {
    if let Some(user) = user
        && !perm.admin
        && let Some(on_forge) = crate::orgs::forge_membership(ci, user, org, max_age).await
    {
        perm.member |= on_forge.member;
        perm.admin |= on_forge.admin;
    }
    perm
}

/// What a route needs of its caller in an organisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgNeed {
    Member,
    /// Its secrets, registries and agents.
    Admin,
}

/// The answer to "may this signed-in caller do that in this organisation?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgDecision {
    Allowed,
    Denied(OrgNeed),
}

/// Whether a caller standing `perm` in an organisation may do what `need` asks (a member
/// always, an admin too for [`OrgNeed::Admin`]).
pub fn decide_org(perm: OrgPerm, need: OrgNeed) -> OrgDecision {
    if perm.member && (need == OrgNeed::Member || perm.admin) {
        OrgDecision::Allowed
    } else {
        OrgDecision::Denied(need)
    }
}

/// Whether the caller's own session decides what they may read (`false`: an instance admin,
/// who reads everything, so no list of readable ids is needed).
pub fn reads_only_what_is_shared(user: &User) -> bool {
    !user.admin
}

/// Whether `user` may put repositories into namespace `owner` of forge `forge_id` (activate
/// one there, or move one there): instance admins, the user the namespace is named after, and
/// admins of its organisation.
pub fn may_activate_in(conn: &Tx, user: &User, forge_id: i64, owner: &str) -> StoreResult<bool> {
    if user.admin || owner == user.login {
        return Ok(true);
    }
    Ok(match orgs::by_name(conn, forge_id, owner)? {
        Some(org) => org_perm(conn, Some(user), &org)?.admin,
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WriteTx;

    /// A user of org `org_id` (their own namespace), an instance admin or not.
    fn user(id: i64, org_id: i64, admin: bool) -> User {
        User {
            id,
            forge_id: 1,
            forge_remote_id: String::new(),
            login: format!("user{id}"),
            email: String::new(),
            avatar_url: String::new(),
            admin,
            admin_env: false,
            org_id,
        }
    }

    /// A repository of org 100 with `visibility`, stored (for its id; the row read back would
    /// carry a bare test row's empty settings).
    fn repo(db: &WriteTx, name: &str, visibility: Visibility) -> RepoRow {
        let remote = crate::forge::RemoteRepo {
            forge_remote_id: name.into(),
            owner: "o".into(),
            name: name.into(),
            clone_url: String::new(),
            forge_url: String::new(),
            default_branch: "main".into(),
            private: visibility != Visibility::Public,
            avatar_url: String::new(),
        };
        let mut repo = remote.new_repo(1, 100);
        repo.id = repos::insert_bare(db, 100, 1, name).unwrap();
        repo.visibility = visibility;
        RepoRow {
            repo,
            user_id: 1,
            hash: String::new(),
        }
    }

    fn stored(pull: bool, push: bool, admin: bool) -> Perm {
        Perm {
            pull,
            push,
            admin,
            ..Perm::default()
        }
    }

    fn bits(p: Perm) -> (bool, bool, bool) {
        (p.pull, p.push, p.admin)
    }

    #[test]
    fn repository_permission_follows_visibility_namespace_and_stored_rows() {
        let db = WriteTx::in_memory_for_tests();
        let public = repo(&db, "o/public", Visibility::Public);
        let internal = repo(&db, "o/internal", Visibility::Internal);
        let private = repo(&db, "o/private", Visibility::Private);
        let (stranger, owner, admin) = (user(2, 2, false), user(3, 100, false), user(4, 4, true));
        let perm = |u: Option<&User>, r: &RepoRow| bits(repo_perm(&db, u, r).unwrap());

        assert_eq!(perm(None, &public), (true, false, false));
        assert_eq!(perm(None, &internal), (false, false, false));
        assert_eq!(perm(None, &private), (false, false, false));
        assert_eq!(perm(Some(&stranger), &public), (true, false, false));
        assert_eq!(perm(Some(&stranger), &internal), (true, false, false));
        assert_eq!(perm(Some(&stranger), &private), (false, false, false));
        assert_eq!(perm(Some(&owner), &private), (true, true, true));
        assert_eq!(perm(Some(&admin), &private), (true, true, true));

        // A stored push implies pull; a stored nothing takes nothing from visibility.
        repos::set_perm(&db, 2, private.repo.id, stored(false, true, false)).unwrap();
        assert_eq!(perm(Some(&stranger), &private), (true, true, false));
        repos::set_perm(&db, 2, public.repo.id, stored(false, false, false)).unwrap();
        assert_eq!(perm(Some(&stranger), &public), (true, false, false));
    }

    #[test]
    fn org_admin_comes_from_the_namespace_or_the_instance_never_from_one_repository() {
        let db = WriteTx::in_memory_for_tests();
        let org = orgs::find_or_create(&db, 1, "team").unwrap();
        let id = repos::insert_bare(&db, org.id, 1, "team/app").unwrap();
        let (stranger, admin) = (user(2, 2, false), user(4, 4, true));
        let own = user(5, org.id, false);
        let standing = |u: Option<&User>| {
            let p = org_perm(&db, u, &org).unwrap();
            (p.member, p.admin)
        };

        assert_eq!(standing(None), (false, false));
        assert_eq!(standing(Some(&stranger)), (false, false));
        assert_eq!(standing(Some(&own)), (true, true));
        assert_eq!(standing(Some(&admin)), (true, true));
        repos::set_perm(&db, 2, id, stored(true, false, false)).unwrap();
        assert_eq!(
            standing(Some(&stranger)),
            (false, false),
            "pull is no membership"
        );
        repos::set_perm(&db, 2, id, stored(true, true, true)).unwrap();
        assert_eq!(
            standing(Some(&stranger)),
            (true, false),
            "repo admin, org member"
        );

        // Activating into the namespace takes what administering the org takes.
        assert!(!may_activate_in(&db, &stranger, 1, "team").unwrap());
        assert!(may_activate_in(&db, &own, 1, "team").unwrap());
        assert!(may_activate_in(&db, &admin, 1, "team").unwrap());
        assert!(
            may_activate_in(&db, &stranger, 1, "user2").unwrap(),
            "own login"
        );
        assert!(!may_activate_in(&db, &stranger, 1, "nobody").unwrap());
        assert!(
            !may_activate_in(&db, &stranger, 2, "team").unwrap(),
            "another forge"
        );
    }

    #[test]
    fn repository_decisions_hide_what_may_not_be_pulled_and_ask_anonymous_callers_to_sign_in() {
        use RepoDecision::*;
        use RepoNeed::*;
        let (none, pull, push, admin) = (
            stored(false, false, false),
            stored(true, false, false),
            stored(true, true, false),
            stored(true, true, true),
        );
        let cases = [
            // (signed in, perm, need, decision)
            (false, none, Pull, SignIn),
            (true, none, Pull, Hidden),
            (true, none, Admin, Hidden),
            (false, pull, Pull, Allowed),
            (false, pull, Push, SignIn),
            (false, admin, Admin, SignIn),
            (true, pull, Pull, Allowed),
            (true, pull, Push, Denied(Push)),
            (true, pull, Admin, Denied(Admin)),
            (true, push, Push, Allowed),
            (true, push, Admin, Denied(Admin)),
            (true, admin, Push, Allowed),
            (true, admin, Admin, Allowed),
        ];
        for (signed_in, perm, need, decision) in cases {
            assert_eq!(
                decide_repo(signed_in, &perm, need),
                decision,
                "signed in {signed_in}, {perm:?}, {need:?}"
            );
        }
    }

    #[test]
    fn org_decisions_need_membership_and_admin_for_admin_routes() {
        let standing = |member, admin| OrgPerm { member, admin };
        let cases = [
            (standing(false, false), OrgNeed::Member, false),
            (standing(true, false), OrgNeed::Member, true),
            (standing(true, false), OrgNeed::Admin, false),
            (standing(true, true), OrgNeed::Admin, true),
            // An admin by the forge's word alone who is no member is refused, as before.
            (standing(false, true), OrgNeed::Admin, false),
        ];
        for (perm, need, allowed) in cases {
            let expected = if allowed {
                OrgDecision::Allowed
            } else {
                OrgDecision::Denied(need)
            };
            assert_eq!(decide_org(perm, need), expected, "{perm:?}, {need:?}");
        }
        assert!(!reads_only_what_is_shared(&user(4, 4, true)));
        assert!(reads_only_what_is_shared(&user(2, 2, false)));
    }
}
