//! The server's ed25519 key pair (`GET /api/signature/public-key`).
//!
//! The key lives in the database (`meta` table, sealed with the sealing key), not in the
//! data dir: replicas on one PostgreSQL database each have their own data dir but must
//! serve, and sign with, one key. The first server to start claims it; a data dir from
//! before the key moved still has `signature.key` (PKCS#8 PEM), and that key is the one
//! claimed, so upgrading keeps the published key. The DER framing for ed25519 is a fixed
//! prefix before the 32 key bytes (RFC 8410), so it is written out here rather than
//! pulling in an ASN.1 stack.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::SigningKey;
use woodlark_store::{Store, StoreError, meta};

use super::sealing::SealKey;

/// PKCS#8 `PrivateKeyInfo` for ed25519, up to the 32-byte seed.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// `SubjectPublicKeyInfo` for ed25519, up to the 32-byte public key.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Where a data dir from before the key moved into the database kept it.
pub const KEY_FILE: &str = "signature.key";

/// The sealing purpose of the stored key (a sealed value opens only for its purpose).
const SEAL_PURPOSE: &str = "signature key";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ed25519 PKCS#8 PEM private key")]
    Malformed { path: PathBuf },
    #[error("storing the signing key: {0}")]
    Store(#[from] StoreError),
    #[error(
        "the database's signing key does not open with this server's sealing key \
         (storage.secret_key_file)"
    )]
    Sealed,
}

pub struct ServerKey {
    signing: SigningKey,
}

impl ServerKey {
    /// The database's key, claimed now if no server has yet: the data dir's old
    /// `signature.key` if there is one, else a fresh key.
    pub fn load_shared(
        store: &Store,
        seal: &SealKey,
        data_dir: &Path,
    ) -> Result<ServerKey, KeyError> {
        let legacy = read_key_file(&data_dir.join(KEY_FILE))?;
        let candidate = legacy.unwrap_or_else(random_seed);
        let sealed = seal.seal(SEAL_PURPOSE, &candidate);
        let stored = store.write_now(move |c| meta::claim(c, meta::SIGNATURE_KEY, &sealed))?;
        let seed: [u8; 32] = seal
            .open(SEAL_PURPOSE, &stored)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(KeyError::Sealed)?;
        if legacy.is_some_and(|own| own != seed) {
            tracing::warn!(
                file = KEY_FILE,
                "this data dir's signing key differs from the database's; serving the database's"
            );
        }
        Ok(ServerKey {
            signing: SigningKey::from_bytes(&seed),
        })
    }

    #[cfg(test)]
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

fn random_seed() -> [u8; 32] {
    super::random_bytes(32)
        .try_into()
        .unwrap_or_else(|_| unreachable!("32 bytes"))
}

/// The seed in an old data dir's key file, if it has one.
fn read_key_file(path: &Path) -> Result<Option<[u8; 32]>, KeyError> {
    match std::fs::read_to_string(path) {
        Ok(text) => decode_private(&text).map(Some).ok_or(KeyError::Malformed {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(KeyError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use woodlark_store::StoreOptions;

    fn store(dir: &Path) -> Store {
        Store::open(&dir.join("db.sqlite"), &StoreOptions::default()).unwrap()
    }

    #[test]
    fn claimed_once_then_reloaded_and_never_stored_in_clear() {
        let dir = tempfile::tempdir().unwrap();
        let seal = SealKey::from_bytes(&[7; 32]);
        let db = store(dir.path());
        let a = ServerKey::load_shared(&db, &seal, dir.path()).unwrap();
        let b = ServerKey::load_shared(&db, &seal, dir.path()).unwrap();
        assert_eq!(a.public_pem(), b.public_pem());
        assert!(
            a.public_pem()
                .starts_with("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA")
        );
        assert!(
            !dir.path().join(KEY_FILE).exists(),
            "no key file is written"
        );
        let stored: String = db
            .write_now(|c| meta::claim(c, meta::SIGNATURE_KEY, "unused"))
            .unwrap();
        assert!(!stored.contains(&STANDARD.encode(a.signing.as_bytes())));
        let sig = a.sign(b"hello");
        let vk = a.signing.verifying_key();
        assert!(
            vk.verify_strict(b"hello", &ed25519_dalek::Signature::from_bytes(&sig))
                .is_ok()
        );
        // Another sealing key cannot open it: a clear error, not another key.
        let other = SealKey::from_bytes(&[8; 32]);
        assert!(matches!(
            ServerKey::load_shared(&db, &other, dir.path()),
            Err(KeyError::Sealed)
        ));
        db.close();
    }

    #[test]
    fn an_old_data_dirs_key_file_is_the_key_claimed() {
        let dir = tempfile::tempdir().unwrap();
        let old = ServerKey {
            signing: SigningKey::from_bytes(&[9; 32]),
        };
        std::fs::write(dir.path().join(KEY_FILE), old.private_pem()).unwrap();
        let seal = SealKey::from_bytes(&[7; 32]);
        let db = store(dir.path());
        let key = ServerKey::load_shared(&db, &seal, dir.path()).unwrap();
        assert_eq!(key.public_pem(), old.public_pem());
        // A second data dir with another file on the same database: the database wins.
        let other_dir = tempfile::tempdir().unwrap();
        let other = ServerKey {
            signing: SigningKey::from_bytes(&[10; 32]),
        };
        std::fs::write(other_dir.path().join(KEY_FILE), other.private_pem()).unwrap();
        let key = ServerKey::load_shared(&db, &seal, other_dir.path()).unwrap();
        assert_eq!(key.public_pem(), old.public_pem());
        db.close();
    }

    #[test]
    fn malformed_key_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "nope").unwrap();
        let db = store(dir.path());
        assert!(matches!(
            ServerKey::load_shared(&db, &SealKey::from_bytes(&[7; 32]), dir.path()),
            Err(KeyError::Malformed { .. })
        ));
        db.close();
    }
}
