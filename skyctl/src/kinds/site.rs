//! `site`: the release's web pages (the demo `index.html`, `bench.html` and their scripts) and,
//! unless a node of the pipeline builds them, the browser engine's two modules. All of it is
//! embedded in skyctl: the pages from `site/src` (`include_str!`, the one source), the modules
//! from `stages/web` built by `build.rs`. The pages read `models/manifest.json` and
//! `bench.json` at run time, so the node has no inputs; its params carry the digests of what
//! it writes, so a skyctl with other pages or modules rebuilds it.
//!
//! Params: `pages` (blake3 of the pages), `modules` (blake3 of the two modules when they come
//! from skyctl; absent when `[site] modules` names files of the pipeline). Outputs: the pages
//! in [`PAGES`] order, then `sky-web.simd.wasm` and `sky-web.scalar.wasm` when `modules`.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::pipeline::plan::{build_dir, Plan, Planned, Planner};
use crate::pipeline::schema::SITE_NODE;
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The pages and scripts, by release file name, as this skyctl embeds them.
pub const PAGES: [(&str, &str); 9] = [
    ("index.html", include_str!("../../../site/src/index.html")),
    ("bench.html", include_str!("../../../site/src/bench.html")),
    ("style.css", include_str!("../../../site/src/style.css")),
    ("index.js", include_str!("../../../site/src/index.js")),
    ("bench.js", include_str!("../../../site/src/bench.js")),
    ("ui.js", include_str!("../../../site/src/ui.js")),
    ("sky.js", include_str!("../../../site/src/sky.js")),
    (
        "sky-engine.js",
        include_str!("../../../site/src/sky-engine.js"),
    ),
    (
        "sky-worker.js",
        include_str!("../../../site/src/sky-worker.js"),
    ),
];

/// The engine modules' release file names: SIMD128, then scalar.
pub const MODULES: [&str; 2] = ["sky-web.simd.wasm", "sky-web.scalar.wasm"];

#[cfg(skyctl_embedded_wasm)]
const EMBEDDED: Option<[&[u8]; 2]> = Some([
    include_bytes!(concat!(env!("SKYCTL_WASM_DIR"), "/sky-web.simd.wasm")),
    include_bytes!(concat!(env!("SKYCTL_WASM_DIR"), "/sky-web.scalar.wasm")),
]);
#[cfg(not(skyctl_embedded_wasm))]
const EMBEDDED: Option<[&[u8]; 2]> = None;

/// Why this skyctl has no modules: a code set by build.rs when it embedded none.
const MISSING: Option<&str> = option_env!("SKYCTL_WASM_MISSING");

/// Why a skyctl without modules has none, in words, for the `[site]` error.
fn missing_reason(code: &str) -> &'static str {
    match code {
        "target" => {
            "it was built without the wasm32-unknown-unknown target \
             (`rustup target add wasm32-unknown-unknown`, then build skyctl again)"
        }
        "env" => "it was built with SKYCTL_NO_EMBED_WASM=1",
        "sources" => "it was built without the stages/web sources beside it",
        _ => "it was built without them",
    }
}

/// The engine modules this skyctl carries (SIMD128, scalar), or why it has none.
///
/// `SKYCTL_TEST_NO_WASM_TARGET=1` answers as a skyctl built without the wasm32 target does, so
/// the tests reach the `[site]` message without building a second skyctl. It is read when the
/// manifest expands: a workspace's compiled graph (`graph.bin`) keeps the earlier answer.
pub fn embedded_modules() -> Result<[&'static [u8]; 2], &'static str> {
    if sky_env::Var::get("SKYCTL_TEST_NO_WASM_TARGET")
        .os()
        .is_some_and(|v| v == "1")
    {
        return Err(missing_reason("target"));
    }
    match EMBEDDED {
        Some(m) => Ok(m),
        None => Err(missing_reason(MISSING.unwrap_or_default())),
    }
}

/// blake3 hex of files in order, each length-prefixed (so moving bytes between files changes
/// it).
pub fn digest<'a>(files: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = blake3::Hasher::new();
    for f in files {
        h.update(&(f.len() as u64).to_le_bytes());
        h.update(f);
    }
    h.finalize().to_hex().to_string()
}

/// The digest of the embedded pages.
pub fn pages_digest() -> String {
    digest(PAGES.iter().map(|(_, text)| text.as_bytes()))
}

/// The `site` kind.
pub struct Site;

/// Positional inputs (or none): see the module doc.
impl super::PipelineKind for Site {
    const PLANNER: Option<Planner> = Some(Planner::Pipeline(plan));
}

/// `[site]`: one `site` node writing the pages (and the modules skyctl carries, unless
/// `modules` names files of the pipeline) into `<build_dir>/site/`, each published at the top
/// of the release tree, where the pages fetch them.
fn plan(cx: &Plan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    let m = cx.m;
    let Some(decl) = &m.site else {
        return Ok(());
    };
    let dir = format!("{}/site", build_dir(m));
    let span = decl.span();
    let (modules, from_files) = match &decl.get_ref().modules {
        Some(files) => (None, Some(files)),
        None => {
            let embedded = embedded_modules().map_err(|why| {
                m.error_at(
                    span.clone(),
                    format!(
                        "[site] needs the browser engine modules ({}), and this skyctl carries none: {why}; \
                         or build them in the pipeline and name them with `modules = {{ simd = \"...\", scalar = \"...\" }}`",
                        MODULES.join(", ")
                    ),
                )
            })?;
            (Some(digest(embedded)), None)
        }
    };
    let params = Params {
        pages: pages_digest(),
        modules,
    };
    let mut node = NodeSpec::new::<Site>(SITE_NODE, &params, span.clone())?;
    let mut files: Vec<&str> = PAGES.iter().map(|(name, _)| *name).collect();
    if from_files.is_none() {
        files.extend(MODULES);
    }
    for f in files {
        let out_file = format!("{dir}/{f}");
        node = node.output(&out_file, span.clone());
        out.publish(f, out_file, span.clone());
    }
    out.node(node);
    if let Some(files) = from_files {
        for (to, from) in MODULES.iter().zip([&files.simd, &files.scalar]) {
            out.publish(*to, from.get_ref().clone(), from.span());
        }
    }
    Ok(())
}

/// Parameters of the `site` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// blake3 of the pages this skyctl embeds ([`pages_digest`]).
    pub pages: String,
    /// blake3 of the embedded modules when the node writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<String>,
}

impl Kind for Site {
    const NAME: &'static str = "site";
    const VERSION: u32 = 1;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        // The key says which pages and modules; a skyctl carrying others must not write them
        // under this key.
        if p.pages != pages_digest() {
            bail!("node `{node}`: this skyctl embeds other pages than the node's key names; run the build again");
        }
        let mut files: Vec<(&str, &[u8])> = PAGES.iter().map(|(n, t)| (*n, t.as_bytes())).collect();
        if let Some(want) = &p.modules {
            let modules = embedded_modules().map_err(|why| {
                anyhow::anyhow!("node `{node}`: this skyctl has no browser engine modules: {why}")
            })?;
            if *want != digest(modules) {
                bail!("node `{node}`: this skyctl embeds other engine modules than the node's key names; run the build again");
            }
            files.extend(MODULES.iter().copied().zip(modules));
        }
        if files.len() != ctx.outputs.len() {
            bail!(
                "node `{node}`: expected {} outputs, got {}",
                files.len(),
                ctx.outputs.len()
            );
        }
        let mut bytes = 0;
        for ((name, data), out) in files.iter().zip(&ctx.outputs) {
            if out.file_name().and_then(|n| n.to_str()) != Some(name) {
                bail!("node `{node}`: output `{}` is not `{name}`", out.display());
            }
            sky_fs::write(out, data).with_context(|| format!("writing `{}`", out.display()))?;
            bytes += data.len();
        }
        let line = format!("{} files, {bytes} bytes\n", files.len());
        ctx.log.extend_from_slice(line.as_bytes());
        Ok(())
    }
}
