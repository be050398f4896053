//! The repository's layout rules (docs/internals/architecture.md): no crate has an import circle between its
//! top-level modules, nothing in skyctl points at `cli` or `commands` but the front end itself,
//! and sky-dag depends on no `sky-*` crate but sky-fs and sky-env (the one writer of files and
//! the one reader of the environment, both leaves).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every workspace crate's `src` folder.
fn crate_sources() -> Vec<PathBuf> {
    let root = repo_root();
    let mut out = vec![root.join("skyctl/src")];
    for e in std::fs::read_dir(root.join("stages")).unwrap().flatten() {
        if e.path().join("src").is_dir() {
            out.push(e.path().join("src"));
        }
    }
    out.sort();
    out
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests` block.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level module -> the other top-level modules it names through `crate::`.
fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for e in walkdir::WalkDir::new(src).into_iter().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let rel = p.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = first.trim_end_matches(".rs").to_string();
        if top != "lib" && top != "main" {
            files.entry(top).or_default().push(p.to_path_buf());
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, paths) in &files {
        let named = edges.entry(module.clone()).or_default();
        for p in paths {
            let text = code(p);
            for (i, _) in text.match_indices("crate::") {
                let rest = &text[i + "crate::".len()..];
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or("")
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .collect(),
                    None => vec![rest
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or("")],
                };
                for n in names {
                    if n != module && files.contains_key(n) {
                        named.insert(n.to_string());
                    }
                }
            }
        }
    }
    edges
}

/// A circle in `edges`, as the modules along it, if there is one.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let sources = crate_sources();
    assert!(sources.len() >= 9, "{sources:?}");
    let (mut modules, mut arrows) = (0, 0);
    for src in sources {
        let edges = module_edges(&src);
        modules += edges.len();
        arrows += edges.values().map(BTreeSet::len).sum::<usize>();
        if let Some(circle) = find_circle(&edges) {
            panic!("{}: import circle {}", src.display(), circle.join(" -> "));
        }
    }
    // The reader found the modules and their imports (a test that sees none proves nothing).
    assert!(
        modules > 50 && arrows > 50,
        "{modules} modules, {arrows} imports"
    );
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [
        ("ops", "pipeline"),
        ("pipeline", "kinds"),
        ("kinds", "ops"),
        ("cli", "ops"),
    ] {
        edges.entry(a.into()).or_default().insert(b.into());
    }
    let circle = find_circle(&edges).unwrap();
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 4, "{circle:?}");
    edges.get_mut("kinds").unwrap().clear();
    assert_eq!(find_circle(&edges), None);
}

#[test]
fn nothing_points_at_the_front_end() {
    let src = repo_root().join("skyctl/src");
    for e in walkdir::WalkDir::new(&src).into_iter().flatten() {
        let p = e.path();
        let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if p.extension().is_none_or(|x| x != "rs")
            || rel == "cli.rs"
            || rel == "main.rs"
            || rel.starts_with("commands")
        {
            continue;
        }
        let text = code(p);
        for bad in ["crate::cli", "crate::commands"] {
            assert!(!text.contains(bad), "{rel} names {bad}");
        }
    }
}

#[test]
fn sky_dag_depends_on_no_stage_crate_but_sky_fs_and_sky_env() {
    let manifest = std::fs::read_to_string(repo_root().join("stages/dag/Cargo.toml")).unwrap();
    let doc: toml::Table = manifest.parse().unwrap();
    let deps = doc["dependencies"].as_table().unwrap();
    let mut sky: Vec<&String> = deps.keys().filter(|k| k.starts_with("sky")).collect();
    sky.sort();
    assert_eq!(sky, ["sky-env", "sky-fs"]);
}

/// Every package sky-dag can pull in as a normal or build dependency, read from `Cargo.lock`
/// (a superset of what one platform builds: every target's and every feature's).
fn sky_dag_closure() -> BTreeSet<String> {
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock")).unwrap();
    let doc: toml::Table = lock.parse().unwrap();
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in doc["package"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        // An entry is `name` or `name version` (when two versions are locked).
        let named = p
            .get("dependencies")
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_str())
            .map(|d| d.split(' ').next().unwrap_or(d).to_string());
        deps.entry(name).or_default().extend(named);
    }
    // sky-dag's own entry also names its dev-dependencies; they are its manifest's to list.
    let manifest = std::fs::read_to_string(repo_root().join("stages/dag/Cargo.toml")).unwrap();
    let manifest: toml::Table = manifest.parse().unwrap();
    let mut todo: Vec<String> = manifest["dependencies"]
        .as_table()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            todo.extend(deps.get(&n).into_iter().flatten().cloned());
        }
    }
    seen
}

/// Issue 27: the remote cache's HTTP client and record signer live in sky-remote, behind
/// sky-dag's `Transport` and `Signer` traits, so users of the engine link no HTTP, TLS or
/// crypto crate.
#[test]
fn sky_dag_links_no_http_tls_or_crypto_crate() {
    let closure = sky_dag_closure();
    // The walk found the engine's real dependencies (a test that sees none proves nothing).
    for expected in ["blake3", "serde_json", "sky-fs", "rustix"] {
        assert!(closure.contains(expected), "{expected} not in {closure:?}");
    }
    let banned = [
        "ureq",
        "ureq-proto",
        "http",
        "httparse",
        "hyper",
        "reqwest",
        "rustls",
        "rustls-pki-types",
        "rustls-webpki",
        "webpki-roots",
        "native-tls",
        "openssl",
        "ring",
        "aws-lc-rs",
        "hmac",
        "sha2",
        "digest",
    ];
    let found: Vec<&str> = banned
        .into_iter()
        .filter(|b| closure.contains(*b))
        .collect();
    assert!(found.is_empty(), "sky-dag depends on {found:?}");
    // The client is still built, in its own crate.
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock")).unwrap();
    assert!(lock.contains("name = \"sky-remote\""));
}

/// Issue 27, item 4: `tempfile` is a test tool; a crate whose library does not use it lists it
/// under `[dev-dependencies]` only (sky-fs writes files atomically through it and keeps it).
#[test]
fn tempfile_is_a_dev_dependency_where_only_tests_use_it() {
    for krate in [
        "dag",
        "gguf",
        "laya",
        "kernels",
        "infer",
        "quant",
        "tokenizer",
        "web",
    ] {
        let manifest =
            std::fs::read_to_string(repo_root().join("stages").join(krate).join("Cargo.toml"))
                .unwrap();
        let doc: toml::Table = manifest.parse().unwrap();
        let normal = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .is_some_and(|d| d.contains_key("tempfile"));
        assert!(!normal, "stages/{krate}: tempfile is a normal dependency");
    }
    let fs = std::fs::read_to_string(repo_root().join("stages/fs/Cargo.toml")).unwrap();
    let fs: toml::Table = fs.parse().unwrap();
    assert!(fs["dependencies"]
        .as_table()
        .unwrap()
        .contains_key("tempfile"));
}

/// The packages `cargo tree` lists for `args` (normal dependencies only), by name. Runs the
/// cargo that runs the tests, on the committed lockfile; it resolves, it builds nothing.
fn cargo_tree(args: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(repo_root())
        .args(["tree", "--locked", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A line is `name vX.Y.Z [(path)] [(*)]`.
    stdout
        .lines()
        .filter_map(|l| l.split(' ').next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// What the browser engine must not link: the file-system parts of sky-laya and sky-gguf.
const FS_ONLY: [&str; 5] = ["rayon", "memmap2", "safetensors", "tempfile", "sky-fs"];

fn fs_only_in(tree: &BTreeSet<String>) -> Vec<&'static str> {
    FS_ONLY.into_iter().filter(|b| tree.contains(*b)).collect()
}

/// Issue 27, item 4: sky-web for wasm32 links the format part of sky-laya (names, limits, the
/// type policy, the tokenizer from GGUF) and sky-gguf's byte reader, not their file-system
/// parts (sky-infer's `std-fs` feature, off there, turns those on).
#[test]
fn the_browser_engine_links_no_file_system_crate() {
    let web = cargo_tree(&["-p", "sky-web", "--target", "wasm32-unknown-unknown"]);
    // The walk found the engine (a test that sees none proves nothing).
    for expected in [
        "sky-infer",
        "sky-laya",
        "sky-gguf",
        "sky-tokenizer",
        "serde_json",
    ] {
        assert!(web.contains(expected), "{expected} not in {web:?}");
    }
    assert_eq!(fs_only_in(&web), Vec::<&str>::new(), "sky-web on wasm32");
}

/// sky-laya and sky-gguf without their default `fs` feature: the format part alone. With it
/// (what skyctl builds) the file-system crates are there, so the feature is what moves them.
#[test]
fn the_format_parts_build_without_the_file_system_parts() {
    for krate in ["sky-laya", "sky-gguf", "sky-infer"] {
        let lean = cargo_tree(&["-p", krate, "--no-default-features"]);
        assert!(lean.contains(krate), "{lean:?}");
        assert_eq!(fs_only_in(&lean), Vec::<&str>::new(), "{krate}");
    }
    let full = cargo_tree(&["-p", "sky-laya"]);
    for expected in ["rayon", "memmap2", "safetensors", "sky-fs"] {
        assert!(full.contains(expected), "{expected} not in {full:?}");
    }
}

/// The `web-wasm` node (pipeline.toml) is keyed on the sources the modules are compiled from:
/// every workspace crate in sky-web's wasm32 tree has its manifest and `src` among the node's
/// inputs, and skyctl's build script (which embeds the same modules) watches the same crates.
#[test]
fn the_web_wasm_node_covers_every_crate_of_the_browser_engine() {
    let root = repo_root();
    let pipeline: toml::Table = std::fs::read_to_string(root.join("pipeline.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let node = pipeline["command"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some("web-wasm"))
        .expect("a web-wasm node");
    let inputs: BTreeSet<&str> = node["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let build_rs = std::fs::read_to_string(root.join("skyctl/build.rs")).unwrap();
    let web = cargo_tree(&["-p", "sky-web", "--target", "wasm32-unknown-unknown"]);
    let mut covered = 0;
    for e in std::fs::read_dir(root.join("stages")).unwrap().flatten() {
        let manifest = e.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let doc: toml::Table = text.parse().unwrap();
        let name = doc["package"]["name"].as_str().unwrap();
        if !web.contains(name) {
            continue;
        }
        let dir = e.file_name().to_string_lossy().into_owned();
        for rel in ["Cargo.toml", "src"] {
            let input = format!("stages/{dir}/{rel}");
            assert!(inputs.contains(input.as_str()), "web-wasm lacks {input}");
        }
        assert!(
            build_rs.contains(&format!("\"{dir}\"")),
            "skyctl/build.rs does not watch stages/{dir}"
        );
        covered += 1;
    }
    assert!(covered >= 6, "{covered} crates of {web:?}");
}
