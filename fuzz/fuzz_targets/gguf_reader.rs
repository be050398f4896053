//! Fuzz the GGUF reader: any input must give Ok or Err, never a panic, hang or huge
//! allocation. Inputs that parse must decode, and writing them back must be idempotent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sky_gguf::{GgufFile, GgufWriter};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::parse(data) else {
        return;
    };
    for t in &file.tensors {
        assert_eq!(t.offset % file.alignment, 0);
        let _ = t.to_f32();
        let _ = t.shape();
    }
    for (k, _) in &file.metadata {
        assert!(file.get(k).is_some());
    }
    // Writing a parsed file back, then parsing and writing again, gives the same bytes.
    let Ok(w) = GgufWriter::from_gguf(&file) else {
        return;
    };
    let Ok(once) = w.to_bytes() else {
        return;
    };
    let again = GgufFile::parse(&once).expect("our own output parses");
    let twice = GgufWriter::from_gguf(&again)
        .expect("our own output copies")
        .to_bytes()
        .expect("our own output writes");
    assert!(once == twice, "write-back is not idempotent");
});
