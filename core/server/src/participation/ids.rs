//! Account addresses and participation ids, byte for byte as algod makes and parses them.
//!
//! - Address: base32 (RFC 4648 alphabet, no padding) of `pubkey(32) || checksum(4)`, where the
//!   checksum is the last 4 bytes of SHA-512/256(pubkey). Parsing checks the checksum and that
//!   the text is canonical (re-encodes to itself), with algod's error messages.
//! - Participation id: base32 of `SHA-512/256("PK" || msgpack(identity))`, the identity being
//!   the canonical msgpack map `{addr, fv, kd, lv, vote-id, vrfsk}` with zero values left out.
//!
//! Decoding follows Go's `base32.StdEncoding.WithPadding(NoPadding)`: trailing bits are not
//! checked (hence algod's separate canonical check for addresses).

use std::sync::OnceLock;

use data_encoding::{Encoding, Specification};
use sha2::{Digest, Sha512_256};

use super::msgpack::Enc;

/// Domain-separation prefix of a participation identity (`protocol.ParticipationKeys`).
pub const PARTICIPATION_ID_PREFIX: &[u8] = b"PK";

fn base32() -> &'static Encoding {
    static ENCODING: OnceLock<Encoding> = OnceLock::new();
    ENCODING.get_or_init(|| {
        let mut spec = Specification::new();
        spec.symbols.push_str("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
        spec.check_trailing_bits = false;
        spec.encoding()
            .unwrap_or_else(|e| unreachable!("static base32 spec: {e}"))
    })
}

pub fn base32_encode(bytes: &[u8]) -> String {
    base32().encode(bytes)
}

/// Decodes like Go's no-padding base32; the error text mirrors Go's `CorruptInputError`.
pub fn base32_decode(text: &str) -> Result<Vec<u8>, String> {
    base32()
        .decode(text.as_bytes())
        .map_err(|e| format!("illegal base32 data at input byte {}", e.position))
}

pub fn sha512_256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha512_256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// The 58-character checksummed form of a 32-byte public key.
pub fn encode_address(pk: &[u8; 32]) -> String {
    let digest = sha512_256(&[pk]);
    let mut raw = [0u8; 36];
    raw[..32].copy_from_slice(pk);
    raw[32..].copy_from_slice(&digest[28..]);
    base32_encode(&raw)
}

/// Parses a checksummed address with algod's checks and messages
/// (`basics.UnmarshalChecksumAddress`).
pub fn parse_address(text: &str) -> Result<[u8; 32], String> {
    let decoded =
        base32_decode(text).map_err(|_| format!("failed to decode address {text} from base 32"))?;
    if decoded.len() < 32 {
        return Err(format!("decoded bad addr: {text}"));
    }
    let mut pk = [0u8; 32];
    pk.copy_from_slice(&decoded[..32]);
    let checksum = &decoded[decoded.len() - 4..];
    if checksum != &sha512_256(&[&pk])[28..] {
        return Err(format!(
            "address {text} is malformed, checksum verification failed"
        ));
    }
    if encode_address(&pk) != text {
        return Err(format!("address {text} is non-canonical"));
    }
    Ok(pk)
}

/// A participation id as text (52 characters).
pub fn encode_participation_id(id: &[u8; 32]) -> String {
    base32_encode(id)
}

/// Parses a participation id with algod's messages (`account.ParseParticipationID`).
pub fn parse_participation_id(text: &str) -> Result<[u8; 32], String> {
    let decoded = base32_decode(text)?;
    <[u8; 32]>::try_from(decoded.as_slice()).map_err(|_| {
        format!("attempted to decode a string which was not a participation id: {text:?}")
    })
}

/// What a participation id commits to (`account.ParticipationKeyIdentity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub parent: [u8; 32],
    /// VRF secret key: seed || public key.
    pub vrf_sk: [u8; 64],
    /// The voting root public key (`OneTimeSignatureVerifier`).
    pub vote_id: [u8; 32],
    pub first_valid: u64,
    pub last_valid: u64,
    pub key_dilution: u64,
}

impl Identity {
    /// Canonical msgpack: keys sorted, zero values left out, byte arrays as `bin8`.
    pub fn encode(&self) -> Vec<u8> {
        let present = [
            self.parent != [0; 32],
            self.first_valid != 0,
            self.key_dilution != 0,
            self.last_valid != 0,
            self.vote_id != [0; 32],
            self.vrf_sk != [0; 64],
        ];
        let mut e = Enc::new();
        e.map(present.iter().filter(|p| **p).count() as u32);
        if present[0] {
            e.str("addr").bin(&self.parent);
        }
        if present[1] {
            e.str("fv").uint(self.first_valid);
        }
        if present[2] {
            e.str("kd").uint(self.key_dilution);
        }
        if present[3] {
            e.str("lv").uint(self.last_valid);
        }
        if present[4] {
            e.str("vote-id").bin(&self.vote_id);
        }
        if present[5] {
            e.str("vrfsk").bin(&self.vrf_sk);
        }
        e.into_bytes()
    }

    /// `SHA-512/256("PK" || msgpack(identity))`.
    pub fn id(&self) -> [u8; 32] {
        sha512_256(&[PARTICIPATION_ID_PREFIX, &self.encode()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex32(s: &str) -> [u8; 32] {
        let v: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect();
        v.try_into().unwrap()
    }

    // Public key → address pairs published as Algorand test vectors
    // (mrtnetwork/blockchain_utils, test/address/algo/test_vector.dart).
    const VECTORS: &[(&str, &str)] = &[
        (
            "ac07e9862bf04fe680c879286f273413d35b87667cce4a76d355fa319a51d82e",
            "VQD6TBRL6BH6NAGIPEUG6JZUCPJVXB3GPTHEU5WTKX5DDGSR3AXNKBN5FQ",
        ),
        (
            "a647141e1a870958ab16e0dfab9356d18a541d98d3bd5ac2d7cfd72e1d0b52ef",
            "UZDRIHQ2Q4EVRKYW4DP2XE2W2GFFIHMY2O6VVQWXZ7LS4HILKLX45W3WGA",
        ),
        (
            "40effadd7e8cb7950aa69f15078e952eead7456c1b0b4a2ec5e6b76d35d167b7",
            "IDX7VXL6RS3ZKCVGT4KQPDUVF3VNORLMDMFUULWF423W2NORM63ZCZMIOQ",
        ),
    ];

    #[test]
    fn address_vectors() {
        for (pk, addr) in VECTORS {
            let pk = hex32(pk);
            assert_eq!(encode_address(&pk), *addr);
            assert_eq!(parse_address(addr).unwrap(), pk);
        }
        // The all-zero key is the well-known "zero address".
        assert_eq!(
            encode_address(&[0; 32]),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAY5HFKQ"
        );
    }

    #[test]
    fn address_errors_match_algod() {
        let good = VECTORS[0].1;
        // Flip one character of the public key part: checksum fails.
        let mut bad = good.to_string();
        bad.replace_range(0..1, "W");
        assert_eq!(
            parse_address(&bad).unwrap_err(),
            format!("address {bad} is malformed, checksum verification failed")
        );
        // The last character carries 2 unused bits: changing them keeps the bytes (so the
        // checksum still matches) but not the text.
        let last = good.chars().last().unwrap();
        let mut noncanon = good[..57].to_string();
        let pos = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".find(last).unwrap();
        noncanon.push(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
                .chars()
                .nth(pos ^ 1)
                .unwrap(),
        );
        assert_eq!(
            parse_address(&noncanon).unwrap_err(),
            format!("address {noncanon} is non-canonical")
        );
        assert_eq!(
            parse_address("abc").unwrap_err(),
            "failed to decode address abc from base 32"
        );
        assert_eq!(
            parse_address("AAAAAAAA").unwrap_err(),
            "decoded bad addr: AAAAAAAA"
        );
        assert!(parse_address(&good.to_lowercase()).is_err());
        assert!(parse_address("").is_err());
    }

    #[test]
    fn participation_id_parse() {
        let id = [9u8; 32];
        let text = encode_participation_id(&id);
        assert_eq!(text.len(), 52);
        assert_eq!(parse_participation_id(&text).unwrap(), id);
        assert_eq!(
            parse_participation_id("AAAA").unwrap_err(),
            "attempted to decode a string which was not a participation id: \"AAAA\""
        );
        assert!(
            parse_participation_id("not-base32!")
                .unwrap_err()
                .starts_with("illegal base32 data at input byte")
        );
    }

    #[test]
    fn identity_encoding_is_canonical() {
        let identity = Identity {
            parent: [1; 32],
            vrf_sk: [2; 64],
            vote_id: [3; 32],
            first_valid: 0,
            last_valid: 120,
            key_dilution: 11,
        };
        let enc = identity.encode();
        // fixmap of 5 (fv is zero and left out), then "addr" as fixstr and bin8 of 32
        assert_eq!(&enc[..7], &[0x85, 0xa4, b'a', b'd', b'd', b'r', 0xc4]);
        assert!(!enc.windows(3).any(|w| w == [0xa2, b'f', b'v']));
        // Independent cross-check: the same identities hashed by a separate implementation
        // (Python msgpack 1.x `packb` of a dict with sorted keys, `use_bin_type=True`, then
        // `hashlib.new("sha512_256", b"PK" + packed)`), see docs/participation.md.
        assert_eq!(
            encode_participation_id(&identity.id()),
            "T6XKAEEH4UGO4R4PIVU5IQ3ACPU3SHHTKWGI3JQEM227SSOBFCUQ"
        );
        let identity = Identity {
            first_valid: 1000,
            last_valid: 10_000,
            key_dilution: 100,
            ..identity
        };
        assert_eq!(
            encode_participation_id(&identity.id()),
            "DSWIECH4SYYCDRZKOLZGHN7WYJXY6LKNOOZOKOJFVAPVYIF2RCNA"
        );
    }
}
