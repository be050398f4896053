//! `SKYCTL_ISA` through the real binary: a bad or unavailable level is refused before anything
//! runs (exit 2, a message naming the levels this CPU has); a good one caps every kernel and
//! `skyctl bench --json` names it, the CPU and the threads; the answers are the same bytes on
//! every level.

use std::path::PathBuf;
use std::process::{Command, Output};

use sky_quant::IsaLevel;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn skyctl(isa: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skyctl"));
    c.args(args).current_dir(root());
    match isa {
        Some(v) => c.env("SKYCTL_ISA", v),
        None => c.env_remove("SKYCTL_ISA"),
    };
    c.output().expect("running skyctl")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_bad_level_is_refused_before_anything_runs() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("pico.gguf");
    let args = ["convert", "models/s1-pico", out.to_str().unwrap()];
    let o = skyctl(Some("sse9"), &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("skyctl: SKYCTL_ISA=\"sse9\" is not an instruction set: use one of scalar, avx2, avx-vnni, avx512, neon, auto"),
        "{err}"
    );
    assert!(!out.exists(), "nothing may run under a bad SKYCTL_ISA");
    // A level this CPU lacks (where there is one) is refused the same way, naming what it has.
    if let Some(missing) = IsaLevel::ALL.into_iter().find(|l| !l.is_available()) {
        let o = skyctl(Some(missing.name()), &args);
        assert_eq!(o.status.code(), Some(2));
        let have: Vec<&str> = IsaLevel::available().iter().map(|l| l.name()).collect();
        assert_eq!(
            stderr(&o).trim_end(),
            format!(
                "skyctl: SKYCTL_ISA={}: this CPU cannot run it (it has {})",
                missing.name(),
                have.join(", ")
            )
        );
        assert!(!out.exists());
    }
    // `auto` and an empty value are the default.
    for v in ["auto", ""] {
        let o = skyctl(Some(v), &args);
        assert!(o.status.success(), "{v:?}: {}", stderr(&o));
    }
}

fn bench(isa: Option<&str>, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "models/s1-pico",
        "--iters",
        "1",
        "--rounds",
        "1",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = skyctl(isa, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("bench --json")
}

#[test]
fn every_level_bench_names_its_path_and_asks_give_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("request.json");
    std::fs::write(
        &request,
        r#"{"state": "WIN a FREE cruise!!!", "questions": {"spam": {"type": "choice", "instructions": "Is this spam?", "criteria": ["spam", "not_spam"]}, "tone": {"type": "score", "instructions": "How urgent?", "criteria": ["calm", "some", "very"]}}}"#,
    )
    .unwrap();
    let mut answers = Vec::new();
    for level in IsaLevel::available() {
        let name = level.name();
        for (flag, int8) in [
            (None, false),
            (Some("--q8"), true),
            (Some("--q8-fast"), true),
        ] {
            let extra: Vec<&str> = flag.into_iter().chain(["--threads", "2"]).collect();
            let r = bench(Some(name), &extra);
            assert_eq!(r["isa"], name, "{r}");
            assert_eq!(r["threads"], 2, "{r}");
            let cpu = r["cpu"].as_str().expect("cpu");
            assert!(!cpu.is_empty());
            let kernel = r["int8_kernel"].as_str().expect("int8_kernel");
            let path = sky_quant::KernelPath::best_at(level);
            assert_eq!(kernel, path.name(), "{r}");
            assert_eq!(r["int8_matrices"].as_u64().unwrap() > 0, int8, "{r}");
            let mut args = vec![
                "ask",
                "models/s1-pico",
                "--request",
                request.to_str().unwrap(),
                "--json",
            ];
            args.extend(flag);
            let o = skyctl(Some(name), &args);
            assert!(o.status.success(), "{}", stderr(&o));
            answers.push((name, flag, o.stdout));
        }
    }
    for mode in [None, Some("--q8"), Some("--q8-fast")] {
        let of_mode: Vec<_> = answers.iter().filter(|a| a.1 == mode).collect();
        assert!(of_mode.len() >= 2, "this CPU runs one level only");
        for a in &of_mode[1..] {
            assert!(
                a.2 == of_mode[0].2,
                "{mode:?}: {} answers differ from {}:\n{}\n{}",
                a.0,
                of_mode[0].0,
                String::from_utf8_lossy(&a.2),
                String::from_utf8_lossy(&of_mode[0].2)
            );
        }
    }
    // Without the variable: the best level.
    let r = bench(None, &[]);
    assert_eq!(r["isa"], IsaLevel::best().name());
}
