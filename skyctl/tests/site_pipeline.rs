//! The project's own pipeline.toml: the browser engine node (`web-wasm`) is keyed on the engine
//! sources and Cargo.lock and nothing else that changes often, and its `[site]` writes the pages
//! skyctl carries beside the node's modules. Only keys are computed (`skyctl graph`); nothing is
//! built.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

/// The repository's sources, without build outputs, stores, dependencies or VCS data.
fn copy_sources(from: &Path, to: &Path) {
    const SKIP: [&str; 8] = [
        "target",
        "build",
        ".skyctl",
        ".git",
        ".venv",
        "node_modules",
        "public",
        "corpus",
    ];
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if SKIP.iter().any(|s| name == *s) {
            continue;
        }
        let ty = entry.file_type().unwrap();
        let dest = to.join(&name);
        if ty.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_sources(&entry.path(), &dest);
        } else if ty.is_file() {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

fn keys(ws: &Ws) -> std::collections::BTreeMap<String, String> {
    let out = ws.run(&["graph", "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_string(),
                // null for a node whose inputs are other nodes' outputs not built yet
                n["key"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn append(ws: &Ws, rel: &str, text: &str) {
    let p = ws.p(rel);
    let mut s = std::fs::read_to_string(&p).unwrap();
    s.push_str(text);
    std::fs::write(&p, s).unwrap();
}

#[test]
fn the_wasm_node_is_keyed_on_the_engine_sources_and_the_lockfile() {
    let ws = Ws::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_sources(&root, ws.path());
    let base = keys(&ws);
    assert!(!base["web-wasm"].is_empty() && !base["site"].is_empty());

    // Unrelated files: no key moves.
    append(&ws, "README.md", "\nmore words\n");
    append(&ws, "skyctl/src/lib.rs", "\n// a comment\n");
    assert_eq!(keys(&ws), base);

    // The engine's sources, the lockfile, the web crate: the wasm node (and only it among the
    // site nodes) is stale.
    for (rel, text) in [
        ("stages/infer/src/lib.rs", "\n// a comment\n"),
        ("stages/tokenizer/src/lib.rs", "\n// a comment\n"),
        ("stages/web/src/lib.rs", "\n// a comment\n"),
        ("Cargo.lock", "\n"),
    ] {
        let before = keys(&ws);
        append(&ws, rel, text);
        let after = keys(&ws);
        assert_ne!(after["web-wasm"], before["web-wasm"], "{rel}");
        assert_eq!(after["site"], before["site"], "{rel}");
    }

    // A page of the copy: no key moves. The site node writes the pages this skyctl carries
    // (embedded from site/src when it was built); its key holds their digest instead.
    let before = keys(&ws);
    append(&ws, "site/src/index.html", "\n");
    assert_eq!(keys(&ws), before);
}

#[test]
fn the_site_node_writes_only_the_pages_beside_the_web_wasm_modules() {
    let ws = Ws::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_sources(&root, ws.path());
    let out = ws.run(&["graph", "--format", "json"]);
    assert!(out.status.success());
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    let site = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "site")
        .expect("a site node");
    assert_eq!(site["kind"], "site");
    // `[site] modules` names the web-wasm node's files: the site node writes only the pages.
    let outputs: Vec<&str> = site["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.as_str().or_else(|| o["path"].as_str()))
        .collect();
    assert_eq!(outputs.len(), 9, "{site}");
    assert!(outputs.iter().all(|o| !o.ends_with(".wasm")), "{outputs:?}");
}
