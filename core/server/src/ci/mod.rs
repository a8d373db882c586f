//! The CI service layer: what happens to pipelines, with no HTTP in sight.
//!
//! The Woodpecker API's handlers (`modules::ci`) parse a request, authorize the caller, call
//! into this layer and render the result; the agent protocol's handlers and the embedded
//! agent call the same [`queue::Queue`] methods. Each service is built from the parts it
//! uses (store, sealing key, log bus), not from the HTTP state, and has its own error type
//! that classifies itself (`woodlark_stdx::Classify`) for whoever renders it.
//!
//! - [`queue`]: the queue service: leases, agent reports, cancel, re-queue, idle waits.
//! - [`lifecycle`]: the state transitions the queue makes inside one write (workflow end,
//!   dependents, roll-up, cancel, re-queue), unit-tested on in-memory SQLite.
//! - [`local`]: the embedded agent, the runner fed from the queue in memory.
//! - [`bus`]: live log lines for stream readers.
//! - [`forge_secrets`]: a forge's sealed API token and webhook secret, in clear.

pub mod bus;
pub mod forge_secrets;
pub mod lifecycle;
pub mod local;
pub mod queue;

#[cfg(test)]
mod tests {
    /// The layer's rule, checked on its sources: nothing here reaches up into the HTTP
    /// handlers or their state.
    #[test]
    fn the_service_layer_knows_no_http() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ci");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for word in [
                "crate::modules",
                "crate::http",
                "crate::app",
                "ApiError",
                "Ctx",
            ] {
                assert!(!code.contains(word), "{} mentions {word}", path.display());
            }
        }
    }
}
