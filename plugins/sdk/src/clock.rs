//! Wall-clock time from the host (there is no other clock inside the sandbox).

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    crate::host_api::clock::now_unix_ms()
}
