//! Agents: registering, changing and removing the runners that lease workflows.
//!
//! An agent's token is shown to its managers, so it is stored sealed (and as a hash to look
//! it up by). The embedded agent is the server's own runner: it can be paused but not
//! renamed (the server finds it by name), and deleted only once it has gone silent (a
//! replica gone for good leaves its record behind).

use super::local::is_embedded;
use super::queue::LONG_POLL;
use super::{Error, Services};
use crate::auth::random_secret;
use crate::store::agents::{
    self, Agent, AgentChange, AgentRow, NewAgent, SEAL_PURPOSE, token_hash,
};
use crate::store::now_unix;

/// Silence after which an embedded agent's server counts as gone and its record may be
/// deleted. A running runner is heard at least every [`LONG_POLL`] (25 s) and its contact
/// is stored every 15 s ([`super::jobs`]), so a stored contact is at most 40 s old; a
/// runner that takes its record stores one at once ([`super::local::ensure_agent`]). Five
/// minutes is over seven times that.
pub const EMBEDDED_GONE_SECS: i64 = 300;
const _: () = assert!(EMBEDDED_GONE_SECS > 5 * (LONG_POLL.as_secs() as i64 + 15));

/// Registers an agent owned by `owner_id` (for organisation `org_id`, 0 = every org's work);
/// returns it with its token in clear, shown this once.
pub async fn register(
    ci: &Services,
    owner_id: i64,
    org_id: i64,
    name: String,
    no_schedule: bool,
) -> Result<Agent, Error> {
    let token = random_secret();
    let new = NewAgent {
        name,
        no_schedule,
        owner_id,
        org_id,
        token_hash: token_hash(&token),
        sealed_token: ci.seal.seal(SEAL_PURPOSE, token.as_bytes()),
    };
    let row = ci.store.write(move |c| agents::create(c, &new)).await?;
    tracing::info!(
        agent = row.agent.id,
        name = row.agent.name,
        org_id,
        "agent created"
    );
    let mut agent = row.agent;
    agent.token = token;
    Ok(agent)
}

/// Changes agent `id`'s name or scheduling.
pub async fn update(ci: &Services, id: i64, change: AgentChange) -> Result<AgentRow, Error> {
    let current = ci.store.read(move |c| agents::by_id(c, id)).await?;
    if is_embedded(&current.agent)
        && change
            .name
            .as_ref()
            .is_some_and(|n| *n != current.agent.name)
    {
        return Err(Error::Conflict(
            "the embedded agent cannot be renamed (the server finds its runner by this name)"
                .into(),
        ));
    }
    Ok(ci
        .store
        .write(move |c| agents::update(c, id, &change))
        .await?)
}

/// Removes agent `id`; its leases expire and go back to the queue.
pub async fn remove(ci: &Services, id: i64) -> Result<(), Error> {
    let current = ci.store.read(move |c| agents::by_id(c, id)).await?;
    let silent = now_unix() - current.agent.last_contact;
    if is_embedded(&current.agent) && silent < EMBEDDED_GONE_SECS {
        return Err(Error::Conflict(format!(
            "the embedded agent of a running server (heard from {silent} s ago) cannot be \
             deleted: pause it with no_schedule, or set [runner] enabled = false in that \
             server's config.toml to turn it off; the agent of a replica that is gone can be \
             deleted once it has been silent for {} minutes",
            EMBEDDED_GONE_SECS / 60
        )));
    }
    let agent = ci.store.write(move |c| agents::delete(c, id)).await?;
    tracing::info!(agent = agent.id, name = agent.name, "agent deleted");
    Ok(())
}
