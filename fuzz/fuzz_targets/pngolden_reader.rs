//! Fuzz the PNGOLDEN1 reader: any input must give Ok or Err, never a panic or a huge
//! allocation. A file that parses must write back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sky_kernels::GoldenFile;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GoldenFile::parse(data, "fuzz.bin") else {
        return;
    };
    assert!(file.to_bytes() == data, "a parsed file does not write back to its bytes");
});
