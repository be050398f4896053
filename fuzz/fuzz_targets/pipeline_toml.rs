//! Fuzz the `pipeline.toml` front end: parsing with located errors, expansion into node specs
//! and the graph checks. Any input must give Ok or a located error, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = skyctl::pipeline::Manifest::parse(text, Path::new("pipeline.toml")) else {
        return;
    };
    let planners = skyctl::kinds::planners();
    let Ok(spec) = skyctl::pipeline::expand::expand(&m, &|_| Ok(None), &planners) else {
        return;
    };
    let _ = sky_dag::Graph::build(spec, &m.source, Path::new("/nonexistent-fuzz-root"));
});
