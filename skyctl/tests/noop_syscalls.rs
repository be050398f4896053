//! The no-op build's file-system calls, counted (`strace -c -f`), not timed: a no-op stats
//! each declared output and each source once, and each blob folder of the store at most once,
//! plus a constant (the state files, the locks, the process start). A second `stat` per output
//! anywhere on the path (a symlink check, a blob check, a prefetch) breaks the bound, whatever
//! the machine's load. The same for a rebuild of one leaf node.

mod common;

use common::Ws;

/// Layers of this many command nodes, each reading two nodes of the layer before (the shape
/// of `bench/pipeline_gen.py`'s `layersN`).
const WIDTH: usize = 50;
const LAYERS: usize = 12;
/// `in/s0.txt` .. `in/s9.txt` and `in/leaf.txt`.
const SOURCES: usize = 11;
/// What does not grow with the graph: the process start, pipeline.toml, the state files, the
/// workspace and store locks, the store's folders. Measured at 105-115 calls on x86-64 Linux.
const CONSTANT: u64 = 160;
/// A one-leaf rebuild also runs that node: `sh`, `mkdir`, `cat` and `cksum` start (each loads
/// its libraries), and its output and log are stored and their blob folders stamped anew.
const ONE_NODE_RUN: u64 = 400;

fn generated() -> Ws {
    let ws = Ws::new();
    for i in 0..10 {
        ws.write(&format!("in/s{i}.txt"), &format!("source {i}\n"));
    }
    ws.write("in/leaf.txt", "leaf\n");
    let mut toml = String::new();
    for layer in 0..LAYERS {
        for i in 0..WIDTH {
            let name = format!("l{layer}-{i}");
            let mut inputs = if layer == 0 {
                vec![format!("in/s{}.txt", i % 10)]
            } else {
                vec![
                    format!("out/l{}-{i}", layer - 1),
                    format!("out/l{}-{}", layer - 1, (i + 1) % WIDTH),
                ]
            };
            if layer == LAYERS - 1 && i == 0 {
                inputs.push("in/leaf.txt".into());
            }
            let quoted: Vec<String> = inputs.iter().map(|p| format!("\"{p}\"")).collect();
            toml.push_str(&format!(
                "[[command]]\nname = \"{name}\"\nrun = \"mkdir -p out && cat {} | cksum > out/{name}\"\ninputs = [{}]\noutputs = [\"out/{name}\"]\n\n",
                inputs.join(" "),
                quoted.join(", ")
            ));
        }
    }
    ws.write("pipeline.toml", &toml);
    ws
}

/// File-system calls (`%file` and `%fstat`) of `skyctl build -j 2` in `ws`, its children
/// included, and the build's summary.
fn counted_build(ws: &Ws) -> (u64, serde_json::Value) {
    let (calls, summary, _) = counted_build_table(ws);
    (calls, summary)
}

/// [`counted_build`] with strace's table, for the messages.
fn counted_build_table(ws: &Ws) -> (u64, serde_json::Value, String) {
    let (calls, out, table) = counted(ws, &["build", "--json", "-j", "2"]);
    let run = common::parse_build(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    (calls, run.summary, table)
}

/// File-system calls of `skyctl ARGS` in `ws` (children included), what it printed, and
/// strace's table.
fn counted(ws: &Ws, args: &[&str]) -> (u64, std::process::Output, String) {
    let log = ws.p("strace.txt");
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq", "-c", "-e", "trace=%file,%fstat", "-o"])
        .arg(&log)
        .arg(common::skyctl_bin())
        .args(args)
        .current_dir(ws.path())
        .env_remove("SKYCTL_STORE")
        // cargo's library path makes the loader try a dozen folders per library: a process
        // start of another size than a user's.
        .env_remove("LD_LIBRARY_PATH")
        .env("SKYCTL_TIMINGS", "1")
        .output()
        .unwrap_or_else(|e| panic!("strace must be installed (Debian package strace): {e}"));
    let table = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).unwrap();
    let total = table
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .unwrap_or_else(|| panic!("no total in strace's table:\n{table}"));
    // `100.00 SECONDS USECS/CALL CALLS [ERRORS] total`: the calls are the fourth column.
    let calls = total
        .split_whitespace()
        .nth(3)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no call count in {total:?}"));
    (calls, out, table)
}

/// The store's blob fan-out folders (`blobs/00` .. `blobs/ff`) in use.
fn blob_folders(ws: &Ws) -> u64 {
    std::fs::read_dir(ws.p(".skyctl/store-v2/blobs"))
        .unwrap()
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_dir()))
        .count() as u64
}

#[test]
fn a_noop_build_stats_each_output_and_source_once() {
    let ws = generated();
    let outputs = (WIDTH * LAYERS) as u64;
    let (_, cold) = counted_build(&ws);
    assert_eq!(cold["executed"], outputs, "{cold}");
    let folders = blob_folders(&ws);
    assert!(folders > 0 && folders <= 256, "{folders}");
    // Just written, the outputs are too fresh for the stat cache to trust (their mtime is
    // within the clock's granularity): the first no-op hashes them again and records them.
    let (_, first) = counted_build(&ws);
    assert_eq!(first["executed"], 0, "{first}");
    for round in 0..3 {
        let (calls, summary, table) = counted_build_table(&ws);
        assert_eq!(summary["executed"], 0, "{summary}");
        assert_eq!(summary["cached"], outputs, "{summary}");
        let bound = outputs + SOURCES as u64 + folders + CONSTANT;
        assert!(
            calls <= bound,
            "no-op {round}: {calls} file-system calls for {outputs} outputs, {SOURCES} sources \
             and {folders} blob folders (bound {bound}): something stats an output twice\n{table}"
        );
        // And not by skipping checks: each output is looked at.
        assert!(calls >= outputs, "no-op {round}: {calls} calls");
    }
}

#[test]
fn a_one_leaf_rebuild_stats_each_output_and_source_once() {
    let ws = generated();
    let outputs = (WIDTH * LAYERS) as u64;
    counted_build(&ws);
    counted_build(&ws);
    for round in 0..2 {
        ws.write("in/leaf.txt", &format!("leaf, edit {round}\n"));
        let (calls, summary, table) = counted_build_table(&ws);
        assert_eq!(summary["executed"], 1, "{summary}");
        let folders = blob_folders(&ws);
        // The blob folders are looked at once; only those the run stored into are stamped
        // anew at the end.
        let bound = outputs + SOURCES as u64 + folders + CONSTANT + ONE_NODE_RUN;
        assert!(
            calls <= bound,
            "one-leaf rebuild {round}: {calls} file-system calls for {outputs} outputs, \
             {SOURCES} sources and {folders} blob folders (bound {bound})\n{table}"
        );
    }
}

/// A plain build after an edit, which the last build's proof answers for every other path:
/// one `lstat` per path the proof holds, one per blob folder, and the leaf's own work; no
/// output is looked at twice and no blob folder is stamped anew but those it stored into.
#[test]
fn a_one_leaf_rebuild_from_the_proof_stats_each_path_once() {
    let ws = generated();
    let outputs = (WIDTH * LAYERS) as u64;
    counted_build(&ws);
    // Plain builds until one is answered by the proof the one before left.
    let mut proved = false;
    for _ in 0..4 {
        let (_, out, _) = counted(&ws, &["build", "-j", "2"]);
        proved = String::from_utf8_lossy(&out.stderr).contains("timing: no-op proof checked");
        if proved {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(60));
    }
    assert!(proved, "no build was answered by the proof");
    let folders = blob_folders(&ws);
    for round in 0..3 {
        ws.write("in/leaf.txt", &format!("leaf, edit {round}\n"));
        let (calls, out, table) = counted(&ws, &["build", "-j", "2"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "skyctl: 1 executed, {} cached, 0 failed",
                outputs - 1
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains("timing: nodes the proof vouches for"),
            "round {round} looked at every node:\n{stderr}"
        );
        let bound = outputs + SOURCES as u64 + folders + CONSTANT + ONE_NODE_RUN;
        assert!(
            calls <= bound,
            "one-leaf rebuild {round} from the proof: {calls} file-system calls for {outputs} \
             outputs, {SOURCES} sources and {folders} blob folders (bound {bound})\n{table}"
        );
        assert!(calls >= outputs, "one-leaf rebuild {round}: {calls} calls");
    }
}

/// A blob damaged by hand after a no-op build is still found by the next one (its folder's
/// ctime moved), which stores it again from the workspace.
#[test]
fn a_damaged_blob_is_seen_by_the_next_noop_build() {
    let ws = generated();
    counted_build(&ws);
    counted_build(&ws);
    counted_build(&ws);
    let hex = blake3::hash(&std::fs::read(ws.p("out/l5-7")).unwrap()).to_hex();
    let blob = ws.p(&format!(
        ".skyctl/store-v2/blobs/{}/{}",
        &hex[..2],
        &hex[2..]
    ));
    std::fs::remove_file(&blob).unwrap();
    let (_, summary) = counted_build(&ws);
    assert_eq!(summary["executed"], 0, "{summary}");
    assert!(
        std::fs::symlink_metadata(&blob).is_ok_and(|m| m.is_file()),
        "the no-op build stored {} again",
        blob.display()
    );
    let check = ws.run(&["store", "check"]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// A plain `skyctl build` that changed nothing is answered by the last build's no-op proof:
/// one `lstat` per path it recorded (each output and source, the folders on the way, the state
/// files) and one per blob folder, without loading the graph; a no-op build through the graph
/// ([`a_noop_build_stats_each_output_and_source_once`]) makes as many.
#[test]
fn a_noop_build_answered_by_the_proof_stats_each_path_once() {
    let ws = generated();
    let outputs = (WIDTH * LAYERS) as u64;
    counted_build(&ws);
    counted_build(&ws);
    let folders = blob_folders(&ws);
    let mut answered = 0;
    for round in 0..4 {
        let (calls, out, table) = counted(&ws, &["build", "-j", "2"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!("skyctl: 0 executed, {outputs} cached, 0 failed")),
            "{stderr}"
        );
        if !stderr.contains("timing: no-op proof checked") {
            // The first plain build writes the proof (the JSON builds do not answer from one).
            assert_eq!(
                round, 0,
                "round {round} was not answered by the proof:\n{stderr}"
            );
            continue;
        }
        answered += 1;
        let bound = outputs + SOURCES as u64 + folders + CONSTANT;
        assert!(
            calls <= bound,
            "no-op {round} from the proof: {calls} file-system calls for {outputs} outputs, \
             {SOURCES} sources and {folders} blob folders (bound {bound})\n{table}"
        );
        assert!(calls >= outputs, "no-op {round}: {calls} calls");
    }
    assert!(answered >= 3, "{answered} of 4 answered by the proof");
}
