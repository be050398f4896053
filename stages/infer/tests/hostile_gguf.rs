//! GGUF metadata counts are checked against the engine's limits before anything is sized: a
//! hostile count is an error naming the key, at once, never an allocation of gigabytes.

use sky_infer::InferError;

/// s1-pico as F16 GGUF bytes.
fn pico() -> Vec<u8> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ckpt = sky_laya::LayaCheckpoint::open(root.join("models/s1-pico")).expect("checkpoint");
    let (w, _) = sky_laya::build_writer(&ckpt, &Default::default()).expect("converts");
    w.to_bytes().expect("serializes")
}

/// The bytes with the u32 value of metadata `key` replaced (key: u64 length, the bytes, a u32
/// type, then the value).
fn with_u32(bytes: &[u8], key: &str, value: u32) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    let at = out
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .unwrap_or_else(|| panic!("{key} not in the file"));
    let ty = at + needle.len();
    assert_eq!(
        u32::from_le_bytes(out[ty..ty + 4].try_into().unwrap()),
        4,
        "{key}: u32"
    );
    out[ty + 4..ty + 8].copy_from_slice(&value.to_le_bytes());
    out
}

#[test]
fn counts_above_the_limits_are_refused_by_name() {
    let bytes = pico();
    sky_infer::load::engine_from_gguf(&bytes, "pico".into()).expect("the unchanged file loads");
    for (key, limit) in [
        ("modern-bert.block_count", 2048usize),
        ("modern-bert.embedding_length", 65_536),
        ("modern-bert.attention.head_count", 1024),
        ("modern-bert.decision.block_count", 1024),
    ] {
        let hostile = with_u32(&bytes, key, u32::MAX);
        let t = std::time::Instant::now();
        let err = sky_infer::load::engine_from_gguf(&hostile, "hostile".into())
            .expect_err("a hostile count must be refused");
        match &err {
            InferError::BadValue { key: k, message } => {
                assert_eq!(k, key);
                assert_eq!(
                    message,
                    &format!("4294967295 is above the limit of {limit}")
                );
            }
            other => panic!("{key}: {other:?}"),
        }
        // No allocation was sized by the count (a 4 GiB one took 40 s before).
        assert!(t.elapsed().as_secs() < 5, "{key}: {:?}", t.elapsed());
        // At the limit + 1 it is refused too; at the limit itself the next check decides.
        let over = with_u32(&bytes, key, limit as u32 + 1);
        assert!(matches!(
            sky_infer::load::engine_from_gguf(&over, "over".into()),
            Err(InferError::BadValue { .. })
        ));
    }
}
