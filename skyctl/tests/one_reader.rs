//! Every file the tool reads is read one way: `sky_fs::read`, `sky_fs::read_to_string` or
//! `sky_fs::open` (a regular file after following links, a size limit per kind of file, an
//! error naming the path). This walks the crates' sources (not their tests) and fails on a
//! `fs::read(`, `read_to_string(`, `File::open(` or `fs::copy(` anywhere else, but for the few listed
//! below with the reason each is not a read of a user's file.

use std::path::{Path, PathBuf};

/// `(file, the line's text, why)`: reads that stay as they are.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "stages/dag/src/statcache.rs",
        "let mut f = std::fs::File::open(path)?;",
        "the scanner hashes only what its lstat found a regular file (scan.rs); no stat is \
         added on the no-op build path",
    ),
    (
        "stages/dag/src/release.rs",
        "std::fs::File::open(e.path())?.sync_all()?;",
        "opened to fsync a file skyctl wrote, not read",
    ),
    (
        "stages/dag/src/fsutil.rs",
        "std::fs::File::open(dir)?.sync_all()",
        "opened to fsync a directory, not read",
    ),
    (
        "stages/dag/src/store/mod.rs",
        "match std::fs::File::open(&p) {",
        "the store's lock file, opened to flock, not read",
    ),
    (
        "stages/dag/src/store/mod.rs",
        "std::fs::File::open(&self.root).map_err(|e| DagError::io(\"open\", &p, e))?",
        "the store directory, opened to flock, not read",
    ),
    (
        "stages/dag/src/workspace.rs",
        "let _ = std::io::Read::read_to_string(&mut file.take(STATE_MAX), &mut before);",
        "the workspace lock file, already open and locked, read through a bound",
    ),
    (
        "stages/dag/src/workspace.rs",
        "Err(_) => std::fs::File::open(&dir).map_err(|e| DagError::io(\"open\", &dir, e))?,",
        "the state folder, opened to flock when there is no lock file, not read",
    ),
    (
        "stages/quant/src/cpu.rs",
        "if let Ok(text) = std::fs::read_to_string(\"/proc/cpuinfo\") {",
        "the kernel's CPU list; sky-quant builds for wasm32 too and does not link sky-fs",
    ),
];

const PATTERNS: [&str; 4] = ["fs::read(", "read_to_string(", "File::open(", "fs::copy("];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("skyctl sits in the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The lines of `text` that are code outside `#[cfg(test)]` items, numbered from 1. A
/// `#[cfg(test)]` item is skipped up to the line where its braces close.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut pending_test = false;
    let mut depth: i64 = 0;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if let Some(d) = skip_depth {
            depth += opens - closes;
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        if t == "#[cfg(test)]" {
            pending_test = true;
            continue;
        }
        if pending_test && !t.starts_with("#[") {
            pending_test = false;
            let before = depth;
            depth += opens - closes;
            if depth > before {
                skip_depth = Some(before);
            }
            continue;
        }
        depth += opens - closes;
        if t.starts_with("//") {
            continue;
        }
        out.push((i + 1, line));
    }
    out
}

/// Whether the match of `pat` at `at` in `line` is the shared reader's own name.
fn is_the_reader(line: &str, at: usize) -> bool {
    line[..at].ends_with("sky_") || line[..at].ends_with("sky_fs::")
}

#[test]
fn every_file_is_read_through_sky_fs() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root.join("skyctl/src"), &mut files);
    let stages = std::fs::read_dir(root.join("stages")).expect("stages/");
    for s in stages.flatten() {
        rust_files(&s.path().join("src"), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut found = Vec::new();
    let mut used = vec![false; ALLOWED.len()];
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .expect("under the workspace")
            .to_string_lossy()
            .into_owned();
        // The reader itself.
        if rel == "stages/fs/src/read.rs" {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("a source file");
        for (n, line) in code_lines(&text) {
            for pat in PATTERNS {
                let hits: Vec<usize> = line
                    .match_indices(pat)
                    .map(|(at, _)| at)
                    .filter(|&at| !is_the_reader(line, at))
                    .collect();
                if hits.is_empty() {
                    continue;
                }
                match ALLOWED
                    .iter()
                    .position(|(file, text, _)| *file == rel && line.trim() == *text)
                {
                    Some(i) => used[i] = true,
                    None => found.push(format!("{rel}:{n}: {}", line.trim())),
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "read these through sky_fs::read / read_to_string / open (with the limit of their \
         kind of file), or list them in ALLOWED with the reason:\n{}",
        found.join("\n")
    );
    let stale: Vec<_> = ALLOWED
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|((f, t, _), _)| format!("{f}: {t}"))
        .collect();
    assert!(
        stale.is_empty(),
        "ALLOWED lists lines that are gone:\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_walk_skips_test_modules_and_comments_only() {
    let text = "fn a() {\n    std::fs::read(p);\n}\n// std::fs::read(q)\n#[cfg(test)]\nmod tests {\n    fn b() {\n        std::fs::read(r);\n    }\n}\nfn c() { File::open(s); }\n";
    let lines: Vec<usize> = code_lines(text)
        .into_iter()
        .filter(|(_, l)| PATTERNS.iter().any(|p| l.contains(p)))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lines, [2, 11]);
    assert!(is_the_reader("sky_fs::read(p)", 4));
    assert!(!is_the_reader("std::fs::read(p)", 3));
}

#[test]
fn the_docs_state_each_limit() {
    let readme = std::fs::read_to_string(workspace().join("docs/internals/never.md"))
        .expect("docs/internals/never.md");
    let rows = [
        ("checkpoint config", vec![sky_fs::CONFIG]),
        (
            "`tokenizer.json`",
            vec![
                sky_fs::TOKENIZER,
                sky_fs::REQUEST,
                sky_fs::CASES,
                sky_fs::PROMPTS,
                sky_fs::CALIBRATION,
                sky_fs::REPORT,
            ],
        ),
        ("`pipeline.toml`", vec![sky_fs::PIPELINE, sky_fs::TEXT]),
        ("policy file", vec![sky_fs::POLICY, sky_fs::CA_BUNDLE]),
        ("kernel source", vec![sky_fs::SOURCE]),
        ("skyctl's own state", vec![sky_fs::STATE]),
    ];
    for (row, limits) in rows {
        let line = readme
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(&format!("| {row}")))
            .unwrap_or_else(|| panic!("docs/internals/never.md: no limits row for {row}"));
        for l in limits {
            let max = l.max.expect("a bounded kind");
            let want = format!("| {} |", sky_fs::size_in_words(max));
            assert!(
                line.ends_with(&want),
                "docs/internals/never.md row {line:?}: {} is {want}",
                l.what
            );
        }
    }
    for any in [sky_fs::MODEL, sky_fs::GOLDEN, sky_fs::CONTENT] {
        assert_eq!(any.max, None);
    }
}
