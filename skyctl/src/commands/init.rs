//! `skyctl init [DIR] [--model CHECKPOINT] [--force]`: a project that builds and verifies as
//! it is: a small checkpoint (the s1-pico preset with random weights, as `skyctl random`
//! writes it, or a copy of an existing Laya checkpoint), a cases file, the expected outputs
//! recorded from the checkpoint, a commented `pipeline.toml` that uses them (with a `[site]`),
//! and a `.gitignore` that keeps what a build writes out of git.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use sky_laya::random::{preset, write_random, WeightDtype};

use crate::outcome::Outcome;
use crate::pipeline::{EXAMPLE, MANIFEST};

/// The cases `init` writes: choice (a list and described options), score and noul questions.
const CASES: &str = include_str!("../pipeline/init.cases.jsonl");

/// The model name of the template (replaced by the checkpoint's folder name with --model).
const TEMPLATE_MODEL: &str = "s1-pico";

/// Arguments of `skyctl init`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The folder (created if missing; default: the current one).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Start from this Laya checkpoint directory (copied into models/<its name>/) instead of
    /// a random s1-pico.
    #[arg(long, value_name = "CHECKPOINT")]
    pub model: Option<PathBuf>,
    /// Replace an existing pipeline.toml (and the files init writes).
    #[arg(long)]
    pub force: bool,
}

/// Run `skyctl init`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let dir = &args.dir;
    let manifest = dir.join(MANIFEST);
    if manifest.exists() && !args.force {
        bail!(
            "`{}` already exists; not overwriting it (use --force to replace it)",
            manifest.display()
        );
    }
    let name = match &args.model {
        Some(src) => model_name(src)?,
        None => TEMPLATE_MODEL.to_string(),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating `{}`", dir.display()))?;
    let model_dir = dir.join("models").join(&name);
    let mut wrote = Vec::new();
    match &args.model {
        Some(src) => {
            // Load before copying: a directory that is not a Laya checkpoint stops here.
            sky_infer::load::open(src)
                .with_context(|| format!("`{}` is not a usable Laya checkpoint", src.display()))?;
            copy_dir(src, &model_dir)?;
            wrote.push(format!(
                "{}/ (a copy of {})",
                model_dir.display(),
                src.display()
            ));
        }
        None => {
            let p = preset(TEMPLATE_MODEL)?;
            let params = write_random(&p, &model_dir, p.seed, WeightDtype::F32)?;
            wrote.push(format!(
                "{}/ (the s1-pico preset with random weights, {params} parameters)",
                model_dir.display()
            ));
        }
    }
    let golden = dir.join("golden").join(&name);
    std::fs::create_dir_all(&golden).with_context(|| format!("creating `{}`", golden.display()))?;
    let cases_path = golden.join("cases.jsonl");
    sky_fs::write(&cases_path, CASES.as_bytes())
        .with_context(|| format!("writing `{}`", cases_path.display()))?;
    let cases = sky_infer::golden::parse_cases(CASES)?;
    let engine = sky_infer::load::open(&model_dir)
        .with_context(|| format!("loading `{}`", model_dir.display()))?;
    let expected = sky_infer::golden::record(&engine, &cases)?;
    let mut bytes = Vec::new();
    for line in &expected {
        serde_json::to_writer(&mut bytes, line)?;
        bytes.push(b'\n');
    }
    let expected_path = golden.join("expected.jsonl");
    sky_fs::write(&expected_path, &bytes)
        .with_context(|| format!("writing `{}`", expected_path.display()))?;
    wrote.push(format!(
        "{} ({} cases) and {} (recorded from the checkpoint)",
        cases_path.display(),
        cases.len(),
        expected_path.display()
    ));
    let text = EXAMPLE.replace(TEMPLATE_MODEL, &name);
    // The template must stay a valid manifest for any name init accepts.
    crate::pipeline::Manifest::parse(&text, Path::new(MANIFEST))?;
    sky_fs::write(&manifest, text.as_bytes())
        .with_context(|| format!("writing `{}`", manifest.display()))?;
    // The template's tolerances are placeholders: each suite's comes from the error measured
    // on this checkpoint and path, so the first build passes whatever the checkpoint.
    let fits = fit_tolerances(&manifest, &text)?;
    wrote.push(format!(
        "{} (commented; edit it to add models)",
        manifest.display()
    ));
    wrote.push(gitignore(dir)?);
    outln!("wrote:");
    for w in &wrote {
        outln!("  {w}");
    }
    outln!(
        "golden tolerances ({}), measured on this checkpoint:",
        crate::pipeline::fit::RULE
    );
    for m in &fits {
        outln!(
            "  {}: max |dp| {:.3e} ({} {} on the {} path) -> tolerance = {}",
            m.suite,
            m.max_abs_err,
            m.model,
            m.variant,
            m.path,
            m.fitted.text
        );
    }
    let cd = if dir == Path::new(".") {
        String::new()
    } else {
        format!("cd {} && ", dir.display())
    };
    outln!("next: {cd}skyctl build && skyctl verify");
    Ok(Outcome::Success)
}

/// Measure the model suites of the manifest just written and write their fitted tolerances.
fn fit_tolerances(
    manifest: &Path,
    text: &str,
) -> anyhow::Result<Vec<crate::pipeline::fit::Measured>> {
    let file = crate::pipeline::ManifestFile::find(Path::new("."), Some(manifest))?;
    // The scratch measurement reads no store; a store path that does not exist is never made.
    let pipe = crate::pipeline::Pipeline::from_file(file, None, crate::kinds::planners())?;
    crate::pipeline::fit::measure_and_set(
        &pipe,
        &crate::kinds::registry(),
        manifest,
        text,
        &|_| true,
        true,
    )
    .context("measuring the golden suites to fit their tolerances")
}

/// What a build writes, which git should not track: the folders of the template's `[project]`.
const IGNORED: [&str; 3] = ["/.skyctl/", "/build/", "/site/public/"];

/// Write `.gitignore`, or add the lines it lacks to an existing one; what to print about it.
fn gitignore(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(".gitignore");
    let old = match sky_fs::read_to_string(&path, sky_fs::TEXT) {
        Ok(text) => Some(text),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let have = old.as_deref().unwrap_or_default();
    let missing: Vec<&str> = IGNORED
        .iter()
        .copied()
        .filter(|l| !have.lines().any(|h| h.trim() == *l))
        .collect();
    if missing.is_empty() {
        return Ok(format!(
            "{} (already keeps {} out of git)",
            path.display(),
            IGNORED.join(" ")
        ));
    }
    let mut text = have.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# What skyctl build writes: the store, the build folder, the release tree\n");
    for l in &missing {
        text.push_str(l);
        text.push('\n');
    }
    sky_fs::write(&path, text.as_bytes())
        .with_context(|| format!("writing `{}`", path.display()))?;
    let verb = if old.is_some() {
        "now also keeps"
    } else {
        "keeps"
    };
    Ok(format!(
        "{} ({verb} {} out of git)",
        path.display(),
        missing.join(" ")
    ))
}

/// The model name for a checkpoint directory: its folder name, when it is a valid name.
fn model_name(src: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(src).with_context(|| format!("resolving `{}`", src.display()))?;
    let name = abs
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        bail!(
            "`{}`: the folder name becomes the model name and may only hold letters, digits, `-`, `_` and `.`; rename the folder",
            src.display()
        );
    }
    Ok(name)
}

/// Copy a checkpoint directory (regular files and subdirectories; symlinks are refused).
fn copy_dir(src: &Path, dst: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dst).with_context(|| format!("creating `{}`", dst.display()))?;
    for entry in std::fs::read_dir(src).with_context(|| format!("reading `{}`", src.display()))? {
        let entry = entry.with_context(|| format!("reading `{}`", src.display()))?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let ty = entry
            .file_type()
            .with_context(|| format!("reading `{}`", from.display()))?;
        if ty.is_dir() {
            copy_dir(&from, &to)?;
        } else if ty.is_file() {
            sky_fs::copy(&from, &to, sky_fs::CONTENT)
                .with_context(|| format!("copying `{}` to `{}`", from.display(), to.display()))?;
        } else {
            bail!(
                "`{}` is not a regular file or directory; a checkpoint holds only those",
                from.display()
            );
        }
    }
    Ok(())
}
