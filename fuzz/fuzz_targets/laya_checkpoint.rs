//! Fuzz the Laya checkpoint loaders: the safetensors header, `encoder/config.json`,
//! `rl_agent_config.json` and `tokenizer/tokenizer.json`, as the converter and the engine read
//! them (`LayaCheckpoint::from_files` and `engine_from_laya_files`, the code `open` runs once
//! it has read the files). Any input must give Ok or Err: never a panic, an abort or an
//! allocation sized by a field (run with `-rss_limit_mb`). And whatever config the converter
//! accepts, the engine's GGUF loader accepts once the converter has written it (one check).
//!
//! The input is the files separated by `\n--8<--\n`: `model.safetensors`,
//! `encoder/config.json`, `rl_agent_config.json`, `tokenizer/tokenizer.json`, then optionally
//! `tokenizer/tokenizer_config.json` (else s1-pico's), the root `config.json` and
//! `tokenizer/config.json`. Seeds: `fuzz/make_laya_seed.py`.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sky_laya::CheckpointFiles;

/// Between two files.
const CUT: &[u8] = b"\n--8<--\n";
/// s1-pico's `tokenizer/tokenizer_config.json`, for inputs without one.
const TOKENIZER_CONFIG: &[u8] =
    include_bytes!("../../models/s1-pico/tokenizer/tokenizer_config.json");

/// The input cut at its separators, at most `N` parts (the rest is dropped).
fn parts<const N: usize>(data: &[u8]) -> [Option<&[u8]>; N] {
    let mut out = [None; N];
    let (mut i, mut start) = (0, 0);
    for at in memchr::memmem::find_iter(data, CUT) {
        out[i] = Some(&data[start..at]);
        i += 1;
        start = at + CUT.len();
        if i == N {
            return out;
        }
    }
    out[i] = Some(&data[start..]);
    out
}

fuzz_target!(|data: &[u8]| {
    let [weights, encoder, agent, tokenizer, tok_config, root, tok_model] = parts::<7>(data);
    let files = CheckpointFiles {
        weights: weights.unwrap_or_default(),
        encoder_config: encoder.unwrap_or_default(),
        agent_config: agent.unwrap_or_default(),
        tokenizer_json: tokenizer.unwrap_or_default(),
        tokenizer_config: tok_config.unwrap_or(TOKENIZER_CONFIG),
        root_config: root,
        tokenizer_model_config: tok_model,
    };
    let dir = Path::new("ckpt");
    if let Ok(ckpt) = sky_laya::LayaCheckpoint::from_files(dir, &files) {
        // One config check (issue 53): whatever the converter accepts, the file it writes
        // loads. The model keys it would write, read back by the engine's GGUF loader.
        let mut w = sky_gguf::GgufWriter::new();
        w.add_kv("general.architecture", sky_laya::config::ARCH);
        sky_laya::config::write_model_keys(&mut w, &ckpt.encoder, &ckpt.agent, 1, false)
            .expect("the converter writes the keys of a checkpoint it opened");
        let bytes = w.to_bytes().expect("no key of an opened checkpoint is refused");
        let f = sky_gguf::GgufFile::parse(&bytes).expect("the writer's bytes parse");
        if let Err(e) = sky_infer::load::config_from_gguf(&f) {
            panic!("convert accepts {:?} / {:?}, load refuses: {e}", ckpt.encoder, ckpt.agent);
        }
    }
    let _ = sky_infer::load::engine_from_laya_files(dir, &files);
    if let Ok(text) = std::str::from_utf8(files.tokenizer_json) {
        let _ = sky_tokenizer::Tokenizer::from_json(text);
    }
});
