//! Participation key generation, as `goal account addpartkey` / algod's generate endpoint do it.
//!
//! - Selection key: libsodium's `crypto_vrf_ietfdraft03_keypair_from_seed`, which is Ed25519
//!   key generation (SHA-512 of a random seed, clamp, multiply the base point); the secret key
//!   is `seed || pk`. No VRF proving is needed to administer keys, so only the key pair is made.
//! - Voting keys (two-level Ed25519 one-time signatures): a master key pair whose public key is
//!   the voting root (`vote-participation-key`); for every batch `first/kd ..= last/kd` a fresh
//!   subkey signed by the master over `"OT1" || msgpack({"batch": n, "pk": subkey})`. The
//!   master secret is discarded. Ed25519 signing is deterministic, so these bytes are what
//!   libsodium would produce for the same keys.
//! - State-proof keys (Falcon-1024) are not generated: see docs/participation.md.

use ed25519_dalek::{Signer, SigningKey};

use super::keys::{PartKey, encode_vrf};
use super::msgpack::Enc;
use crate::auth::random_bytes;

/// Longest validity range algod accepts (`MaxKeyregValidPeriod` = 256 * 2^16 - 1 rounds).
pub const MAX_VALID_PERIOD: u64 = 256 * (1 << 16) - 1;

/// Most voting batches one key may hold. Each batch costs 224 bytes of secrets and an Ed25519
/// key generation plus a signature; the default dilution never needs more than 4,097.
pub const MAX_BATCHES: u64 = 1 << 18;

/// algod's default key dilution: `1 + floor(sqrt(last - first))`, computed in `f64` exactly
/// as Go's `math.Sqrt` does (the two differ from an integer square root near large squares).
pub fn default_dilution(first: u64, last: u64) -> u64 {
    1 + (last.saturating_sub(first) as f64).sqrt() as u64
}

/// What a generate request asks for, checked before any work starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub parent: [u8; 32],
    pub first: u64,
    pub last: u64,
    pub dilution: u64,
}

impl Plan {
    /// Validates a request (dilution 0 = the default). `Err` is a message for the client.
    pub fn new(parent: [u8; 32], first: u64, last: u64, dilution: u64) -> Result<Plan, String> {
        if parent == [0; 32] {
            return Err("cannot generate a participation key for the zero address".into());
        }
        if last > i64::MAX as u64 {
            return Err(format!(
                "the last round {last} is above the largest supported round {}",
                i64::MAX
            ));
        }
        if last < first {
            return Err(format!(
                "the first round {first} is after the last round {last}"
            ));
        }
        if last - first > MAX_VALID_PERIOD {
            return Err(format!(
                "the validity range {first}..{last} is longer than the maximum of {MAX_VALID_PERIOD} rounds"
            ));
        }
        let dilution = if dilution == 0 {
            default_dilution(first, last)
        } else {
            dilution
        };
        let plan = Plan {
            parent,
            first,
            last,
            dilution,
        };
        if plan.batches() > MAX_BATCHES {
            return Err(format!(
                "dilution {dilution} needs {} voting key batches for rounds {first}..{last}; at most {MAX_BATCHES} are allowed (use a larger dilution or leave it out for the default)",
                plan.batches()
            ));
        }
        Ok(plan)
    }

    pub fn first_batch(&self) -> u64 {
        self.first / self.dilution
    }

    pub fn batches(&self) -> u64 {
        self.last / self.dilution - self.first_batch() + 1
    }
}

fn random_key() -> SigningKey {
    let seed: [u8; 32] = random_bytes(32)
        .try_into()
        .unwrap_or_else(|_| unreachable!("32 bytes"));
    SigningKey::from_bytes(&seed)
}

/// The message a batch subkey is signed over: `"OT1" || msgpack({"batch", "pk"})`.
pub fn batch_id_message(batch: u64, pk: &[u8; 32]) -> Vec<u8> {
    let mut e = Enc(b"OT1".to_vec());
    e.map(2).str("batch").uint(batch).str("pk").bin(pk);
    e.into_bytes()
}

/// Generates the key material of `plan` (CPU-bound; run it off the async runtime).
pub fn generate(plan: &Plan) -> PartKey {
    let vrf = random_key();
    let vrf_pk = vrf.verifying_key().to_bytes();
    let vrf_sk = vrf.to_keypair_bytes();

    let master = random_key();
    let verifier = master.verifying_key().to_bytes();
    let first_batch = plan.first_batch();
    let batches = plan.batches();

    // OneTimeSignatureSecrets, keys in canonical order: "First" (left out when 0),
    // "OneTimeSignatureVerifier", "Sub"; the offset fields are empty in a new key.
    let mut e = Enc::new();
    e.map(if first_batch == 0 { 2 } else { 3 });
    if first_batch != 0 {
        e.str("First").uint(first_batch);
    }
    e.str("OneTimeSignatureVerifier").bin(&verifier);
    e.str("Sub").array(batches as u32);
    for i in 0..batches {
        let sub = random_key();
        let pk = sub.verifying_key().to_bytes();
        let sig = master
            .sign(&batch_id_message(first_batch + i, &pk))
            .to_bytes();
        e.map(4)
            .str("PK")
            .bin(&pk)
            .str("PKSig")
            .bin(&[0u8; 64])
            .str("SK")
            .bin(&sub.to_keypair_bytes())
            .str("sig2")
            .bin(&sig);
    }
    PartKey {
        parent: plan.parent,
        first_valid: plan.first,
        last_valid: plan.last,
        key_dilution: plan.dilution,
        vrf: encode_vrf(&vrf_pk, &vrf_sk),
        voting: e.into_bytes(),
        state_proof: None,
        state_proof_keys: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participation::keys::KeyMaterial;
    use crate::participation::msgpack;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};

    #[test]
    fn dilution_default() {
        assert_eq!(default_dilution(0, 120), 11);
        assert_eq!(default_dilution(0, 0), 1);
        assert_eq!(default_dilution(1000, 1099), 10);
        assert_eq!(default_dilution(1000, 1100), 11);
        assert_eq!(default_dilution(0, 3_000_000), 1733);
        assert_eq!(default_dilution(0, MAX_VALID_PERIOD), 4096);
    }

    #[test]
    fn plan_checks() {
        let p = Plan::new([1; 32], 0, 120, 0).unwrap();
        assert_eq!((p.dilution, p.first_batch(), p.batches()), (11, 0, 11));
        let p = Plan::new([1; 32], 1000, 2000, 100).unwrap();
        assert_eq!((p.first_batch(), p.batches()), (10, 11));
        assert!(Plan::new([1; 32], 10, 9, 0).is_err());
        assert!(Plan::new([1; 32], 0, MAX_VALID_PERIOD + 1, 0).is_err());
        assert!(Plan::new([1; 32], 0, MAX_VALID_PERIOD, 1).is_err());
        assert!(Plan::new([0; 32], 0, 10, 0).is_err());
        assert!(Plan::new([1; 32], u64::MAX - 5, u64::MAX, 0).is_err());
        assert!(Plan::new([1; 32], i64::MAX as u64 - 5, i64::MAX as u64, 0).is_ok());
    }

    #[test]
    fn generated_keys_are_consistent() {
        let plan = Plan::new([5; 32], 1000, 1100, 0).unwrap();
        let key = generate(&plan);
        let public = key.public_keys().unwrap();

        // The selection key pair is an Ed25519 key pair from the seed (libsodium's VRF keygen).
        let (pk, sk) = super::super::keys::decode_vrf(&key.vrf).unwrap();
        assert_eq!(pk, public.selection);
        let seed: [u8; 32] = sk[..32].try_into().unwrap();
        assert_eq!(SigningKey::from_bytes(&seed).verifying_key().to_bytes(), pk);
        assert_eq!(&sk[32..], &pk);

        // Every batch subkey is signed by the voting root over its batch id.
        let voting = msgpack::decode_exact(&key.voting).unwrap();
        assert_eq!(msgpack::uint_field(&voting, "First").unwrap(), 1000 / 11);
        let root = VerifyingKey::from_bytes(&public.vote).unwrap();
        let subs = voting.get("Sub").unwrap().as_array().unwrap();
        assert_eq!(subs.len() as u64, plan.batches());
        for (i, sub) in subs.iter().enumerate() {
            let pk = msgpack::fixed_bytes::<32>(sub, "PK").unwrap();
            let sig = msgpack::fixed_bytes::<64>(sub, "sig2").unwrap();
            assert_eq!(msgpack::fixed_bytes::<64>(sub, "PKSig").unwrap(), [0; 64]);
            let msg = batch_id_message(plan.first_batch() + i as u64, &pk);
            root.verify(&msg, &Signature::from_bytes(&sig)).unwrap();
        }
        assert_eq!(
            voting.keys(),
            vec!["First", "OneTimeSignatureVerifier", "Sub"]
        );

        // Two generations never share keys.
        assert_ne!(generate(&plan).public_keys().unwrap().id, public.id);
    }

    #[test]
    fn batch_message_layout() {
        let m = batch_id_message(0, &[0xab; 32]);
        // "OT1", fixmap 2, "batch" 0, "pk" bin8(32)
        assert_eq!(&m[..3], b"OT1");
        assert_eq!(m[3], 0x82);
        assert_eq!(&m[4..10], b"\xa5batch");
        assert_eq!(m[10], 0x00);
        assert_eq!(&m[11..16], b"\xa2pk\xc4\x20");
        assert_eq!(m.len(), 16 + 32);
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use crate::participation::keys::KeyMaterial;

    /// `cargo test -p woodlark --release --lib keygen_3m -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark"]
    fn keygen_3m() {
        let plan = Plan::new([1; 32], 1_000_000, 4_000_000, 0).unwrap();
        let started = std::time::Instant::now();
        let key = generate(&plan);
        let elapsed = started.elapsed();
        let id = key.public_keys().unwrap().id;
        println!(
            "3,000,000 rounds, dilution {}, {} batches: {:.3} s ({} bytes of voting secrets, id {})",
            plan.dilution,
            plan.batches(),
            elapsed.as_secs_f64(),
            key.voting.len(),
            super::super::ids::encode_participation_id(&id)
        );
    }
}
