//! The shared remote cache against a real nginx WebDAV server (Bazel HTTP layout: `cas/`,
//! `ac/`): a second clone with an empty local store builds nothing and gets identical bytes;
//! corrupted objects, stopped, hung, failing and forbidding servers cost one warning and a
//! local build; read-only mode and a token-guarded server; two clones uploading at once; a
//! no-op build sends no request.

mod common;
#[path = "common/nginx.rs"]
mod nginx;

use std::process::Command;

use common::{
    check_artifact_digests, model_workspace, parse_build, project_clone, snapshot, BuildRun, Ws,
};
use nginx::{Mode, Nginx, Silent};

const REMOTE_ENV: [&str; 6] = [
    "SKYCTL_REMOTE_CACHE_CA",
    "SKYCTL_REMOTE_CACHE",
    "SKYCTL_REMOTE_CACHE_READ_ONLY",
    "SKYCTL_REMOTE_CACHE_HEADER",
    "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
    "SKYCTL_REMOTE_CACHE_TIMEOUT",
];

/// `skyctl ARGS` in `ws` with no remote-cache variable but `env`.
fn cmd(ws: &Ws, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = ws.cmd(args);
    for v in REMOTE_ENV {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// `skyctl build --json --remote-cache URL ARGS`.
fn build(ws: &Ws, url: &str, args: &[&str], env: &[(&str, &str)]) -> BuildRun {
    let mut all = vec!["build", "--json", "--remote-cache", url];
    all.extend_from_slice(args);
    parse_build(cmd(ws, &all, env).output().expect("running skyctl"))
}

/// The remote-cache warnings a `--json` build reported (as notes).
fn warnings(run: &BuildRun) -> Vec<String> {
    run.events
        .iter()
        .filter(|e| e["event"] == "note")
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.starts_with("warning: remote cache"))
        .map(str::to_string)
        .collect()
}

/// The executed nodes, their `why` and the remote warnings, for a failed assertion.
fn explain(run: &BuildRun) -> String {
    let why: Vec<_> = run.executed().iter().map(|n| run.why(n)).collect();
    format!(
        "executed {:?}, why {:?}, warnings {:?}",
        run.executed(),
        why,
        warnings(run)
    )
}

fn remote(run: &BuildRun, what: &str) -> u64 {
    run.summary["remote"][what].as_u64().unwrap_or(u64::MAX)
}

const MODELS: [&str; 2] = ["pico", "nano"];
const NODES: usize = 11;

/// Every object on the server is sound: each `cas/<d>` hashes to `d`, each `ac/<k>` is a
/// record for `k` whose blobs are all there.
fn assert_consistent(server: &Nginx) {
    let cas = server.objects("cas");
    for p in &cas {
        let name = p.file_name().unwrap().to_str().unwrap();
        let bytes = std::fs::read(p).unwrap();
        assert_eq!(blake3::hash(&bytes).to_hex().as_str(), name, "cas/{name}");
    }
    let names: Vec<String> = cas
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let ac = server.objects("ac");
    assert!(!ac.is_empty());
    for p in &ac {
        let name = p.file_name().unwrap().to_str().unwrap();
        let body = std::fs::read_to_string(p).unwrap();
        let (header, json) = body.split_once('\n').unwrap();
        assert!(
            header.starts_with(&format!("skyctl-action-v1 {name} ")),
            "{header}"
        );
        let rec: serde_json::Value = serde_json::from_str(json).unwrap();
        for o in rec["outputs"].as_array().unwrap() {
            let d = o["digest"].as_str().unwrap();
            assert!(
                names.iter().any(|n| n == d),
                "ac/{name} names missing cas/{d}"
            );
        }
    }
}

#[test]
fn a_second_clone_with_an_empty_store_fetches_everything_and_a_noop_sends_nothing() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = model_workspace(&MODELS);
    let first = build(&a, &server.url(), &[], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.count("executed"), NODES as u64);
    assert_eq!(remote(&first, "uploaded"), NODES as u64);
    assert_eq!(remote(&first, "warnings"), 0, "{:?}", warnings(&first));
    assert!(remote(&first, "bytes_uploaded") > 0);
    assert_consistent(&server);

    // A no-op build with the remote configured sends no request at all.
    let before = server.requests().len();
    let noop = build(&a, &server.url(), &[], &[]);
    assert_eq!(noop.count("executed"), 0);
    assert_eq!(remote(&noop, "requests"), 0);
    assert_eq!(
        server.requests().len(),
        before,
        "a no-op build sent requests"
    );

    // Another folder, an empty local store: every node comes from the remote.
    let b = model_workspace(&MODELS);
    let second = build(&b, &server.url(), &[], &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        second.count("executed"),
        0,
        "{:?}, why {:?}; warnings {:?}",
        second.executed(),
        second
            .executed()
            .iter()
            .map(|n| second.why(n))
            .collect::<Vec<_>>(),
        warnings(&second)
    );
    assert_eq!(second.with_status("remote").len(), NODES);
    assert_eq!(remote(&second, "restored"), NODES as u64);
    assert_eq!(remote(&second, "uploaded"), 0);
    assert!(remote(&second, "bytes_downloaded") > 0);
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&b.p("site/public")));
    assert_eq!(snapshot(&a.p("build")), snapshot(&b.p("build")));
    // What came down is in the local store, sound: the next build is a local no-op.
    let check = cmd(&b, &["store", "check"], &[]).output().unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let before = server.requests().len();
    let again = build(&b, &server.url(), &[], &[]);
    assert_eq!(
        (again.count("executed"), again.count("cached")),
        (0, NODES as u64)
    );
    assert_eq!(server.requests().len(), before);

    // The plain summary line reports the remote.
    let out = cmd(&b, &["build", "--remote-cache", &server.url()], &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "skyctl: 0 executed, {NODES} cached, 0 failed, 0 skipped in "
        )) && err.contains("; remote cache: 0 fetched, 0 uploaded, 0 B down, 0 B up, 0 warnings"),
        "{err}"
    );
}

#[test]
fn without_a_remote_nothing_changes() {
    let _turn = nginx::one_at_a_time();
    let a = model_workspace(&MODELS);
    let run = parse_build(cmd(&a, &["build", "--json"], &[]).output().unwrap());
    assert_eq!(run.code, 0);
    assert!(run.summary.get("remote").is_none(), "{}", run.summary);
    let out = cmd(&a, &["build"], &[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("remote"), "{err}");
}

/// A build against `url` that cannot use it: succeeds locally with exactly one warning.
fn one_warning_and_a_local_build(url: &str, env: &[(&str, &str)]) -> String {
    let ws = model_workspace(&MODELS);
    let run = build(&ws, url, &[], env);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), NODES as u64);
    let w = warnings(&run);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(remote(&run, "warnings"), 1);
    w[0].clone()
}

#[test]
fn a_stopped_server_costs_one_warning() {
    let _turn = nginx::one_at_a_time();
    let url = {
        let server = Nginx::start(Mode::Open);
        server.url()
    };
    let w = one_warning_and_a_local_build(&url, &[]);
    assert!(
        w.starts_with(&format!("warning: remote cache {url}: GET ac/"))
            && w.contains("Connection refused")
            && w.ends_with("; building without the remote cache"),
        "{w}"
    );
}

#[test]
fn a_hung_server_costs_one_warning_after_the_timeout() {
    let _turn = nginx::one_at_a_time();
    let silent = Silent::start();
    let w = one_warning_and_a_local_build(&silent.url(), &[("SKYCTL_REMOTE_CACHE_TIMEOUT", "0.5")]);
    assert!(
        w.contains(": GET ac/") && w.contains("timed out; building without the remote cache"),
        "{w}"
    );
}

#[test]
fn a_failing_or_forbidding_server_costs_one_warning() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let w = one_warning_and_a_local_build(&server.failing_url(500), &[]);
    assert!(
        w.contains(": GET ac/")
            && w.ends_with(
                ": answered 500 Internal Server Error; building without the remote cache"
            ),
        "{w}"
    );
    let w = one_warning_and_a_local_build(&server.failing_url(403), &[]);
    assert!(
        w.ends_with(": answered 403 Forbidden; building without the remote cache"),
        "{w}"
    );
}

#[test]
fn a_corrupted_object_is_detected_the_node_reruns_and_the_server_is_repaired() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = model_workspace(&MODELS);
    assert_eq!(build(&a, &server.url(), &[], &[]).code, 0);
    // Corrupt the blob of pico's f32 conversion on the server.
    let digest = blake3::hash(&std::fs::read(a.p("build/pico/pico.f32.gguf")).unwrap())
        .to_hex()
        .to_string();
    let obj = server.data().join("cas").join(&digest);
    std::fs::write(&obj, "poisoned bytes\n").unwrap();
    // And nano's f16 conversion with more bytes than its record says it has.
    let f16 = std::fs::read(a.p("build/nano/nano.f16.gguf")).unwrap();
    let big = blake3::hash(&f16).to_hex().to_string();
    std::fs::write(server.data().join("cas").join(&big), vec![b'x'; 4096]).unwrap();

    let b = model_workspace(&MODELS);
    let run = build(&b, &server.url(), &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.executed(), vec!["nano/convert.f16", "pico/convert.f32"]);
    assert_eq!(run.with_status("remote").len(), NODES - 2);
    let mut w = warnings(&run);
    w.sort_by_key(|l| !l.contains(&digest));
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains(&format!(
            "cas/{digest}: content does not match its digest (hashes to "
        )) && w[0].ends_with("; ignored"),
        "{w:?}"
    );
    assert!(
        w[1].ends_with(&format!(
            "cas/{big}: larger than {} bytes; ignored",
            f16.len()
        )),
        "{w:?}"
    );
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&b.p("site/public")));
    // The re-run uploaded the good bytes over the bad ones.
    assert_consistent(&server);

    // A record copied under another key's name is refused.
    let ac = server.objects("ac");
    std::fs::copy(&ac[0], &ac[1]).unwrap();
    let c = model_workspace(&MODELS);
    let run = build(&c, &server.url(), &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), 1, "{}", explain(&run));
    let w = warnings(&run);
    assert!(
        w.len() == 1 && w[0].contains(": the record names another key; ignored"),
        "{w:?}"
    );
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&c.p("site/public")));
}

fn puts(server: &Nginx) -> usize {
    server
        .requests()
        .iter()
        .filter(|l| l.contains("\"PUT "))
        .count()
}

#[test]
fn read_only_mode_uploads_nothing_but_reads() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = model_workspace(&MODELS);
    let run = build(&a, &server.url(), &["--remote-cache-read-only"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        (remote(&run, "uploaded"), remote(&run, "bytes_uploaded")),
        (0, 0)
    );
    assert!(!server.requests().is_empty(), "it did ask");
    assert_eq!(puts(&server), 0);
    assert!(server.objects("cas").is_empty() && server.objects("ac").is_empty());

    // Filled by a read-write build, read by a read-only one (environment variable).
    let b = model_workspace(&MODELS);
    assert_eq!(build(&b, &server.url(), &[], &[]).code, 0);
    let before = puts(&server);
    let c = model_workspace(&MODELS);
    let run = build(
        &c,
        &server.url(),
        &["--rerun", "pico/bench"],
        &[("SKYCTL_REMOTE_CACHE_READ_ONLY", "1")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.executed(),
        vec!["pico/bench"],
        "--rerun re-measures; why {:?}; warnings {:?}",
        run.executed()
            .iter()
            .map(|n| run.why(n))
            .collect::<Vec<_>>(),
        warnings(&run)
    );
    assert_eq!(run.with_status("remote").len(), NODES - 1);
    assert_eq!(puts(&server), before, "read-only uploaded");
    let bad = cmd(
        &c,
        &["build", "--remote-cache", &server.url()],
        &[("SKYCTL_REMOTE_CACHE_READ_ONLY", "maybe")],
    )
    .output()
    .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim(),
        "skyctl: SKYCTL_REMOTE_CACHE_READ_ONLY must be 1 or 0, not `maybe`"
    );
}

#[test]
fn a_token_guarded_server_accepts_authenticated_writes_only() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::TokenGuarded);
    // Anonymous: reads work (misses), the first write is refused: one warning, local build.
    let a = model_workspace(&MODELS);
    let run = build(&a, &server.url(), &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let w = warnings(&run);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(": PUT cas/")
            && w[0].ends_with(
                ": answered 403 Forbidden; not uploading to it for the rest of this build"
            ),
        "{w:?}"
    );
    assert!(server.objects("cas").is_empty() && server.objects("ac").is_empty());

    // With the token: uploaded; the token is never printed.
    let header = format!("Authorization: Bearer {}", nginx::TOKEN);
    let b = model_workspace(&MODELS);
    let out = cmd(
        &b,
        &["build", "--json", "--remote-cache", &server.url()],
        &[("SKYCTL_REMOTE_CACHE_HEADER", &header)],
    )
    .output()
    .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains(nginx::TOKEN));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(nginx::TOKEN));
    let run = parse_build(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(remote(&run, "uploaded"), NODES as u64);
    assert_eq!(warnings(&run), Vec::<String>::new());
    assert_consistent(&server);
    // An anonymous reader gets it all.
    let c = model_workspace(&MODELS);
    let run = build(&c, &server.url(), &[], &[]);
    assert_eq!(
        run.count("executed"),
        0,
        "{}: {}",
        explain(&run),
        run.stderr
    );
    // An anonymous build that runs something: its writes are refused (one warning), its
    // reads go on: nano's chain still comes from the remote.
    let d = model_workspace(&MODELS);
    d.write(
        "models/pico/config.json",
        "{\"name\": \"pico\", \"changed\": true}\n",
    );
    let run = build(&d, &server.url(), &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let fetched = run.with_status("remote");
    assert_eq!(
        fetched,
        vec![
            "nano/bench",
            "nano/calibrate",
            "nano/convert.f16",
            "nano/convert.f32",
            "nano/quantize.q8_0"
        ],
        "{:?}",
        run.executed()
    );
    let w = warnings(&run);
    assert!(
        w.len() == 1 && w[0].contains("answered 403 Forbidden; not uploading"),
        "{w:?}"
    );

    // A malformed header is an error that does not echo it.
    let bad = cmd(
        &c,
        &["build", "--remote-cache", &server.url()],
        &[("SKYCTL_REMOTE_CACHE_HEADER", "Bearer hunter2")],
    )
    .output()
    .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("SKYCTL_REMOTE_CACHE_HEADER must look like `Name: value`")
            && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn two_clones_uploading_at_once_leave_a_consistent_cache() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = model_workspace(&MODELS);
    let b = model_workspace(&MODELS);
    let spawn = |ws: &Ws| {
        cmd(
            ws,
            &["build", "--json", "--remote-cache", &server.url()],
            &[],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (pa, pb) = (spawn(&a), spawn(&b));
    for p in [pa, pb] {
        let run = parse_build(p.wait_with_output().unwrap());
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(warnings(&run), Vec::<String>::new());
    }
    assert_consistent(&server);
    let c = model_workspace(&MODELS);
    let run = build(&c, &server.url(), &[], &[]);
    assert_eq!(run.count("executed"), 0, "{}", explain(&run));
    let check = cmd(&c, &["store", "check"], &[]).output().unwrap();
    assert_eq!(check.status.code(), Some(0));
}

#[test]
fn signed_records_are_required_when_a_signing_key_is_set() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let key = (
        "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
        "a signing key of the team 0123",
    );
    let a = model_workspace(&MODELS);
    assert_eq!(build(&a, &server.url(), &[], &[key]).code, 0);
    // Same key: everything is used.
    let b = model_workspace(&MODELS);
    let run = build(&b, &server.url(), &[], &[key]);
    assert_eq!(
        run.count("executed"),
        0,
        "{}: {}",
        explain(&run),
        run.stderr
    );
    // Another key: nothing is trusted; one warning.
    let c = model_workspace(&MODELS);
    let run = build(
        &c,
        &server.url(),
        &[],
        &[(
            "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
            "somebody else's key 4567",
        )],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), NODES as u64);
    let w = warnings(&run);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(": the record's signature does not match the signing key; ignored"),
        "{w:?}"
    );

    // Unsigned records (written without a key) are ignored by a reader with one.
    let server = Nginx::start(Mode::Open);
    let d = model_workspace(&MODELS);
    assert_eq!(build(&d, &server.url(), &[], &[]).code, 0);
    let e = model_workspace(&MODELS);
    let run = build(&e, &server.url(), &[], &[key]);
    assert_eq!(run.count("executed"), NODES as u64);
    let w = warnings(&run);
    assert!(
        w.len() == 1 && w[0].contains(": the record is not signed; ignored"),
        "{w:?}"
    );
}

/// Issue 32 class 3: a signing key that is not UTF-8, or only spaces, used to be read as no
/// key at all (unsigned records restored without a word); a read-only switch that is not
/// UTF-8 as read-write (two PUTs). Each is now exit 2 naming the variable, with no request
/// that writes.
#[test]
fn unusable_guard_settings_are_exit_2_and_nothing_is_uploaded() {
    use std::os::unix::ffi::OsStrExt;
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    // Unsigned records on the server.
    let a = model_workspace(&MODELS);
    assert_eq!(build(&a, &server.url(), &[], &[]).code, 0);
    let before = server.objects("cas").len() + server.objects("ac").len();
    let b = model_workspace(&MODELS);
    let spaces = " ".repeat(17);
    let cases: [(&str, &[u8]); 3] = [
        (
            "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
            b"a signing key \xff of the team",
        ),
        ("SKYCTL_REMOTE_CACHE_SIGNING_KEY", spaces.as_bytes()),
        ("SKYCTL_REMOTE_CACHE_READ_ONLY", b"1\xff"),
    ];
    for (var, value) in cases {
        let puts = |s: &Nginx| s.requests().iter().filter(|r| r.contains("PUT")).count();
        let put_before = puts(&server);
        let out = cmd(
            &b,
            &["build", "--json", "--remote-cache", &server.url()],
            &[],
        )
        .env(var, std::ffi::OsStr::from_bytes(value))
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value:?}: {stderr}");
        assert!(stderr.contains(var), "{stderr}");
        assert!(!stderr.contains("signing key \u{fffd}"), "{stderr}");
        assert_eq!(puts(&server), put_before, "{var}={value:?} uploaded");
        assert!(!b.p("out").exists() && !b.p("build").exists(), "it built");
    }
    assert_eq!(
        server.objects("cas").len() + server.objects("ac").len(),
        before
    );
}

#[test]
fn the_cache_section_status_and_bad_urls() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = model_workspace(&MODELS);
    let manifest = std::fs::read_to_string(a.p("pipeline.toml")).unwrap();
    let with_cache = format!("[cache]\nremote = \"{}\"\n{manifest}", server.url());
    a.write("pipeline.toml", &with_cache);
    let run = parse_build(cmd(&a, &["build", "--json"], &[]).output().unwrap());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(remote(&run, "uploaded"), NODES as u64);
    // `off` turns it off for one run.
    let run = parse_build(
        cmd(
            &a,
            &[
                "build",
                "--json",
                "--remote-cache",
                "off",
                "--rerun",
                "pico/bench",
            ],
            &[],
        )
        .output()
        .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.summary.get("remote").is_none(), "{}", run.summary);

    // status in a fresh clone: source-only nodes the remote has are listed as `fetch`.
    let b = model_workspace(&MODELS);
    let out = cmd(&b, &["status", "--remote-cache", &server.url()], &[])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(s.contains("fetch    pico/convert.f32"), "{s}");
    assert!(s.contains("stale    pico/calibrate"), "{s}");
    let out = cmd(&b, &["build", "-n", "--remote-cache", &server.url()], &[])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("fetch    nano/convert.f16"));

    // Bad URLs: a located error in pipeline.toml, a plain one on the command line.
    b.write(
        "pipeline.toml",
        &format!("[cache]\nremote = \"ftp://x\"\n{manifest}"),
    );
    let err = b.fails(&["build"], 2);
    assert!(
        err.contains(
            "pipeline.toml:2:10: remote cache URL `ftp://x` must start with http:// or https://"
        ),
        "{err}"
    );
    b.write("pipeline.toml", &manifest);
    let out = cmd(&b, &["build", "--remote-cache", "cache.example"], &[])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "skyctl: remote cache URL `cache.example` must start with http:// or https://"
    );
}

#[test]
fn the_projects_own_pipeline_from_a_second_clone_runs_nothing_and_is_byte_identical() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = project_clone();
    let first = build(&a, &server.url(), &[], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let nodes = first.count("executed");
    assert!(nodes >= 30, "{nodes}");
    assert_eq!(remote(&first, "uploaded"), nodes);
    assert_eq!(warnings(&first), Vec::<String>::new());
    assert_consistent(&server);
    check_artifact_digests(&a);

    let b = project_clone();
    let second = build(&b, &server.url(), &[], &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.count("executed"), 0, "{}", explain(&second));
    assert_eq!(remote(&second, "restored"), nodes);
    assert_eq!(warnings(&second), Vec::<String>::new());
    let release = snapshot(&a.p("site/public"));
    assert!(release.contains_key("models/s1-pico.gguf") && release.contains_key("bench.json"));
    assert_eq!(release, snapshot(&b.p("site/public")));

    // Up to date now: a no-op build sends nothing.
    let before = server.requests().len();
    let noop = build(&b, &server.url(), &[], &[]);
    assert_eq!((noop.count("executed"), noop.count("cached")), (0, nodes));
    assert_eq!(server.requests().len(), before);

    // `verify` in a third clone: the golden suites and what they need come from the remote.
    let c = project_clone();
    let out = cmd(
        &c,
        &["verify", "--json", "--remote-cache", &server.url()],
        &[],
    )
    .output()
    .unwrap();
    let run = parse_build(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), 0, "{}", explain(&run));
    assert!(run
        .with_status("remote")
        .iter()
        .any(|n| n == "golden/s1-pico-f16"));
    assert!(remote(&run, "restored") > 0);
}

#[test]
fn https_with_the_caches_own_ca() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Tls);
    assert!(server.url().starts_with("https://"));
    let ca = nginx::test_ca();
    let ca = ("SKYCTL_REMOTE_CACHE_CA", ca.to_str().unwrap());
    let a = model_workspace(&MODELS);
    let run = build(&a, &server.url(), &[], &[ca]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(warnings(&run), Vec::<String>::new());
    assert_eq!(remote(&run, "uploaded"), NODES as u64);
    let b = model_workspace(&MODELS);
    let run = build(&b, &server.url(), &[], &[ca]);
    assert_eq!(
        run.count("executed"),
        0,
        "{}: {}",
        explain(&run),
        run.stderr
    );
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&b.p("site/public")));

    // Without the CA the certificate is not trusted: one warning, a local build.
    let c = model_workspace(&MODELS);
    let run = build(&c, &server.url(), &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), NODES as u64);
    let w = warnings(&run);
    assert!(
        w.len() == 1
            && w[0].contains(": GET ac/")
            && w[0].to_lowercase().contains("certificate")
            && w[0].ends_with("; building without the remote cache"),
        "{w:?}"
    );
    // A CA file that is not one: exit 2, said plainly.
    c.write("not-a-ca.pem", "hello\n");
    let out = cmd(
        &c,
        &["build", "--remote-cache", &server.url()],
        &[("SKYCTL_REMOTE_CACHE_CA", "not-a-ca.pem")],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "skyctl: SKYCTL_REMOTE_CACHE_CA `not-a-ca.pem`: no PEM certificate in it"
    );
}

#[test]
fn directory_outputs_exec_bits_and_logs_travel() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let pipeline = r#"
[[command]]
name = "tree"
run = "mkdir -p out/tree/sub && echo one > out/tree/a.txt && printf '#!/bin/sh\necho hi\n' > out/tree/sub/run.sh && chmod +x out/tree/sub/run.sh && echo 'made a tree'"
inputs = ["in.txt"]
outputs = ["out/tree/"]
"#;
    let clone = || {
        let ws = Ws::new();
        ws.write("pipeline.toml", pipeline);
        ws.write("in.txt", "x\n");
        ws
    };
    let a = clone();
    let run = build(&a, &server.url(), &[], &[]);
    assert_eq!((run.code, run.count("executed")), (0, 1), "{}", run.stderr);
    // The file, the executable, the tree listing and the log.
    assert_eq!(server.objects("cas").len(), 4);
    let b = clone();
    let run = build(&b, &server.url(), &[], &[]);
    assert_eq!(run.with_status("remote"), vec!["tree"], "{}", run.stderr);
    assert_eq!(snapshot(&a.p("out/tree")), snapshot(&b.p("out/tree")));
    use std::os::unix::fs::PermissionsExt;
    let mode = |ws: &Ws, p: &str| std::fs::metadata(ws.p(p)).unwrap().permissions().mode() & 0o111;
    assert_ne!(mode(&b, "out/tree/sub/run.sh"), 0);
    assert_eq!(mode(&b, "out/tree/a.txt"), 0);
    let check = cmd(&b, &["store", "check"], &[]).output().unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn store_push_uploads_what_was_built_before_the_remote() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = model_workspace(&MODELS);
    let local = parse_build(cmd(&a, &["build", "--json"], &[]).output().unwrap());
    assert_eq!(local.count("executed"), NODES as u64);
    // A no-op with the remote uploads nothing (nothing ran); `store push` does.
    let noop = build(&a, &server.url(), &[], &[]);
    assert_eq!(remote(&noop, "requests"), 0);
    let out = cmd(&a, &["store", "push", "--remote-cache", &server.url()], &[])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with(&format!(
            "pushed {NODES} of {NODES} results to {} (",
            server.url()
        )),
        "{stdout}"
    );
    assert_consistent(&server);
    let b = model_workspace(&MODELS);
    let run = build(&b, &server.url(), &[], &[]);
    assert_eq!(run.count("executed"), 0, "{}", explain(&run));
    // Nothing to push to: exit 2, said plainly.
    let err = cmd(&a, &["store", "push"], &[]).output().unwrap();
    assert_eq!(err.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&err.stderr).trim(),
        "skyctl: no remote cache: give --remote-cache URL, SKYCTL_REMOTE_CACHE or [cache] remote"
    );
}

/// Issue 32 class 11: `store push` checks each local blob against its digest before the
/// `PUT`. An emptied blob is named in a warning and never uploaded (nor the record that needs
/// it), the sound results still go, and the push exits 1 saying how to repair.
#[test]
fn store_push_never_uploads_a_damaged_local_blob() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    let a = Ws::new();
    a.write(
        "pipeline.toml",
        "[[command]]\nname = \"good\"\nrun = \"echo good > out/good\"\noutputs = [\"out/good\"]\n\
         [[command]]\nname = \"bad\"\nrun = \"echo damaged-later > out/bad\"\noutputs = [\"out/bad\"]\n",
    );
    let local = parse_build(cmd(&a, &["build", "--json"], &[]).output().unwrap());
    assert_eq!(local.count("executed"), 2, "{}", local.stderr);
    let digest = blake3::hash(b"damaged-later\n").to_hex().to_string();
    let blob = a
        .p(".skyctl/store-v2/blobs")
        .join(&digest[..2])
        .join(&digest[2..]);
    std::fs::write(&blob, "").unwrap();
    let out = cmd(&a, &["store", "push", "--remote-cache", &server.url()], &[])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("not uploading node `bad`")
            && stderr.contains(&blob.display().to_string())
            && stderr.contains("skyctl store check"),
        "{stderr}"
    );
    assert!(stdout.starts_with("pushed 1 of 2 results"), "{stdout}");
    let puts: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.contains("PUT") && r.contains(&digest))
        .collect();
    assert!(puts.is_empty(), "{puts:?}");
    assert!(
        !server.objects("cas").iter().any(|p| p.ends_with(&digest)),
        "the emptied blob reached the server"
    );
    assert_eq!(server.objects("ac").len(), 1);
    assert_consistent(&server);
}

/// Nodes whose outputs share one directory that a fresh clone does not have yet: restored
/// side by side, every one of them is a hit (one creating the directory while another waits
/// for it used to make the other run instead, without a word).
#[test]
fn hits_restored_side_by_side_into_one_new_directory_all_come_from_the_remote() {
    let _turn = nginx::one_at_a_time();
    let server = Nginx::start(Mode::Open);
    const WIDE: usize = 24;
    const STRESS: usize = 30;
    let mut pipeline = String::new();
    for i in 0..WIDE {
        pipeline += &format!(
            "[[command]]\nname = \"n{i}\"\nrun = \"echo {i} > out/shared/deep/{i}.txt\"\ninputs = [\"in.txt\"]\noutputs = [\"out/shared/deep/{i}.txt\"]\n\n"
        );
    }
    let clone = || {
        let ws = Ws::new();
        ws.write("pipeline.toml", &pipeline);
        ws.write("in.txt", "x\n");
        ws
    };
    let a = clone();
    let first = build(&a, &server.url(), &["-j", "8"], &[]);
    assert_eq!(
        (first.code, first.count("executed")),
        (0, WIDE as u64),
        "{}",
        first.stderr
    );
    for _ in 0..STRESS {
        let b = clone();
        let run = build(&b, &server.url(), &["-j", "8"], &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(
            (run.count("executed"), run.with_status("remote").len()),
            (0, WIDE),
            "executed {:?}, warnings {:?}",
            run.executed(),
            warnings(&run)
        );
        assert_eq!(snapshot(&a.p("out")), snapshot(&b.p("out")));
    }
}
