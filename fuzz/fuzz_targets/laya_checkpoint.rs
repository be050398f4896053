//! Fuzz the Laya checkpoint loaders: the safetensors header, `encoder/config.json`,
//! `rl_agent_config.json` and `tokenizer/tokenizer.json`, as the converter and the engine read
//! them. Any input must give Ok or Err: never a panic, an abort or an allocation sized by a
//! field (run with `-rss_limit_mb`). The input is the four files separated by `\n--8<--\n`.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One checkpoint folder per process, rewritten for every input.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("laya-fuzz-{}", std::process::id()));
        for sub in ["encoder", "tokenizer"] {
            std::fs::create_dir_all(d.join(sub)).expect("fuzz temp dir");
        }
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split_inclusive(|&b| b == b'\n');
    let mut files: [Vec<u8>; 4] = Default::default();
    let mut i = 0;
    for line in parts.by_ref() {
        if line == b"--8<--\n" {
            i += 1;
            if i == files.len() {
                break;
            }
            continue;
        }
        files[i].extend_from_slice(line);
    }
    let d = dir();
    let paths = [
        "model.safetensors",
        "encoder/config.json",
        "rl_agent_config.json",
        "tokenizer/tokenizer.json",
    ];
    for (p, bytes) in paths.iter().zip(&files) {
        std::fs::write(d.join(p), bytes).expect("fuzz temp file");
    }
    let _ = sky_laya::LayaCheckpoint::open(d);
    let _ = sky_infer::load::open(d);
    if let Ok(text) = std::str::from_utf8(&files[3]) {
        let _ = sky_tokenizer::Tokenizer::from_json(text);
    }
});
