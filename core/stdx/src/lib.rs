//! Small helpers every Woodlark crate may use, with no dependency on any of them (the idea of
//! rust-analyzer's `stdx`): randomness from the OS, Unix time and its RFC 3339 text
//! ([`timefmt`]), files only the owner can read.
//!
//! Nothing here knows about HTTP, SQL, pipelines or plugins; a helper that needs one of those
//! belongs in that crate. ([`tls`] is TLS certificate policy, which the forge client and
//! the database connection share.)

pub mod timefmt;
pub mod tls;

use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// `n` bytes from the operating system's CSPRNG.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    // getrandom fails only when the OS has no entropy source at all; nothing safe to do then.
    getrandom::fill(&mut buf).unwrap_or_else(|e| panic!("the OS random source failed: {e}"));
    buf
}

/// A 256-bit random secret as URL-safe text (user hashes, agent tokens, webhook secrets).
pub fn random_secret() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes(32))
}

/// A UUID of version 7 (RFC 9562): the Unix time in milliseconds, then 74 random bits, as
/// `xxxxxxxx-xxxx-7xxx-yxxx-xxxxxxxxxxxx`. Ids made later sort later, so an index on them
/// grows at its end (one page touched per commit) instead of at a random page per insert.
pub fn uuid_v7() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6..].copy_from_slice(&random_bytes(10));
    b[6] = 0x70 | (b[6] & 0x0f);
    b[8] = 0x80 | (b[8] & 0x3f);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A boolean as Go's `strconv.ParseBool` reads it, which upstream Woodpecker's flags and
/// query parameters use: `1`, `t`, `T`, `TRUE`, `true`, `True` and their false forms.
pub fn go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Seconds since the Unix epoch (the API's timestamp unit).
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Writes a new file readable only by the owner, atomically (temp file + rename).
pub fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// How a failure reads to a client, whatever the protocol: the record does not exist, the
/// request contradicts what is stored, a system we depend on failed, or the server did.
/// Crates and layers below the HTTP core (the store, the CI services) classify their errors
/// with it and `woodlark_http::ApiError` renders any [`Classify`] error as 404 / 400 / 409 /
/// 422 / 502 / 503 / 500, so nothing below the HTTP core knows HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The message names what is missing.
    NotFound(String),
    /// The request is malformed or asks for something impossible; the message says why.
    Invalid(String),
    /// The message is shown to the client.
    Conflict(String),
    /// The caller may not do this; the message says what it takes.
    Forbidden(String),
    /// Well-formed, but the system it names refused it (a forge does not know the commit).
    Unprocessable(String),
    /// A system we depend on (a forge, a plugin) failed; the message says which and how.
    Upstream(String),
    /// What would serve the request is not there now (no plugin loaded for a forge type).
    Unavailable(String),
    /// Logged with the error's text; the client sees only that the server failed.
    Internal,
}

/// An error that knows which [`Fault`] it is.
pub trait Classify: std::fmt::Display {
    fn fault(&self) -> Fault;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v7_has_the_shape_and_sorts_by_time() {
        let a = uuid_v7();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = uuid_v7();
        assert!(a < b, "{a} then {b}");
        assert_ne!(uuid_v7(), uuid_v7());
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('7'), "version 7: {a}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "variant: {a}"
        );
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }

    #[test]
    fn secrets_are_url_safe_and_distinct() {
        let (a, b) = (random_secret(), random_secret());
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn private_files_are_owner_only_and_replace_atomically() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_private(&path, "one").unwrap();
        write_private(&path, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!path.with_extension("tmp").exists());
    }
}
