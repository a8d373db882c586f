//! The participation service: algod participation keys, with no HTTP in sight.
//!
//! [`Keyring`] is the only way installed keys change: it validates a key, seals its private
//! material (each part bound to the key's id, so sealed values cannot be swapped between
//! keys) and writes it through the store; it opens sealed material again for an export.
//! The HTTP handlers (`modules::participation`) authorize, parse and render around it.
//!
//! - [`ids`]: addresses and participation ids (algod's base32 with checksum).
//! - [`msgpack`]: algod's canonical msgpack, as far as keys need it.
//! - [`keys`]: key material shapes and their encodings.
//! - [`keygen`]: generating a key (VRF, voting, state-proof keys).
//! - [`partfile`]: algod's SQLite partkey file, import and export.

pub mod ids;
pub mod keygen;
pub mod keys;
pub mod msgpack;
pub mod partfile;

use std::path::Path;

use woodlark_stdx::{Classify, Fault};

use crate::auth::sealing::SealKey;
use crate::store::partkeys::{self, NewPartKey, ParticipationKey, Secrets};
use crate::store::{Store, StoreError};
use ids::{encode_address, encode_participation_id, parse_address};
use keys::{KeyMaterial, PartKey};

/// Why a keyring call failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// The key or the request is unusable; the message says why (algod's 400).
    #[error("{0}")]
    Invalid(String),
    /// No installed key has that id.
    #[error("participation key not found")]
    NotFound,
    #[error(transparent)]
    Store(StoreError),
    /// A sealed value could not be opened or a worker failed (logged, never shown).
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for KeyringError {
    fn from(e: StoreError) -> KeyringError {
        match e {
            StoreError::NotFound => KeyringError::NotFound,
            // A duplicate install or a round already present: algod answers 400.
            StoreError::Conflict(message) => KeyringError::Invalid(message),
            other => KeyringError::Store(other),
        }
    }
}

impl Classify for KeyringError {
    fn fault(&self) -> Fault {
        match self {
            KeyringError::Invalid(message) => Fault::Invalid(message.clone()),
            KeyringError::NotFound => Fault::NotFound(self.to_string()),
            KeyringError::Store(e) => e.fault(),
            KeyringError::Internal(_) => Fault::Internal,
        }
    }
}

/// Installed participation keys: the store they live in and the key that seals them.
#[derive(Clone)]
pub struct Keyring {
    store: Store,
    seal: SealKey,
}

fn sealing_purpose(part: &str, id: &str) -> String {
    format!("partkey-{part}:{id}")
}

fn worker_failed(e: tokio::task::JoinError) -> KeyringError {
    KeyringError::Internal(format!("participation key worker: {e}"))
}

impl Keyring {
    pub fn new(store: Store, seal: SealKey) -> Keyring {
        Keyring { store, seal }
    }

    /// Validates `key`, seals its secrets (bound to its id) and renders what the store needs.
    fn prepare(&self, key: &PartKey) -> Result<NewPartKey, String> {
        let public = key.public_keys()?;
        let id = encode_participation_id(&public.id);
        let signer_purpose = sealing_purpose("stateproof", &id);
        Ok(NewPartKey {
            address: encode_address(&key.parent),
            first_valid: key.first_valid,
            last_valid: key.last_valid,
            key_dilution: key.key_dilution,
            selection_key: public.selection,
            vote_key: public.vote,
            state_proof_key: public.state_proof,
            sealed_vrf: self.seal.seal(&sealing_purpose("vrf", &id), &key.vrf),
            sealed_voting: self.seal.seal(&sealing_purpose("voting", &id), &key.voting),
            state_proof_data: key.state_proof.clone(),
            state_proof_keys: key
                .state_proof_keys
                .iter()
                .map(|(round, signer)| (*round, self.seal.seal(&signer_purpose, signer)))
                .collect(),
            id,
        })
    }

    /// Opens the sealed material of an installed key.
    fn unseal(&self, s: &Secrets) -> Result<PartKey, String> {
        let id = &s.key.id;
        let open = |part: &str, sealed: &str| {
            self.seal
                .open(&sealing_purpose(part, id), sealed)
                .map_err(|e| format!("participation key {id}: {e}"))
        };
        let parent = parse_address(&s.key.address)?;
        Ok(PartKey {
            parent,
            first_valid: s.key.key.vote_first_valid,
            last_valid: s.key.key.vote_last_valid,
            key_dilution: s.key.key.vote_key_dilution,
            vrf: open("vrf", &s.sealed_vrf)?,
            voting: open("voting", &s.sealed_voting)?,
            state_proof: s.state_proof_data.clone(),
            state_proof_keys: s
                .state_proof_keys
                .iter()
                .map(|(round, sealed)| Ok((*round, open("stateproof", sealed)?)))
                .collect::<Result<_, String>>()?,
        })
    }

    /// Seals and stores `key`; a second install of the same key is algod's duplicate 400.
    pub async fn install(&self, key: PartKey) -> Result<ParticipationKey, KeyringError> {
        let worker = self.clone();
        let new = tokio::task::spawn_blocking(move || worker.prepare(&key))
            .await
            .map_err(worker_failed)?
            .map_err(KeyringError::Invalid)?;
        let key = self.store.write(move |c| partkeys::insert(c, &new)).await?;
        tracing::info!(id = %key.id, address = %key.address, "participation key installed");
        Ok(key)
    }

    /// Removes installed key `id` (canonical id text).
    pub async fn delete(&self, id: String) -> Result<(), KeyringError> {
        let key = self.store.write(move |c| partkeys::delete(c, &id)).await?;
        tracing::info!(id = %key.id, "participation key deleted");
        Ok(())
    }

    /// Appends the state-proof signing keys of `body` (msgpack array of `{"key", "rnd"}`)
    /// to installed key `id`, sealed like the key's own.
    pub async fn append_state_proof_keys(
        &self,
        id: String,
        body: bytes::Bytes,
    ) -> Result<(), KeyringError> {
        let seal = self.seal.clone();
        let purpose = sealing_purpose("stateproof", &id);
        let sealed = tokio::task::spawn_blocking(move || {
            let pairs = keys::decode_key_round_pairs(&body)
                .map_err(|e| format!("unable to parse keys from body: {e}"))?;
            if pairs.is_empty() {
                return Err("empty request, please attach keys to request body".to_string());
            }
            Ok(pairs
                .into_iter()
                .map(|(round, signer)| (round, seal.seal(&purpose, &signer)))
                .collect::<Vec<_>>())
        })
        .await
        .map_err(worker_failed)?
        .map_err(KeyringError::Invalid)?;
        let count = sealed.len();
        let key = self
            .store
            .write(move |c| partkeys::append_state_proof_keys(c, &id, &sealed))
            .await?;
        tracing::info!(id = %key.id, count, "state proof keys appended");
        Ok(())
    }

    /// Writes installed key `id` back out as an algod partkey file at `path` (for backups and
    /// moving keys between servers; not reachable over HTTP).
    pub async fn export(&self, id: &str, path: &Path) -> Result<(), KeyringError> {
        let id = id.to_string();
        let secrets = self.store.read(move |c| partkeys::secrets(c, &id)).await?;
        let keyring = self.clone();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let key = keyring.unseal(&secrets).map_err(KeyringError::Internal)?;
            partfile::write(&key, &path)
                .map_err(|e| KeyringError::Internal(format!("{}: {e}", path.display())))
        })
        .await
        .map_err(worker_failed)?
    }
}
