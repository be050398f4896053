//! The engine modules skyctl carries: byte-identical to what the repository's `web-wasm` node
//! builds (the same `stages/web/build.sh`, run as a command node runs it), written by `[site]`
//! for a project without any Rust toolchain; and a skyctl without them says so at `[site]`.

mod common;

use common::Ws;
use std::path::Path;
use std::process::Command;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An `init` project's `site` node alone: the pages and the embedded modules in build/site/.
fn site_of_init() -> Ws {
    let ws = Ws::new();
    assert_eq!(ws.run(&["init"]).status.code(), Some(0));
    let b = ws.build(&["site"]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_eq!(b.executed(), vec!["site"]);
    ws
}

#[test]
fn the_embedded_modules_are_the_web_wasm_nodes() {
    let ws = site_of_init();
    // The web-wasm node's command (pipeline.toml), with a command node's environment: PATH
    // and HOME only. Its target folder is the one skyctl's build script used, so this is
    // quick after a build of skyctl.
    let out = tempfile::tempdir().unwrap();
    let root = repo();
    let status = Command::new("bash")
        .arg(root.join("stages/web/build.sh"))
        .arg(out.path())
        .current_dir(&root)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .status()
        .expect("bash");
    assert!(status.success(), "stages/web/build.sh failed");
    for m in ["simd", "scalar"] {
        let name = format!("sky-web.{m}.wasm");
        let node = std::fs::read(out.path().join(&name)).unwrap();
        let embedded = std::fs::read(ws.p(&format!("build/site/{name}"))).unwrap();
        assert_eq!(&node[..4], b"\0asm", "{name}");
        assert!(
            node == embedded,
            "{name}: the web-wasm node built {} bytes, skyctl embeds {} bytes (blake3 {} vs {})",
            node.len(),
            embedded.len(),
            blake3::hash(&node),
            blake3::hash(&embedded)
        );
    }
    // The pages are site/src's, byte for byte.
    for page in [
        "index.html",
        "bench.html",
        "style.css",
        "index.js",
        "bench.js",
        "ui.js",
        "sky.js",
        "sky-engine.js",
        "sky-worker.js",
    ] {
        assert_eq!(
            std::fs::read(ws.p(&format!("build/site/{page}"))).unwrap(),
            std::fs::read(root.join("site/src").join(page)).unwrap(),
            "{page}"
        );
    }
}

#[test]
fn a_skyctl_without_modules_says_so_at_the_site_section() {
    let ws = Ws::new();
    assert_eq!(ws.run(&["init"]).status.code(), Some(0));
    let text = ws.read("pipeline.toml");
    let at = text.find("\n[site]\n").expect("init writes [site]") + 1;
    let line = text[..at].lines().count() + 1;
    let out = ws
        .cmd(&["build"])
        .env("SKYCTL_TEST_NO_WASM_TARGET", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let want = format!(
        "skyctl: pipeline.toml:{line}:1: [site] needs the browser engine modules (sky-web.simd.wasm, sky-web.scalar.wasm), and this skyctl carries none: it was built without the wasm32-unknown-unknown target (`rustup target add wasm32-unknown-unknown`, then build skyctl again)"
    );
    assert!(err.starts_with(&want), "{err}");
    assert!(err.contains("modules = { simd"), "{err}");
    // Nothing ran: no build folder, no release.
    assert!(!ws.p("build").exists() && !ws.p("site/public").exists());

    // With modules of its own the pipeline does not need skyctl's.
    let text = text.replace(
        "\n[site]\n",
        "\n[site]\nmodules = { simd = \"build/w/a.wasm\", scalar = \"build/w/b.wasm\" }\n\n[[command]]\nname = \"w\"\nrun = \"mkdir -p build/w && printf a > build/w/a.wasm && printf b > build/w/b.wasm\"\noutputs = [\"build/w/a.wasm\", \"build/w/b.wasm\"]\n",
    );
    ws.write("pipeline.toml", &text);
    let out = ws
        .cmd(&["build", "--json", "site", "w"])
        .env("SKYCTL_TEST_NO_WASM_TARGET", "1")
        .output()
        .unwrap();
    let b = common::parse_build(out);
    assert_eq!(b.code, 0, "{}", b.stderr);
}

#[test]
fn site_section_errors_are_located() {
    let ws = Ws::new();
    let cases = [
        (
            "[site]\n",
            "pipeline.toml:1:1: [site]: no [[model]] publishes a variant",
        ),
        (
            "[site]\nmodule = 1\n",
            "pipeline.toml:2:1: unknown key `module` (did you mean `modules`?)",
        ),
        (
            "[[model]]\nname = \"m\"\nsource = \"m\"\npublish = [\"f16\"]\n[[command]]\nname = \"site\"\nrun = \"true\"\n[site]\n",
            "pipeline.toml:6:8: a command named `site`: that name is the node of [site]",
        ),
    ];
    for (src, want) in cases {
        ws.write("pipeline.toml", src);
        let err = ws.fails(&["build"], 2);
        assert!(err.contains(want), "{src}\n{err}");
    }
}
