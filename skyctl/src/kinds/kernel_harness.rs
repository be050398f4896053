//! `kernel_harness`: run a kernel implementation over the golden inputs (volatile: the result
//! depends on the hardware it ran on; `--rerun kernel_harness` runs it again).
//!
//! Inputs: the golden directory first (the `golden_gen` output or committed goldens), then the
//! kernel sources (globs; they are only there so their content enters the key). Params:
//! `harness`, a shell command run with `sh -c` in the workspace root, or null for the built-in
//! CPU harness ([`sky_kernels::run_cpu`], in process). Output: a directory of the output files.
//!
//! Placeholders in `harness` (absolute paths, shell-quoted; the key holds the string *before*
//! substitution, so it does not depend on where the workspace is):
//!
//! | placeholder | value |
//! |---|---|
//! | `{inputs}` | a directory holding exactly the input files (`skyctl kernels files`) |
//! | `{outputs}` | an empty directory; the harness leaves the output files there |
//! | `{input_paths}` | the input file paths, space separated (for scp/rsync) |
//! | `{input_files}` / `{output_files}` | the bare file names `<name>.bin`, space separated |
//! | `{skyctl}` | this skyctl binary |
//!
//! Any other `{...}` is left alone (shell `${VAR}` keeps working). The child gets PATH, HOME,
//! the suite's declared `env` variables (their values are in the key) and nothing else from the
//! environment; its stdout and stderr go to the node log. A non-zero exit
//! fails the node; missing or wrong output files do not (the check names them one by one).
//! The outputs are written under a temp name and renamed into place only on success.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sky_dag::process::{describe_failure, resolve, Child};

use super::golden_gen::temp_dir_beside;
use super::{InputRole as _, PipelineKind, Role};
use crate::pipeline::plan::GoldenPlan;
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `kernel_harness` kind.
pub struct KernelHarness;

/// The golden directory (`golden_gen`'s output, or files in the workspace).
pub const GOLD: Role = Role {
    name: "gold",
    what: "golden directory",
};
/// The harness's sources: in the key only, so that a changed kernel runs again.
pub const SOURCE: Role = Role {
    name: "source",
    what: "harness source",
};

impl PipelineKind for KernelHarness {
    const INPUTS: &'static [Role] = &[GOLD, SOURCE];
}

/// Parameters of a `kernel_harness` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The shell command that runs the kernels (None: the built-in CPU harness).
    pub harness: Option<String>,
    /// Declared environment variables and their values (None: unset), passed to the harness
    /// besides PATH and HOME. Left out of the params when empty, so that suites without it
    /// keep their keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, Option<String>>,
}

/// The harness run of kernel suite `cx` over the goldens at `gold` (a directory, or the
/// generator's `node:` output, and where it is named): see [`super::golden_kernels`].
pub fn node(
    cx: &GoldenPlan<'_>,
    gold: (String, std::ops::Range<usize>),
) -> sky_dag::Result<NodeSpec> {
    let g = cx.golden;
    let params = Params {
        harness: g.harness.as_ref().map(|h| h.get_ref().clone()),
        env: crate::pipeline::plan::declared_env(cx.m, cx.env, &g.env)?,
    };
    let mut run =
        NodeSpec::new::<KernelHarness>(format!("{}/run", cx.id), &params, cx.span.clone())?
            .input_role(GOLD, gold.0, gold.1);
    for s in &g.sources {
        run = run.input_role(SOURCE, s.get_ref(), s.span());
    }
    run.volatile = true;
    Ok(run.output(format!("{}/out/", cx.dir()), cx.span.clone()))
}

impl Kind for KernelHarness {
    const NAME: &'static str = "kernel_harness";
    const VERSION: u32 = 1;
    type Params = Params;

    fn volatile(&self) -> bool {
        true
    }

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let gold = GOLD.get(ctx)?;
        if !gold.dir {
            bail!(
                "node `{node}`: the golden input `{}` is not a directory",
                gold.rel
            );
        }
        let [out] = ctx.outputs.as_slice() else {
            bail!(
                "node `{node}`: expected one output directory, got {}",
                ctx.outputs.len()
            );
        };
        let tmp_out = temp_dir_beside(out, "out-")?;
        match p.harness.as_deref() {
            None => {
                let files = sky_kernels::run_cpu(&gold.path, tmp_out.path())
                    .with_context(|| format!("node `{node}`: CPU harness over `{}`", gold.rel))?;
                ctx.log.extend_from_slice(
                    format!("cpu (in-process): wrote {} output files\n", files.len()).as_bytes(),
                );
            }
            Some(harness) => {
                let tmp_in = temp_dir_beside(out, "in-")?;
                let inputs = stage_inputs(&gold.path, &gold.rel, tmp_in.path())?;
                let script = substitute(harness, tmp_in.path(), tmp_out.path(), &inputs)?;
                let env = sky_dag::process::set_vars(&p.env);
                run_shell(node, &script, ctx.workspace, &env, ctx.log)?;
            }
        }
        std::fs::rename(tmp_out.keep(), out)
            .with_context(|| format!("node `{node}`: creating `{}`", out.display()))?;
        Ok(())
    }
}

/// Copy the input files (only those) from the golden directory into `dir`; copies, not links,
/// so a harness that writes into its inputs cannot damage the goldens.
fn stage_inputs(gold: &Path, gold_rel: &str, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for spec in sky_kernels::input_files() {
        let src = sky_kernels::format::file_path(gold, spec.name);
        let dst = sky_kernels::format::file_path(dir, spec.name);
        sky_fs::copy(&src, &dst, sky_fs::GOLDEN).with_context(|| {
            format!(
                "golden input `{}.bin` missing or unreadable in `{gold_rel}`",
                spec.name
            )
        })?;
        paths.push(dst);
    }
    Ok(paths)
}

/// Single-quote for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn quote_path(p: &Path) -> anyhow::Result<String> {
    match p.to_str() {
        Some(s) => Ok(quote(s)),
        None => bail!(
            "path `{}` is not UTF-8; a harness command cannot name it",
            p.display()
        ),
    }
}

/// Replace the placeholders of `harness`.
fn substitute(
    harness: &str,
    inputs: &Path,
    outputs: &Path,
    input_paths: &[PathBuf],
) -> anyhow::Result<String> {
    fn names(it: impl Iterator<Item = &'static sky_kernels::FileSpec>) -> String {
        it.map(|f| format!("{}.{}", f.name, sky_kernels::format::EXTENSION))
            .collect::<Vec<_>>()
            .join(" ")
    }
    let exe = std::env::current_exe().context("locating the skyctl binary")?;
    let values = [
        ("inputs", quote_path(inputs)?),
        ("outputs", quote_path(outputs)?),
        (
            "input_paths",
            input_paths
                .iter()
                .map(|p| quote_path(p))
                .collect::<anyhow::Result<Vec<_>>>()?
                .join(" "),
        ),
        ("input_files", names(sky_kernels::input_files())),
        ("output_files", names(sky_kernels::output_files())),
        ("skyctl", quote_path(&exe)?),
    ];
    let mut out = String::with_capacity(harness.len());
    let mut rest = harness;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let hit = after.find('}').and_then(|close| {
            values
                .iter()
                .find(|(k, _)| *k == &after[..close])
                .map(|(_, v)| (close, v))
        });
        match hit {
            Some((close, v)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `sh -c script` in `cwd` with a clean environment plus `env`; both streams into `log`.
fn run_shell(
    node: &str,
    script: &str,
    cwd: &Path,
    env: &[(String, String)],
    log: &mut Vec<u8>,
) -> anyhow::Result<()> {
    let start = log.len();
    let args = ["-c".to_string(), script.to_string()];
    let sh = resolve("sh", sky_env::Var::get("PATH").os().as_deref(), cwd);
    let status = Child {
        program: &sh,
        arg0: "sh",
        args: &args,
        cwd,
        env,
    }
    .run(log)
    .with_context(|| format!("node `{node}`: cannot run the harness"))?;
    if !status.success() {
        let text = String::from_utf8_lossy(&log[start..]);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let how = describe_failure(status);
        if last.is_empty() {
            bail!("harness {how}");
        }
        bail!("harness {how}: {last}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sky_dag::kind::DynKind;
    use sky_dag::StageInput;

    struct Fixture {
        dir: tempfile::TempDir,
        gold: PathBuf,
    }

    #[test]
    fn params_without_env_serialize_as_before_env_existed() {
        // A suite that declares no variables keeps its key (and the caches built before).
        let p = Params {
            harness: Some("h".into()),
            env: BTreeMap::new(),
        };
        assert_eq!(serde_json::to_value(&p).unwrap(), json!({"harness": "h"}));
        let with = Params {
            harness: Some("h".into()),
            env: BTreeMap::from([("LD_LIBRARY_PATH".to_string(), None)]),
        };
        assert_eq!(
            serde_json::to_value(&with).unwrap(),
            json!({"harness": "h", "env": {"LD_LIBRARY_PATH": null}})
        );
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let gold = dir.path().join("gold");
        sky_kernels::generate(&gold).unwrap();
        std::fs::create_dir_all(dir.path().join("build")).unwrap();
        Fixture { dir, gold }
    }

    impl Fixture {
        fn run(&self, harness: Option<&str>) -> (anyhow::Result<()>, String, PathBuf) {
            let params = json!({ "harness": harness });
            let out = self.dir.path().join("build/out");
            let mut log = Vec::new();
            let mut ctx = StageCtx {
                node: "golden/k/run",
                workspace: self.dir.path(),
                inputs: vec![StageInput {
                    rel: "gold".into(),
                    path: self.gold.clone(),
                    dir: true,
                    role: GOLD.name.into(),
                }],
                outputs: vec![out.clone()],
                log: &mut log,
            };
            let r = DynKind::run(&KernelHarness, &params, &mut ctx);
            (r, String::from_utf8_lossy(&log).into_owned(), out)
        }
    }

    #[test]
    fn builtin_cpu_harness_passes_the_check() {
        let f = fixture();
        let (r, log, out) = f.run(None);
        r.unwrap();
        assert!(
            log.contains("cpu (in-process): wrote 19 output files"),
            "{log}"
        );
        assert!(sky_kernels::check(&f.gold, &out).unwrap().passed);
    }

    #[test]
    fn shell_harness_sees_placeholders_and_runs_in_the_workspace() {
        let f = fixture();
        // Copies the golden outputs (a perfect "implementation"), after checking what it was given.
        let gold = quote(f.gold.to_str().unwrap());
        let harness = format!(
            "set -e; test \"$(ls {{inputs}} | wc -l)\" -eq 21; for p in {{input_paths}}; do test -f \"$p\"; done; \
             test -f pipeline.marker; echo \"${{HOME:+home set}}\"; \
             for n in {{output_files}}; do cp {gold}/$n {{outputs}}/; done; echo staged {{input_files}} | wc -w"
        );
        std::fs::write(f.dir.path().join("pipeline.marker"), "").unwrap();
        let (r, log, out) = f.run(Some(&harness));
        r.unwrap();
        assert!(log.contains("22"), "21 names + `staged`: {log}");
        assert!(sky_kernels::check(&f.gold, &out).unwrap().passed);
        // Temp dirs are gone; only the output remains.
        let left: Vec<_> = std::fs::read_dir(f.dir.path().join("build"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("out")]);
    }

    #[test]
    fn failing_harness_fails_the_node_and_leaves_no_output() {
        let f = fixture();
        let (r, log, out) = f.run(Some(
            "echo half done > {outputs}/x.bin; echo 'no GPU here' >&2; exit 3",
        ));
        let e = r.unwrap_err().to_string();
        assert_eq!(e, "harness exited with status 3: no GPU here");
        assert!(log.contains("no GPU here"));
        assert!(!out.exists());
        assert_eq!(
            std::fs::read_dir(f.dir.path().join("build"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn substitution_quotes_and_leaves_unknown_braces() {
        let s = substitute(
            "a {inputs} {nope} ${X} {outputs",
            Path::new("/t/in it's"),
            Path::new("/o"),
            &[],
        )
        .unwrap();
        assert_eq!(s, r"a '/t/in it'\''s' {nope} ${X} {outputs");
    }
}
