//! The action record as the remote cache holds it under `ac/<key>`, and its signature.
//!
//! # Format
//!
//! ```text
//! skyctl-action-v1 <key hex> <mac hex, or "-">\n
//! <ActionRecord JSON>
//! ```
//!
//! The key is repeated inside so a record copied to another key's name is refused. With a
//! signing key, `mac` is HMAC-SHA256 over `skyctl-action-v1\0`, the 32 key bytes and the JSON
//! bytes exactly as sent (no re-serialization, so no canonical form is needed). HMAC-SHA256 and
//! not blake3's keyed mode: it is what other caches (Turborepo) use for the same purpose, and
//! anyone can check or produce a signature with standard tools (`openssl dgst -sha256 -hmac`).
//! The MAC itself is a [`Signer`] (sky-remote's is HMAC-SHA256; verification is constant-time):
//! this file only frames the message, so the engine links no crypto crate.

use super::transport::Signer;
use crate::key::Digest;
use crate::store::ActionRecord;

const MAGIC: &str = "skyctl-action-v1";

/// The largest record body read from a server (records are a few hundred bytes).
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

/// What is signed: `skyctl-action-v1\0`, the 32 key bytes, the JSON bytes.
pub fn signed_message(key: &Digest, json: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(MAGIC.len() + 1 + 32 + json.len());
    m.extend_from_slice(MAGIC.as_bytes());
    m.push(0);
    m.extend_from_slice(&key.0);
    m.extend_from_slice(json);
    m
}

/// Why a body fetched from `ac/<key>` is not used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not this format at all.
    #[error("not a skyctl action record")]
    NotARecord,
    /// A record of another key copied to this key's name.
    #[error("the record names another key")]
    OtherKey,
    /// A signing key is set and the record carries no signature.
    #[error("the record is not signed")]
    Unsigned,
    /// Signed, but not with this signing key (or changed since).
    #[error("the record's signature does not match the signing key")]
    BadSignature,
    /// The JSON part does not parse as an action record.
    #[error("bad action record: {0}")]
    Json(serde_json::Error),
}

impl RecordError {
    /// A signature problem (these come in batches: another team's key, an unsigned cache).
    pub fn is_signature(&self) -> bool {
        matches!(self, RecordError::Unsigned | RecordError::BadSignature)
    }
}

/// The bytes to PUT under `ac/<key>`.
pub fn encode(key: &Digest, rec: &ActionRecord, signer: Option<&dyn Signer>) -> Vec<u8> {
    let json = serde_json::to_vec(rec).unwrap_or_default();
    let sig = match signer {
        Some(s) => hex(&s.sign(&signed_message(key, &json))),
        None => "-".to_string(),
    };
    let mut out = format!("{MAGIC} {} {sig}\n", key.hex()).into_bytes();
    out.extend_from_slice(&json);
    out
}

/// Parse a body fetched for `key`; with `signer`, only a record it signed is accepted. `Err`
/// says what is wrong (for the warning line).
pub fn decode(
    key: &Digest,
    body: &[u8],
    signer: Option<&dyn Signer>,
) -> Result<ActionRecord, RecordError> {
    let nl = body
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(RecordError::NotARecord)?;
    let header = std::str::from_utf8(&body[..nl]).map_err(|_| RecordError::NotARecord)?;
    let json = &body[nl + 1..];
    let mut parts = header.split(' ');
    let (Some(magic), Some(k), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RecordError::NotARecord);
    };
    if magic != MAGIC {
        return Err(RecordError::NotARecord);
    }
    if Digest::from_hex(k) != Some(*key) {
        return Err(RecordError::OtherKey);
    }
    if let Some(signer) = signer {
        let Some(given) = unhex(sig) else {
            return Err(RecordError::Unsigned);
        };
        if !signer.verify(&signed_message(key, json), &given) {
            return Err(RecordError::BadSignature);
        }
    }
    serde_json::from_slice(json).map_err(RecordError::Json)
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy signer: the tag is blake3 keyed by a 32-byte key (only for these tests).
    struct Toy([u8; 32]);

    impl Signer for Toy {
        fn sign(&self, message: &[u8]) -> Vec<u8> {
            blake3::keyed_hash(&self.0, message).as_bytes().to_vec()
        }
        fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
            self.sign(message) == tag
        }
    }

    fn rec() -> ActionRecord {
        ActionRecord {
            node: "n".into(),
            kind: "command".into(),
            outputs: Vec::new(),
            duration_ms: 3,
            log: None,
            volatile: false,
        }
    }

    #[test]
    fn round_trip_signed_and_unsigned() {
        let k = Digest::of(b"k");
        let (secret, other) = (Toy([1; 32]), Toy([2; 32]));
        let plain = encode(&k, &rec(), None);
        assert!(plain.starts_with(format!("skyctl-action-v1 {} -\n", k.hex()).as_bytes()));
        assert_eq!(decode(&k, &plain, None).unwrap().duration_ms, 3);
        let e = decode(&k, &plain, Some(&secret)).unwrap_err();
        assert!(
            matches!(e, RecordError::Unsigned) && e.is_signature(),
            "{e}"
        );
        assert_eq!(e.to_string(), "the record is not signed");
        let signed = encode(&k, &rec(), Some(&secret));
        assert_eq!(decode(&k, &signed, Some(&secret)).unwrap().node, "n");
        // Readers without a key still use signed records.
        assert!(decode(&k, &signed, None).is_ok());
        let e = decode(&k, &signed, Some(&other)).unwrap_err();
        assert!(
            matches!(e, RecordError::BadSignature) && e.is_signature(),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "the record's signature does not match the signing key"
        );
        // A changed byte of the JSON breaks the signature.
        let mut tampered = signed.clone();
        let n = tampered.len();
        tampered[n - 2] = b'4';
        assert!(decode(&k, &tampered, Some(&secret)).is_err());
        // Moved to another key's name: refused, signed or not.
        let e = decode(&Digest::of(b"other"), &plain, None).unwrap_err();
        assert!(
            matches!(e, RecordError::OtherKey) && !e.is_signature(),
            "{e}"
        );
        let e = decode(&k, b"garbage", None).unwrap_err();
        assert!(matches!(e, RecordError::NotARecord), "{e}");
        assert_eq!(e.to_string(), "not a skyctl action record");
        let mut bad_json = plain.clone();
        bad_json.truncate(plain.len() - 1);
        let e = decode(&k, &bad_json, None).unwrap_err();
        assert!(matches!(e, RecordError::Json(_)), "{e}");
        assert!(e.to_string().starts_with("bad action record: "), "{e}");
    }

    #[test]
    fn the_signed_message_is_pinned() {
        let m = signed_message(&Digest([7; 32]), br#"{"a":1}"#);
        let mut want = b"skyctl-action-v1\0".to_vec();
        want.extend_from_slice(&[7; 32]);
        want.extend_from_slice(br#"{"a":1}"#);
        assert_eq!(m, want);
    }
}
