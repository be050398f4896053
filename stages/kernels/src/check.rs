//! The verifier: judge a kernel implementation's output files against the goldens.
//!
//! Rules (the seed's tolerances, made precise):
//! - f32 outputs: per element `rel = |c − g| / max(|g|, floor)`, where
//!   `floor = FLOOR_FRACTION · max_i |g_i|` over the whole file (and at least the smallest
//!   normal f32). The file passes when every `rel ≤ rtol` ([`crate::table::RTOL_KERNEL`] =
//!   1e-3 for the Kepler fp32 kernels, [`crate::table::RTOL_ROUTING`] = 1e-4 for the MoE
//!   weights and gate). The floor turns the test into an absolute one near zero: an element
//!   whose golden is below 1 % of the file's largest magnitude may be off by
//!   `rtol · floor`, which keeps legitimate fp32 cancellation (a dot product summing to
//!   nearly zero, `sin θ` near a root) from failing while any real bug still does.
//! - i32 outputs (the top-k indices): exact equality.
//! - A NaN or Inf anywhere in a candidate fails the file.
//! - A missing, malformed, wrongly typed or wrongly sized candidate file fails the file, with
//!   the reader's message.
//! - For Q3_K, when the mat-vec fails the report says whether the dequant-only file already
//!   fails (the seed's advice for localising a mismatch).
//!
//! Problems with the *golden* directory (missing or malformed goldens, NaN in a golden) are
//! errors, not failures: nothing can be judged against a broken reference.

use std::path::{Path, PathBuf};

use serde::ser::SerializeMap;

use crate::error::{Error, Result};
use crate::format::{self, Dtype, GoldenFile, Payload};
use crate::table::{self, FileSpec, Kernel, Tolerance};

/// Fraction of a file's largest golden magnitude below which relative error is measured
/// against that floor instead of the element's own magnitude.
pub const FLOOR_FRACTION: f64 = 1e-2;

/// Pass or fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within tolerance.
    Pass,
    /// Out of tolerance, non-finite, or unreadable.
    Fail,
}

/// Named coordinates of an element, e.g. `{"head": 3, "j": 17}`; serialized as a JSON
/// object in dimension order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coords(pub Vec<(&'static str, usize)>);

impl serde::Serialize for Coords {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl std::fmt::Display for Coords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(" "))
    }
}

/// The worst element of a file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Worst {
    /// Flat element index.
    pub index: usize,
    /// The index in the kernel's own coordinates (row, head, position, ...).
    pub coords: Coords,
    /// Golden value.
    pub golden: f64,
    /// Candidate value (NaN/Inf serialize as JSON `null`; see `non_finite`).
    pub candidate: f64,
}

/// The verdict on one output file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FileReport {
    /// Golden name.
    pub name: String,
    /// The kernel it belongs to.
    pub kernel: Kernel,
    /// Element type.
    pub dtype: Dtype,
    /// Pass or fail.
    pub status: Status,
    /// Elements compared (the golden's count).
    pub elements: usize,
    /// How the file is judged.
    pub tolerance: Tolerance,
    /// The relative-error floor used for this file (f32 files).
    pub floor: Option<f64>,
    /// Largest |c − g| over finite candidate elements.
    pub max_abs_err: Option<f64>,
    /// Largest relative error over finite candidate elements (f32 files).
    pub max_rel_err: Option<f64>,
    /// Elements out of tolerance (mismatching, for exact files).
    pub over_tolerance: usize,
    /// NaN or Inf candidate elements.
    pub non_finite: usize,
    /// The worst element: the first non-finite one if any, else the largest relative error
    /// (the first mismatch for exact files).
    pub worst: Option<Worst>,
    /// Why the file could not be compared (missing, malformed, wrong size), if so.
    pub problem: Option<String>,
    /// Diagnosis attached to the file (the Q3_K localisation advice).
    pub note: Option<String>,
}

/// The verdict on a whole candidate directory.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckReport {
    /// The golden directory.
    pub golden_dir: PathBuf,
    /// The candidate directory.
    pub candidate_dir: PathBuf,
    /// True when every file passes.
    pub passed: bool,
    /// Output files checked.
    pub files_checked: usize,
    /// Output files that failed.
    pub files_failed: usize,
    /// One entry per golden output file, in table order.
    pub files: Vec<FileReport>,
    /// Cross-file diagnoses.
    pub notes: Vec<String>,
}

impl CheckReport {
    /// The report of file `name`, if it was checked.
    pub fn file(&self, name: &str) -> Option<&FileReport> {
        self.files.iter().find(|f| f.name == name)
    }

    /// Names of the failing files, in table order.
    pub fn failing(&self) -> Vec<&str> {
        self.files
            .iter()
            .filter(|f| f.status == Status::Fail)
            .map(|f| f.name.as_str())
            .collect()
    }
}

/// Compare every golden output file in `golden_dir` with the same-named file in
/// `candidate_dir`. `Err` only when the goldens themselves cannot be used.
pub fn check(golden_dir: &Path, candidate_dir: &Path) -> Result<CheckReport> {
    // A mistyped candidate directory is a usage error, not 19 "missing" failures.
    if !candidate_dir.is_dir() {
        let e = std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "candidate directory does not exist",
        );
        return Err(Error::io(candidate_dir, e));
    }
    let mut files = Vec::new();
    for spec in table::output_files() {
        let golden = read_golden(golden_dir, spec)?;
        files.push(check_file(spec, &golden, candidate_dir));
    }
    let mut notes = Vec::new();
    localise_q3k(&mut files, &mut notes);
    let files_failed = files.iter().filter(|f| f.status == Status::Fail).count();
    Ok(CheckReport {
        golden_dir: golden_dir.to_path_buf(),
        candidate_dir: candidate_dir.to_path_buf(),
        passed: files_failed == 0,
        files_checked: files.len(),
        files_failed,
        files,
        notes,
    })
}

fn read_golden(dir: &Path, spec: &FileSpec) -> Result<GoldenFile> {
    let file = GoldenFile::read(dir, spec.name)?;
    let label = format::file_path(dir, spec.name).display().to_string();
    table::check_shape(spec, &file, &label)?;
    if let Payload::F32(v) = &file.payload {
        if let Some((index, &value)) = v.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(Error::NonFiniteGolden {
                file: label,
                index,
                value,
            });
        }
    }
    Ok(file)
}

fn read_candidate(
    dir: &Path,
    spec: &FileSpec,
    golden: &GoldenFile,
) -> std::result::Result<GoldenFile, String> {
    let path = format::file_path(dir, spec.name);
    if !path.exists() {
        return Err(format!("missing: {} does not exist", path.display()));
    }
    let file = GoldenFile::read(dir, spec.name).map_err(|e| e.to_string())?;
    table::check_shape(spec, &file, &path.display().to_string()).map_err(|e| e.to_string())?;
    if file.seed != golden.seed {
        return Err(format!(
            "{}: seed is 0x{:08X}, the goldens were generated with 0x{:08X}",
            path.display(),
            file.seed,
            golden.seed
        ));
    }
    Ok(file)
}

fn check_file(spec: &FileSpec, golden: &GoldenFile, candidate_dir: &Path) -> FileReport {
    let tolerance = spec.tolerance.unwrap_or(Tolerance::Exact);
    let mut report = FileReport {
        name: spec.name.to_string(),
        kernel: spec.kernel,
        dtype: spec.dtype,
        status: Status::Fail,
        elements: golden.payload.len(),
        tolerance,
        floor: None,
        max_abs_err: None,
        max_rel_err: None,
        over_tolerance: 0,
        non_finite: 0,
        worst: None,
        problem: None,
        note: None,
    };
    let candidate = match read_candidate(candidate_dir, spec, golden) {
        Ok(c) => c,
        Err(problem) => {
            report.problem = Some(problem);
            return report;
        }
    };
    match (&golden.payload, &candidate.payload, tolerance) {
        (Payload::F32(g), Payload::F32(c), Tolerance::Relative { rtol }) => {
            compare_f32(spec, g, c, rtol, &mut report)
        }
        (Payload::I32(g), Payload::I32(c), _) => compare_exact(spec, g, c, &mut report),
        (Payload::U8(g), Payload::U8(c), _) => {
            let g: Vec<i32> = g.iter().map(|&b| i32::from(b)).collect();
            let c: Vec<i32> = c.iter().map(|&b| i32::from(b)).collect();
            compare_exact(spec, &g, &c, &mut report)
        }
        _ => {
            report.problem = Some(format!(
                "{}: dtype and tolerance of the table disagree",
                spec.name
            ))
        }
    }
    report
}

fn compare_f32(spec: &FileSpec, g: &[f32], c: &[f32], rtol: f64, r: &mut FileReport) {
    let max_g = g.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    let floor = (FLOOR_FRACTION * max_g).max(f64::from(f32::MIN_POSITIVE));
    let (mut max_abs, mut max_rel, mut worst_rel) = (0.0f64, 0.0f64, 0usize);
    let mut first_non_finite = None;
    for (i, (&gv, &cv)) in g.iter().zip(c).enumerate() {
        if !cv.is_finite() {
            r.non_finite += 1;
            first_non_finite.get_or_insert(i);
            continue;
        }
        let abs = (f64::from(cv) - f64::from(gv)).abs();
        let rel = abs / f64::from(gv).abs().max(floor);
        max_abs = max_abs.max(abs);
        if rel > max_rel {
            (max_rel, worst_rel) = (rel, i);
        }
        if rel > rtol {
            r.over_tolerance += 1;
        }
    }
    let worst = first_non_finite.unwrap_or(worst_rel);
    r.floor = Some(floor);
    r.max_abs_err = Some(max_abs);
    r.max_rel_err = Some(max_rel);
    // Identical files have no worst element.
    let differs = first_non_finite.is_some() || max_abs > 0.0;
    r.worst = (!g.is_empty() && differs).then(|| Worst {
        index: worst,
        coords: Coords(spec.coords(worst)),
        golden: f64::from(g[worst]),
        candidate: f64::from(c[worst]),
    });
    r.status = if r.non_finite == 0 && r.over_tolerance == 0 {
        Status::Pass
    } else {
        Status::Fail
    };
}

fn compare_exact(spec: &FileSpec, g: &[i32], c: &[i32], r: &mut FileReport) {
    let mismatches: Vec<usize> = (0..g.len()).filter(|&i| g[i] != c[i]).collect();
    let max_abs = g
        .iter()
        .zip(c)
        .map(|(&a, &b)| (i64::from(a) - i64::from(b)).unsigned_abs())
        .max()
        .unwrap_or(0);
    r.max_abs_err = Some(max_abs as f64);
    r.over_tolerance = mismatches.len();
    r.worst = mismatches.first().map(|&i| Worst {
        index: i,
        coords: Coords(spec.coords(i)),
        golden: f64::from(g[i]),
        candidate: f64::from(c[i]),
    });
    r.status = if mismatches.is_empty() {
        Status::Pass
    } else {
        Status::Fail
    };
}

/// The seed: "use the dequant-only file first to localize a mismatch to the dequant vs. the
/// dot-product".
fn localise_q3k(files: &mut [FileReport], notes: &mut Vec<String>) {
    let status =
        |files: &[FileReport], name: &str| files.iter().find(|f| f.name == name).map(|f| f.status);
    let dequant = status(files, "q3k_dequant_block0");
    let Some(matvec) = files.iter_mut().find(|f| f.name == "q3k_matvec_output") else {
        return;
    };
    let note = match (matvec.status, dequant) {
        (Status::Fail, Some(Status::Fail)) => "q3k_dequant_block0 already fails: the mismatch is in the Q3_K \
             dequantisation (hmask / qs / scales / d decoding), before any dot product"
            .to_string(),
        (Status::Fail, Some(Status::Pass)) => {
            let row = matvec.worst.as_ref().map_or(String::new(), |w| format!(" (worst: {})", w.coords));
            format!(
                "q3k_dequant_block0 passes: block 0 dequantises correctly, so the mismatch is in the dot \
                 product or in blocks 1..95{row}"
            )
        }
        (Status::Pass, Some(Status::Fail)) => {
            "q3k_dequant_block0 fails although the mat-vec passes: the dequant-only output path is wrong".to_string()
        }
        _ => return,
    };
    matvec.note = Some(note.clone());
    notes.push(note);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{generate, run_cpu, write_files};

    fn golden_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        generate(dir.path()).unwrap();
        dir
    }

    fn harness_dir(golden: &Path) -> tempfile::TempDir {
        let out = tempfile::tempdir().unwrap();
        run_cpu(golden, out.path()).unwrap();
        out
    }

    #[test]
    fn cpu_harness_passes_with_zero_error() {
        let g = golden_dir();
        let c = harness_dir(g.path());
        let report = check(g.path(), c.path()).unwrap();
        assert!(report.passed, "{:?}", report.failing());
        assert_eq!(report.files_checked, 19);
        for f in &report.files {
            assert_eq!(f.max_abs_err, Some(0.0), "{}", f.name);
        }
    }

    #[test]
    fn small_errors_within_tolerance_pass_and_floor_covers_near_zero() {
        let g = golden_dir();
        let c = harness_dir(g.path());
        let mut y = GoldenFile::read(c.path(), "ssm_recur_y").unwrap();
        let Payload::F32(v) = &mut y.payload else {
            panic!()
        };
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        for x in v.iter_mut() {
            *x *= 1.0 + 5e-4; // relative 5e-4 < 1e-3
        }
        // A near-zero golden off by less than rtol·floor passes.
        let i = v
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
            .unwrap()
            .0;
        v[i] += 0.5e-3 * 0.01 * max;
        write_files(c.path(), &[y]).unwrap();
        let report = check(g.path(), c.path()).unwrap();
        assert!(report.passed, "{:?}", report.file("ssm_recur_y"));
        let f = report.file("ssm_recur_y").unwrap();
        assert!(f.max_rel_err.unwrap() > 4e-4 && f.max_rel_err.unwrap() <= 1e-3);
    }

    #[test]
    fn missing_malformed_and_wrong_sized_candidates_fail() {
        let g = golden_dir();
        let c = harness_dir(g.path());
        std::fs::remove_file(format::file_path(c.path(), "qknorm_output")).unwrap();
        std::fs::write(
            format::file_path(c.path(), "ssm_conv_out"),
            b"PNGOLDEN1 ssm_conv_out f32 2\n\0\0\0\0\0\0\0\0",
        )
        .unwrap();
        write_files(
            c.path(),
            &[GoldenFile::new(
                "ssm_gated_out",
                Payload::F32(vec![0.0; 4097]),
            )],
        )
        .unwrap();
        write_files(
            c.path(),
            &[GoldenFile::new(
                "moe_topk_indices",
                Payload::F32(vec![0.0; 8]),
            )],
        )
        .unwrap();
        let mut path = format::file_path(c.path(), "rope_q_pos1");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 0, 0, 0]);
        std::fs::write(&path, &bytes).unwrap();
        path = format::file_path(c.path(), "rope_k_pos1");
        let mut seeded = GoldenFile::read(c.path(), "rope_k_pos1").unwrap();
        seeded.seed = 1;
        std::fs::write(&path, seeded.to_bytes()).unwrap();

        let report = check(g.path(), c.path()).unwrap();
        assert!(!report.passed);
        let problem = |n: &str| report.file(n).unwrap().problem.clone().unwrap_or_default();
        assert!(
            problem("qknorm_output").starts_with("missing: "),
            "{}",
            problem("qknorm_output")
        );
        assert!(
            problem("ssm_conv_out").contains("4 fields, expected 5"),
            "{}",
            problem("ssm_conv_out")
        );
        assert!(
            problem("ssm_gated_out").contains("count is 4097, expected 4096"),
            "{}",
            problem("ssm_gated_out")
        );
        assert!(problem("moe_topk_indices").contains("dtype is f32, expected i32"));
        assert!(problem("rope_q_pos1").contains("(trailing bytes)"));
        assert!(problem("rope_k_pos1").contains("seed is 0x00000001"));
        assert_eq!(
            report.failing(),
            vec![
                "rope_q_pos1",
                "rope_k_pos1",
                "qknorm_output",
                "moe_topk_indices",
                "ssm_conv_out",
                "ssm_gated_out"
            ]
        );
    }

    #[test]
    fn broken_goldens_are_an_error_not_a_failure() {
        let g = golden_dir();
        let c = harness_dir(g.path());
        let mut y = GoldenFile::read(g.path(), "ssm_recur_y").unwrap();
        if let Payload::F32(v) = &mut y.payload {
            v[3] = f32::INFINITY;
        }
        write_files(g.path(), &[y]).unwrap();
        let msg = check(g.path(), c.path()).unwrap_err().to_string();
        assert!(
            msg.contains("ssm_recur_y.bin: golden value at element 3 is not finite"),
            "{msg}"
        );
        let empty = tempfile::tempdir().unwrap();
        let msg = check(empty.path(), c.path()).unwrap_err().to_string();
        assert!(msg.contains("q3k_matvec_output.bin"), "{msg}");
        let msg = check(g.path(), &empty.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.ends_with("nope: candidate directory does not exist"),
            "{msg}"
        );
    }

    #[test]
    fn report_serializes_with_coordinates_as_an_object() {
        let g = golden_dir();
        let c = harness_dir(g.path());
        let mut q = GoldenFile::read(c.path(), "rope_q_pos7").unwrap();
        if let Payload::F32(v) = &mut q.payload {
            v[3 * 256 + 40] += 0.5;
        }
        write_files(c.path(), &[q]).unwrap();
        let report = check(g.path(), c.path()).unwrap();
        let json = serde_json::to_value(&report).unwrap();
        let f = &json["files"][6];
        assert_eq!(f["name"], "rope_q_pos7");
        assert_eq!(f["status"], "fail");
        assert_eq!(f["kernel"], "rope");
        assert_eq!(f["tolerance"]["relative"]["rtol"], 1e-3);
        assert_eq!(f["over_tolerance"], 1);
        let coords: Vec<(&String, &serde_json::Value)> =
            f["worst"]["coords"].as_object().unwrap().iter().collect();
        assert_eq!(
            format!("{coords:?}"),
            r#"[("pos", Number(7)), ("head", Number(3)), ("dim", Number(40))]"#
        );
        assert_eq!(
            json["files"][2]["worst"],
            serde_json::Value::Null,
            "identical file: no worst element"
        );
        assert_eq!(json["passed"], false);
        assert_eq!(json["files_failed"], 1);
    }
}
