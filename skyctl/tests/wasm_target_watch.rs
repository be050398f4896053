//! A skyctl built before the wasm32 target was installed gets its engine modules on the next
//! build. On a fresh machine the README's first command builds skyctl, then its `web-wasm`
//! node adds the target; `.ci/run`'s build of skyctl must then run the build script again,
//! though no source changed. Checked with cargo itself: a scratch crate whose build script is
//! skyctl's probe (`skyctl/build_support/wasm_target.rs`, included as skyctl's build script
//! includes it) against a scratch sysroot, built before and after the target appears there.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

// `probe` itself runs in the scratch crate's build script, not here.
#[path = "../build_support/wasm_target.rs"]
#[allow(dead_code)]
mod wasm_target;

/// `cargo build -v` of the scratch crate; returns (whether its build script ran, what the
/// built binary prints).
fn build_and_run(krate: &Path, sysroot: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO"))
        .args(["build", "-v", "--offline"])
        .current_dir(krate)
        .env("PROBE_SYSROOT", sysroot)
        .env("CARGO_TARGET_DIR", krate.join("target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "scratch crate build failed:\n{stderr}"
    );
    let ran = stderr
        .lines()
        .any(|l| l.contains("Running") && l.contains("build-script-build"));
    let bin = krate.join("target/debug/probe");
    let run = Command::new(&bin)
        .output()
        .expect("the scratch binary runs");
    assert!(run.status.success());
    (ran, String::from_utf8_lossy(&run.stdout).trim().to_string())
}

/// Sets a file's modification time `secs` seconds ahead, so that cargo sees it as newer than
/// the last run of the build script whatever the file system's timestamp resolution.
fn touch_ahead(p: &Path, secs: u64) {
    let f = fs::File::options().append(true).open(p).unwrap();
    f.set_modified(SystemTime::now() + Duration::from_secs(secs))
        .unwrap();
}

#[test]
fn a_target_added_after_the_build_reruns_the_build_script() {
    let tmp = tempfile::tempdir().unwrap();
    let probe_rs = Path::new(env!("CARGO_MANIFEST_DIR")).join("build_support/wasm_target.rs");
    let krate = tmp.path().join("probe");
    fs::create_dir_all(krate.join("src")).unwrap();
    fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    fs::write(
        krate.join("build.rs"),
        format!(
            "#[path = {:?}]\nmod wasm_target;\n\nfn main() {{\n    \
             println!(\"cargo::rerun-if-env-changed=PROBE_SYSROOT\");\n    \
             let sysroot = std::path::PathBuf::from(std::env::var_os(\"PROBE_SYSROOT\").unwrap());\n    \
             let on = wasm_target::probe(&sysroot);\n    \
             println!(\"cargo::rustc-env=PROBE_WASM={{on}}\");\n}}\n",
            probe_rs.display().to_string()
        ),
    )
    .unwrap();
    fs::write(
        krate.join("src/main.rs"),
        "fn main() {\n    println!(\"{}\", env!(\"PROBE_WASM\"));\n}\n",
    )
    .unwrap();

    // A rustup-style sysroot with the host's standard library only.
    let sysroot = tmp.path().join("sysroot");
    let rustlib = sysroot.join("lib/rustlib");
    fs::create_dir_all(rustlib.join("x86_64-unknown-linux-gnu/lib")).unwrap();
    let components = rustlib.join("components");
    fs::write(&components, "rust-std-x86_64-unknown-linux-gnu\n").unwrap();

    let (ran, wasm) = build_and_run(&krate, &sysroot);
    assert!(ran, "the first build runs the build script");
    assert_eq!(wasm, "false", "no wasm32 target yet");

    // Nothing changed: the build script must not run again (it would rebuild skyctl on every
    // build).
    let (ran, wasm) = build_and_run(&krate, &sysroot);
    assert!(!ran, "a no-op build ran the build script again");
    assert_eq!(wasm, "false");

    // `rustup target add wasm32-unknown-unknown`: the target's library and a rewritten list.
    fs::create_dir_all(rustlib.join("wasm32-unknown-unknown/lib")).unwrap();
    fs::write(
        &components,
        "rust-std-x86_64-unknown-linux-gnu\nrust-std-wasm32-unknown-unknown\n",
    )
    .unwrap();
    touch_ahead(&components, 2);
    let (ran, wasm) = build_and_run(&krate, &sysroot);
    assert!(
        ran,
        "the build after `target add` did not run the build script"
    );
    assert_eq!(
        wasm, "true",
        "the rerun build script did not see the target"
    );

    // `rustup target remove`: seen as well.
    fs::remove_dir_all(rustlib.join("wasm32-unknown-unknown")).unwrap();
    fs::write(&components, "rust-std-x86_64-unknown-linux-gnu\n").unwrap();
    touch_ahead(&components, 4);
    let (ran, wasm) = build_and_run(&krate, &sysroot);
    assert!(
        ran,
        "the build after `target remove` did not run the build script"
    );
    assert_eq!(wasm, "false");
}

#[test]
fn a_sysroot_without_a_component_list_is_watched_whole() {
    // A toolchain from a distribution package has no `components` list: the rustlib folder
    // is watched instead; with no rustlib at all nothing is (a missing watched path would
    // make cargo run the build script on every build).
    let tmp = tempfile::tempdir().unwrap();
    let rustlib = tmp.path().join("lib/rustlib");
    assert_eq!(wasm_target::watched(tmp.path()), None);
    fs::create_dir_all(rustlib.join("wasm32-unknown-unknown/lib")).unwrap();
    assert_eq!(wasm_target::watched(tmp.path()), Some(rustlib.clone()));
    fs::write(rustlib.join("components"), "").unwrap();
    assert_eq!(
        wasm_target::watched(tmp.path()),
        Some(rustlib.join("components"))
    );
}
