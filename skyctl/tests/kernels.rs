//! End-to-end tests of `skyctl golden gen`, `skyctl kernels run --impl cpu` and
//! `skyctl golden check` (exit codes, text and JSON output), run on the real binary.

use std::path::Path;
use std::process::{Command, Output};

fn skyctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args(args)
        .output()
        .expect("run skyctl")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// Overwrite element `index` of a PNGOLDEN1 f32 file with NaN.
fn poison(file: &Path, index: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let start = bytes.iter().position(|&b| b == b'\n').unwrap() + 1 + 4 * index;
    bytes[start..start + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn gen_run_check_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (golden, again, out) = (
        tmp.path().join("golden"),
        tmp.path().join("again"),
        tmp.path().join("out"),
    );

    let gen = skyctl(&["golden", "gen", path(&golden), "--json"]);
    assert!(gen.status.success(), "{gen:?}");
    let doc = json(&gen);
    assert_eq!(doc["files"].as_array().unwrap().len(), 40);
    assert_eq!(doc["files"][0]["name"], "q3k_matvec_weight");
    assert_eq!(
        doc["files"][0]["bytes"],
        10560 + "PNGOLDEN1 q3k_matvec_weight u8 10560 seed=0x9E3779B9\n".len()
    );
    let header = std::fs::read(golden.join("moe_topk_indices.bin")).unwrap();
    assert!(header.starts_with(b"PNGOLDEN1 moe_topk_indices i32 8 seed=0x9E3779B9\n"));

    let gen2 = skyctl(&["golden", "gen", path(&again)]);
    assert!(gen2.status.success());
    assert!(
        stdout(&gen2).contains(doc["set_digest"].as_str().unwrap()),
        "same set digest in another dir"
    );

    let run = skyctl(&["kernels", "run", "--impl", "cpu", path(&golden), path(&out)]);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        19,
        "exactly the output files"
    );

    let ok = skyctl(&["golden", "check", path(&golden), path(&out)]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(
        stdout(&ok).contains("PASS: all 19 output files within tolerance"),
        "{}",
        stdout(&ok)
    );

    let ok_json = json(&skyctl(&[
        "golden",
        "check",
        path(&golden),
        path(&out),
        "--json",
    ]));
    assert_eq!(ok_json["passed"], true);
    assert_eq!(ok_json["files"].as_array().unwrap().len(), 19);
    for f in ok_json["files"].as_array().unwrap() {
        assert_eq!(f["max_abs_err"], 0.0, "CPU harness is exact: {f}");
    }

    poison(&out.join("ssm_conv_out.bin"), 4100);
    let bad = skyctl(&["golden", "check", path(&golden), path(&out)]);
    assert_eq!(bad.status.code(), Some(1), "{}", stdout(&bad));
    let text = stdout(&bad);
    assert!(text.contains("FAIL: 1 of 19 output files failed"), "{text}");
    assert!(
        text.contains("ssm_conv_out: worst at index 4100 (channel=4100)"),
        "{text}"
    );

    let bad_json = skyctl(&["golden", "check", path(&golden), path(&out), "--json"]);
    assert_eq!(bad_json.status.code(), Some(1));
    let doc = json(&bad_json);
    assert_eq!(doc["passed"], false);
    assert_eq!(doc["files_failed"], 1);
    let conv = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "ssm_conv_out")
        .unwrap();
    assert_eq!(conv["status"], "fail");
    assert_eq!(conv["kernel"], "ssm_conv");
    assert_eq!(conv["elements"], 8192);
    assert_eq!(conv["non_finite"], 1);
    assert_eq!(conv["worst"]["index"], 4100);
    assert_eq!(conv["worst"]["coords"]["channel"], 4100);
    assert!(
        conv["worst"]["candidate"].is_null(),
        "NaN serializes as null"
    );
    for key in [
        "max_abs_err",
        "max_rel_err",
        "floor",
        "tolerance",
        "problem",
        "note",
    ] {
        assert!(conv.get(key).is_some(), "missing key {key}");
    }
}

#[test]
fn missing_candidate_file_fails_and_bad_golden_dir_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (golden, out) = (tmp.path().join("g"), tmp.path().join("o"));
    assert!(skyctl(&["golden", "gen", path(&golden)]).status.success());
    assert!(
        skyctl(&["kernels", "run", "--impl", "cpu", path(&golden), path(&out)])
            .status
            .success()
    );
    std::fs::remove_file(out.join("q3k_dequant_block0.bin")).unwrap();
    let o = skyctl(&["golden", "check", path(&golden), path(&out)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("q3k_dequant_block0: missing: "),
        "{}",
        stdout(&o)
    );

    let nowhere = tmp.path().join("nowhere");
    let o = skyctl(&["golden", "check", path(&nowhere), path(&out)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("skyctl: ") && err.contains("q3k_matvec_output.bin"),
        "{err}"
    );

    let o = skyctl(&[
        "kernels",
        "run",
        "--impl",
        "cpu",
        path(&out),
        path(&nowhere),
    ]);
    assert_eq!(o.status.code(), Some(2), "outputs are not inputs");
    assert!(String::from_utf8_lossy(&o.stderr).contains("q3k_matvec_weight.bin"));
}

#[test]
fn kernels_files_lists_harness_inputs_and_outputs() {
    let o = skyctl(&["kernels", "files", "--json"]);
    assert!(o.status.success());
    let doc = json(&o);
    assert_eq!(doc["inputs"].as_array().unwrap().len(), 21);
    assert_eq!(doc["outputs"].as_array().unwrap().len(), 19);
    assert_eq!(doc["inputs"][0], "q3k_matvec_weight.bin");
    assert_eq!(doc["outputs"][18], "ssm_gated_out.bin");
}
