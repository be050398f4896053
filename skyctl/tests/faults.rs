//! The fault suite: a build tried as a hostile user and a crashing machine would try it.
//! kill -9 at pseudo-random points of a real model pipeline; each kind of store and
//! workspace corruption followed by a build and `store check`; paths leading out of the
//! workspace; outputs that are not the engine's to delete; signals; a read-only store.
//! `SKYCTL_FAULT_ROUNDS` sets the kill rounds (default 20).

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use common::*;

/// A real model (the s1-pico preset, converted and quantized) plus command nodes that write
/// in steps, so kills land in every phase: conversion, calibration, command runs, storing,
/// the release swap.
fn pipeline() -> String {
    let mut s = String::from(
        r#"[calibration.default]
prompts = "builtin"

[[model]]
name = "m"
source = "models/m"
variants = ["f16", "q8_0"]
publish = ["f16", "q8_0"]

"#,
    );
    for i in 0..4 {
        let input = if i == 0 {
            "build/m/m.f16.gguf".to_string()
        } else {
            format!("out/n{}", i - 1)
        };
        s += &format!(
            "[[command]]\nname = \"n{i}\"\nrun = \"head -c 64 {input} > out/n{i} && sleep 0.05 && echo step{i} >> out/n{i}\"\ninputs = [\"{input}\"]\noutputs = [\"out/n{i}\"]\n\n"
        );
    }
    s += "[[release.publish]]\nfrom = \"out/n3\"\nto = \"final.txt\"\n";
    s
}

fn workspace() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", &pipeline());
    let o = ws.run(&["random", "s1-pico", ws.p("models/m").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    ws
}

/// Paths under `dir` whose name starts with the temp prefix (leftovers of a killed build).
fn temps(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".skyctl-tmp-"))
        .map(|e| e.path().display().to_string())
        .collect()
}

fn store_check(ws: &Ws) -> String {
    let o = ws.run(&["store", "check"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "store check:\n{out}");
    out
}

/// A tiny deterministic generator for kill points.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn kill_9_at_random_points_never_leaves_a_wrong_release_or_leftovers() {
    let reference = workspace();
    let t0 = std::time::Instant::now();
    let r = reference.build(&[]);
    // Kill points spread over a cold build's duration.
    let span_ms = (t0.elapsed().as_millis() as u64).max(50);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = snapshot(&reference.p("site/public"));
    assert!(want.contains_key("final.txt") && want.contains_key("models/m.q8_0.gguf"));

    let rounds: u64 = std::env::var("SKYCTL_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let ws = workspace();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut killed, mut failures) = (0, Vec::new());
    for round in 0..rounds {
        // Every round from nothing (no outputs, an empty store), so the kill lands in real
        // work: conversion, calibration, commands, storing, the release swap.
        let store = tempfile::tempdir().unwrap();
        let store_arg = store.path().to_str().unwrap().to_string();
        assert_eq!(ws.run(&["clean"]).status.code(), Some(0));
        let delay = next(&mut rng) % span_ms;
        let mut child = ws
            .cmd(&["build", "-j", "2", "--store", &store_arg])
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        if child.try_wait().unwrap().is_none() {
            killed += 1;
        }
        let _ = std::process::Command::new("kill")
            .args(["-9", "--", &format!("-{}", child.id())])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = child.wait();
        let run = ws.build(&["--store", &store_arg]);
        if run.code != 0 {
            let errors: Vec<String> = run
                .events
                .iter()
                .filter_map(|e| Some(format!("{}: {}", e["node"], e["error"].as_str()?)))
                .collect();
            failures.push(format!(
                "round {round} ({delay} ms): resume failed: {} {errors:?}",
                run.stderr
            ));
            continue;
        }
        let got = snapshot(&ws.p("site/public"));
        if got != want {
            let mut differ: Vec<&String> = want
                .keys()
                .chain(got.keys())
                .filter(|k| want.get(*k) != got.get(*k))
                .collect();
            differ.sort();
            differ.dedup();
            // The text files' tails, to tell a stale output from a doubled write.
            let tail = |m: &std::collections::BTreeMap<String, Vec<u8>>, k: &str| {
                m.get(k)
                    .map(|b| String::from_utf8_lossy(&b[b.len().saturating_sub(40)..]).into_owned())
            };
            let shown: Vec<String> = differ
                .iter()
                .map(|k| format!("{k}: want {:?}, got {:?}", tail(&want, k), tail(&got, k)))
                .collect();
            failures.push(format!(
                "round {round} ({delay} ms): release differs: {shown:?}"
            ));
        }
        let mut left = temps(ws.path());
        left.extend(temps(store.path()));
        if !left.is_empty() {
            failures.push(format!("round {round} ({delay} ms): leftovers {left:?}"));
        }
        let o = ws.run(&["store", "check", "--store", &store_arg]);
        if o.status.code() != Some(0) {
            failures.push(format!(
                "round {round} ({delay} ms): store check: {}",
                String::from_utf8_lossy(&o.stdout)
            ));
        }
        let tmp = store.path().join("store-v2/tmp");
        if std::fs::read_dir(&tmp).is_ok_and(|mut d| d.next().is_some()) {
            failures.push(format!("round {round} ({delay} ms): store temp files left"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {rounds} rounds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        killed >= rounds / 2,
        "only {killed} of {rounds} kills landed mid-build"
    );
}

/// A command-only pipeline for the store corruption cases (fast, deterministic).
const SMALL: &str = r#"[[command]]
name = "a"
run = "cat in.txt > out/a.txt && echo made >> out/a.txt"
inputs = ["in.txt"]
outputs = ["out/a.txt"]

[[command]]
name = "b"
run = "tr a-z A-Z < out/a.txt > out/b.txt"
inputs = ["out/a.txt"]
outputs = ["out/b.txt"]

[[release.publish]]
from = "out/b.txt"
to = "b.txt"
"#;

fn small() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", SMALL);
    ws.write("in.txt", "hello\n");
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    ws
}

fn blobs(ws: &Ws) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(ws.p(".skyctl/store-v2/blobs"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect()
}

fn writable(p: &Path) {
    let mut perm = std::fs::metadata(p).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(p, perm).unwrap();
}

#[test]
fn each_corruption_is_detected_and_repaired() {
    // 1. A deleted blob: check reports it, gc repairs, the build restores the rest.
    let ws = small();
    let gone = blobs(&ws).into_iter().next().unwrap();
    std::fs::remove_file(&gone).unwrap();
    assert_eq!(ws.run(&["store", "check"]).status.code(), Some(1));
    assert_eq!(ws.run(&["gc"]).status.code(), Some(0));
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nMADE\n");
    store_check(&ws);

    // 2. A corrupted blob (a captured log or an output): detected, removed by gc, re-made.
    let ws = small();
    for b in blobs(&ws) {
        writable(&b);
        std::fs::write(&b, "rotten").unwrap();
    }
    let o = ws.run(&["store", "check"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("blob content hashes to"));
    let o = ws.run(&["gc"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("damaged blobs removed"));
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nMADE\n");
    store_check(&ws);

    // 3. A damaged action-log line: ignored by readers, reported by check, gone after gc.
    let ws = small();
    let log = walkdir::WalkDir::new(ws.p(".skyctl/store-v2/actions"))
        .into_iter()
        .flatten()
        .find(|e| e.file_type().is_file())
        .unwrap()
        .into_path();
    let mut text = std::fs::read(&log).unwrap();
    let mid = text.len() / 2;
    text[mid] ^= 0x20;
    std::fs::write(&log, &text).unwrap();
    assert_eq!(ws.run(&["store", "check"]).status.code(), Some(1));
    assert_eq!(ws.run(&["gc"]).status.code(), Some(0));
    store_check(&ws);
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nMADE\n");
    store_check(&ws);

    // 4. An edit through the hard link between an output and its blob, mtime put back:
    // the ctime gives it away; the node re-runs and the store heals.
    let ws = small();
    let out = ws.p("out/a.txt");
    let mtime = std::fs::metadata(&out).unwrap().modified().unwrap();
    writable(&out);
    std::fs::write(&out, "HACKED\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&out)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ws.read("out/a.txt"), "hello\nmade\n");
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nMADE\n");
    store_check(&ws);

    // 5. Bit rot in the release tree (no stat change at all): check finds it, the next
    // build restores it.
    let ws = small();
    let rel = ws.p("site/public/b.txt");
    let meta = std::fs::metadata(&rel).unwrap();
    writable(&rel);
    let mut bytes = std::fs::read(&rel).unwrap();
    bytes[0] = b'J';
    std::fs::write(&rel, &bytes).unwrap();
    let _ = std::fs::File::options()
        .write(true)
        .open(&rel)
        .unwrap()
        .set_modified(meta.modified().unwrap());
    let o = ws.run(&["store", "check"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("site/public/b.txt: content hashes to"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(ws.build(&[]).code, 0);
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nMADE\n");
    store_check(&ws);

    // 6. Leftovers of a killed build: temp files beside outputs and in the store.
    let ws = small();
    ws.write("out/.skyctl-tmp-a.txt.999999-1", "half");
    std::fs::create_dir_all(ws.p("site/.skyctl-tmp-public.new-999999")).unwrap();
    ws.write(".skyctl/store-v2/tmp/blob-999999-3-17.tmp", "half");
    assert_eq!(ws.build(&[]).code, 0);
    assert!(temps(ws.path()).is_empty(), "{:?}", temps(ws.path()));
    assert!(!ws.p(".skyctl/store-v2/tmp/blob-999999-3-17.tmp").exists());
}

#[test]
fn nothing_leads_out_of_the_workspace() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("passwd"), "root:x:0:0\n").unwrap();
    std::fs::create_dir_all(outside.path().join("dir")).unwrap();
    type Setup<'a> = Box<dyn Fn(&Ws) + 'a>;
    let cases: Vec<(&str, Setup, &str)> = vec![
        (
            "file input",
            Box::new(|ws: &Ws| {
                std::os::unix::fs::symlink(outside.path().join("passwd"), ws.p("in.txt")).unwrap()
            }),
            "input `in.txt` leads out of the workspace through a symlink",
        ),
        (
            "release dir",
            Box::new(|ws: &Ws| {
                std::fs::create_dir_all(ws.p("site")).unwrap();
                std::os::unix::fs::symlink(outside.path().join("dir"), ws.p("site/public")).unwrap()
            }),
            "release_dir `site/public` leads out of the workspace through a symlink",
        ),
        (
            "output dir",
            Box::new(|ws: &Ws| {
                std::os::unix::fs::symlink(outside.path().join("dir"), ws.p("out")).unwrap()
            }),
            "is a symlink leading out of the workspace",
        ),
    ];
    for (what, setup, message) in cases {
        let ws = Ws::new();
        ws.write("pipeline.toml", SMALL);
        if what != "file input" {
            ws.write("in.txt", "hello\n");
        }
        setup(&ws);
        let e = ws.fails(&["build"], 2);
        assert!(e.contains(message), "{what}: {e}");
        assert!(
            e.starts_with("skyctl: pipeline.toml:"),
            "{what}: not located: {e}"
        );
        assert_eq!(
            std::fs::read_dir(outside.path().join("dir"))
                .unwrap()
                .count(),
            0,
            "{what}: wrote outside"
        );
    }
    // A command's cwd, and a build_dir, through a symlink.
    let ws = Ws::new();
    std::os::unix::fs::symlink(outside.path().join("dir"), ws.p("work")).unwrap();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"c\"\nrun = \"touch x\"\ncwd = \"work\"\noutputs = [\"o\"]\n",
    );
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("pipeline.toml:4:7: cwd `work` leads out of the workspace"),
        "{e}"
    );
    ws.write("pipeline.toml", "[project]\nbuild_dir = \"work\"\n");
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("pipeline.toml:2:13: build_dir `work` leads out"),
        "{e}"
    );
}

#[test]
fn the_engine_deletes_and_overwrites_only_what_it_made() {
    // An output naming a file the user has: refused, the file intact.
    let ws = Ws::new();
    ws.write("README.md", "my notes\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"c\"\nrun = \"echo x > README.md\"\noutputs = [\"README.md\"]\n",
    );
    let r = ws.build(&[]);
    assert_eq!(r.code, 1);
    let err = r
        .events
        .iter()
        .find_map(|e| e["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        err.contains("output `README.md` already exists and was not made by skyctl"),
        "{err}"
    );
    assert_eq!(ws.read("README.md"), "my notes\n");
    // Another node's source directory: refused, the directory intact.
    ws.write("models/m/weights", "w\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"clobber\"\nrun = \"mkdir -p models/m\"\noutputs = [\"models/m/\"]\n[[command]]\nname = \"use\"\nrun = \"cat models/m/weights > o\"\ninputs = [\"models/m\"]\noutputs = [\"o\"]\n",
    );
    assert_eq!(ws.build(&[]).code, 1);
    assert_eq!(ws.read("models/m/weights"), "w\n");
    // The manifest and .git are never outputs.
    for out in ["pipeline.toml", ".git/config", "."] {
        ws.write(
            "pipeline.toml",
            &format!("[[command]]\nname = \"c\"\nrun = \"true\"\noutputs = [\"{out}\"]\n"),
        );
        let e = ws.fails(&["build"], 2);
        assert!(
            e.contains("which is not the build's to write") || e.contains("cannot be an output"),
            "{out}: {e}"
        );
    }
    // A node that changes its own source input fails (and would otherwise re-run forever).
    let ws = Ws::new();
    ws.write("in.txt", "a\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"c\"\nrun = \"echo more >> in.txt; cp in.txt o\"\ninputs = [\"in.txt\"]\noutputs = [\"o\"]\n",
    );
    let r = ws.build(&[]);
    assert_eq!(r.code, 1);
    let err = r
        .events
        .iter()
        .find_map(|e| e["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        err.contains("modified its input `in.txt` in place"),
        "{err}"
    );
    // A node writing into the release tree fails and its stray goes at once; a stray put
    // there by hand goes with the next build.
    let ws = small();
    ws.write(
        "pipeline.toml",
        &format!("{SMALL}\n[[command]]\nname = \"sneak\"\nrun = \"echo x > site/public/extra && echo y > s\"\noutputs = [\"s\"]\n"),
    );
    assert_eq!(ws.build(&[]).code, 1);
    assert!(!ws.p("site/public/extra").exists());
    ws.write("pipeline.toml", SMALL);
    ws.write("site/public/by-hand.txt", "x");
    assert_eq!(ws.build(&[]).code, 0);
    assert_eq!(
        snapshot(&ws.p("site/public"))
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        vec!["b.txt".to_string()]
    );
}

#[test]
fn signals_stop_the_build_and_end_the_commands() {
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let ws = Ws::new();
        ws.write(
            "pipeline.toml",
            "[[command]]\nname = \"slow\"\nrun = \"sleep 30 & sleep 30; echo done > o\"\noutputs = [\"o\"]\n",
        );
        let mut child = ws
            .cmd(&["build"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(800));
        let t0 = std::time::Instant::now();
        let _ = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "SIG{sig}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "SIG{sig}: took {:?}",
            t0.elapsed()
        );
        // The node's whole process group is gone (the backgrounded sleep too): no process
        // is left whose working directory is this workspace.
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c == ws.path()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            left.is_empty(),
            "SIG{sig}: processes left in the workspace: {left:?}"
        );
        assert!(!ws.p("o").exists());
        store_check(&ws);
    }
}

/// A read-only bind mount of `dir` (as root; the test fails, never skips, where it cannot
/// make one), unmounted on drop.
struct ReadOnly(std::path::PathBuf);

impl ReadOnly {
    fn mount(src: &Path, at: &Path) -> ReadOnly {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["--bind", src.to_str().unwrap(), at.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "mount --bind failed (the fault suite runs as root, as CI does)"
        );
        let guard = ReadOnly(at.to_path_buf());
        let ok = std::process::Command::new("mount")
            .args(["-o", "remount,ro,bind", at.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount read-only failed");
        guard
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_read_only_store_still_serves() {
    let ws = small();
    let ro = tempfile::tempdir().unwrap();
    let _mount = ReadOnly::mount(&ws.p(".skyctl"), &ro.path().join("store"));
    let store = ro.path().join("store");
    let with_store = |ws: &Ws, extra: &[&str]| {
        let mut args = vec!["build", "--json", "--store", store.to_str().unwrap()];
        args.extend_from_slice(extra);
        parse_build(ws.run(&args))
    };
    // No-op.
    let r = with_store(&ws, &[]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
    // Restore-only: outputs and release gone, everything comes back from the store.
    std::fs::remove_dir_all(ws.p("out")).unwrap();
    std::fs::remove_dir_all(ws.p("site")).unwrap();
    let r = with_store(&ws, &[]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nMADE\n");
    // A build that must store a result says why it cannot.
    ws.write("in.txt", "changed\n");
    let r = with_store(&ws, &[]);
    assert_eq!(r.code, 1);
    let err = r
        .events
        .iter()
        .find_map(|e| e["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(err.contains("the store is read-only"), "{err}");
}

/// Hostile checkpoint fields: every loader refuses them with the file and the key, at once
/// and in little memory (checked: /usr/bin/time shows under 10 MB; here the exit code, the
/// message and that it returns quickly).
#[test]
fn hostile_checkpoint_fields_are_refused_by_every_loader() {
    let ws = Ws::new();
    let base = ws.p("base");
    assert_eq!(
        ws.run(&["random", "s1-pico", base.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let cases: [(&str, &str, serde_json::Value, &str); 6] = [
        (
            "rl_agent_config.json",
            "head_layers",
            serde_json::json!(4294967297u64),
            "head_layers",
        ),
        (
            "encoder/config.json",
            "num_hidden_layers",
            serde_json::json!(5_000_000),
            "num_hidden_layers",
        ),
        (
            "rl_agent_config.json",
            "max_len",
            serde_json::json!(9223372036854775802u64),
            "max_len",
        ),
        (
            "encoder/config.json",
            "hidden_size",
            serde_json::json!(1u64 << 40),
            "hidden_size",
        ),
        (
            "encoder/config.json",
            "vocab_size",
            serde_json::json!(1u64 << 40),
            "vocab_size",
        ),
        (
            "rl_agent_config.json",
            "head_max_len",
            serde_json::json!(1u64 << 40),
            "head_max_len",
        ),
    ];
    for (file, key, value, named) in cases {
        let dir = ws.p(&format!("bad-{key}"));
        let o = std::process::Command::new("cp")
            .args(["-r", base.to_str().unwrap(), dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(o.success());
        let p = dir.join(file);
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        v[key] = value;
        std::fs::write(&p, v.to_string()).unwrap();
        let d = dir.to_str().unwrap();
        ws.write(
            "req.json",
            r#"{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}"#,
        );
        for args in [
            vec!["convert", d, "x.gguf"],
            vec!["ask", d, "--request", "req.json"],
            vec!["calibrate", d, "c.json"],
            vec!["bench", d, "--iters", "1", "--rounds", "1"],
        ] {
            let t0 = std::time::Instant::now();
            let e = ws.fails(&args, 2);
            assert!(
                e.contains(named) && e.contains("above the limit"),
                "{args:?}: {e}"
            );
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{args:?} took {:?}",
                t0.elapsed()
            );
        }
        assert!(!ws.p("x.gguf").exists());
    }
    // A token id of 2^31 in tokenizer.json.
    let dir = ws.p("bad-vocab-id");
    assert!(std::process::Command::new("cp")
        .args(["-r", base.to_str().unwrap(), dir.to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let p = dir.join("tokenizer/tokenizer.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let first = v["model"]["vocab"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    v["model"]["vocab"][&first] = serde_json::json!(2147483648u64);
    std::fs::write(&p, v.to_string()).unwrap();
    for args in [
        vec!["convert", dir.to_str().unwrap(), "x.gguf"],
        vec!["ask", dir.to_str().unwrap(), "--request", "req.json"],
    ] {
        let e = ws.fails(&args, 2);
        assert!(
            e.contains("2147483648") && e.contains("tokenizer.json"),
            "{args:?}: {e}"
        );
    }
}

/// A build inside a built-in kind (a bench of a billion questions) stops within 2 s of SIGTERM
/// with exit 143, writes no output and leaves no process behind.
#[test]
fn a_signal_stops_a_built_in_kind() {
    let ws = Ws::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_tree(&root.join("models/s1-pico"), &ws.p("models/s1-pico"));
    ws.write(
        "pipeline.toml",
        "[[model]]\nname = \"s1-pico\"\nsource = \"models/s1-pico\"\nvariants = [\"f16\"]\nbench = { modes = [\"f32\"], questions = 1000000000, iters = 1, rounds = 1 }\n",
    );
    // The bench starts once the converted file is there.
    term_while_running(
        &ws,
        "build/s1-pico/s1-pico.f16.gguf",
        "build/s1-pico/bench.json",
    );
}

/// A calibration over a long prompt set (about a minute of forward passes) ends within a
/// question's time of SIGTERM.
#[test]
fn a_signal_stops_a_long_calibration() {
    let ws = Ws::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_tree(&root.join("models/s1-pico"), &ws.p("models/s1-pico"));
    let prompt = r#""type": "choice", "instructions": "Is this message spam?", "criteria": ["spam", "not_spam"], "state": "WIN a FREE cruise!!! Click the link now to claim your prize.""#;
    let prompts: String = (0..100_000)
        .map(|i| format!("{{\"id\": \"p{i}\", {prompt}}}\n"))
        .collect();
    ws.write("prompts.jsonl", &prompts);
    ws.write(
        "pipeline.toml",
        "[calibration.long]\nprompts = \"prompts.jsonl\"\n\n[[model]]\nname = \"s1-pico\"\nsource = \"models/s1-pico\"\nvariants = [\"q8_0\"]\nquantize = { calibration = \"long\" }\n",
    );
    // The calibration starts once the f32 file it reads is there.
    term_while_running(
        &ws,
        "build/s1-pico/s1-pico.f32.gguf",
        "build/s1-pico/calibration.json",
    );
}

/// A golden suite of many cases ends within a case's time of SIGTERM and writes no report.
#[test]
fn a_signal_stops_a_long_golden_suite() {
    let ws = Ws::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_tree(&root.join("models/s1-pico"), &ws.p("models/s1-pico"));
    let case = std::fs::read_to_string(root.join("golden/laya/cases.jsonl")).unwrap();
    let expected =
        std::fs::read_to_string(root.join("golden/laya/s1-pico.expected.jsonl")).unwrap();
    let (case, expected) = (
        case.lines().next().unwrap(),
        expected.lines().next().unwrap(),
    );
    let id = r#""id": "c2_list_plain""#;
    let compact_id = r#""id":"c2_list_plain""#;
    assert!(case.contains(id) && expected.contains(compact_id));
    let (mut cases, mut want) = (String::new(), String::new());
    for i in 0..20_000 {
        cases += &case.replace(id, &format!(r#""id": "c{i}""#));
        cases.push('\n');
        want += &expected.replace(compact_id, &format!(r#""id":"c{i}""#));
        want.push('\n');
    }
    ws.write("cases.jsonl", &cases);
    ws.write("expected.jsonl", &want);
    ws.write(
        "pipeline.toml",
        "[[model]]\nname = \"s1-pico\"\nsource = \"models/s1-pico\"\nvariants = [\"f16\"]\n\n[[golden]]\nname = \"long\"\nkind = \"model\"\nmodel = \"s1-pico\"\nvariant = \"f16\"\ncompute = \"f32\"\ncases = \"cases.jsonl\"\nexpected = \"expected.jsonl\"\ntolerance = 1e-3\n",
    );
    term_while_running(
        &ws,
        "build/s1-pico/s1-pico.f16.gguf",
        "build/golden/long.json",
    );
}

/// Start `skyctl build`, wait until `started` exists and 1.5 s more (the long node runs),
/// send SIGTERM: the build must exit 143 within 2 s, leave no `output` and a sound store.
fn term_while_running(ws: &Ws, started: &str, output: &str) {
    let mut child = ws
        .cmd(&["build"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = ws.p(started);
    let t = std::time::Instant::now();
    while !started.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            started.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the long node ended by itself"
    );
    let (status, took) = terminate(&mut child, "in a long node");
    assert_eq!(status.code(), Some(143));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(!ws.p(output).exists(), "{output} was written");
    store_check(ws);
}
