//! A user's first week: `init` on their own checkpoint builds on the first try (tolerances
//! fitted to the error measured on that checkpoint), the release's checksums check, and the
//! messages say what to do next.

mod common;

use common::Ws;
use std::path::Path;
use std::process::Command;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `tolerance = ...` values of the manifest's suites, in order.
fn tolerances(manifest: &str) -> Vec<f64> {
    manifest
        .lines()
        .filter_map(|l| l.strip_prefix("tolerance = "))
        .map(|t| t.parse().unwrap())
        .collect()
}

/// `init --model CHECKPOINT` into `proj/`, then the first build: it passes and publishes.
fn first_build_passes(ws: &Ws, checkpoint: &Path, name: &str) {
    let o = ws.run(&["init", "proj", "--model", checkpoint.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // Each suite's tolerance is reported with the error it was fitted to.
    for suite in [format!("{name}-f16"), format!("{name}-q8_0")] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{suite}: max |dp| ")))
            .unwrap_or_else(|| panic!("no line for {suite}:\n{out}"));
        let measured: f64 = line
            .split("max |dp| ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        let fitted: f64 = line.rsplit("tolerance = ").next().unwrap().parse().unwrap();
        assert!(
            fitted >= (2.0 * measured).min(1.0) && (1e-4..=1.0).contains(&fitted),
            "{line}"
        );
    }
    let manifest = ws.read("proj/pipeline.toml");
    assert_eq!(tolerances(&manifest).len(), 2, "{manifest}");
    let b = common::parse_build(
        ws.cmd(&["build", "--json"])
            .current_dir(ws.p("proj"))
            .output()
            .unwrap(),
    );
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);
    assert_eq!(b.summary["release"]["published"], true, "{}", b.summary);
    assert!(ws
        .p(&format!("proj/site/public/models/{name}.gguf"))
        .is_file());
    assert!(ws
        .p(&format!("proj/site/public/models/{name}.q8_0.gguf"))
        .is_file());
}

#[test]
fn init_on_each_committed_model_builds_on_the_first_try() {
    for name in ["s1-pico", "s1-nano", "s1-micro"] {
        let ws = Ws::new();
        first_build_passes(&ws, &repo().join("models").join(name), name);
    }
}

#[test]
fn init_on_random_checkpoints_builds_on_the_first_try() {
    for preset in ["s1-pico", "s1-nano"] {
        let ws = Ws::new();
        let name = format!("my-{preset}");
        let ck = ws.p(&name);
        let o = ws.run(&["random", preset, ck.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        first_build_passes(&ws, &ck, &name);
    }
}

/// A project from `init` (random s1-pico), not built.
fn initialised() -> Ws {
    let ws = Ws::new();
    let o = ws.run(&["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    ws
}

#[test]
fn golden_record_reports_each_suite_and_set_tolerance_writes_the_fit() {
    let ws = initialised();
    let fitted = tolerances(&ws.read("pipeline.toml"));
    // A tolerance far too tight, and one missing: both get the fitted value back.
    let manifest = ws
        .read("pipeline.toml")
        .replacen(
            &format!("tolerance = {:e}", fitted[0]),
            "tolerance = 1e-12",
            1,
        )
        .replacen(&format!("tolerance = {:e}", fitted[1]), "", 1);
    ws.write("pipeline.toml", &manifest);
    assert_eq!(tolerances(&manifest), vec![1e-12], "{manifest}");
    let record = [
        "golden",
        "record",
        "models/s1-pico",
        "--cases",
        "golden/s1-pico/cases.jsonl",
        "--out",
        "golden/s1-pico/expected.jsonl",
    ];
    let o = ws.run(&record);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("s1-pico-f16 (s1-pico f16, f32 path): max |dp| ")
            && out.contains("tolerance 1e-12: EXCEEDED; fitted "),
        "{out}"
    );
    assert!(
        out.contains("s1-pico-q8_0 (s1-pico q8_0, q8 path): max |dp| ")
            && out.contains("no tolerance; fitted "),
        "{out}"
    );
    assert!(
        out.contains("--set-tolerance writes the fitted tolerances into pipeline.toml"),
        "{out}"
    );
    assert_eq!(ws.read("pipeline.toml"), manifest, "reported, not written");

    let mut set = record.to_vec();
    set.push("--set-tolerance");
    let o = ws.run(&set);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("wrote the fitted tolerances into"), "{out}");
    let now = ws.read("pipeline.toml");
    let mut got = tolerances(&now);
    got.sort_by(f64::total_cmp);
    let mut want = fitted.clone();
    want.sort_by(f64::total_cmp);
    assert_eq!(got, want, "{now}");
    let b = ws.build(&[]);
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);

    // --set-tolerance with no suite using the file says so and changes nothing.
    let e = ws.fails(
        &[
            "golden",
            "record",
            "models/s1-pico",
            "--cases",
            "golden/s1-pico/cases.jsonl",
            "--out",
            "other.jsonl",
            "--set-tolerance",
        ],
        2,
    );
    assert!(
        e.contains("--set-tolerance: no [[golden]] suite of ")
            && e.contains("has expected = `other.jsonl`"),
        "{e}"
    );
    assert_eq!(ws.read("pipeline.toml"), now);
}

#[test]
fn the_release_checksums_check_with_sha256sum_in_the_release_root() {
    let ws = initialised();
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    let o = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(ws.p("site/public"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(out, "models/s1-pico.gguf: OK\n");
    // A changed published file fails the check: the sums are of what the release ships.
    std::fs::write(ws.p("site/public/models/s1-pico.gguf"), b"changed").unwrap();
    let o = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(ws.p("site/public"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}
