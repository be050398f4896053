//! Whether rustc's sysroot has the wasm32-unknown-unknown standard library, for skyctl's build
//! script (and `skyctl/tests/wasm_target_watch.rs`, which includes this file as its build
//! script does).
//!
//! The target can appear after skyctl was built: the repository's `web-wasm` node and
//! `.ci/run` add it with rustup, on a fresh machine after the README's first command has
//! built skyctl. No source changes then, so without a watched file cargo would keep the
//! skyctl built without modules, and "build skyctl again" would not help.

use std::path::{Path, PathBuf};

/// The file whose change says that targets were added or removed: rustup (and the standalone
/// installers) rewrite `lib/rustlib/components` on every `target add` and `remove`; a
/// toolchain without that list is watched as the whole `lib/rustlib` (cargo scans a
/// directory). None where neither exists: cargo runs a build script on every build while a
/// path it watches is missing, which would rebuild skyctl each time.
pub fn watched(sysroot: &Path) -> Option<PathBuf> {
    let rustlib = sysroot.join("lib/rustlib");
    let components = rustlib.join("components");
    [components, rustlib].into_iter().find(|p| p.exists())
}

/// Tells cargo to run the build script again when the sysroot's targets change, and answers
/// whether the wasm32 target is installed.
#[allow(clippy::print_stdout)] // cargo reads a build script's instructions from its stdout
pub fn probe(sysroot: &Path) -> bool {
    if let Some(w) = watched(sysroot) {
        println!("cargo::rerun-if-changed={}", w.display());
    }
    sysroot
        .join("lib/rustlib/wasm32-unknown-unknown/lib")
        .is_dir()
}
