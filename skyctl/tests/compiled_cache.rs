//! The compiled-graph cache (`.skyctl/state-v1/graph.bin`) and the binary build state: each
//! thing a cached graph or state depends on, changed, must be seen by the next build; a
//! damaged file must be ignored, never trusted.

mod common;

use common::*;

const GRAPH: &str = ".skyctl/state-v1/graph.bin";

/// Three command nodes in a chain, one reading a declared environment variable.
fn chain() -> Ws {
    let ws = Ws::new();
    ws.write("in/a.txt", "alpha\n");
    ws.write("in/b.txt", "beta\n");
    ws.write(
        "pipeline.toml",
        r#"[[command]]
name = "one"
run = "mkdir -p out && cat in/a.txt > out/one"
inputs = ["in/a.txt"]
outputs = ["out/one"]

[[command]]
name = "two"
run = "cat out/one in/b.txt > out/two"
inputs = ["out/one", "in/b.txt"]
outputs = ["out/two"]

[[command]]
name = "three"
run = "echo \"$GREETING\" | cat out/two - > out/three"
inputs = ["out/two"]
outputs = ["out/three"]
env = ["GREETING"]
"#,
    );
    ws
}

/// `skyctl build --json` with phase timings on; also whether the graph came from the cache.
fn build(ws: &Ws, args: &[&str], env: &[(&str, &str)]) -> (BuildRun, bool) {
    let mut c = ws.cmd(&[&["build", "--json"], args].concat());
    c.env("SKYCTL_TIMINGS", "1").env_remove("GREETING");
    for (k, v) in env {
        c.env(k, v);
    }
    let run = parse_build(c.output().expect("running skyctl"));
    let cached = run.stderr.contains("timing: graph (cached)");
    assert!(
        cached || run.code != 0 || run.stderr.contains("timing: graph (parsed)"),
        "{}",
        run.stderr
    );
    (run, cached)
}

/// A first build, then a no-op that uses the cache.
fn built() -> Ws {
    let ws = chain();
    let (first, cached) = build(&ws, &[], &[]);
    assert_eq!((first.code, first.count("executed"), cached), (0, 3, false));
    let (again, cached) = build(&ws, &[], &[]);
    assert_eq!((again.code, again.count("executed"), cached), (0, 0, true));
    ws
}

/// Put the mtime of `rel` back to what it was, so only the content says it changed.
fn edit_keeping_mtime(ws: &Ws, rel: &str, from: &str, to: &str) {
    let p = ws.p(rel);
    let before = std::fs::metadata(&p).unwrap().modified().unwrap();
    let text = ws.read(rel);
    assert!(text.contains(from));
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(before)
        .unwrap();
}

#[test]
fn an_edited_manifest_is_parsed_again_even_with_its_size_and_mtime_kept() {
    let ws = built();
    // Same length, same mtime: only the bytes differ.
    edit_keeping_mtime(&ws, "pipeline.toml", "cat in/a.txt >", "cat in/b.txt >");
    let (run, cached) = build(&ws, &[], &[]);
    assert!(!cached);
    assert_eq!(
        run.executed(),
        vec!["one", "three", "two"],
        "{:?}",
        run.events
    );
    assert_eq!(ws.read("out/one"), "beta\n");
    assert_eq!(run.why("one")["reason"], "params_changed");
    let (run, cached) = build(&ws, &[], &[]);
    assert_eq!((run.count("executed"), cached), (0, true));
}

#[test]
fn a_declared_variable_changed_reruns_its_node() {
    let ws = built();
    let (run, cached) = build(&ws, &[], &[("GREETING", "hello")]);
    assert!(!cached);
    assert_eq!(run.executed(), vec!["three"]);
    assert!(ws.read("out/three").ends_with("hello\n"));
    let (run, cached) = build(&ws, &[], &[("GREETING", "hello")]);
    assert_eq!((run.count("executed"), cached), (0, true));
    // Unset again: back to the first value (the store has it: restored, nothing runs).
    let (run, cached) = build(&ws, &[], &[]);
    assert!(!cached);
    assert_eq!(run.count("executed"), 0);
    assert!(ws.read("out/three").ends_with("beta\n\n"));
}

#[test]
fn inputs_and_outputs_are_still_checked_with_a_cached_graph() {
    let ws = built();
    // A touch with the same content: nothing runs.
    let p = ws.p("in/a.txt");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let (run, cached) = build(&ws, &[], &[]);
    assert_eq!((run.count("executed"), cached), (0, true));
    // New content, same size, mtime put back: the ctime says it changed.
    edit_keeping_mtime(&ws, "in/b.txt", "beta", "BETA");
    let (run, cached) = build(&ws, &[], &[]);
    assert!(cached);
    assert_eq!(run.executed(), vec!["three", "two"]);
    assert_eq!(run.why("two")["reason"], "input_changed");
    // A deleted output comes back from the store; a replaced one too (written in place, it
    // would be the blob it is linked to: see `pipeline::corrupted_blob_is_detected_and_rebuilt`).
    std::fs::remove_file(ws.p("out/two")).unwrap();
    std::fs::remove_file(ws.p("out/three")).unwrap();
    std::fs::write(ws.p("out/three"), "tampered\n").unwrap();
    let (run, cached) = build(&ws, &[], &[]);
    assert!(cached);
    assert_eq!(run.count("executed"), 0, "{:?}", run.events);
    assert_eq!(
        run.with_status("restored"),
        vec!["three".to_string(), "two".to_string()]
    );
    assert_eq!(ws.read("out/two"), "alpha\nBETA\n");
    assert!(ws.read("out/three").starts_with("alpha\nBETA\n"));
    // Targets and --rerun select from the cached graph like from a parsed one.
    let (run, cached) = build(&ws, &["two", "--rerun", "one"], &[]);
    assert!(cached);
    assert_eq!(run.executed(), vec!["one"]);
    assert_eq!(run.count("cached"), 1);
}

#[test]
fn a_damaged_cache_is_ignored_and_rewritten() {
    let ws = built();
    let good = std::fs::read(ws.p(GRAPH)).unwrap();
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x20;
    let damaged: Vec<Vec<u8>> = vec![
        Vec::new(),
        good[..good.len() / 3].to_vec(),
        flipped,
        b"not a graph at all".to_vec(),
        [good.as_slice(), b"trailing"].concat(),
    ];
    for bad in damaged {
        std::fs::write(ws.p(GRAPH), &bad).unwrap();
        let (run, cached) = build(&ws, &[], &[]);
        assert_eq!((run.code, run.count("executed"), cached), (0, 0, false));
        assert_eq!(std::fs::read(ws.p(GRAPH)).unwrap(), good);
    }
    // A graph cached for another manifest is not used for this one.
    let other = chain();
    other.write(
        "pipeline.toml",
        "[[command]]\nname = \"x\"\nrun = \"mkdir -p out && echo x > out/x\"\noutputs = [\"out/x\"]\n",
    );
    let (run, _) = build(&other, &[], &[]);
    assert_eq!(run.count("executed"), 1);
    std::fs::copy(other.p(GRAPH), ws.p(GRAPH)).unwrap();
    let (run, cached) = build(&ws, &[], &[]);
    assert_eq!((run.code, run.count("executed"), cached), (0, 0, false));
    assert_eq!(run.count("cached"), 3);
}

#[test]
fn another_executable_compiles_its_own_graph() {
    let ws = built();
    let key = |ws: &Ws| std::fs::read(ws.p(GRAPH)).unwrap()[48..80].to_vec();
    let before = key(&ws);
    // The same binary under another name and inode (a rebuilt or reinstalled skyctl).
    let copy = ws.p("skyctl-copy");
    std::fs::copy(skyctl_bin(), &copy).unwrap();
    // A test thread that forks while the copy is still open for writing hands the child that
    // descriptor until it execs, and running the file meanwhile fails with "Text file busy":
    // try again until that child is gone.
    let mut tries = 0;
    let out = loop {
        let got = std::process::Command::new(&copy)
            .args(["build", "--json"])
            .current_dir(ws.path())
            .env("SKYCTL_TIMINGS", "1")
            .env_remove("GREETING")
            .env_remove("SKYCTL_STORE")
            .output();
        match got {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    let run = parse_build(out);
    assert_eq!((run.code, run.count("executed")), (0, 0));
    assert!(
        run.stderr.contains("timing: graph (parsed)"),
        "{}",
        run.stderr
    );
    assert_ne!(key(&ws), before);
    // And back: this binary does not take the copy's graph either.
    let (_, cached) = build(&ws, &[], &[]);
    assert!(!cached);
    assert_eq!(key(&ws), before);
}

#[test]
fn a_symlink_leading_out_is_refused_with_a_cached_graph() {
    let ws = built();
    let outside = tempfile::tempdir().unwrap();
    std::fs::rename(ws.p("out"), outside.path().join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("out"), ws.p("out")).unwrap();
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("`out` is a symlink leading out of the workspace"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("out/one")).unwrap(),
        "alpha\n"
    );
}

#[test]
fn a_store_override_compiles_its_own_graph() {
    let ws = built();
    let store = tempfile::tempdir().unwrap();
    let s = store.path().to_str().unwrap();
    let (run, cached) = build(&ws, &["--store", s], &[]);
    assert_eq!((run.code, run.count("executed"), cached), (0, 0, false));
    let (run, cached) = build(&ws, &["--store", s], &[]);
    assert_eq!((run.code, run.count("executed"), cached), (0, 0, true));
    let (_, cached) = build(&ws, &[], &[]);
    assert!(!cached);
}

#[test]
fn a_command_folder_leading_out_is_refused_with_a_cached_graph() {
    let ws = Ws::new();
    ws.write("sub/in.txt", "x\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"mkdir -p ../out && cat in.txt > ../out/a\"\ncwd = \"sub\"\ninputs = [\"sub/in.txt\"]\noutputs = [\"out/a\"]\n",
    );
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.count("executed"), 1);
    let (run, cached) = build(&ws, &[], &[]);
    assert_eq!((run.count("executed"), cached), (0, true));
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("in.txt"), "x\n").unwrap();
    std::fs::remove_dir_all(ws.p("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.p("sub")).unwrap();
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cwd `sub` leads out of the workspace through a symlink"),
        "{}",
        run.stderr
    );
}

const LAST: &str = ".skyctl/state-v1/last-build.bin";
const MATERIALS: &str = ".skyctl/state-v1/materials.log";

#[test]
fn a_damaged_build_state_is_never_trusted() {
    let ws = built();
    let good = std::fs::read(ws.p(LAST)).unwrap();
    let mut flipped = good.clone();
    let at = flipped.len() - 20;
    flipped[at] ^= 0x01;
    for bad in [
        good[..good.len() - 1].to_vec(),
        flipped,
        b"garbage".to_vec(),
    ] {
        std::fs::write(ws.p(LAST), &bad).unwrap();
        // Unchanged inputs: every node is checked against the store's records; none runs.
        let (run, _) = build(&ws, &[], &[]);
        assert_eq!(
            (run.code, run.count("executed"), run.count("cached")),
            (0, 0, 3)
        );
    }
    // A damaged record and a changed input: the node still runs.
    std::fs::write(ws.p(LAST), b"garbage").unwrap();
    ws.write("in/a.txt", "ALPHA\n");
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.executed(), vec!["one", "three", "two"]);
    assert_eq!(ws.read("out/three"), "ALPHA\nbeta\n\n");
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.count("executed"), 0);
    // Changes since the base go to last-build.log; a damaged or cut log is not trusted past
    // the damage, and the answer stays right.
    ws.write("in/b.txt", "b2\n");
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.executed(), vec!["three", "two"]);
    let log = ".skyctl/state-v1/last-build.log";
    let bytes = std::fs::read(ws.p(log)).unwrap();
    assert!(!bytes.is_empty());
    for bad in [bytes[..bytes.len() - 3].to_vec(), {
        let mut b = bytes.clone();
        b[40] ^= 2;
        b
    }] {
        std::fs::write(ws.p(log), &bad).unwrap();
        let (run, _) = build(&ws, &[], &[]);
        assert_eq!((run.code, run.count("executed")), (0, 0));
        ws.write("in/b.txt", &format!("b{}\n", bad.len()));
        let (run, _) = build(&ws, &[], &[]);
        assert_eq!(run.executed(), vec!["three", "two"]);
        assert!(ws.read("out/two").ends_with(&format!("b{}\n", bad.len())));
    }
}

#[test]
fn damaged_key_materials_only_make_reasons_vaguer() {
    let ws = built();
    let mats = std::fs::read(ws.p(MATERIALS)).unwrap();
    // The materials are in id order (one, three, two): the first survives the cut.
    std::fs::write(ws.p(MATERIALS), &mats[..mats.len() / 2]).unwrap();
    ws.write("in/a.txt", "a2\n");
    let out = ws.run(&["explain", "two"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.executed(), vec!["one", "three", "two"]);
    assert_eq!(run.why("one")["reason"], "input_changed");
    assert_eq!(run.why("two")["reason"], "no_record");
    std::fs::write(ws.p(MATERIALS), b"").unwrap();
    ws.write("in/b.txt", "b3\n");
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.executed(), vec!["three", "two"]);
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.count("executed"), 0);
}

#[test]
fn temp_files_are_swept_after_a_build_that_did_not_end_cleanly() {
    let ws = built();
    let lock = ".skyctl/state-v1/lock";
    // After a clean build the lock file says since when; a killed one leaves its pid there.
    assert!(ws.read(lock).starts_with("clean\n"), "{}", ws.read(lock));
    ws.write("out/.skyctl-tmp-one.12345-1", "half");
    std::fs::write(ws.p(lock), "999999").unwrap();
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.code, 0);
    assert!(!ws.p("out/.skyctl-tmp-one.12345-1").exists());
    assert!(ws.read(lock).starts_with("clean\n"));
    // A folder changed since the clean end is listed too, whatever made the change.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.code, 0);
    ws.write("out/.skyctl-tmp-two.12345-2", "half");
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.code, 0);
    assert!(!ws.p("out/.skyctl-tmp-two.12345-2").exists());
    // A failed build does not say it ended cleanly.
    ws.write(
        "pipeline.toml",
        &ws.read("pipeline.toml")
            .replace("cat in/a.txt", "false && cat in/a.txt"),
    );
    let (run, _) = build(&ws, &[], &[]);
    assert_eq!(run.code, 1);
    assert!(!ws.read(lock).starts_with("clean"), "{}", ws.read(lock));
}
