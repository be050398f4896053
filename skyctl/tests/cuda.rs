//! The CUDA reference kernels (stages/cuda/kernels) compile for the Tesla K80: NVRTC to
//! `compute_37` PTX and `ptxas` to `sm_37`, through `skyctl cuda compile`; a kernel edited to
//! use what Kepler lacks fails naming its source line; the harness without a GPU exits 2 with
//! one line (with a GPU, its outputs pass the golden check).
//!
//! The toolchain is the PyPI CUDA 11.8 packages in the virtual environment of
//! SKYCTL_TEST_PYTHON (else <workspace>/.venv); without them the tests fail, never skip
//! (`bash .ci/run` installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The virtual environment holding the CUDA packages: `<venv>/bin/python` is
/// SKYCTL_TEST_PYTHON (the path as given: the interpreter itself is a symlink out of it).
fn venv() -> PathBuf {
    let venv = match std::env::var_os("SKYCTL_TEST_PYTHON") {
        Some(py) => {
            let py = PathBuf::from(py);
            py.parent()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .unwrap_or_else(|| {
                    panic!(
                        "SKYCTL_TEST_PYTHON={} is not <venv>/bin/python",
                        py.display()
                    )
                })
        }
        None => root().join(".venv"),
    };
    if let Err(e) = sky_cuda::Toolchain::from_venv(&venv) {
        panic!(
            "the CUDA toolchain is missing ({e}); `bash .ci/run` installs it (pip install -r \
             stages/cuda/toolchain.txt into .venv)"
        );
    }
    venv
}

/// `skyctl cuda compile` of `sources` (paths relative to `cwd`) into `out`.
fn compile(cwd: &Path, out: &Path, sources: &[String]) -> Output {
    compile_with(cwd, out, sources, &[])
}

/// [`compile`] with more options.
fn compile_with(cwd: &Path, out: &Path, sources: &[String], options: &[&str]) -> Output {
    Command::new(common::skyctl_bin())
        .current_dir(cwd)
        .arg("cuda")
        .arg("compile")
        .args(options)
        .arg("--venv")
        .arg(venv())
        .arg("--pin")
        .arg(root().join("stages/cuda/toolchain.txt"))
        .arg("--out")
        .arg(out)
        .args(sources)
        .output()
        .unwrap()
}

fn all_sources() -> Vec<String> {
    sky_cuda::SOURCES
        .iter()
        .map(|s| format!("stages/cuda/kernels/{}", s.name))
        .collect()
}

#[test]
fn every_kernel_compiles_for_compute_37_and_assembles_for_sm_37() {
    // SOURCES lists exactly the .cu files of the directory.
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("stages/cuda/kernels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".cu"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<&str> = sky_cuda::SOURCES.iter().map(|s| s.name).collect();
    listed.sort();
    assert_eq!(on_disk, listed);

    let out = tempfile::tempdir().unwrap();
    let run = compile(&root(), out.path(), &all_sources());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&run.stdout).starts_with("NVRTC 11.8,"),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    for src in &sky_cuda::SOURCES {
        let ptx = std::fs::read_to_string(out.path().join(format!("{}.ptx", src.stem()))).unwrap();
        assert!(
            ptx.contains("\n.target sm_37\n"),
            "{}: {}",
            src.name,
            &ptx[..300]
        );
        assert!(
            ptx.contains("Cuda compilation tools, release 11.8"),
            "{}",
            src.name
        );
        // The line table names the source as given, not the working directory.
        assert!(
            ptx.contains(&format!(".file\t1 \"stages/cuda/kernels/{}\"", src.name)),
            "{}",
            src.name
        );
        for k in src.kernels {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "{}: no kernel {k}",
                src.name
            );
        }
        let cubin = std::fs::read(out.path().join(format!("{}.sm_37.cubin", src.stem()))).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "{}", src.name);
    }

    // The same bytes from another run (the node's outputs are content-addressed).
    let again = tempfile::tempdir().unwrap();
    assert_eq!(
        compile(&root(), again.path(), &all_sources()).status.code(),
        Some(0)
    );
    assert_eq!(common::snapshot(out.path()), common::snapshot(again.path()));

    // And from another clone, whose sources have other modification times (ptxas records
    // the time of the source file its line table names when it can open it).
    let clone = tempfile::tempdir().unwrap();
    let kernels = clone.path().join("stages/cuda/kernels");
    common::copy_tree(&root().join("stages/cuda/kernels"), &kernels);
    for e in std::fs::read_dir(&kernels).unwrap() {
        let f = std::fs::File::options()
            .write(true)
            .open(e.unwrap().path())
            .unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
            .unwrap();
    }
    let third = tempfile::tempdir().unwrap();
    assert_eq!(
        compile(clone.path(), third.path(), &all_sources())
            .status
            .code(),
        Some(0)
    );
    assert_eq!(common::snapshot(out.path()), common::snapshot(third.path()));
}

/// A copy of the kernels under `<tmp>/stages/cuda/kernels` with `file`'s line containing
/// `anchor` replaced by `with`; returns the tmp dir and the 1-based line edited.
fn edited(file: &str, anchor: &str, with: &str) -> (tempfile::TempDir, u32) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stages/cuda/kernels");
    std::fs::create_dir_all(&dir).unwrap();
    let mut line = 0;
    for src in &sky_cuda::SOURCES {
        let mut text = src.text.to_string();
        if src.name == file {
            let lines: Vec<String> = text
                .lines()
                .enumerate()
                .map(|(i, l)| {
                    if l.contains(anchor) && line == 0 {
                        line = i as u32 + 1;
                        with.to_string()
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            text = lines.join("\n");
        }
        std::fs::write(dir.join(src.name), text).unwrap();
    }
    assert!(line > 0, "anchor {anchor:?} not in {file}");
    (tmp, line)
}

/// Compile the edited tree; it must fail naming `file:line` and `message`.
fn fails_at(file: &str, anchor: &str, with: &str, message: &str) {
    let (tmp, line) = edited(file, anchor, with);
    let out = tmp.path().join("out");
    let run = compile(tmp.path(), &out, &all_sources());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let want = format!("stages/cuda/kernels/{file}:{line}: error: {message}");
    assert!(
        last.starts_with("skyctl: 1 of 5 CUDA sources do not compile for sm_37; first: ")
            && last.contains(&want),
        "want {want:?} in the last line of: {stderr}"
    );
}

#[test]
fn half_precision_intrinsics_fail_at_their_source_line() {
    // Kepler has no half arithmetic; CUDA 11.8 NVRTC has no cuda_fp16.h for it either.
    fails_at(
        "norm.cu",
        "double zd = (double)z[base + d];",
        "        double zd = (double)__half2float(__hadd(__float2half(z[base + d]), __float2half(1.0f)));",
        "identifier \"__float2half\" is undefined",
    );
}

#[test]
fn a_volta_warp_intrinsic_fails_at_its_source_line() {
    // __match_any_sync exists from sm_70 on; for compute_37 the headers do not declare it.
    fails_at(
        "moe.cu",
        "int t = threadIdx.x;",
        "    int t = (int)__match_any_sync(0xffffffffu, threadIdx.x) & 255;",
        "identifier \"__match_any_sync\" is undefined",
    );
}

#[test]
fn an_sm_70_instruction_in_inline_asm_fails_in_ptxas_at_its_source_line() {
    // NVRTC passes inline PTX through; ptxas rejects it for sm_37, and the PTX line table maps
    // its PTX line back to the .cu line.
    fails_at(
        "ssm.cu",
        "if (c >= channels) return;",
        "    if (c >= channels) return; asm volatile(\"nanosleep.u32 5;\");",
        "Instruction 'nanosleep' requires .target sm_70 or higher",
    );
}

#[test]
fn arch_compiles_the_same_sources_for_a_later_gpu() {
    // A Volta warp intrinsic: refused for the K80 (above), compiled for sm_90, so the
    // architecture reaches NVRTC and ptxas.
    let (tmp, _) = edited(
        "moe.cu",
        "int t = threadIdx.x;",
        "    int t = (int)__match_any_sync(0xffffffffu, threadIdx.x) & 255;",
    );
    let out = tmp.path().join("out");
    let run = compile_with(tmp.path(), &out, &all_sources(), &["--arch", "sm_90"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout
            .lines()
            .next()
            .unwrap_or_default()
            .ends_with(": compute_90 -> sm_90"),
        "{stdout}"
    );
    for src in &sky_cuda::SOURCES {
        let ptx = std::fs::read_to_string(out.join(format!("{}.ptx", src.stem()))).unwrap();
        assert!(
            ptx.contains("\n.target sm_90\n"),
            "{}: {}",
            src.name,
            &ptx[..300]
        );
        let cubin = std::fs::read(out.join(format!("{}.sm_90.cubin", src.stem()))).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "{}", src.name);
        assert!(!out.join(format!("{}.sm_37.cubin", src.stem())).exists());
    }
    let moe = std::fs::read_to_string(out.join("moe.ptx")).unwrap();
    assert!(moe.contains("match.any.sync"), "{moe}");

    // An architecture the CUDA 11.8 toolchain lacks: refused before anything is written.
    let refused = tmp.path().join("refused");
    let run = compile_with(&root(), &refused, &all_sources(), &["--arch", "sm_100"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "invalid value 'sm_100' for '--arch <SM>': the CUDA 11.8 toolchain compiles for \
             sm_35, sm_37, sm_50, sm_52, sm_53, sm_60, sm_61, sm_62, sm_70, sm_72, sm_75, sm_80, \
             sm_86, sm_87, sm_89, sm_90"
        ),
        "{stderr}"
    );
    assert!(!refused.exists());
}

#[test]
fn a_toolchain_of_another_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pin = tmp.path().join("pin.txt");
    std::fs::write(&pin, "# comment\nnvidia-cuda-nvrtc-cu11==11.7.99\n").unwrap();
    let run = Command::new(common::skyctl_bin())
        .current_dir(root())
        .args(["cuda", "compile", "--venv"])
        .arg(venv())
        .arg("--pin")
        .arg(&pin)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .args(all_sources())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("nvidia-cuda-nvrtc-cu11 11.8.89 is installed in")
            && stderr.contains(&format!("but {} pins 11.7.99", pin.display())),
        "{stderr}"
    );
    assert!(!tmp.path().join("out").exists());
}

#[test]
fn the_cuda_harness_exits_2_with_one_line_without_a_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let gold = tmp.path().join("gold");
    sky_kernels::generate(&gold).unwrap();
    let ptx = tmp.path().join("ptx");
    assert_eq!(
        compile(&root(), &ptx, &all_sources()).status.code(),
        Some(0)
    );
    let out = tmp.path().join("out");
    let run = Command::new(common::skyctl_bin())
        .args(["kernels", "run", "--impl", "cuda", "--ptx"])
        .arg(&ptx)
        .arg(&gold)
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    match sky_cuda::driver::Gpu::open() {
        Err(sky_cuda::Error::NoGpu(why)) => {
            assert_eq!(run.status.code(), Some(2), "{stderr}");
            assert_eq!(stderr, format!("skyctl: no CUDA GPU: {why}\n"));
            assert!(!out.exists());
        }
        Err(e) => panic!("a driver that fails otherwise: {e}"),
        Ok(_) => {
            // On a GPU: every output within the goldens' tolerances.
            assert_eq!(run.status.code(), Some(0), "{stderr}");
            let report = sky_kernels::check(&gold, &out).unwrap();
            assert!(report.passed, "{report:#?}");
        }
    }
}

/// A workspace with the CUDA part of the project's pipeline.toml (and the CPU kernel suite),
/// the kernels, the pin, and `.venv` linked to the test toolchain's environment.
fn cuda_workspace() -> common::Ws {
    let text = std::fs::read_to_string(root().join("pipeline.toml")).unwrap();
    let start = text
        .find("# The CUDA reference kernels for the Tesla K80")
        .expect("the CUDA section marker moved");
    let end = start
        + text[start..]
            .find("\n# The site:")
            .expect("the site marker moved");
    let ws = common::Ws::new();
    ws.write(
        "pipeline.toml",
        &format!(
            "[project]\nrelease_dir = \"site/public\"\n\n[[golden]]\nname = \"kernels\"\nkind = \"kernels\"\n\n{}",
            &text[start..end]
        ),
    );
    common::copy_tree(
        &root().join("stages/cuda/kernels"),
        &ws.p("stages/cuda/kernels"),
    );
    std::fs::copy(
        root().join("stages/cuda/toolchain.txt"),
        ws.p("stages/cuda/toolchain.txt"),
    )
    .unwrap();
    std::os::unix::fs::symlink(venv(), ws.p(".venv")).unwrap();
    ws
}

#[test]
fn the_pipeline_compiles_in_every_build_and_runs_on_a_gpu_only_on_request() {
    let ws = cuda_workspace();
    let first = ws.build(&[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let mut ran = first.executed();
    ran.sort();
    // No kernels-gpu node in a build without targets.
    assert_eq!(
        ran,
        [
            "cuda-ptx",
            "golden/kernels",
            "golden/kernels/gen",
            "golden/kernels/run"
        ]
    );
    for s in &sky_cuda::SOURCES {
        assert!(ws.p(&format!("build/cuda/ptx/{}.ptx", s.stem())).is_file());
        assert!(ws
            .p(&format!("build/cuda/ptx/{}.sm_37.cubin", s.stem()))
            .is_file());
    }
    assert_eq!(ws.build(&[]).count("executed"), 0);
    // `verify` without names leaves the on-request suite out too.
    let verify = ws.run(&["verify"]);
    let stdout = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("kernels-gpu"), "{stdout}");

    // Asked for: the GPU suite runs the cuda harness.
    let gpu = ws.build(&["golden/kernels-gpu"]);
    match sky_cuda::driver::Gpu::open() {
        Ok(_) => assert_eq!(gpu.code, 0, "{}", gpu.stderr),
        Err(_) => {
            assert_eq!(gpu.code, 1, "{}", gpu.stderr);
            let e = failure(&gpu, "golden/kernels-gpu/run");
            assert!(
                e.contains("harness exited with status 2: skyctl: no CUDA GPU: "),
                "{e}"
            );
        }
    }

    // A kernel edited to use what the K80 lacks fails the build at its source line.
    let rope = ws.read("stages/cuda/kernels/rope.cu");
    let line = rope
        .lines()
        .position(|l| l.contains("y[idx] = x[idx];"))
        .unwrap()
        + 1;
    ws.write(
        "stages/cuda/kernels/rope.cu",
        &rope.replace(
            "y[idx] = x[idx];",
            "y[idx] = __half2float(__float2half(x[idx]));",
        ),
    );
    let bad = ws.build(&[]);
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert_eq!(bad.with_status("failed"), ["cuda-ptx"]);
    let want = format!(
        "stages/cuda/kernels/rope.cu:{line}: error: identifier \"__float2half\" is undefined"
    );
    let e = failure(&bad, "cuda-ptx");
    assert!(e.contains(&want), "want {want:?} in {e}");
}

/// The error and the log tail of a failed node of a `--json` build.
fn failure(run: &common::BuildRun, node: &str) -> String {
    let ev = run
        .events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == node && e["status"] == "failed")
        .unwrap_or_else(|| panic!("{node} did not fail: {:?}", run.events));
    format!(
        "{}\n{}",
        ev["error"].as_str().unwrap_or_default(),
        ev["log_tail"].as_str().unwrap_or_default()
    )
}
