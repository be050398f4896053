//! The goldens against an independent numpy implementation (`kernels_numpy/reference.py`,
//! written from the seed and the spec): every input must be bit-identical when regenerated
//! from the xorshift32 stream, every output within a few f32 ulp (in practice identical).
//! Python comes from SKYCTL_TEST_PYTHON, else <workspace>/.venv/bin/python; without either
//! the test fails (never a silent pass).

use std::path::PathBuf;
use std::process::Command;

fn python() -> PathBuf {
    let candidates = std::env::var_os("SKYCTL_TEST_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")]);
    for py in candidates {
        let ok = Command::new(&py)
            .args(["-c", "import numpy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return py;
        }
    }
    panic!("no Python with numpy: set SKYCTL_TEST_PYTHON or create .venv (bash .ci/run does)");
}

#[test]
fn goldens_match_an_independent_numpy_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let gen = Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args(["golden", "gen"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(gen.status.success(), "{gen:?}");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kernels_numpy/reference.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("inputs: 21 of 21 bit-identical"),
        "{stdout}"
    );
    assert!(
        stdout.contains("topk [1, 93, 212, 144, 170, 76, 180, 203]"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("\noutput ").count(), 19, "{stdout}");
    assert!(stdout.trim_end().ends_with("OK"), "{stdout}");
}
