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
//! Verification is constant-time (`Mac::verify_slice`).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::key::Digest;
use crate::store::ActionRecord;

const MAGIC: &str = "skyctl-action-v1";

/// The largest record body read from a server (records are a few hundred bytes).
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

type HmacSha256 = Hmac<Sha256>;

fn mac(signing_key: &[u8], key: &Digest, json: &[u8]) -> Option<HmacSha256> {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(signing_key).ok()?;
    m.update(MAGIC.as_bytes());
    m.update(&[0]);
    m.update(&key.0);
    m.update(json);
    Some(m)
}

/// The bytes to PUT under `ac/<key>`.
pub fn encode(key: &Digest, rec: &ActionRecord, signing_key: Option<&[u8]>) -> Vec<u8> {
    let json = serde_json::to_vec(rec).unwrap_or_default();
    let sig = match signing_key.and_then(|k| mac(k, key, &json)) {
        Some(m) => hex(&m.finalize().into_bytes()),
        None => "-".to_string(),
    };
    let mut out = format!("{MAGIC} {} {sig}\n", key.hex()).into_bytes();
    out.extend_from_slice(&json);
    out
}

/// Parse a body fetched for `key`; with `signing_key`, only a record signed with it is
/// accepted. `Err` says what is wrong (for the warning line).
pub fn decode(
    key: &Digest,
    body: &[u8],
    signing_key: Option<&[u8]>,
) -> Result<ActionRecord, String> {
    let nl = body
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("not a skyctl action record")?;
    let header = std::str::from_utf8(&body[..nl]).map_err(|_| "not a skyctl action record")?;
    let json = &body[nl + 1..];
    let mut parts = header.split(' ');
    let (Some(magic), Some(k), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not a skyctl action record".into());
    };
    if magic != MAGIC {
        return Err("not a skyctl action record".into());
    }
    if Digest::from_hex(k) != Some(*key) {
        return Err("the record names another key".into());
    }
    if let Some(sk) = signing_key {
        let Some(given) = unhex(sig) else {
            return Err("the record is not signed".into());
        };
        let m = mac(sk, key, json).ok_or("bad signing key")?;
        m.verify_slice(&given)
            .map_err(|_| "the record's signature does not match the signing key")?;
    }
    serde_json::from_slice(json).map_err(|e| format!("bad action record: {e}"))
}

fn hex(b: &[u8]) -> String {
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
        let plain = encode(&k, &rec(), None);
        assert!(plain.starts_with(format!("skyctl-action-v1 {} -\n", k.hex()).as_bytes()));
        assert_eq!(decode(&k, &plain, None).unwrap().duration_ms, 3);
        assert_eq!(
            decode(&k, &plain, Some(b"secret")).unwrap_err(),
            "the record is not signed"
        );
        let signed = encode(&k, &rec(), Some(b"secret"));
        assert_eq!(decode(&k, &signed, Some(b"secret")).unwrap().node, "n");
        // Readers without a key still use signed records.
        assert!(decode(&k, &signed, None).is_ok());
        assert_eq!(
            decode(&k, &signed, Some(b"other")).unwrap_err(),
            "the record's signature does not match the signing key"
        );
        // A changed byte of the JSON breaks the signature.
        let mut tampered = signed.clone();
        let n = tampered.len();
        tampered[n - 2] = b'4';
        assert!(decode(&k, &tampered, Some(b"secret")).is_err());
        // Moved to another key's name: refused, signed or not.
        assert_eq!(
            decode(&Digest::of(b"other"), &plain, None).unwrap_err(),
            "the record names another key"
        );
        assert_eq!(
            decode(&k, b"garbage", None).unwrap_err(),
            "not a skyctl action record"
        );
    }

    #[test]
    fn pinned_signature() {
        // The value Python's `hmac.new(b"key", msg, hashlib.sha256)` (or `openssl dgst -sha256
        // -hmac key`) gives for msg = "skyctl-action-v1\0" + 32 bytes of 7 + the JSON.
        let m = mac(b"key", &Digest([7; 32]), br#"{"a":1}"#).unwrap();
        assert_eq!(
            hex(&m.finalize().into_bytes()),
            "e453797bcc7ce47deb31b177cf022b09bd67aeede800041a6986652c81999159"
        );
    }
}
