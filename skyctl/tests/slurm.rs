//! `skyctl build --execute slurm` against a real one-machine Slurm cluster (munged, slurmctld
//! and slurmd started by `bench/slurm_cluster.sh` in a temp folder, on loopback, stopped by
//! pid) and the nginx WebDAV cache of the remote-cache tests: nodes run as Slurm jobs (counted
//! in the cluster's jobcomp file), their outputs come back through the cache byte-identical to
//! a local build's (commands, and a `skyctl init` project's built-in kinds), a GPU node sees
//! CUDA_VISIBLE_DEVICES, an unknown feature is refused at submit with Slurm's message, a job
//! that fails, is cancelled from outside, lacks a declared tool or leaves no result fails its
//! node with a stable kind and writes no record, SIGTERM cancels every job. Slurm and munge
//! must be installed
//! (`.ci/run` installs them): without them these tests fail, never skip.

mod common;
#[path = "common/nginx.rs"]
#[allow(dead_code)]
mod nginx;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{check_artifact_digests, parse_build, project_clone, snapshot, BuildRun, Ws};
use nginx::{Mode, Nginx};

const REMOTE_ENV: [&str; 6] = [
    "SKYCTL_REMOTE_CACHE_CA",
    "SKYCTL_REMOTE_CACHE",
    "SKYCTL_REMOTE_CACHE_READ_ONLY",
    "SKYCTL_REMOTE_CACHE_HEADER",
    "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
    "SKYCTL_REMOTE_CACHE_TIMEOUT",
];

/// A running one-machine cluster; stopped by pid when dropped.
struct Cluster {
    dir: tempfile::TempDir,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/slurm_cluster.sh")
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(dir.path())
            .output()
            .expect("running bench/slurm_cluster.sh");
        let cluster = Cluster { dir };
        assert!(
            out.status.success(),
            "the Slurm cluster did not start (apt-get install -y slurmctld slurmd slurm-client munge; .ci/run does this): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// Finished jobs, as the jobcomp file lists them (`JobState=...` of each).
    fn finished_jobs(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.path().join("jobcomp.txt")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("JobState="))
                    .map(str::to_string)
            })
            .collect()
    }

    /// Job ids in the queue (pending or running).
    fn queue(&self) -> Vec<String> {
        let out = Command::new("squeue")
            .args(["-h", "-o", "%i"])
            .env("SLURM_CONF", self.conf())
            .output()
            .expect("squeue");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// `skyctl ARGS` in `ws` against `cluster`, no remote-cache variable.
fn cmd(ws: &Ws, cluster: Option<&Cluster>, args: &[&str]) -> Command {
    let mut c = ws.cmd(args);
    for v in REMOTE_ENV {
        c.env_remove(v);
    }
    if let Some(cl) = cluster {
        c.env("SLURM_CONF", cl.conf());
    }
    c
}

fn build(ws: &Ws, cluster: Option<&Cluster>, args: &[&str]) -> BuildRun {
    let mut all = vec!["build", "--json"];
    all.extend_from_slice(args);
    parse_build(cmd(ws, cluster, &all).output().expect("running skyctl"))
}

const PIPELINE: &str = r#"
[[command]]
name = "upper"
run = "tr a-z A-Z < in.txt > build/upper.txt"
inputs = ["in.txt"]
outputs = ["build/upper.txt"]

[[command]]
name = "twice"
run = ["sh", "-c", "cat build/upper.txt build/upper.txt > build/twice.txt"]
inputs = ["node:upper"]
outputs = ["build/twice.txt"]

[[command]]
name = "tree"
run = "mkdir -p build/tree && cp -r data/. build/tree/ && ls data > build/tree/list.txt && cp tool.sh build/tree/"
inputs = ["data", "tool.sh"]
outputs = ["build/tree/"]

[[release.publish]]
from = "build/twice.txt"
to = "twice.txt"
"#;

fn small_workspace() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", PIPELINE);
    ws.write("in.txt", "hello cluster\n");
    ws.write("data/a.txt", "a\n");
    ws.write("data/sub/b.bin", "b\u{0}\n");
    ws.write("tool.sh", "#!/bin/sh\necho tool\n");
    let tool = ws.p("tool.sh");
    let mut perm = std::fs::metadata(&tool).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&tool, perm).unwrap();
    ws
}

/// The workspace's outputs and release tree, file by file.
fn results(ws: &Ws) -> Vec<(String, Vec<u8>, bool)> {
    let mut out = Vec::new();
    for dir in ["build", "site/public"] {
        for (rel, bytes) in snapshot(&ws.p(dir)) {
            let exec = std::fs::metadata(ws.p(dir).join(&rel))
                .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
                .unwrap_or(false);
            out.push((format!("{dir}/{rel}"), bytes, exec));
        }
    }
    out
}

#[test]
fn nodes_run_as_slurm_jobs_and_come_back_through_the_cache() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();

    let local = small_workspace();
    let r = build(&local, None, &["--remote-cache", "off"]);
    assert_eq!((r.code, r.count("executed")), (0, 3), "{}", r.stderr);

    let ws = small_workspace();
    let r = build(
        &ws,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    assert_eq!(r.executed(), ["tree", "twice", "upper"], "{:?}", r.events);
    // Every executed node ran as a job, and nothing else did.
    assert_eq!(
        cluster.finished_jobs(),
        ["COMPLETED", "COMPLETED", "COMPLETED"]
    );
    assert_eq!(results(&ws), results(&local));
    assert_eq!(
        ws.read("site/public/twice.txt"),
        "HELLO CLUSTER\nHELLO CLUSTER\n"
    );
    assert!(results(&ws)
        .iter()
        .any(|(p, _, exec)| p == "build/tree/tool.sh" && *exec));

    // A second fresh clone, local engine, same cache: nothing runs.
    let again = small_workspace();
    let r = build(
        &again,
        None,
        &["--execute", "local", "--remote-cache", &url],
    );
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
    assert_eq!(results(&again), results(&local));
    assert_eq!(cluster.finished_jobs().len(), 3);

    // And the other way round: a local build's result is a hit for a Slurm build.
    let other = small_workspace();
    other.write("in.txt", "another input\n");
    let r = build(&other, None, &["--remote-cache", &url]);
    assert_eq!((r.code, r.count("executed")), (0, 2), "{}", r.stderr);
    let fresh = small_workspace();
    fresh.write("in.txt", "another input\n");
    let r = build(
        &fresh,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
    assert_eq!(cluster.finished_jobs().len(), 3);
}

#[test]
fn a_gpu_node_sees_its_gpu_and_an_unknown_feature_is_refused_at_submit() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[execute]
engine = "slurm"

[[command]]
name = "gpu"
run = "echo \"cuda=$CUDA_VISIBLE_DEVICES\" > build/gpu.txt"
outputs = ["build/gpu.txt"]
resources = { gpus = 1, constraint = "k80" }
"#,
    );
    let r = build(&ws, Some(&cluster), &["--remote-cache", &url]);
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    assert_eq!(ws.read("build/gpu.txt"), "cuda=0\n");
    assert_eq!(cluster.finished_jobs(), ["COMPLETED"]);

    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[execute]
engine = "slurm"

[[command]]
name = "nowhere"
run = "echo hi > out.txt"
outputs = ["out.txt"]
resources = { constraint = "a100" }
"#,
    );
    let r = build(&ws, Some(&cluster), &["--remote-cache", &url]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let failed = r
        .events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == "nowhere")
        .expect("a finished event");
    assert_eq!(failed["failure"]["kind"], "remote_failed", "{failed}");
    let msg = failed["error"].as_str().unwrap_or_default();
    assert!(
        msg == "Slurm refused the job for node `nowhere`: srun: error: Unable to allocate resources: Invalid feature specification",
        "{msg}"
    );
    assert!(!ws.p("out.txt").exists());
}

/// The repository's own pipeline (its model part, as the remote-cache tests build it) from a
/// fresh clone on the cluster: every node that runs is a Slurm job, the artifacts are the
/// committed digests of a local build (golden/artifacts.blake3), and a second fresh clone
/// building locally on the same cache runs nothing and publishes the same release.
#[test]
fn the_projects_own_pipeline_builds_on_slurm_byte_identical_to_a_local_build() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let a = project_clone();
    let r = build(
        &a,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let executed = r
        .events
        .iter()
        .filter(|e| e["event"] == "finished" && e["status"] == "executed")
        .count();
    assert!(executed >= 30, "{executed}");
    assert_eq!(cluster.finished_jobs(), vec!["COMPLETED"; executed]);
    check_artifact_digests(&a);

    let b = project_clone();
    let r = build(&b, None, &["--execute", "local", "--remote-cache", &url]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.summary["executed"], 0, "{:?}", r.events);
    assert_eq!(cluster.finished_jobs().len(), executed);
    let release = snapshot(&a.p("site/public"));
    assert!(release.contains_key("models/s1-pico.gguf") && release.contains_key("bench.json"));
    assert_eq!(release, snapshot(&b.p("site/public")));
}

/// Two nodes for the cluster's one GPU: one waits in the queue, and the build says so with
/// its job id, then says where it runs.
#[test]
fn progress_shows_a_queued_node_with_its_job_id_then_where_it_runs() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    let pipeline = |round: &str| {
        format!(
            r#"
[execute]
engine = "slurm"

[[command]]
name = "gpu-a"
run = "sleep 3; echo {round} > build/a.txt"
outputs = ["build/a.txt"]
resources = {{ gpus = 1 }}

[[command]]
name = "gpu-b"
run = "sleep 3; echo {round} > build/b.txt"
outputs = ["build/b.txt"]
resources = {{ gpus = 1 }}
"#
        )
    };
    ws.write("pipeline.toml", &pipeline("one"));
    let r = build(&ws, Some(&cluster), &["--remote-cache", &url, "-j", "2"]);
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    let jobs: Vec<&serde_json::Value> = r.events.iter().filter(|e| e["event"] == "job").collect();
    for e in &jobs {
        assert_eq!(e["engine"], "slurm", "{e}");
        let id = e["job"].as_str().unwrap_or_default();
        assert!(
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
            "{e}"
        );
    }
    let running = |node: &str| {
        jobs.iter()
            .find(|e| e["node"] == node && e["state"] == "running")
            .unwrap_or_else(|| panic!("no running event for {node}: {jobs:?}"))
    };
    let (a, b) = (running("gpu-a"), running("gpu-b"));
    assert_ne!(a["job"], b["job"]);
    assert_eq!(a["detail"], "skynode", "{a}");
    let queued: Vec<_> = jobs.iter().filter(|e| e["state"] == "queued").collect();
    assert!(!queued.is_empty(), "one node waits for the GPU: {jobs:?}");
    for q in &queued {
        let node = q["node"].as_str().unwrap_or_default();
        assert_eq!(
            q["job"],
            running(node)["job"],
            "the same job starts: {jobs:?}"
        );
        let at = |e: &&serde_json::Value| r.events.iter().position(|x| x == *e);
        assert!(at(q) < at(running(node)), "queued before running: {jobs:?}");
    }

    // Piped, each change is one line.
    ws.write("pipeline.toml", &pipeline("two"));
    let out = cmd(
        &ws,
        Some(&cluster),
        &["build", "--remote-cache", &url, "-j", "2"],
    )
    .output()
    .expect("running skyctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("queued    gpu-"))
        .unwrap_or_else(|| panic!("no queued line: {stderr}"));
    let (_, tail) = line.split_once(": slurm job ").expect(line);
    let (id, reason) = tail.split_once(' ').expect(line);
    assert!(id.bytes().all(|b| b.is_ascii_digit()), "{line}");
    assert!(reason.starts_with('(') && reason.ends_with(')'), "{line}");
    let node = &line["queued    ".len()..line.find(':').expect(line)];
    assert!(
        stderr.contains(&format!("running   {node}: slurm job {id} on skynode")),
        "{stderr}"
    );
}

#[test]
fn a_failing_node_fails_with_slurms_reason_and_writes_nothing_to_the_cache() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "bad"
run = "echo about to fail; exit 3"
outputs = ["out.txt"]
"#,
    );
    let r = build(
        &ws,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let failed = r
        .events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == "bad")
        .expect("a finished event");
    assert_eq!(failed["failure"]["kind"], "remote_failed", "{failed}");
    let msg = failed["error"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("the Slurm job for node `bad` failed:\n"),
        "{msg}"
    );
    assert!(
        msg.contains("`sh -c echo about to fail; exit 3` exited with status 3"),
        "{msg}"
    );
    assert!(cache.objects("ac").is_empty(), "{:?}", cache.objects("ac"));
}

#[test]
fn slurm_without_a_remote_cache_is_refused_at_start() {
    let ws = small_workspace();
    let out = cmd(&ws, None, &["build", "--execute", "slurm"])
        .output()
        .expect("skyctl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim(),
        "skyctl: the slurm engine needs a remote cache its jobs can write to (data moves through it, never through a shared file system): give --remote-cache URL, SKYCTL_REMOTE_CACHE or [cache] remote, not read-only"
    );
    assert!(!ws.p("build").exists());
    // From pipeline.toml too.
    ws.write(
        "pipeline.toml",
        &format!("[execute]\nengine = \"slurm\"\n{PIPELINE}"),
    );
    let out = cmd(&ws, None, &["build"]).output().expect("skyctl");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn execute_settings_are_checked_where_they_are_written() {
    let ws = Ws::new();
    let cases: [(&str, &str); 7] = [
        (
            "[execute]\nengine = \"ray\"\n",
            "pipeline.toml:2:10: unknown engine `ray` (expected one of: local, slurm)",
        ),
        (
            "[execute.slurm]\nmax_jobs = 0\n",
            "pipeline.toml:2:12: `max_jobs` must be between 1 and 10000, not 0",
        ),
        (
            "[execute.slurm]\nargs = [\"--qos high\"]\n",
            "pipeline.toml:2:9: each of `args` must be one srun option starting with `-`, without spaces (`--qos=high`), not `--qos high`",
        ),
        (
            "[[command]]\nname = \"c\"\nrun = \"true\"\nresources = { gpus = -1 }\n",
            "pipeline.toml:4:22: `gpus` must be between 0 and 64, not -1",
        ),
        (
            "[[command]]\nname = \"c\"\nrun = \"true\"\nresources = { mem = \"lots\" }\n",
            "pipeline.toml:4:21: `mem` must be a size such as `4G` or `512M` (a number, then K, M, G or T), not `lots`",
        ),
        (
            "[[command]]\nname = \"c\"\nrun = \"true\"\nresources = { constraint = \"k80 && x\" }\n",
            "pipeline.toml:4:28: `constraint` must be a Slurm feature expression (names with `&`, `|`, `[]`, `*`), not `k80 && x`",
        ),
        (
            "[[command]]\nname = \"c\"\nrun = \"true\"\nresources = { tools = [\"nv cc\"] }\n",
            "pipeline.toml:4:24: each of `tools` must be a program name or an absolute path, not `nv cc`",
        ),
    ];
    for (toml, want) in cases {
        ws.write("pipeline.toml", toml);
        let err = ws.fails(&["build"], 2);
        assert!(err.contains(want), "{toml}\n{err}");
    }
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"c\"\nrun = \"true\"\nresources = { gpu = 1 }\n",
    );
    let err = ws.fails(&["build"], 2);
    assert!(
        err.contains("pipeline.toml:4:15: unknown key `gpu` (did you mean `gpus`?); expected one of `cpus`, `gpus`, `constraint`, `exclusive`, `mem`, `local`, `tools`"),
        "{err}"
    );
    let err = ws.fails(&["build", "--execute", "ray"], 2);
    assert!(
        err.contains("invalid value 'ray' for '--execute <ENGINE>'"),
        "{err}"
    );
}

#[test]
fn sigterm_cancels_every_job_the_build_submitted_and_the_next_build_completes() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    // The slow nodes wait for a file outside the workspace (the one-machine cluster sees it).
    let gate = tempfile::tempdir().expect("tempdir");
    let go = gate.path().join("go");
    let wait = format!("while [ ! -e {} ]; do sleep 0.1; done", go.display());
    ws.write(
        "pipeline.toml",
        &format!(
            r#"
[[command]]
name = "fast"
run = "echo fast > fast.txt"
outputs = ["fast.txt"]

[[command]]
name = "slow1"
run = "{wait}; echo 1 > one.txt"
outputs = ["one.txt"]

[[command]]
name = "slow2"
run = "{wait}; echo 2 > two.txt"
outputs = ["two.txt"]
"#
        ),
    );
    let mut child = cmd(
        &ws,
        Some(&cluster),
        &["build", "--execute", "slurm", "--remote-cache", &url],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("skyctl");
    let t0 = Instant::now();
    while cluster.queue().len() < 2 || !ws.p("fast.txt").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the jobs never queued"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = common::terminate(&mut child, "during a Slurm build");
    assert_eq!(status.code(), Some(143));
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(cluster.queue(), Vec::<String>::new());
    assert!(!Path::new(&ws.p("one.txt")).exists());

    // The next build takes what finished and runs the rest.
    std::fs::write(&go, "").expect("the gate");
    let r = build(
        &ws,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.executed(), ["slow1", "slow2"]);
    assert_eq!(r.count("cached"), 1);
    assert_eq!(ws.read("two.txt"), "2\n");
}

#[test]
fn a_job_cancelled_from_outside_fails_its_node_with_slurms_reason() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "slow"
run = "sleep 60; echo 1 > one.txt"
outputs = ["one.txt"]
"#,
    );
    let child = cmd(
        &ws,
        Some(&cluster),
        &[
            "build",
            "--json",
            "--execute",
            "slurm",
            "--remote-cache",
            &url,
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("skyctl");
    let t0 = Instant::now();
    let running = || {
        let out = Command::new("squeue")
            .args(["-h", "-t", "RUNNING", "-o", "%i"])
            .env("SLURM_CONF", cluster.conf())
            .output()
            .expect("squeue");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let id = loop {
        let id = running();
        if !id.is_empty() {
            break id;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the job never ran");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Give the worker time to start the node's command.
    std::thread::sleep(Duration::from_millis(500));
    let st = Command::new("scancel")
        .arg(&id)
        .env("SLURM_CONF", cluster.conf())
        .status()
        .expect("scancel");
    assert!(st.success());
    let r = parse_build(child.wait_with_output().expect("skyctl"));
    assert_eq!(r.code, 1, "{}", r.stderr);
    let failed = r
        .events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == "slow")
        .expect("a finished event");
    assert_eq!(failed["failure"]["kind"], "remote_failed", "{failed}");
    let msg = failed["error"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("the Slurm job for node `slow` failed:\n")
            && msg.contains(&format!("*** STEP {id}.0 ON skynode CANCELLED AT")),
        "{msg}"
    );
    assert!(cache.objects("ac").is_empty(), "{:?}", cache.objects("ac"));
    assert!(!ws.p("one.txt").exists());
}

#[test]
fn a_job_that_leaves_no_result_in_the_cache_is_remote_lost() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    // A "worker" that succeeds without doing anything.
    ws.write(
        "pipeline.toml",
        r#"
[execute.slurm]
worker = "/bin/true"
retries = 0

[[command]]
name = "ghost"
run = "echo 1 > one.txt"
outputs = ["one.txt"]
"#,
    );
    let r = build(
        &ws,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let failed = r
        .events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == "ghost")
        .expect("a finished event");
    assert_eq!(failed["failure"]["kind"], "remote_lost", "{failed}");
    assert_eq!(
        failed["error"],
        format!("the slurm job ended, but its result for node `ghost` could not be taken from the remote cache `{}`", url.trim_end_matches('/'))
    );
    assert_eq!(cluster.finished_jobs(), ["COMPLETED"]);
}

#[test]
fn a_worker_without_a_declared_tool_refuses_the_job_naming_it() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "compile"
run = "nvcc-of-nowhere --version > v.txt"
outputs = ["v.txt"]
resources = { tools = ["sh", "nvcc-of-nowhere"] }
"#,
    );
    let r = build(
        &ws,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let failed = r
        .events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == "compile")
        .expect("a finished event");
    assert_eq!(failed["failure"]["kind"], "remote_failed", "{failed}");
    let msg = failed["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("skyctl: refusing the job: node `compile` needs the tool `nvcc-of-nowhere`, which this worker (skynode) does not have on PATH"),
        "{msg}"
    );
    assert!(cache.objects("ac").is_empty(), "{:?}", cache.objects("ac"));
}

#[test]
fn a_model_project_builds_on_slurm_with_the_kinds_own_code() {
    let cluster = Cluster::start();
    let cache = Nginx::start(Mode::Open);
    let url = cache.url();
    let top = Ws::new();
    let out = top.run(&["init", "proj"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ws = Ws::new();
    common::copy_tree(&top.p("proj"), ws.path());
    let local = Ws::new();
    common::copy_tree(&top.p("proj"), local.path());

    let r = build(
        &ws,
        Some(&cluster),
        &["--execute", "slurm", "--remote-cache", &url],
    );
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    let executed = r.executed();
    assert!(executed.len() >= 8, "{executed:?}");
    assert_eq!(cluster.finished_jobs().len(), executed.len());
    let r = build(&local, None, &["--remote-cache", "off"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.executed(), executed);
    // Byte-identical, but for the bench's timings.
    let timings = |p: &str| p.contains("bench");
    let a: Vec<_> = results(&ws)
        .into_iter()
        .filter(|f| !timings(&f.0))
        .collect();
    let b: Vec<_> = results(&local)
        .into_iter()
        .filter(|f| !timings(&f.0))
        .collect();
    assert!(
        a.iter().any(|f| f.0.ends_with(".gguf")),
        "{:?}",
        a.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(a, b);
}
