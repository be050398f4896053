//! Embeds the browser engine (stages/web built for wasm32 with SIMD128 and without) into
//! skyctl, so that a `[site]` needs nothing but the binary. The modules come from
//! `stages/web/build.sh`, the same script (and the same target folder, `build/web/target`) the
//! repository's `web-wasm` node runs, so both give the same bytes and the second build is a
//! no-op.
//!
//! No module is embedded, and `[site]` then says why, when the wasm32-unknown-unknown target
//! is not installed, when the sources are not beside this crate (a packaged skyctl), or when
//! `SKYCTL_NO_EMBED_WASM=1`.

use std::path::PathBuf;
use std::process::Command;

#[path = "build_support/wasm_target.rs"]
mod wasm_target;

// The workspace crates in sky-web's wasm32 tree (skyctl/tests/layout.rs checks the list).
const ENGINE_CRATES: [&str; 7] = ["web", "infer", "tokenizer", "quant", "env", "gguf", "laya"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(skyctl_embedded_wasm)");
    println!("cargo::rerun-if-env-changed=SKYCTL_NO_EMBED_WASM");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest_dir.join("..");
    let script = root.join("stages/web/build.sh");
    if std::env::var_os("SKYCTL_NO_EMBED_WASM").is_some_and(|v| v == "1") {
        return missing("env");
    }
    if !script.is_file() {
        return missing("sources");
    }
    for rel in [
        "Cargo.toml",
        "Cargo.lock",
        "stages/web/build.sh",
        "stages/laya/assets",
    ] {
        println!("cargo::rerun-if-changed={}", root.join(rel).display());
    }
    for c in ENGINE_CRATES {
        for rel in ["Cargo.toml", "src"] {
            let p = root.join("stages").join(c).join(rel);
            println!("cargo::rerun-if-changed={}", p.display());
        }
    }
    if !rustc_sysroot().is_some_and(|s| wasm_target::probe(&s)) {
        return missing("target");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("wasm");
    let target = root.join("build/web/target");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg(&out).env("CARGO_TARGET_DIR", &target);
    // What cargo sets for a build script must not reach the nested build: another rustc or
    // wrapper, the host's flags or profile would change the bytes (or the fingerprints, so the
    // web-wasm node would rebuild). The jobserver (CARGO_MAKEFLAGS) is kept: it only shares
    // this build's job slots.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_PROFILE_")
            || k.starts_with("CARGO_BUILD_")
            || (k.starts_with("CARGO_TARGET_") && k != "CARGO_TARGET_DIR")
        {
            cmd.env_remove(&*k);
        }
    }
    for k in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "RUSTDOC",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_INCREMENTAL",
    ] {
        cmd.env_remove(k);
    }
    let status = cmd.status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "stages/web/build.sh failed ({s}) while embedding the browser engine into skyctl; \
             set SKYCTL_NO_EMBED_WASM=1 to build skyctl without it"
        ),
        Err(e) => panic!("could not run bash stages/web/build.sh: {e}"),
    }
    for v in ["simd", "scalar"] {
        let f = out.join(format!("sky-web.{v}.wasm"));
        if !f.is_file() {
            panic!("stages/web/build.sh did not write {}", f.display());
        }
    }
    println!("cargo::rustc-cfg=skyctl_embedded_wasm");
    println!("cargo::rustc-env=SKYCTL_WASM_DIR={}", out.display());
}

/// Build without modules; `kinds/site.rs` turns the reason's code into what `[site]` says.
fn missing(code: &str) {
    println!("cargo::rustc-env=SKYCTL_WASM_MISSING={code}");
}

/// rustc's sysroot (None where rustc cannot say).
fn rustc_sysroot() -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !sysroot.is_empty()).then(|| PathBuf::from(sysroot))
}
