//! The no-op proof (`sky_dag::noop`): a plain `skyctl build` that finds nothing changed is
//! told from what the last full build looked at, without loading the graph. Each test makes
//! one kind of change after the proof is written and checks that the next plain build sees it
//! exactly as a build without the proof would: the same nodes run, the same files result. And
//! a build that changes nothing is answered by the proof (the phase timer says so).

mod common;

use common::Ws;

/// A plain `skyctl build` as a user types it (no `--json`, which the proof does not answer).
struct Plain {
    code: i32,
    stderr: String,
    /// The proof answered.
    proved: bool,
    /// The proof held but for edited files, and the build looked only at the nodes they
    /// lead to.
    vouched: bool,
    executed: u64,
    cached: u64,
}

fn plain_build(ws: &Ws, env: &[(&str, &str)]) -> Plain {
    let mut cmd = ws.cmd(&["build"]);
    cmd.env("SKYCTL_TIMINGS", "1")
        .env_remove("SKYCTL_REMOTE_CACHE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running skyctl");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // `skyctl: N executed, M cached, F failed, S skipped in T`
    let line = stderr
        .lines()
        .find(|l| l.starts_with("skyctl: ") && l.contains(" executed, "))
        .unwrap_or_else(|| panic!("no summary line:\n{stderr}"));
    let count = |what: &str| -> u64 {
        let before = line.split(&format!(" {what}")).next().unwrap_or_default();
        let n = before.rsplit([' ', ',']).next().unwrap_or_default();
        n.parse()
            .unwrap_or_else(|_| panic!("no `{what}` count in {line:?}"))
    };
    Plain {
        code: out.status.code().unwrap_or(-1),
        proved: stderr.contains("timing: no-op proof checked"),
        vouched: stderr.contains("timing: nodes the proof vouches for"),
        executed: count("executed"),
        cached: count("cached"),
        stderr,
    }
}

/// Build until the proof answers (the first builds may leave files too fresh to vouch for
/// by their stat); the third must.
fn settle(ws: &Ws) {
    for round in 0..3 {
        let b = plain_build(ws, &[]);
        assert_eq!(b.code, 0, "{}", b.stderr);
        if b.proved {
            assert_eq!((b.executed, b.cached), (0, NODES), "{}", b.stderr);
            return;
        }
        assert!(round < 2, "the proof never answered:\n{}", b.stderr);
        // Past the stat cache's racy window (50 ms).
        std::thread::sleep(std::time::Duration::from_millis(60));
    }
}

const NODES: u64 = 5;

/// Sources of every kind (a file, a folder, a glob over nested folders), a declared
/// variable, a chain of nodes, and a release tree.
fn project() -> Ws {
    let ws = Ws::new();
    ws.write("in/a.txt", "a\n");
    ws.write("data/one.txt", "one\n");
    ws.write("tree/x/1.txt", "1\n");
    ws.write("tree/y/z/2.txt", "2\n");
    ws.write(
        "pipeline.toml",
        r#"
[project]
release_dir = "dist"

[[command]]
name = "file"
run = "mkdir -p out && cat in/a.txt > out/file.txt"
inputs = ["in/a.txt"]
outputs = ["out/file.txt"]

[[command]]
name = "folder"
run = "mkdir -p out && ls -R data > out/folder.txt && cat data/*.txt >> out/folder.txt"
inputs = ["data"]
outputs = ["out/folder.txt"]

[[command]]
name = "glob"
run = "mkdir -p out && find tree -name '*.txt' | sort | xargs cat > out/glob.txt"
inputs = ["tree/**/*.txt"]
outputs = ["out/glob.txt"]

[[command]]
name = "env"
run = "mkdir -p out && echo \"${DECLARED:-unset}\" > out/env.txt"
outputs = ["out/env.txt"]
env = ["DECLARED"]

[[command]]
name = "all"
run = "cat out/file.txt out/folder.txt out/glob.txt out/env.txt > out/all.txt"
inputs = ["out/file.txt", "out/folder.txt", "out/glob.txt", "out/env.txt"]
outputs = ["out/all.txt"]

[[release.publish]]
from = "out/all.txt"
to = "all.txt"
"#,
    );
    let first = plain_build(&ws, &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.executed, NODES, "{}", first.stderr);
    settle(&ws);
    ws
}

/// Whether one of four plain builds, 60 ms apart (past the stat cache's racy window), is
/// answered by the proof the one before left.
fn answered_within_four_builds(ws: &Ws) -> bool {
    let mut answered = false;
    for _ in 0..4 {
        let b = plain_build(ws, &[]);
        assert_eq!(b.code, 0, "{}", b.stderr);
        answered |= b.proved;
        std::thread::sleep(std::time::Duration::from_millis(60));
    }
    answered
}

/// After `change`, the plain build runs exactly `ran` nodes (not from the proof), and the
/// build after that is answered by the proof again.
fn sees(ws: &Ws, ran: u64, env: &[(&str, &str)]) -> Plain {
    let b = plain_build(ws, env);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        !b.proved,
        "the proof answered after a change:\n{}",
        b.stderr
    );
    assert_eq!(b.executed, ran, "{}", b.stderr);
    b
}

#[test]
fn a_build_that_changes_nothing_is_answered_by_the_proof() {
    let ws = project();
    let b = plain_build(&ws, &[]);
    assert!(b.proved, "{}", b.stderr);
    assert_eq!((b.executed, b.cached), (0, NODES));
    // The same line as a build that loads the graph, the release included.
    assert!(
        b.stderr
            .contains("skyctl: 0 executed, 5 cached, 0 failed, 0 skipped in "),
        "{}",
        b.stderr
    );
    // A build with flags, targets or JSON loads the graph.
    for args in [
        &["build", "--json"][..],
        &["build", "-v"],
        &["build", "all"],
        &["build", "--rerun", "file"],
    ] {
        let out = ws
            .cmd(args)
            .env("SKYCTL_TIMINGS", "1")
            .output()
            .expect("skyctl");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("no-op proof"),
            "{args:?} was answered by the proof: {stderr}"
        );
    }
}

#[test]
fn an_edited_source_runs_its_node_and_what_follows() {
    let ws = project();
    // Same size, so only the stat's times and the content differ.
    ws.write("in/a.txt", "b\n");
    let b = sees(&ws, 2, &[]);
    assert!(b.vouched, "{}", b.stderr);
    assert_eq!(ws.read("dist/all.txt").lines().next(), Some("b"));
    settle(&ws);
}

#[test]
fn the_proof_an_edit_leaves_still_covers_the_nodes_that_build_did_not_look_at() {
    // No release tree (a build that publishes anew lists it within its racy window and
    // leaves no proof), so each build leaves the proof the next one starts from.
    let ws = Ws::new();
    ws.write("in/a.txt", "a\n");
    ws.write("data/one.txt", "one\n");
    ws.write("tree/y/z/2.txt", "2\n");
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "file"
run = "mkdir -p out && cat in/a.txt > out/file.txt"
inputs = ["in/a.txt"]
outputs = ["out/file.txt"]

[[command]]
name = "folder"
run = "mkdir -p out && cat data/*.txt > out/folder.txt"
inputs = ["data"]
outputs = ["out/folder.txt"]

[[command]]
name = "glob"
run = "mkdir -p out && find tree -name '*.txt' | sort | xargs cat > out/glob.txt"
inputs = ["tree/**/*.txt"]
outputs = ["out/glob.txt"]

[[command]]
name = "both"
run = "cat out/file.txt out/folder.txt > out/both.txt"
inputs = ["out/file.txt", "out/folder.txt"]
outputs = ["out/both.txt"]
"#,
    );
    assert!(answered_within_four_builds(&ws), "the proof never held");
    let edit_then_build = |rel: &str, content: &str, ran: u64| {
        ws.write(rel, content);
        let b = sees(&ws, ran, &[]);
        assert!(b.vouched, "{rel}: {}", b.stderr);
        // Answered by the proof that build left (files hashed within their racy window are
        // hashed again).
        let b = plain_build(&ws, &[]);
        assert!(b.proved, "{rel}: {}", b.stderr);
    };
    // Each build after the first starts from a proof that the one before left, and looks
    // only at the nodes its edit leads to.
    edit_then_build("in/a.txt", "b\n", 2);
    edit_then_build("data/one.txt", "uno\n", 2);
    assert_eq!(ws.read("out/both.txt"), "b\nuno\n");
    edit_then_build("tree/y/z/2.txt", "two\n", 1);
    assert_eq!(ws.read("out/glob.txt"), "two\n");
    edit_then_build("in/a.txt", "c\n", 2);
    // An edit that leaves the content as it was runs nothing.
    edit_then_build("data/one.txt", "uno\n", 0);
    assert_eq!(ws.read("out/both.txt"), "c\nuno\n");
    // An output of a node the last build did not look at, replaced (as an editor saves):
    // the usual build's, which puts it back.
    ws.write("edited.txt", "edited\n");
    std::fs::rename(ws.p("edited.txt"), ws.p("out/glob.txt")).unwrap();
    let b = sees(&ws, 0, &[]);
    assert!(!b.vouched, "{}", b.stderr);
    assert_eq!(ws.read("out/glob.txt"), "two\n");
}

#[test]
fn a_file_added_to_a_folder_input_or_deep_under_a_glob_is_seen() {
    let ws = project();
    ws.write("data/two.txt", "two\n");
    sees(&ws, 2, &[]);
    settle(&ws);
    // A new folder, three levels under the glob's root.
    ws.write("tree/y/z/w/3.txt", "3\n");
    sees(&ws, 2, &[]);
    assert!(ws.read("dist/all.txt").contains("3\n"));
    settle(&ws);
    // A file the glob does not match is a change of the folder, not of the inputs: the
    // build looks, and runs nothing.
    ws.write("tree/x/notes.md", "n\n");
    let b = sees(&ws, 0, &[]);
    assert_eq!(b.cached, NODES);
    settle(&ws);
    // A removed match.
    std::fs::remove_file(ws.p("tree/x/1.txt")).unwrap();
    sees(&ws, 2, &[]);
}

#[test]
fn a_glob_walked_from_the_top_of_the_workspace_is_answered_and_sees_a_new_file() {
    let ws = Ws::new();
    ws.write("a.md", "a\n");
    ws.write("deep/er/b.md", "b\n");
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "docs"
run = "mkdir -p out && find . -name '*.md' -not -path './.skyctl/*' | sort | xargs cat > out/docs.txt"
inputs = ["**/*.md"]
outputs = ["out/docs.txt"]
"#,
    );
    assert!(
        answered_within_four_builds(&ws),
        "a walk from the top never left a proof that holds"
    );
    ws.write("deep/er/est/c.md", "c\n");
    let b = plain_build(&ws, &[]);
    assert!(!b.proved, "{}", b.stderr);
    assert_eq!(b.executed, 1, "{}", b.stderr);
    assert_eq!(ws.read("out/docs.txt"), "a\nb\nc\n");
}

#[test]
fn a_declared_variable_with_another_value_runs_its_node() {
    let ws = project();
    sees(&ws, 2, &[("DECLARED", "now set")]);
    assert!(ws.read("out/env.txt").contains("now set"));
}

#[test]
fn outputs_and_release_files_changed_by_hand_are_put_back() {
    let ws = project();
    let all = ws.read("out/all.txt");
    // Replaced (as an editor saves): put back from the store.
    ws.write("edited.txt", "edited\n");
    std::fs::rename(ws.p("edited.txt"), ws.p("out/file.txt")).unwrap();
    let b = sees(&ws, 0, &[]);
    assert_eq!(b.cached, NODES);
    assert_eq!(ws.read("out/file.txt"), "a\n");
    settle(&ws);
    // Written in place: an output shares its blob's inode, so the stored copy is damaged
    // too, and the node runs again.
    ws.write("out/file.txt", "edited\n");
    sees(&ws, 1, &[]);
    assert_eq!(ws.read("out/file.txt"), "a\n");
    settle(&ws);
    std::fs::remove_file(ws.p("out/all.txt")).unwrap();
    sees(&ws, 0, &[]);
    assert_eq!(ws.read("out/all.txt"), all);
    settle(&ws);
    // An output replaced by a symlink to a copy of itself: same content, not the same file.
    std::fs::copy(ws.p("out/glob.txt"), ws.p("glob-copy.txt")).unwrap();
    std::fs::remove_file(ws.p("out/glob.txt")).unwrap();
    std::os::unix::fs::symlink(ws.p("glob-copy.txt"), ws.p("out/glob.txt")).unwrap();
    let out = ws
        .cmd(&["build"])
        .env("SKYCTL_TIMINGS", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`out/glob.txt` is a symlink (to `glob-copy.txt`); outputs are written only through real folders"),
        "{stderr}"
    );
    assert!(!stderr.contains("no-op proof checked"), "{stderr}");
    std::fs::remove_file(ws.p("out/glob.txt")).unwrap();
    std::fs::rename(ws.p("glob-copy.txt"), ws.p("out/glob.txt")).unwrap();
    plain_build(&ws, &[]);
    settle(&ws);
    // The release tree: an edited file, then a stray one.
    ws.write("dist/all.txt", "edited\n");
    sees(&ws, 0, &[]);
    assert_eq!(ws.read("dist/all.txt"), all);
    settle(&ws);
    ws.write("dist/stray.txt", "x\n");
    sees(&ws, 0, &[]);
    assert!(!ws.p("dist/stray.txt").exists());
    settle(&ws);
}

#[test]
fn a_collected_or_replaced_store_is_seen() {
    let ws = project();
    // A blob removed behind the build's back (another workspace's gc, a hand): the blob
    // folder's ctime moved, the build looks and stores it again.
    let hex = blake3::hash(ws.read("out/all.txt").as_bytes()).to_hex();
    let blob = ws.p(&format!(
        ".skyctl/store-v2/blobs/{}/{}",
        &hex[..2],
        &hex[2..]
    ));
    std::fs::remove_file(&blob).unwrap();
    sees(&ws, 0, &[]);
    assert!(blob.is_file(), "the build stored {} again", blob.display());
    settle(&ws);
    // A new store: every node's record is looked for there.
    std::fs::remove_dir_all(ws.p(".skyctl/store-v2")).unwrap();
    let b = sees(&ws, 0, &[]);
    assert_eq!(b.cached, NODES);
    assert!(blob.is_file());
    settle(&ws);
}

#[test]
fn every_command_that_takes_the_lock_drops_the_proof() {
    let ws = project();
    let proof = ws.p(".skyctl/state-v1/noop-proof");
    assert!(proof.is_file());
    // `verify` (a build of the golden targets) and a build of one target.
    for args in [&["build", "file"][..], &["clean"]] {
        let out = ws.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!proof.exists(), "{args:?} left the proof");
        plain_build(&ws, &[]);
        settle(&ws);
    }
    // The manifest edited: another graph, another key.
    let mut text = ws.read("pipeline.toml");
    text.push_str(
        "\n[[command]]\nname = \"more\"\nrun = \"echo m > m.txt\"\noutputs = [\"m.txt\"]\n",
    );
    ws.write("pipeline.toml", &text);
    let b = plain_build(&ws, &[]);
    assert!(!b.proved);
    assert_eq!(b.executed, 1, "{}", b.stderr);
}

/// With `proof` in place of the workspace's, the plain build is not answered by it, and
/// builds as it would without one (nothing runs); then the proof answers again.
fn not_answered_by(ws: &Ws, proof: &[u8], what: &str) {
    std::fs::write(ws.p(".skyctl/state-v1/noop-proof"), proof).unwrap();
    let b = plain_build(ws, &[]);
    assert_eq!(
        (b.code, b.executed, b.cached),
        (0, 0, NODES),
        "{}",
        b.stderr
    );
    assert!(!b.proved, "{what} answered");
    settle(ws);
}

#[test]
fn a_damaged_or_foreign_proof_is_only_a_missed_shortcut() {
    let ws = project();
    let proof = ws.p(".skyctl/state-v1/noop-proof");
    let bytes = std::fs::read(&proof).unwrap();
    for cut in [0, 8, bytes.len() / 2, bytes.len() - 1] {
        not_answered_by(&ws, &bytes[..cut], &format!("a proof cut at {cut}"));
    }
    // A flipped bit anywhere in a proof that holds: found by the frame's digest if not sooner
    // (a tag flipped from a settled file to a state file, say, checks the same stat).
    for at in (0..bytes.len()).step_by(23) {
        let holds = std::fs::read(&proof).unwrap();
        let mut flipped = holds.clone();
        flipped[at.min(holds.len() - 1)] ^= 0x04;
        not_answered_by(&ws, &flipped, &format!("a proof with byte {at} flipped"));
    }
    // Another workspace's proof (a copied `.skyctl`): its paths are not these files.
    let other = project();
    std::fs::copy(other.p(".skyctl/state-v1/noop-proof"), &proof).unwrap();
    let b = plain_build(&ws, &[]);
    assert!(!b.proved, "{}", b.stderr);
    assert_eq!((b.code, b.executed), (0, 0));
}

#[test]
fn a_held_lock_is_waited_for_not_read_around() {
    let ws = project();
    // Another build holds the workspace lock: the proof is not read while it may be writing.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ws.p(".skyctl/state-v1/lock"))
        .unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let mut child = ws
        .cmd(&["build"])
        .env("SKYCTL_TIMINGS", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the build did not wait for the lock"
    );
    drop(lock);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("waiting for another skyctl build"),
        "{stderr}"
    );
    assert!(!stderr.contains("no-op proof checked"), "{stderr}");
}
