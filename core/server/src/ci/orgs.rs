//! Organisations: removing one with what it holds (its secrets, registries and agents; never
//! while it has repositories — the store refuses).

use super::{Error, Services};
use crate::store::orgs;

/// Removes organisation `id` and its contents.
pub async fn delete(ci: &Services, id: i64) -> Result<(), Error> {
    ci.store
        .write(move |c| orgs::delete_with_contents(c, id))
        .await?;
    Ok(())
}
