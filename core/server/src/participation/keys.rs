//! Participation key material and its msgpack shapes, as stored in algod's partkey files.
//!
//! [`PartKey`] is everything a partkey file carries. The secret parts (`vrf`, `voting`,
//! state-proof signers) are kept as the exact msgpack bytes algod wrote (or we generated in
//! algod's encoding), so a key can be written back to a file byte-compatible with its source;
//! they are decoded only to validate them and to read the public values the API reports.
//!
//! Shapes (go-algorand `crypto` and `merklesignature` packages):
//! - VRF secrets: `{"PK": bin32, "SK": bin64}`.
//! - Voting secrets (`OneTimeSignatureSecrets`): `{"First", "OneTimeSignatureVerifier", "Sub",
//!   "firstoff", "offkeys", "offpk2", "offpk2sig"}`, zero values left out; each subkey is
//!   `{"PK", "PKSig", "SK", "sig2"}` with all four always present.
//! - State-proof secrets: `{"fv", "iv", "tree": {"hsh", "lvls", "nl", "vc"}}`; the commitment
//!   (`state-proof-key`) is the single digest of the top tree level.
//! - State-proof signer (`FalconSigner`): `{"pk": bin(1793), "sk": bin(2305)}`; the append-keys
//!   body is an array of `{"key": FalconSigner, "rnd": u64}`.

use super::ids::Identity;
use super::msgpack::{self, Enc, Value, expect_map, fixed_bytes, uint_field};

/// Falcon-1024 (deterministic, Algorand `det1024`) public and private key sizes.
pub const FALCON_PK_LEN: usize = 1793;
pub const FALCON_SK_LEN: usize = 2305;
/// Size of a state-proof commitment (a Sumhash512 digest).
pub const COMMITMENT_LEN: usize = 64;

/// Everything a partkey file holds: the store's record of its rows (the file is SQLite), whose
/// material this module decodes ([`KeyMaterial`]).
pub use crate::store::partfile::PartFile as PartKey;

/// The public values of a key, read from its material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKeys {
    pub id: [u8; 32],
    pub selection: [u8; 32],
    pub vote: [u8; 32],
    pub state_proof: Option<[u8; COMMITMENT_LEN]>,
}

/// What a key's material says, once decoded.
pub trait KeyMaterial {
    /// Validates the material and derives the id and public keys; `Err` is a message for the
    /// client (which part of the key is malformed and how).
    fn public_keys(&self) -> Result<PublicKeys, String>;
}

impl KeyMaterial for PartKey {
    fn public_keys(&self) -> Result<PublicKeys, String> {
        let (selection, vrf_sk) = decode_vrf(&self.vrf)?;
        let vote = decode_voting(&self.voting)?;
        let state_proof = match &self.state_proof {
            Some(raw) => Some(decode_state_proof(raw)?),
            None => None,
        };
        for (round, signer) in &self.state_proof_keys {
            decode_falcon_signer_bytes(signer)
                .map_err(|e| format!("state proof key for round {round}: {e}"))?;
        }
        let id = Identity {
            parent: self.parent,
            vrf_sk,
            vote_id: vote,
            first_valid: self.first_valid,
            last_valid: self.last_valid,
            key_dilution: self.key_dilution,
        }
        .id();
        Ok(PublicKeys {
            id,
            selection,
            vote,
            state_proof,
        })
    }
}

fn decode_blob(raw: &[u8], what: &str) -> Result<Value, String> {
    if raw.is_empty() {
        return Err(format!("{what} is empty"));
    }
    let value = msgpack::decode_exact(raw).map_err(|e| format!("{what}: {e}"))?;
    expect_map(&value, what)?;
    Ok(value)
}

/// VRF secrets → (public key, secret key).
pub fn decode_vrf(raw: &[u8]) -> Result<([u8; 32], [u8; 64]), String> {
    let v = decode_blob(raw, "VRF secrets")?;
    let pk = fixed_bytes::<32>(&v, "PK").map_err(|e| format!("VRF secrets: {e}"))?;
    let sk = fixed_bytes::<64>(&v, "SK").map_err(|e| format!("VRF secrets: {e}"))?;
    Ok((pk, sk))
}

pub fn encode_vrf(pk: &[u8; 32], sk: &[u8; 64]) -> Vec<u8> {
    let mut e = Enc::new();
    e.map(2).str("PK").bin(pk).str("SK").bin(sk);
    e.into_bytes()
}

/// Voting secrets → the voting root public key, after checking the whole structure.
pub fn decode_voting(raw: &[u8]) -> Result<[u8; 32], String> {
    let what = "voting secrets";
    let v = decode_blob(raw, what)?;
    let err = |e: String| format!("{what}: {e}");
    let verifier = fixed_bytes::<32>(&v, "OneTimeSignatureVerifier").map_err(err)?;
    uint_field(&v, "First").map_err(err)?;
    uint_field(&v, "firstoff").map_err(err)?;
    fixed_bytes::<32>(&v, "offpk2").map_err(err)?;
    fixed_bytes::<64>(&v, "offpk2sig").map_err(err)?;
    for list in ["Sub", "offkeys"] {
        let Some(items) = v.get(list) else { continue };
        if *items == Value::Nil {
            continue;
        }
        let items = items
            .as_array()
            .ok_or_else(|| err(format!("field {list:?} must be an array")))?;
        for (i, sub) in items.iter().enumerate() {
            let at = |e: String| err(format!("{list}[{i}]: {e}"));
            expect_map(sub, "subkey").map_err(at)?;
            fixed_bytes::<32>(sub, "PK").map_err(at)?;
            fixed_bytes::<64>(sub, "SK").map_err(at)?;
            fixed_bytes::<64>(sub, "PKSig").map_err(at)?;
            fixed_bytes::<64>(sub, "sig2").map_err(at)?;
        }
    }
    Ok(verifier)
}

/// State-proof secrets → the commitment (root of the key tree; zeros for an empty tree).
pub fn decode_state_proof(raw: &[u8]) -> Result<[u8; COMMITMENT_LEN], String> {
    let what = "state proof secrets";
    let v = decode_blob(raw, what)?;
    let err = |e: String| format!("{what}: {e}");
    uint_field(&v, "fv").map_err(err)?;
    uint_field(&v, "iv").map_err(err)?;
    let mut commitment = [0u8; COMMITMENT_LEN];
    let Some(tree) = v.get("tree") else {
        return Ok(commitment);
    };
    expect_map(tree, "tree").map_err(err)?;
    let levels = match tree.get("lvls") {
        None | Some(Value::Nil) => return Ok(commitment),
        Some(l) => l
            .as_array()
            .ok_or_else(|| err("tree levels must be an array".into()))?,
    };
    for (i, level) in levels.iter().enumerate() {
        let digests = level
            .as_array()
            .ok_or_else(|| err(format!("tree level {i} must be an array")))?;
        for d in digests {
            let d = d
                .as_bytes()
                .ok_or_else(|| err(format!("tree level {i} holds a non-digest")))?;
            if d.len() > COMMITMENT_LEN {
                return Err(err(format!(
                    "tree level {i} holds a {}-byte digest (at most {COMMITMENT_LEN})",
                    d.len()
                )));
            }
        }
    }
    if let Some(top) = levels.last() {
        let top = top.as_array().unwrap_or_default();
        if top.len() != 1 {
            return Err(err(format!(
                "the top tree level must hold exactly one digest, found {}",
                top.len()
            )));
        }
        let root = top[0].as_bytes().unwrap_or_default();
        commitment[..root.len()].copy_from_slice(root);
    }
    Ok(commitment)
}

/// Checks one `FalconSigner` map.
pub fn check_falcon_signer(v: &Value) -> Result<(), String> {
    expect_map(v, "key")?;
    fixed_bytes::<FALCON_PK_LEN>(v, "pk")?;
    fixed_bytes::<FALCON_SK_LEN>(v, "sk")?;
    Ok(())
}

fn decode_falcon_signer_bytes(raw: &[u8]) -> Result<(), String> {
    let v = msgpack::decode_exact(raw).map_err(|e| e.to_string())?;
    check_falcon_signer(&v)
}

/// Canonical msgpack of a `FalconSigner` map read from a request (keys sorted, empty left out).
fn encode_falcon_signer(v: &Value) -> Vec<u8> {
    let pk = v.get("pk").and_then(Value::as_bytes).unwrap_or_default();
    let sk = v.get("sk").and_then(Value::as_bytes).unwrap_or_default();
    let mut e = Enc::new();
    e.map(u32::from(!pk.is_empty()) + u32::from(!sk.is_empty()));
    if !pk.is_empty() {
        e.str("pk").bin(pk);
    }
    if !sk.is_empty() {
        e.str("sk").bin(sk);
    }
    e.into_bytes()
}

/// The append-keys body: a msgpack array of `{"key": FalconSigner, "rnd": u64}`. Like algod,
/// only the first value is read. Returns (round, msgpack `FalconSigner`) pairs.
pub fn decode_key_round_pairs(body: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, String> {
    if body.is_empty() {
        return Err("EOF".into());
    }
    let (value, _) = msgpack::decode(body).map_err(|e| e.to_string())?;
    let items = match &value {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => {
            return Err(
                "msgpack decode error: expected an array of {\"key\", \"rnd\"} maps".into(),
            );
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = |e: String| format!("msgpack decode error: element {i}: {e}");
        expect_map(item, "element").map_err(at)?;
        let round = uint_field(item, "rnd").map_err(at)?;
        let signer = match item.get("key") {
            None | Some(Value::Nil) => {
                return Err(at("\"key\" is missing".into()));
            }
            Some(k) => k,
        };
        check_falcon_signer(signer).map_err(at)?;
        out.push((round, encode_falcon_signer(signer)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(pk: usize, sk: usize) -> Vec<u8> {
        let mut e = Enc::new();
        e.map(2)
            .str("pk")
            .bin(&vec![1; pk])
            .str("sk")
            .bin(&vec![2; sk]);
        e.into_bytes()
    }

    #[test]
    fn key_round_pairs() {
        let mut e = Enc::new();
        e.array(2);
        for rnd in [256u64, 512] {
            e.map(2)
                .str("key")
                .raw(&signer(FALCON_PK_LEN, FALCON_SK_LEN))
                .str("rnd")
                .uint(rnd);
        }
        let pairs = decode_key_round_pairs(&e.into_bytes()).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[1].0, 512);
        assert_eq!(pairs[0].1, signer(FALCON_PK_LEN, FALCON_SK_LEN));

        let mut e = Enc::new();
        e.array(1)
            .map(2)
            .str("key")
            .raw(&signer(10, FALCON_SK_LEN))
            .str("rnd")
            .uint(1);
        let err = decode_key_round_pairs(&e.into_bytes()).unwrap_err();
        assert!(err.contains("\"pk\" must be 1793 bytes"), "{err}");
        assert_eq!(decode_key_round_pairs(&[]).unwrap_err(), "EOF");
        assert!(decode_key_round_pairs(&[0x90]).unwrap().is_empty());
        assert!(decode_key_round_pairs(b"{\"json\": 1}").is_err());
    }

    #[test]
    fn state_proof_commitment_is_the_top_digest() {
        let mut e = Enc::new();
        e.map(3).str("fv").uint(1).str("iv").uint(256).str("tree");
        e.map(4)
            .str("hsh")
            .map(1)
            .str("t")
            .uint(1)
            .str("lvls")
            .array(2)
            .array(2)
            .bin(&[1; 64])
            .bin(&[2; 64])
            .array(1)
            .bin(&[9; 64])
            .str("nl")
            .uint(2)
            .str("vc");
        e.0.push(0xc3);
        assert_eq!(decode_state_proof(&e.into_bytes()).unwrap(), [9; 64]);
        assert!(decode_state_proof(&[0x80]).unwrap() == [0; 64]);
        assert!(decode_state_proof(&[0x01]).is_err());
    }

    #[test]
    fn vrf_and_voting_shapes() {
        let raw = encode_vrf(&[1; 32], &[2; 64]);
        assert_eq!(decode_vrf(&raw).unwrap(), ([1; 32], [2; 64]));
        assert!(decode_vrf(&[]).is_err());
        let mut e = Enc::new();
        e.map(1).str("PK").bin(&[1; 31]);
        assert!(decode_vrf(&e.into_bytes()).is_err());
        let mut e = Enc::new();
        e.map(1).str("Sub").array(1).map(1).str("PK").bin(&[1; 3]);
        let err = decode_voting(&e.into_bytes()).unwrap_err();
        assert!(err.contains("Sub[0]"), "{err}");
    }
}
