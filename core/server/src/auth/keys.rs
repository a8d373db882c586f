//! The server's ed25519 key pair (`GET /api/signature/public-key`).
//!
//! Created on first start as `<data_dir>/signature.key` (PKCS#8 PEM, mode 0600) and reused
//! after. The DER framing for ed25519 is a fixed prefix before the 32 key bytes (RFC 8410), so
//! it is written out here rather than pulling in an ASN.1 stack.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::SigningKey;

/// PKCS#8 `PrivateKeyInfo` for ed25519, up to the 32-byte seed.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// `SubjectPublicKeyInfo` for ed25519, up to the 32-byte public key.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

pub const KEY_FILE: &str = "signature.key";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ed25519 PKCS#8 PEM private key")]
    Malformed { path: PathBuf },
}

pub struct ServerKey {
    signing: SigningKey,
}

impl ServerKey {
    /// Loads the key from `data_dir`, creating it (0600) if it does not exist yet.
    pub fn load_or_create(data_dir: &Path) -> Result<ServerKey, KeyError> {
        let path = data_dir.join(KEY_FILE);
        let io = |source| KeyError::Io {
            path: path.clone(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let seed =
                    decode_private(&text).ok_or(KeyError::Malformed { path: path.clone() })?;
                Ok(ServerKey {
                    signing: SigningKey::from_bytes(&seed),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let seed: [u8; 32] = super::random_bytes(32)
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("32 bytes"));
                let key = ServerKey {
                    signing: SigningKey::from_bytes(&seed),
                };
                write_private(&path, &key.private_pem()).map_err(io)?;
                tracing::info!(path = %path.display(), "created the server signing key");
                Ok(key)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn private_pem(&self) -> String {
        let mut der = PKCS8_PREFIX.to_vec();
        der.extend_from_slice(self.signing.as_bytes());
        pem("PRIVATE KEY", &der)
    }

    /// The public key as a PEM `PUBLIC KEY` block (PKIX), as Woodpecker serves it.
    pub fn public_pem(&self) -> String {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.signing.verifying_key().as_bytes());
        pem("PUBLIC KEY", &der)
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer;
        self.signing.sign(message).to_bytes()
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn decode_private(text: &str) -> Option<[u8; 32]> {
    let body: String = text
        .lines()
        .map(str::trim)
        .skip_while(|l| *l != "-----BEGIN PRIVATE KEY-----")
        .skip(1)
        .take_while(|l| *l != "-----END PRIVATE KEY-----")
        .collect();
    let der = STANDARD.decode(body).ok()?;
    let seed = der.strip_prefix(&PKCS8_PREFIX[..])?;
    seed.try_into().ok()
}

pub use woodlark_stdx::write_private;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let a = ServerKey::load_or_create(dir.path()).unwrap();
        let b = ServerKey::load_or_create(dir.path()).unwrap();
        assert_eq!(a.public_pem(), b.public_pem());
        assert!(
            a.public_pem()
                .starts_with("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let sig = a.sign(b"hello");
        let vk = a.signing.verifying_key();
        assert!(
            vk.verify_strict(b"hello", &ed25519_dalek::Signature::from_bytes(&sig))
                .is_ok()
        );
    }

    #[test]
    fn malformed_key_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "nope").unwrap();
        assert!(matches!(
            ServerKey::load_or_create(dir.path()),
            Err(KeyError::Malformed { .. })
        ));
    }
}
