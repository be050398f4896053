//! End-to-end tests of the pipeline engine: real binary, real files, real processes.

mod common;

use common::*;

#[test]
fn noop_build_executes_zero_nodes() {
    let ws = model_workspace(&["pico", "nano"]);
    let first = ws.build(&[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.count("executed"), 11);
    let second = ws.build(&[]);
    assert_eq!(second.code, 0);
    assert_eq!(second.count("executed"), 0, "{:?}", second.executed());
    assert_eq!(second.count("cached"), 11);
    // The release tree holds the published files.
    assert!(ws.p("site/public/models/pico.q8_0.gguf").is_file());
    assert!(ws.p("site/public/manifest.json").is_file());
    // status agrees: nothing stale, exit 0.
    let out = ws.run(&["status"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn changing_one_model_source_reruns_only_its_chain_and_the_manifest() {
    let ws = model_workspace(&["pico", "nano"]);
    assert_eq!(ws.build(&[]).code, 0);
    ws.write("models/pico/model.safetensors", "new weights of pico\n");
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.executed(),
        vec![
            "manifest",
            "pico/bench",
            "pico/calibrate",
            "pico/convert.f16",
            "pico/convert.f32",
            "pico/quantize.q8_0"
        ]
    );
    assert_eq!(
        run.why("pico/convert.f32"),
        serde_json::json!({"reason": "input_changed", "path": "models/pico/model.safetensors"})
    );
}

#[test]
fn changing_a_calibration_prompt_reruns_only_calibrate_and_dependents() {
    let ws = model_workspace(&["pico"]);
    assert_eq!(ws.build(&[]).code, 0);
    ws.write(
        "prompts/default.jsonl",
        "{\"prompt\": \"is it snowing today?\"}\n",
    );
    let run = ws.build(&[]);
    assert_eq!(
        run.executed(),
        vec![
            "manifest",
            "pico/bench",
            "pico/calibrate",
            "pico/quantize.q8_0"
        ]
    );
    assert_eq!(
        run.why("pico/calibrate"),
        serde_json::json!({"reason": "input_changed", "path": "prompts/default.jsonl"})
    );
}

#[test]
fn early_cutoff_stops_at_identical_outputs() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "head"
run = "mkdir -p out && cut -c1-3 in.txt > out/head.txt"
inputs = ["in.txt"]
outputs = ["out/head.txt"]

[[command]]
name = "upper"
run = "tr a-z A-Z < out/head.txt > out/upper.txt"
inputs = ["out/head.txt"]
outputs = ["out/upper.txt"]
"#,
    );
    ws.write("in.txt", "abcdef\n");
    assert_eq!(ws.build(&[]).count("executed"), 2);
    ws.write("in.txt", "abcXYZ\n"); // same first three characters
    let run = ws.build(&[]);
    assert_eq!(run.executed(), vec!["head"]);
    assert_eq!(run.with_status("cached"), vec!["upper"]);
    assert_eq!(ws.read("out/upper.txt"), "ABC\n");
}

#[test]
fn two_clones_in_different_folders_compute_the_same_keys_and_share_a_store() {
    let a = model_workspace(&["pico"]);
    let b = model_workspace(&["pico"]);
    let keys = |ws: &Ws| {
        let out = ws.run(&["graph", "--format", "json"]);
        assert_eq!(out.status.code(), Some(0));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["id"].to_string(), n["key"].to_string()))
            .collect::<Vec<_>>()
    };
    // Before any build, only source-only nodes have keys; those must agree.
    assert_eq!(keys(&a), keys(&b));
    let store = a.p(".skyctl");
    let first = a.build(&[]);
    assert_eq!(first.code, 0);
    // The second clone, pointed at the first one's store: nothing runs, same release.
    let out = b
        .cmd(&["build", "--json"])
        .env("SKYCTL_STORE", &store)
        .output()
        .unwrap();
    let second = parse_build(out);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.count("executed"), 0, "{:?}", second.executed());
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&b.p("site/public")));
    assert_eq!(snapshot(&a.p("build")), snapshot(&b.p("build")));
    let ka = keys(&a);
    assert!(ka.iter().all(|(_, k)| k != "null"));
    let out = b
        .cmd(&["graph", "--format", "json", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kb: Vec<_> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].to_string(), n["key"].to_string()))
        .collect();
    assert_eq!(ka, kb);
}

#[test]
fn corrupted_blob_is_detected_and_rebuilt() {
    let ws = model_workspace(&["pico"]);
    assert_eq!(ws.build(&[]).code, 0);
    let good = ws.read("build/pico/pico.f16.gguf");
    // Corrupt the blob holding convert.f16's output.
    let digest = blake3::hash(good.as_bytes()).to_hex().to_string();
    let blob = ws.p(&format!(
        ".skyctl/store-v2/blobs/{}/{}",
        &digest[..2],
        &digest[2..]
    ));
    assert!(blob.is_file());
    std::fs::set_permissions(&blob, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&blob, "garbage").unwrap();
    let check = ws.run(&["store", "check"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains(&digest[2..]));
    // Remove the workspace copy so the build needs the blob.
    std::fs::remove_file(ws.p("build/pico/pico.f16.gguf")).unwrap();
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.executed(), vec!["pico/convert.f16"]);
    assert_eq!(run.why("pico/convert.f16")["reason"], "store_damaged");
    assert!(
        run.events
            .iter()
            .any(|e| e["event"] == "note"
                && e["message"].as_str().unwrap_or("").contains("corrupted"))
    );
    assert_eq!(ws.read("build/pico/pico.f16.gguf"), good);
    assert_eq!(ws.run(&["store", "check"]).status.code(), Some(0));
}

#[test]
fn clean_then_build_restores_from_the_store_without_running() {
    let ws = model_workspace(&["pico"]);
    assert_eq!(ws.build(&[]).code, 0);
    let before = snapshot(&ws.p("site/public"));
    assert_eq!(ws.run(&["clean"]).status.code(), Some(0));
    assert!(!ws.p("build/pico/pico.f16.gguf").exists());
    assert!(!ws.p("site/public").exists());
    let run = ws.build(&[]);
    assert_eq!(run.count("executed"), 0);
    assert_eq!(run.with_status("restored").len(), 6);
    assert_eq!(snapshot(&ws.p("site/public")), before);
}

#[test]
fn rerun_forces_volatile_nodes_and_targets_limit_scope() {
    let ws = model_workspace(&["pico", "nano"]);
    assert_eq!(ws.build(&[]).code, 0);
    let run = ws.build(&["--rerun", "pico/bench"]);
    assert_eq!(run.executed(), vec!["pico/bench"]);
    assert_eq!(run.why("pico/bench")["reason"], "forced");
    // Targets: only nano's chain is considered.
    ws.write("models/pico/config.json", "{}\n");
    ws.write("models/nano/config.json", "{\"n\": 1}\n");
    let run = ws.build(&["nano/quantize.q8_0"]);
    assert_eq!(
        run.executed(),
        vec!["nano/calibrate", "nano/convert.f32", "nano/quantize.q8_0"]
    );
}

#[test]
fn dry_run_lists_what_would_run_and_why() {
    let ws = model_workspace(&["pico"]);
    assert_eq!(ws.build(&[]).code, 0);
    ws.write("prompts/default.jsonl", "changed\n");
    let out = ws.run(&["build", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("run      pico/calibrate")
            && s.contains("input `prompts/default.jsonl` changed"),
        "{s}"
    );
    assert!(
        s.contains("may run  pico/quantize.q8_0")
            && s.contains("upstream node `pico/calibrate` is stale"),
        "{s}"
    );
    assert!(!s.contains("convert"), "{s}");
    // Nothing ran.
    assert_eq!(
        ws.build(&[]).executed(),
        vec![
            "manifest",
            "pico/bench",
            "pico/calibrate",
            "pico/quantize.q8_0"
        ]
    );
}

#[test]
fn status_and_explain_give_reasons() {
    let ws = model_workspace(&["pico"]);
    let out = ws.run(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("new node"));
    assert_eq!(ws.build(&[]).code, 0);
    ws.write("models/pico/config.json", "{\"name\": \"other\"}\n");
    let out = ws.run(&["status"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("pico/convert.f32") && s.contains("input `models/pico/config.json` changed"),
        "{s}"
    );
    std::fs::remove_file(ws.p("build/pico/calibration.json")).unwrap();
    let out = ws.run(&["explain", "pico/convert.f16"]);
    let s = String::from_utf8_lossy(&out.stdout);
    // The file inside the changed directory is named.
    assert!(
        s.contains("differs: input `models/pico/config.json` changed"),
        "{s}"
    );
    assert!(s.contains("models/pico"), "{s}");
    // A changed command is a parameter change.
    let p = ws.read("pipeline.toml").replace("tr a-z A-Z", "tr a-y A-Y");
    ws.write("pipeline.toml", &p);
    let out = ws.run(&["explain", "pico/convert.f16"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("differs: parameter `run` changed from "), "{s}");
    assert!(s.contains("tr a-z A-Z") && s.contains("tr a-y A-Y"), "{s}");
}

#[test]
fn command_nodes_see_only_declared_environment() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "env"
run = "mkdir -p out && echo \"${DECLARED:-unset} ${SECRET:-unset}\" > out/env.txt"
outputs = ["out/env.txt"]
env = ["DECLARED"]
"#,
    );
    let out = ws
        .cmd(&["build"])
        .env("DECLARED", "one")
        .env("SECRET", "s")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ws.read("out/env.txt"), "one unset\n");
    // A declared variable's value is part of the key.
    let run = parse_build(
        ws.cmd(&["build", "--json"])
            .env("DECLARED", "two")
            .output()
            .unwrap(),
    );
    assert_eq!(run.executed(), vec!["env"]);
    assert_eq!(
        run.why("env"),
        serde_json::json!({"reason": "params_changed", "field": "env"})
    );
}

#[test]
fn missing_output_and_undeclared_release_write_fail_the_node() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "lazy"
run = "true"
outputs = ["out/never.txt"]

[[command]]
name = "sneaky"
run = "mkdir -p out site/public && echo x > out/ok.txt && echo y > site/public/extra.txt"
outputs = ["out/ok.txt"]

[[command]]
name = "fine"
run = "mkdir -p out && echo z > out/fine.txt"
outputs = ["out/fine.txt"]

[[command]]
name = "after-lazy"
run = "cp out/never.txt out/copy.txt"
inputs = ["out/never.txt"]
outputs = ["out/copy.txt"]
"#,
    );
    let run = ws.build(&["--keep-going", "-j", "1"]);
    assert_eq!(run.code, 1);
    assert_eq!(run.with_status("failed"), vec!["lazy", "sneaky"]);
    assert_eq!(run.with_status("skipped"), vec!["after-lazy"]);
    assert_eq!(run.executed(), vec!["fine"]);
    let err = |n: &str| {
        run.events
            .iter()
            .find(|e| e["node"] == n && e["event"] == "finished")
            .map(|e| e["error"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        err("lazy").contains("declared output `out/never.txt` was not written"),
        "{}",
        err("lazy")
    );
    assert!(
        err("sneaky").contains("wrote into the release directory `site/public`"),
        "{}",
        err("sneaky")
    );
    assert_eq!(run.summary["failed"], 2);
    // A failing command's log tail is reported.
    ws.write("pipeline.toml", "[[command]]\nname = \"bad\"\nrun = \"echo oops-on-stderr >&2; exit 3\"\noutputs = [\"o\"]\n");
    let run = ws.build(&[]);
    let fin = run
        .events
        .iter()
        .find(|e| e["node"] == "bad" && e["event"] == "finished")
        .unwrap();
    assert!(fin["error"]
        .as_str()
        .unwrap()
        .contains("exited with status 3"));
    assert!(fin["log_tail"].as_str().unwrap().contains("oops-on-stderr"));
}

#[test]
fn two_concurrent_builds_in_one_workspace_serialize() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "slow"
run = "mkdir -p out && echo start >> ../trace.txt && sleep 1 && echo end >> ../trace.txt && echo done > out/slow.txt"
outputs = ["out/slow.txt"]
"#,
    );
    let ws_dir = ws.path().join("w");
    std::fs::create_dir_all(&ws_dir).unwrap();
    std::fs::rename(ws.p("pipeline.toml"), ws_dir.join("pipeline.toml")).unwrap();
    let spawn = || {
        std::process::Command::new(skyctl_bin())
            .args(["build", "--json"])
            .current_dir(&ws_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let b = spawn();
    let ra = parse_build(a.wait_with_output().unwrap());
    let rb = parse_build(b.wait_with_output().unwrap());
    assert_eq!((ra.code, rb.code), (0, 0), "{} {}", ra.stderr, rb.stderr);
    // The second waited (and said so), then found everything built.
    assert_eq!(ra.count("executed") + rb.count("executed"), 1);
    let waited = [&ra, &rb].iter().any(|r| {
        r.events.iter().any(|e| {
            e["event"] == "note"
                && e["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("waiting for another skyctl build")
        })
    });
    assert!(waited);
    assert_eq!(ws.read("trace.txt"), "start\nend\n");
}

#[test]
fn init_writes_an_example_that_parses() {
    let ws = Ws::new();
    let out = ws.run(&["init"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(ws.p("pipeline.toml").is_file());
    // Never overwritten.
    assert_eq!(ws.run(&["init"]).status.code(), Some(2));
    ws.write("models/s1-pico/model.safetensors", "x");
    ws.write("docs/a.md", "# a\n");
    let out = ws.run(&["graph", "--format", "mermaid"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    for node in [
        "s1-pico/convert.f16",
        "s1-pico/calibrate",
        "s1-pico/quantize.q8_0",
        "s1-pico/bench",
        "manifest",
        "checksums",
    ] {
        assert!(s.contains(node), "{node} missing from {s}");
    }
    let out = ws.run(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("new node"));
}

#[test]
fn gc_keeps_the_last_builds_and_store_check_passes() {
    let ws = Ws::new();
    let p = |v: &str| {
        format!("[[command]]\nname = \"n\"\nrun = \"mkdir -p o && echo {v} > o/x\"\noutputs = [\"o/x\"]\n")
    };
    ws.write("pipeline.toml", &p("one"));
    assert_eq!(ws.build(&[]).code, 0);
    ws.write("pipeline.toml", &p("two"));
    assert_eq!(ws.build(&[]).code, 0);
    let out = ws.run(&["gc", "--keep-last", "1"]);
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("removed 1 action records"), "{s}");
    assert_eq!(ws.run(&["store", "check"]).status.code(), Some(0));
    // The kept build is still fully cached.
    ws.run(&["clean"]);
    assert_eq!(ws.build(&[]).count("executed"), 0);
    assert_eq!(ws.read("o/x"), "two\n");
}

#[test]
fn two_workspaces_sharing_one_store_build_concurrently() {
    let a = model_workspace(&["pico", "nano"]);
    let b = model_workspace(&["pico", "nano"]);
    let store = tempfile::tempdir().unwrap();
    let spawn = |ws: &Ws| {
        ws.cmd(&["build", "--json", "-j", "3"])
            .env("SKYCTL_STORE", store.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (pa, pb) = (spawn(&a), spawn(&b));
    let ra = parse_build(pa.wait_with_output().unwrap());
    let rb = parse_build(pb.wait_with_output().unwrap());
    assert_eq!((ra.code, rb.code), (0, 0), "{} {}", ra.stderr, rb.stderr);
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&b.p("site/public")));
    assert_eq!(snapshot(&a.p("build")), snapshot(&b.p("build")));
    let check = a
        .cmd(&["store", "check"])
        .env("SKYCTL_STORE", store.path())
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}
