//! The README's walk-through (between the walkthrough markers), run as written: each `$` line is a shell
//! command (with this build's `skyctl` first on PATH), and the lines under it must appear in
//! its output, in order, where `...` matches any text.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    std::fs::read_to_string(path).expect("README.md")
}

/// (command, expected lines) of the block between the walkthrough markers.
fn steps(text: &str) -> Vec<(String, Vec<String>)> {
    let start = text
        .find("<!-- walkthrough -->")
        .expect("walkthrough marker");
    let end = text
        .find("<!-- /walkthrough -->")
        .expect("walkthrough end marker");
    let block = &text[start..end];
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines().skip(1) {
        if line.starts_with("```") {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push((cmd.to_string(), Vec::new()));
        } else if let Some((_, expected)) = steps.last_mut() {
            expected.push(line.to_string());
        }
    }
    steps
}

/// Whether `line` matches `pattern`, where `...` in the pattern matches any text.
fn matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").collect();
    let mut rest = line;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return part.is_empty() || rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    rest.is_empty()
}

#[test]
fn matcher_follows_the_dots() {
    assert!(matches("a ... b", "a xyz b"));
    assert!(matches("...", "anything"));
    assert!(matches("skyctl: ... in ...", "skyctl: 9 executed in 0.1s"));
    assert!(!matches("abc", "abcd"));
    assert!(!matches("a ... b", "a xyz c"));
}

#[test]
fn the_walkthrough_runs_as_written() {
    let text = readme();
    let steps = steps(&text);
    assert!(steps.len() >= 6, "walkthrough has {} steps", steps.len());
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin_dir = PathBuf::from(common::skyctl_bin())
        .parent()
        .expect("binary folder")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut cwd = tmp.path().to_path_buf();
    for (cmd, expected) in steps {
        if let Some(dir) = cmd.strip_prefix("cd ") {
            cwd = cwd.join(dir);
            continue;
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .current_dir(&cwd)
            .env("PATH", &path)
            .output()
            .expect("sh");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "`{cmd}` failed:\n{all}");
        let lines: Vec<&str> = all.lines().collect();
        let mut at = 0;
        for want in expected.iter().filter(|w| w.as_str() != "...") {
            match lines[at..].iter().position(|l| matches(want, l)) {
                Some(i) => at += i + 1,
                None => panic!("`{cmd}`: no line matching {want:?} (in order) in:\n{all}"),
            }
        }
    }
}
