//! `SKYCTL_ISA` through the real binary: a bad or unavailable level is refused before anything
//! runs (exit 2, a message naming the levels this CPU has); a good one caps every kernel and
//! `skyctl bench --json` names it, the CPU and the threads; the answers are the same bytes on
//! every level. On an emulated AVX2-only CPU (QEMU's Zen 3) the default path is AVX2, the levels
//! it lacks are refused, and answers and artifacts are this machine's bytes.

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

/// One quick `skyctl bench` of s1-pico, as JSON.
const PICO_BENCH: [&str; 7] = [
    "bench",
    "models/s1-pico",
    "--iters",
    "1",
    "--rounds",
    "1",
    "--json",
];

fn bench(isa: Option<&str>, extra: &[&str]) -> serde_json::Value {
    let mut args = PICO_BENCH.to_vec();
    args.extend_from_slice(extra);
    let o = skyctl(isa, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("bench --json")
}

/// `skyctl ask` of s1-pico on the request file, JSON out, in the mode of `flag` (none: f32).
fn pico_ask<'a>(request: &'a std::path::Path, flag: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec![
        "ask",
        "models/s1-pico",
        "--request",
        request.to_str().unwrap(),
        "--json",
    ];
    args.extend(flag);
    args
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
            let o = skyctl(Some(name), &pico_ask(&request, flag));
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

/// The CPU model of the issue's AVX2-only machines (AMD family 25, Zen 3: AVX2 and FMA, no
/// AVX-512, no AVX-VNNI), as QEMU's user-mode emulator presents it to a program: CPUID says so,
/// so `auto` takes the path such a machine takes, with no `SKYCTL_ISA` to stand in for it.
#[cfg(target_arch = "x86_64")]
const ZEN3: &str = "EPYC-Milan";

/// `skyctl ARGS` under `qemu-x86_64 -cpu EPYC-Milan`, `SKYCTL_ISA` as given; stderr without
/// QEMU's warnings about CPUID bits it does not emulate.
#[cfg(target_arch = "x86_64")]
fn skyctl_on_zen3(isa: Option<&str>, args: &[&str]) -> (Output, String) {
    let mut c = Command::new("qemu-x86_64");
    c.args(["-cpu", ZEN3, env!("CARGO_BIN_EXE_skyctl")])
        .args(args)
        .current_dir(root());
    match isa {
        Some(v) => c.env("SKYCTL_ISA", v),
        None => c.env_remove("SKYCTL_ISA"),
    };
    let o = c.output().unwrap_or_else(|e| {
        panic!("qemu-x86_64 (Debian's qemu-user; .ci/run installs it) could not run: {e}")
    });
    let err = stderr(&o)
        .lines()
        .filter(|l| !l.starts_with("qemu-x86_64: warning:"))
        .map(|l| format!("{l}\n"))
        .collect();
    (o, err)
}

#[cfg(target_arch = "x86_64")]
#[test]
fn an_avx2_only_cpu_picks_avx2_and_gives_this_machines_bytes() {
    // Under the emulated Zen 3 the default is AVX2 for the f32 kernels and the int8 ones.
    let (o, err) = skyctl_on_zen3(None, &PICO_BENCH);
    assert!(o.status.success(), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("bench --json");
    assert_eq!(r["isa"], "avx2", "{r}");
    assert_eq!(r["int8_kernel"], "avx2", "{r}");
    // What it lacks is refused before anything runs, naming what it has.
    let dir = tempfile::tempdir().unwrap();
    let refused = dir.path().join("refused.gguf");
    for level in ["avx512", "avx-vnni"] {
        let (o, err) = skyctl_on_zen3(
            Some(level),
            &["convert", "models/s1-pico", refused.to_str().unwrap()],
        );
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(
            err.trim_end(),
            format!("skyctl: SKYCTL_ISA={level}: this CPU cannot run it (it has scalar, avx2)")
        );
        assert!(!refused.exists());
    }
    // Answers in every compute mode: the bytes of this machine's default path.
    let request = dir.path().join("request.json");
    std::fs::write(
        &request,
        r#"{"state": "Reply by Friday or the offer lapses.", "questions": {"spam": {"type": "choice", "instructions": "Is this spam?", "criteria": ["spam", "not_spam"]}, "tone": {"type": "score", "instructions": "How urgent?", "criteria": ["calm", "some", "very"]}}}"#,
    )
    .unwrap();
    for mode in [None, Some("--q8"), Some("--q8-fast")] {
        let args = pico_ask(&request, mode);
        let here = skyctl(None, &args);
        assert!(here.status.success(), "{}", stderr(&here));
        let (zen3, err) = skyctl_on_zen3(None, &args);
        assert!(zen3.status.success(), "{err}");
        assert!(
            zen3.stdout == here.stdout,
            "{mode:?}: the AVX2-only CPU answers\n{}\nthis machine ({})\n{}",
            String::from_utf8_lossy(&zen3.stdout),
            IsaLevel::best().name(),
            String::from_utf8_lossy(&here.stdout)
        );
    }
    // The artifacts the pipeline caches: the same bytes whichever CPU built them.
    for (name, args) in [
        ("f16.gguf", &["convert", "models/s1-pico"][..]),
        ("calibration.json", &["calibrate", "models/s1-pico"][..]),
        ("q8_0.gguf", &["quantize", "models/s1-pico"][..]),
    ] {
        let here = dir.path().join(format!("here.{name}"));
        let zen3 = dir.path().join(format!("zen3.{name}"));
        let o = skyctl(None, &[args, &[here.to_str().unwrap()]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let (o, err) = skyctl_on_zen3(None, &[args, &[zen3.to_str().unwrap()]].concat());
        assert!(o.status.success(), "{err}");
        let (a, b) = (std::fs::read(&here).unwrap(), std::fs::read(&zen3).unwrap());
        assert!(!a.is_empty());
        assert!(
            a == b,
            "{name}: the AVX2-only CPU wrote other bytes than this machine"
        );
    }
}
