//! Encryption at rest for secret values (CI secrets, registry passwords, private key material).
//!
//! XChaCha20-Poly1305 with a random 192-bit nonce per value, under one 256-bit key that lives
//! **outside** the database: `<data_dir>/secrets.key` (mode 0600, created on first start) or the
//! file named by `storage.secret_key_file`. A copy of the database alone reveals nothing.
//! The `purpose` string is bound in as associated data, so a value sealed as a registry
//! password cannot be replayed as a CI secret.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::random_bytes;
use woodlark_stdx::write_private;

pub const KEY_FILE: &str = "secrets.key";
const PREFIX: &str = "v1:";

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: expected 32 base64-encoded bytes")]
    BadKeyFile { path: PathBuf },
    #[error("sealed value is malformed or was sealed with another key")]
    Open,
}

#[derive(Clone)]
pub struct SealKey {
    cipher: XChaCha20Poly1305,
    /// Key for [`SealKey::derive`], itself derived from the file's key (never the same bytes
    /// used for two algorithms).
    derive_key: [u8; 32],
}

impl SealKey {
    /// Loads the key from `path`, creating a fresh one (0600) if the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<SealKey, SealError> {
        let io = |source| SealError::Io {
            path: path.to_path_buf(),
            source,
        };
        match SealKey::load(path) {
            Err(SealError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let key = random_bytes(32);
                write_private(path, &format!("{}\n", STANDARD.encode(&key))).map_err(io)?;
                tracing::info!(path = %path.display(), "created the secrets encryption key");
                Ok(SealKey::from_bytes(&key))
            }
            other => other,
        }
    }

    /// Loads the key from `path`, which must exist (backups and restores never make one).
    pub fn load(path: &Path) -> Result<SealKey, SealError> {
        let text = std::fs::read_to_string(path).map_err(|source| SealError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bytes = STANDARD
            .decode(text.trim())
            .ok()
            .filter(|b| b.len() == 32)
            .ok_or(SealError::BadKeyFile {
                path: path.to_path_buf(),
            })?;
        Ok(SealKey::from_bytes(&bytes))
    }

    pub fn from_bytes(key: &[u8]) -> SealKey {
        SealKey {
            cipher: XChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key)),
            derive_key: hmac_sha256(key, b"woodlark key derivation v1"),
        }
    }

    /// A short public name of this key (16 hex digits), which tells two keys apart without
    /// revealing either: what a database records to refuse a server with another key.
    pub fn fingerprint(&self) -> String {
        let mut name = self.derive("sealing key fingerprint", "");
        name.truncate(16);
        name
    }

    /// A key for `purpose` derived from `seed` and this secret key (HMAC-SHA256, hex). A
    /// database row holds only the seed, so a copy of the database cannot be used to compute
    /// the key: user tokens are signed this way.
    pub fn derive(&self, purpose: &str, seed: &str) -> String {
        let mut input = Vec::with_capacity(purpose.len() + 1 + seed.len());
        input.extend_from_slice(purpose.as_bytes());
        input.push(0);
        input.extend_from_slice(seed.as_bytes());
        hmac_sha256(&self.derive_key, &input)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Encrypts `plaintext` for `purpose`; the result is printable text.
    pub fn seal(&self, purpose: &str, plaintext: &[u8]) -> String {
        let nonce_bytes = random_bytes(24);
        let nonce = XNonce::from_slice(&nonce_bytes);
        let ciphertext = self
            .cipher
            .encrypt(
                nonce,
                Payload {
                    msg: plaintext,
                    aad: purpose.as_bytes(),
                },
            )
            .unwrap_or_else(|_| unreachable!("XChaCha20-Poly1305 encryption cannot fail"));
        let mut out = nonce_bytes;
        out.extend_from_slice(&ciphertext);
        format!("{PREFIX}{}", STANDARD.encode(out))
    }

    /// Decrypts a value sealed by [`SealKey::seal`] with the same `purpose`.
    pub fn open(&self, purpose: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        let raw = sealed
            .strip_prefix(PREFIX)
            .and_then(|b| STANDARD.decode(b).ok())
            .filter(|b| b.len() >= 24 + 16)
            .ok_or(SealError::Open)?;
        let (nonce, ciphertext) = raw.split_at(24);
        self.cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: purpose.as_bytes(),
                },
            )
            .map_err(|_| SealError::Open)
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(data);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_binding() {
        let k = SealKey::from_bytes(&[7u8; 32]);
        let sealed = k.seal("secret", b"hunter2");
        assert!(!sealed.contains("hunter2"));
        assert_ne!(
            sealed,
            k.seal("secret", b"hunter2"),
            "fresh nonce each time"
        );
        assert_eq!(k.open("secret", &sealed).unwrap(), b"hunter2");
        assert!(k.open("registry", &sealed).is_err());
        assert!(
            SealKey::from_bytes(&[8u8; 32])
                .open("secret", &sealed)
                .is_err()
        );
        assert!(k.open("secret", "v1:AAAA").is_err());
        assert!(k.open("secret", "garbage").is_err());
    }

    #[test]
    fn derived_keys_depend_on_key_purpose_and_seed() {
        let k = SealKey::from_bytes(&[7u8; 32]);
        let a = k.derive("user-token", "seed");
        assert_eq!(a.len(), 64);
        assert_eq!(a, k.derive("user-token", "seed"), "deterministic");
        assert_ne!(a, k.derive("user-token", "seed2"));
        assert_ne!(a, k.derive("other", "seed"));
        assert_ne!(
            a,
            SealKey::from_bytes(&[8u8; 32]).derive("user-token", "seed")
        );
        assert!(!a.contains("seed"));
    }

    #[test]
    fn key_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let a = SealKey::load_or_create(&path).unwrap();
        let sealed = a.seal("p", b"v");
        let b = SealKey::load_or_create(&path).unwrap();
        assert_eq!(b.open("p", &sealed).unwrap(), b"v");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "short").unwrap();
        assert!(matches!(
            SealKey::load_or_create(&path),
            Err(SealError::BadKeyFile { .. })
        ));
    }
}
