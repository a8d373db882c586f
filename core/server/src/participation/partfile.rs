//! algod's partkey files, as the participation API reads and writes them. The SQLite side
//! (staging an untrusted upload, opening it read-only and immutable, checking every table
//! and column) is the store's [`woodlark_store::partfile`]; here its rows become a
//! [`PartKey`] only after every value is decoded ([`PartKey::public_keys`]).

use std::path::Path;

use super::keys::{KeyMaterial, PartKey};
use crate::store::partfile;

pub use crate::store::partfile::ReadError;

/// Reads and validates a partkey file uploaded as `bytes` (staged in `tmp_dir`). Blocking.
pub fn read(bytes: &[u8], tmp_dir: &Path) -> Result<PartKey, ReadError> {
    let key = partfile::read(bytes, tmp_dir)?;
    key.public_keys()
        .map_err(|e| ReadError::Bad(format!("participation key file: {e}")))?;
    Ok(key)
}

/// Writes `key` as a version-3 partkey file at `path` (which must not exist yet).
pub fn write(key: &PartKey, path: &Path) -> Result<(), partfile::WriteError> {
    partfile::write(key, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participation::keygen::{Plan, generate};

    fn file_bytes(key: &PartKey) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.partkey");
        write(key, &path).unwrap();
        std::fs::read(&path).unwrap()
    }

    #[test]
    fn round_trip() {
        let key = generate(&Plan::new([3; 32], 100, 5000, 0).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let back = read(&file_bytes(&key), dir.path()).unwrap();
        assert_eq!(back, key);
        assert_eq!(
            back.public_keys().unwrap().id,
            key.public_keys().unwrap().id
        );
    }

    #[test]
    fn field_checks() {
        let dir = tempfile::tempdir().unwrap();
        let key = generate(&Plan::new([3; 32], 0, 100, 0).unwrap());
        let cases: Vec<(PartKey, &str)> = vec![
            (
                PartKey {
                    parent: [0; 32],
                    ..key.clone()
                },
                "missing (zero) parent address",
            ),
            (
                PartKey {
                    vrf: vec![0x80 | 1, 0xa2, b'P', b'K', 0x01],
                    ..key.clone()
                },
                "VRF secrets",
            ),
            (
                PartKey {
                    voting: b"junk".to_vec(),
                    ..key.clone()
                },
                "voting secrets",
            ),
            (
                PartKey {
                    state_proof: Some(vec![0x80]),
                    state_proof_keys: vec![(256, vec![0x01])],
                    ..key.clone()
                },
                "state proof key for round 256",
            ),
        ];
        for (bad_key, expected) in cases {
            let path = dir.path().join("k.partkey");
            write(&bad_key, &path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            match read(&bytes, dir.path()) {
                Err(ReadError::Bad(m)) => assert!(m.contains(expected), "{m}"),
                other => panic!("expected {expected:?}, got {other:?}"),
            }
        }
    }
}
