//! `golden_gen`: generate a kernel golden set (inputs and reference outputs, PNGOLDEN1 files)
//! into the node's output directory, with [`sky_kernels::generate`].
//!
//! No inputs. Params: `generator` (the suite; `qwen35moe` is the only one). The kind version is
//! [`sky_kernels::GENERATOR_VERSION`], so a generator change re-runs the chain. The directory
//! is filled under a temp name beside it and renamed into place, so a failed run leaves none.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::ops::kernels::Generator;
use crate::pipeline::plan::GoldenPlan;
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `golden_gen` kind.
pub struct GoldenGen;

/// Positional inputs (or none): see the module doc.
impl super::PipelineKind for GoldenGen {}

/// The generator node of kernel suite `cx` (its goldens, when it names no committed `path`):
/// see [`super::golden_kernels`].
pub fn node(cx: &GoldenPlan<'_>) -> sky_dag::Result<NodeSpec> {
    let generator = cx
        .golden
        .generator
        .as_ref()
        .and_then(|x| Generator::parse(x.get_ref()))
        .unwrap_or_default();
    Ok(NodeSpec::new::<GoldenGen>(
        format!("{}/gen", cx.id),
        &Params { generator },
        cx.span.clone(),
    )?
    .output(format!("{}/gold/", cx.dir()), cx.span.clone()))
}

/// Parameters of a `golden_gen` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The generator.
    pub generator: Generator,
}

impl Kind for GoldenGen {
    const NAME: &'static str = "golden_gen";
    const VERSION: u32 = sky_kernels::GENERATOR_VERSION;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let generator = p.generator.name();
        let [out] = ctx.outputs.as_slice() else {
            bail!(
                "node `{node}`: expected one output directory, got {}",
                ctx.outputs.len()
            );
        };
        let tmp = temp_dir_beside(out, "gen-")?;
        let files = sky_kernels::generate(tmp.path())
            .with_context(|| format!("node `{node}`: generating goldens"))?;
        std::fs::rename(tmp.keep(), out)
            .with_context(|| format!("node `{node}`: creating `{}`", out.display()))?;
        let bytes: u64 = files.iter().map(|f| f.bytes).sum();
        let line = format!(
            "{generator}: {} golden files, {bytes} bytes, set digest {}\n",
            files.len(),
            sky_kernels::set_digest(&files)
        );
        ctx.log.extend_from_slice(line.as_bytes());
        Ok(())
    }
}

/// A temp directory next to `target` (same filesystem, so it can be renamed onto it).
pub(crate) fn temp_dir_beside(
    target: &std::path::Path,
    prefix: &str,
) -> anyhow::Result<tempfile::TempDir> {
    let parent = target.parent().unwrap_or(std::path::Path::new("."));
    tempfile::Builder::new()
        .prefix(&format!("{}{prefix}", sky_fs::TEMP_PREFIX))
        .tempdir_in(parent)
        .with_context(|| format!("creating a temp directory in `{}`", parent.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sky_dag::kind::DynKind;

    #[test]
    fn generates_the_whole_set_deterministically() {
        let dir = tempfile::tempdir().unwrap();
        let gen = |out: &std::path::Path, params: serde_json::Value| {
            let mut log = Vec::new();
            let mut ctx = StageCtx {
                node: "golden/k/gen",
                workspace: dir.path(),
                inputs: Vec::new(),
                outputs: vec![out.to_path_buf()],
                log: &mut log,
            };
            DynKind::run(&GoldenGen, &params, &mut ctx)
                .map(|()| String::from_utf8_lossy(&log).into_owned())
        };
        let a = dir.path().join("a");
        let log = gen(&a, json!({"generator": "qwen35moe"})).unwrap();
        assert!(log.starts_with("qwen35moe: 40 golden files"), "{log}");
        let names: Vec<String> = std::fs::read_dir(&a)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), sky_kernels::FILES.len());
        let b = dir.path().join("b");
        gen(&b, json!({"generator": "qwen35moe"})).unwrap();
        for n in &names {
            assert_eq!(
                std::fs::read(a.join(n)).unwrap(),
                std::fs::read(b.join(n)).unwrap(),
                "{n}"
            );
        }
        let e = gen(&dir.path().join("c"), json!({"generator": "llama"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `llama`"), "{e}");
        // Only a, b and nothing half-made.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
