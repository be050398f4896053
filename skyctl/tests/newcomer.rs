//! A newcomer's first project, run as a user would in a temp dir: `init` -> `build` ->
//! `verify`, `golden record`, a changed model failing its suite, and the messages a person
//! meets on the way (said once, located, with the right exit code).

mod common;

use common::Ws;

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `init` in a fresh workspace, then a successful build.
fn initialised() -> Ws {
    let ws = Ws::new();
    let o = ws.run(&["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    ws
}

#[test]
fn init_gives_a_project_that_builds_and_verifies() {
    let ws = Ws::new();
    let o = ws.run(&["init"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for wrote in [
        "./models/s1-pico/",
        "./golden/s1-pico/cases.jsonl (8 cases)",
        "./pipeline.toml",
        "./.gitignore (keeps /.skyctl/ /build/ /site/public/ out of git)",
        "next: skyctl build && skyctl verify",
    ] {
        assert!(out.contains(wrote), "{wrote:?} missing from:\n{out}");
    }
    assert_eq!(
        ws.read(".gitignore"),
        "# What skyctl build writes: the store, the build folder, the release tree\n/.skyctl/\n/build/\n/site/public/\n"
    );
    let b = ws.build(&[]);
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);
    assert_eq!(b.count("executed"), 10);
    assert_eq!(
        b.summary["release"],
        serde_json::json!({"dir": "site/public", "published": true, "blocked_by": []})
    );
    // The site comes with skyctl: pages, scripts and both engine modules, beside the models.
    for f in [
        "site/public/SHA256SUMS",
        "site/public/models/manifest.json",
        "site/public/models/s1-pico.gguf",
        "site/public/models/s1-pico.q8_0.gguf",
        "site/public/bench.json",
        "site/public/index.html",
        "site/public/bench.html",
        "site/public/sky-worker.js",
        "site/public/sky-web.simd.wasm",
        "site/public/sky-web.scalar.wasm",
    ] {
        assert!(ws.p(f).is_file(), "{f} missing");
    }
    assert_eq!(
        std::fs::read(ws.p("site/public/index.html")).unwrap(),
        std::fs::read(repo().join("site/src/index.html")).unwrap()
    );
    for m in ["simd", "scalar"] {
        let wasm = std::fs::read(ws.p(&format!("site/public/sky-web.{m}.wasm"))).unwrap();
        assert_eq!(&wasm[..4], b"\0asm", "{m}");
    }
    let sums = ws.read("site/public/SHA256SUMS");
    assert!(sums.ends_with("  models/s1-pico.gguf\n"), "{sums}");
    let v = ws.run(&["verify"]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
    assert!(
        stdout(&v).contains("s1-pico-f16   f32   8 cases"),
        "{}",
        stdout(&v)
    );
    assert_eq!(ws.build(&[]).count("executed"), 0);
}

#[test]
fn init_refuses_an_existing_pipeline_unless_forced() {
    let ws = Ws::new();
    ws.write("pipeline.toml", "# mine\n");
    let e = ws.fails(&["init"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: `./pipeline.toml` already exists; not overwriting it (use --force to replace it)"
    );
    assert_eq!(ws.read("pipeline.toml"), "# mine\n");
    let o = ws.run(&["init", "--force"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(ws.read("pipeline.toml").contains("[[model]]"));
}

#[test]
fn init_adds_what_an_existing_gitignore_lacks_and_help_says_what_it_writes() {
    let ws = Ws::new();
    ws.write(".gitignore", "target\n/build/");
    let o = ws.run(&["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("./.gitignore (now also keeps /.skyctl/ /site/public/ out of git)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        ws.read(".gitignore"),
        "target\n/build/\n# What skyctl build writes: the store, the build folder, the release tree\n/.skyctl/\n/site/public/\n"
    );
    // Again: nothing is missing, nothing is added.
    let o = ws.run(&["init", "--force"]);
    assert!(stdout(&o).contains("already keeps"), "{}", stdout(&o));
    assert_eq!(ws.read(".gitignore").matches("/.skyctl/").count(), 1);

    let help = stdout(&ws.run(&["init", "--help"]));
    for what in [
        "checkpoint",
        "golden cases",
        "expected outputs",
        "pipeline.toml",
        "the site",
        ".gitignore",
    ] {
        assert!(
            help.contains(what),
            "{what:?} missing from init --help:\n{help}"
        );
    }
}

#[test]
fn init_from_an_existing_checkpoint() {
    let ws = Ws::new();
    let src = repo().join("models/s1-nano");
    let o = ws.run(&["init", "proj", "--model", src.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("proj/models/s1-nano/ (a copy of"), "{out}");
    assert!(
        out.contains("next: cd proj && skyctl build && skyctl verify"),
        "{out}"
    );
    assert_eq!(
        std::fs::read(ws.p("proj/models/s1-nano/model.safetensors")).unwrap(),
        std::fs::read(src.join("model.safetensors")).unwrap()
    );
    let toml = ws.read("proj/pipeline.toml");
    assert!(toml.contains("name = \"s1-nano\"") && !toml.contains("s1-pico"));
    let b = common::parse_build(
        ws.cmd(&["build", "--json"])
            .current_dir(ws.p("proj"))
            .output()
            .unwrap(),
    );
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);
    // A folder that is not a checkpoint stops before anything is written.
    let e = ws.fails(
        &[
            "init",
            "other",
            "--model",
            ws.p("proj/golden").to_str().unwrap(),
        ],
        2,
    );
    assert!(e.contains("is not a usable Laya checkpoint"), "{e}");
    assert!(!ws.p("other/pipeline.toml").exists());
}

#[test]
fn record_then_a_changed_model_fails_verify_naming_the_case() {
    let ws = initialised();
    let o = ws.run(&[
        "golden",
        "record",
        "build/s1-pico/s1-pico.f16.gguf",
        "--cases",
        "golden/s1-pico/cases.jsonl",
        "--out",
        "golden/s1-pico/expected.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("wrote golden/s1-pico/expected.jsonl: 8 cases recorded from build/s1-pico/s1-pico.f16.gguf (f32 compute)\n"),
        "{out}"
    );
    // The suites that use the file are measured against it, each on its own path.
    assert!(
        out.contains("  s1-pico-f16 (s1-pico f16, f32 path): max |dp| ")
            && out.contains("  s1-pico-q8_0 (s1-pico q8_0, q8 path): max |dp| "),
        "{out}"
    );
    let first: serde_json::Value = serde_json::from_str(
        ws.read("golden/s1-pico/expected.jsonl")
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    for key in [
        "id",
        "input_ids",
        "markers",
        "scores",
        "temperature",
        "probabilities",
    ] {
        assert!(first.get(key).is_some(), "{key} missing from {first}");
    }
    assert_eq!(ws.run(&["verify"]).status.code(), Some(0));
    // A different temperature for two-option choices moves those answers.
    let cfg = ws.p("models/s1-pico/rl_agent_config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("\"choice:2\": 0.9", "\"choice:2\": 2.5")).unwrap();
    let v = ws.run(&["verify"]);
    let out = format!("{}{}", stdout(&v), String::from_utf8_lossy(&v.stderr));
    assert_eq!(v.status.code(), Some(1), "{out}");
    assert!(out.contains("s1-pico-f16") && out.contains("FAIL"), "{out}");
    assert!(
        out.contains("c2_list_plain"),
        "the worst case is named:\n{out}"
    );
}

#[test]
fn requests_from_standard_input_and_the_lines_they_print() {
    let ws = initialised();
    let mut child = ws
        .cmd(&[
            "ask",
            "build/s1-pico/s1-pico.f16.gguf",
            "--requests",
            "-",
            "--json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let cases = ws.read("golden/s1-pico/cases.jsonl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cases.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected: Vec<serde_json::Value> = ws
        .read("golden/s1-pico/expected.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), expected.len());
    for (got, want) in lines.iter().zip(&expected) {
        assert_eq!(got["id"], want["id"]);
        assert_eq!(
            got["input_ids"], want["input_ids"],
            "the field the suite reads"
        );
        assert!(got.get("answer").is_some());
    }
}

#[test]
fn messages_say_each_thing_once() {
    let ws = initialised();
    ws.write("r.json", "{x\n");
    let e = ws.fails(&["ask", "models/s1-pico", "--request", "r.json"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: r.json:1:2: invalid JSON: key must be a string"
    );
    let e = ws.fails(&["ask", "models/s1-pico", "--requests", "r.json"], 2);
    assert!(
        e.starts_with("skyctl: r.json:1:2: invalid JSON: key must be a string\n"),
        "{e}"
    );
    let e = ws.fails(&["inspect", "models"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: models: not a regular file (a directory); a model file must be one"
    );
    let e = ws.fails(&["golden", "check", "models", "nope"], 2);
    assert_eq!(e.trim(), "skyctl: nope: candidate directory does not exist");
    let e = ws.fails(&["kernels", "run", "--impl", "cpu", "models", "out"], 2);
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    let e = ws.fails(&["convert", "models/s1-pico", "models"], 2);
    assert_eq!(e.matches("refusing to replace `models`").count(), 1, "{e}");
}

#[test]
fn bad_checkpoints_and_files_are_described_in_words() {
    let ws = Ws::new();
    ws.write("bad.gguf", "GGML\x03\0\0\0");
    let e = ws.fails(&["inspect", "bad.gguf"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: bad.gguf: not a GGUF file: magic at byte 0 is 47 47 4d 4c (\"GGML\"), expected 47 47 55 46 (\"GGUF\")"
    );
    let ck = ws.p("ck");
    let o = ws.run(&["random", "s1-pico", ck.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    // A header length pointing past the end of the file.
    let mut st = 1_000_000u64.to_le_bytes().to_vec();
    st.extend_from_slice(b"{}");
    std::fs::write(ck.join("model.safetensors"), &st).unwrap();
    let e = ws.fails(&["convert", "ck", "x.gguf"], 2);
    assert!(
        e.contains("ck/model.safetensors: not a valid safetensors file: the header length in the first 8 bytes runs past the end of the file (10 bytes)"),
        "{e}"
    );
    assert!(!e.contains("InvalidHeaderLength"), "{e}");
}

/// 1-based line and column where `needle` starts in `text`.
fn at(text: &str, needle: &str) -> (usize, usize) {
    let i = text.find(needle).expect("needle in pipeline.toml");
    let line = text[..i].matches('\n').count() + 1;
    let col = i - text[..i].rfind('\n').map_or(0, |n| n + 1) + 1;
    (line, col)
}

#[test]
fn pipeline_messages_are_located() {
    let ws = initialised();
    let toml = ws.read("pipeline.toml");
    let (src_line, src_col) = at(&toml, "\"models/s1-pico\"\npolicy");
    let (it_line, it_col) = at(&toml, "10, rounds");
    let (mode_line, mode_col) = at(&toml, "\"q8_0\"], questions");
    // A missing source.
    std::fs::rename(ws.p("models/s1-pico"), ws.p("models/gone")).unwrap();
    let e = ws.fails(&["build"], 2);
    assert_eq!(
        e.trim(),
        format!("skyctl: pipeline.toml:{src_line}:{src_col}: node `s1-pico/convert.f32`: input `models/s1-pico` does not exist")
    );
    std::fs::rename(ws.p("models/gone"), ws.p("models/s1-pico")).unwrap();
    // A source that is a symlink out of the workspace, named or matched by a glob.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), ws.p("notes.txt")).unwrap();
    let base = ws.read("pipeline.toml");
    for input in ["notes.txt", "*.txt"] {
        ws.write(
            "pipeline.toml",
            &format!("{base}\n[[command]]\nname = \"leak\"\nrun = \"cp notes.txt build/leak\"\ninputs = [\"{input}\"]\noutputs = [\"build/leak\"]\n"),
        );
        let e = ws.fails(&["build"], 2);
        let line = base.lines().count() + 5;
        assert!(
            e.starts_with(&format!("skyctl: pipeline.toml:{line}:11: node `leak`: input `notes.txt` leads out of the workspace through a symlink (to `")),
            "{e}"
        );
        assert!(!ws.p("build/leak").exists());
    }
    ws.write("pipeline.toml", &base);
    // Bench settings are checked when the manifest is read.
    ws.write("pipeline.toml", &base.replace("iters = 10", "iters = 0"));
    let e = ws.fails(&["status"], 2);
    assert_eq!(
        e.trim(),
        format!("skyctl: pipeline.toml:{it_line}:{it_col}: model `s1-pico`: bench.iters must be at least 1")
    );
    ws.write(
        "pipeline.toml",
        &base.replace("modes = [\"f32\", \"q8_0\"]", "modes = [\"f32\", \"fp8\"]"),
    );
    let e = ws.fails(&["status"], 2);
    assert!(
        e.starts_with(&format!("skyctl: pipeline.toml:{mode_line}:{mode_col}: model `s1-pico`: unknown bench mode `fp8`; expected one of f32, q8, q8-fast, q8_0")),
        "{e}"
    );
    ws.write("pipeline.toml", &base);
    let e = ws.fails(&["build", "-j", "0"], 2);
    assert!(e.contains("invalid value '0' for '--jobs <N>'"), "{e}");
}

#[test]
fn explain_store_check_and_an_empty_manifest() {
    let ws = initialised();
    let o = ws.run(&["explain", "s1-pico"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.starts_with("model `s1-pico`: 7 nodes"), "{out}");
    assert!(
        out.contains("s1-pico/quantize.q8_0") && out.contains("up to date"),
        "{out}"
    );
    let e = ws.fails(&["explain", "s1-pic"], 2);
    assert!(e.contains("did you mean"), "{e}");
    // --store after the verb.
    let store = ws.p(".skyctl");
    let o = ws.run(&["store", "check", "--store", store.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout(&o).starts_with("store ok: "));
    // One damaged blob: "1 problem".
    let blobs = store.join("store-v2/blobs");
    let blob = walkdir::WalkDir::new(&blobs)
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_type().is_file())
        .unwrap()
        .into_path();
    // Replaced, not written in place: the blob may share its inode with a workspace output
    // (a hard link), which would then be damaged too and make a second problem.
    let damaged = blob.with_extension("damaged");
    std::fs::write(&damaged, "damaged").unwrap();
    std::fs::rename(&damaged, &blob).unwrap();
    let o = ws.run(&["store", "check"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).ends_with("\n1 problem\n"), "{}", stdout(&o));
    // An empty pipeline.toml publishes nothing and leaves the release tree alone.
    ws.write("pipeline.toml", "");
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(ws.p("site/public/models/manifest.json").is_file());
}
