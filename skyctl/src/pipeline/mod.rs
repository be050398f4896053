//! The `pipeline.toml` front end: the schema ([`schema`]), its expansion into node specs
//! ([`expand`], by the kinds' planners: [`plan`]), and [`Pipeline`], a workspace opened from
//! its manifest.

pub mod cache;
pub mod execute;
pub mod expand;
pub mod fit;
pub mod plan;
pub mod schema;

use std::path::{Path, PathBuf};

use sky_dag::{DagError, Graph, Result, Workspace};

use plan::Planner;

/// A variable a node declares (`env = [...]`), read from this process: its value may be any
/// text, even empty; set but not UTF-8 is an error.
pub fn read_declared(name: &str) -> std::result::Result<Option<String>, sky_env::EnvError> {
    sky_env::Var::get(name).text("UTF-8 text (its value enters the node's key)")
}

pub use schema::{Manifest, EXAMPLE};

/// Manifest file name.
pub const MANIFEST: &str = "pipeline.toml";

/// A workspace and the manifest it was opened from.
#[derive(Debug)]
pub struct Pipeline {
    /// Where things are.
    pub ws: Workspace,
    /// The parsed manifest.
    pub manifest: Manifest,
    /// The manifest's path relative to the workspace root (`pipeline.toml`).
    pub manifest_rel: String,
    /// The kinds' planners, which expand the manifest ([`expand::expand`]).
    pub planners: Vec<Planner>,
}

/// A manifest file found and read, not parsed yet.
#[derive(Debug)]
pub struct ManifestFile {
    /// The file as shown in messages (relative to where the search started when inside it).
    pub shown: PathBuf,
    /// The workspace root (the file's folder), absolute.
    pub root: PathBuf,
    /// The file name (`pipeline.toml`), relative to the root.
    pub manifest_rel: String,
    /// Its text.
    pub text: String,
}

impl ManifestFile {
    /// Find `pipeline.toml` in `start` or a parent (or use `manifest` as given) and read it.
    pub fn find(start: &Path, manifest: Option<&Path>) -> anyhow::Result<ManifestFile> {
        let file = match manifest {
            Some(m) => m.to_path_buf(),
            None => find_manifest(start)?,
        };
        let root = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let shown = file
            .strip_prefix(start)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| file.clone());
        let text = sky_fs::read_to_string(&file, sky_fs::PIPELINE)
            .map_err(|e| DagError::io("read", &file, e.into()))?;
        let root = std::path::absolute(&root).map_err(|e| DagError::io("resolve", &root, e))?;
        let manifest_rel = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(MANIFEST)
            .to_string();
        Ok(ManifestFile {
            shown,
            root,
            manifest_rel,
            text,
        })
    }
}

impl Pipeline {
    /// Find `pipeline.toml` in `start` or a parent (or use `manifest` as given), parse it, and
    /// resolve the store: `store_override` (from `--store` or `SKYCTL_STORE`) wins over
    /// `[project] store_dir`. `planners` expand it into nodes.
    pub fn open(
        start: &Path,
        manifest: Option<&Path>,
        store_override: Option<PathBuf>,
        planners: Vec<Planner>,
    ) -> anyhow::Result<Pipeline> {
        Pipeline::from_file(
            ManifestFile::find(start, manifest)?,
            store_override,
            planners,
        )
    }

    /// Parse a manifest file read with [`ManifestFile::find`] (see [`Pipeline::open`]).
    pub fn from_file(
        file: ManifestFile,
        store_override: Option<PathBuf>,
        planners: Vec<Planner>,
    ) -> anyhow::Result<Pipeline> {
        let manifest = Manifest::parse(&file.text, &file.shown)?;
        let store_dir = match store_override {
            Some(s) => s,
            None => file.root.join(manifest.project.store_dir.get_ref()),
        };
        let ws = Workspace::new(&file.root, &store_dir)?;
        Ok(Pipeline {
            ws,
            manifest,
            manifest_rel: file.manifest_rel,
            planners,
        })
    }

    /// Expand the manifest into the checked graph (reading declared environment variables).
    pub fn graph(&self) -> Result<Graph> {
        self.graph_with_env(&read_declared)
    }

    /// [`Pipeline::graph`], with `env` reading the declared environment variables.
    pub fn graph_with_env(&self, env: &plan::EnvReader<'_>) -> Result<Graph> {
        let folders = self.project_folders()?;
        self.check_folders(&folders)?;
        self.check_confined()?;
        let mut spec = expand::expand(&self.manifest, env, &self.planners)?;
        // The manifest is never an output (nor a folder holding it).
        spec.protected.push(sky_dag::writable::Protected::new(
            &self.manifest_rel,
            "the pipeline file",
        ));
        // Nor is anything inside the store in use (`--store` inside the workspace too).
        if let Some(store) = folders.iter().find(|f| f.is_store()) {
            spec.store_dir = store.rel.clone();
        }
        let graph = Graph::build(spec, &self.manifest.source, &self.ws.root)?;
        self.check_folder_inputs(&folders, &graph)?;
        Ok(graph)
    }
}

/// One of the project folders: the release tree (replaced whole by each build), the store and
/// the build folder. Each is skyctl's alone: none may hold another, the workspace root,
/// `.git`, the manifest, skyctl's state or a declared source input.
#[derive(Debug, Clone)]
pub struct Folder {
    /// The key naming it (`release_dir`, `store_dir`, `build_dir`, or `--store`).
    pub what: &'static str,
    /// Its workspace path, normalised.
    pub rel: String,
    /// Where it is declared (`0..0`: a default, or `--store`).
    pub span: std::ops::Range<usize>,
}

impl Folder {
    fn is_store(&self) -> bool {
        matches!(self.what, "store_dir" | "--store")
    }

    /// What it is, in messages.
    fn noun(&self) -> &'static str {
        match self.what {
            "release_dir" => "the release tree",
            "build_dir" => "the build folder",
            _ => "the store",
        }
    }
}

/// The workspace paths no project folder may be, hold or lie inside, and what each is (`.git`
/// at any depth is refused by [`sky_dag::writable::may_write`] itself).
fn reserved(manifest_rel: &str, folder: &Folder) -> Vec<sky_dag::writable::Protected> {
    use sky_dag::writable::Protected;
    vec![
        Protected::new(manifest_rel, "the pipeline file"),
        // The store may be `.skyctl` (the default) or lie in it, but never be the state.
        if folder.is_store() {
            Protected::new(".skyctl/state-v1", "skyctl's workspace state").may_be_held()
        } else {
            Protected::new(".skyctl", "skyctl's workspace state and store folder")
        },
    ]
}

/// What is wrong on the disk with project folder `rel` (named by `what`), if anything: a
/// symlink on its way (leading out of the workspace or not), a `.git` inside it, or, for the
/// store, entries that are not the store's (it writes `CACHEDIR.TAG` and `.gitignore` beside
/// `store-v2/`). Checked again when a cached graph is used ([`cache`]).
pub fn folder_on_disk(root: &Path, what: &str, rel: &str) -> Option<String> {
    if let Some(target) = sky_dag::graph::symlink_escape(root, rel) {
        return Some(format!(
            "{what} `{rel}` leads out of the workspace through a symlink (to `{}`)",
            target.display()
        ));
    }
    if let Some((link, target)) = sky_dag::graph::symlink_on_path(root, rel, true) {
        return Some(format!(
            "{what} `{rel}`: `{link}` is a symlink (to `{}`); skyctl writes its folders only through real folders, never through a symlink",
            target.display()
        ));
    }
    let abs = root.join(rel);
    let Ok(md) = std::fs::symlink_metadata(&abs) else {
        return None;
    };
    if !md.is_dir() {
        return Some(format!(
            "{what} `{rel}` is a file skyctl did not make, not a folder; choose a folder of its own"
        ));
    }
    if std::fs::symlink_metadata(abs.join(".git")).is_ok() {
        return Some(format!(
            "{what} `{rel}` contains `{rel}/.git` (version control), which is not skyctl's; choose a folder of its own"
        ));
    }
    if what == "store_dir" {
        if let Some(name) = sky_dag::store::foreign_entry(&abs) {
            return Some(format!(
                "{what} `{rel}` already exists and holds `{rel}/{}`, which is not the store's; choose a folder of its own (the store writes `CACHEDIR.TAG` and `.gitignore` into it)",
                name.to_string_lossy()
            ));
        }
    }
    None
}

/// Why no store may be made in `dir` (given as `--store` or `SKYCTL_STORE`), if so: it holds
/// no store yet, and it lies in version control's folder, or holds files that are not a
/// store's ([`sky_dag::store::foreign_entry`], the rule `store_dir` follows too). A folder
/// that already holds a store is used as it is.
pub fn store_folder_problem(dir: &std::path::Path) -> Option<String> {
    if dir.join(sky_dag::store::STORE_VERSION_DIR).is_dir() {
        return None;
    }
    if let Err(refusal) = sky_dag::writable::may_write(&sky_dag::writable::resolved(dir), &[]) {
        return Some(format!(
            "{refusal}, which is not skyctl's; choose a folder of its own"
        ));
    }
    let name = sky_dag::store::foreign_entry(dir)?;
    Some(format!(
        "already exists and holds `{}`, which is not the store's; choose a folder of its own (the store writes `CACHEDIR.TAG` and `.gitignore` into it)",
        dir.join(name).display()
    ))
}

impl Pipeline {
    /// The project folders in use, normalised: `[project] release_dir`, `build_dir`, and the
    /// store (`store_dir`, or `--store` / `SKYCTL_STORE` when that lies inside the workspace).
    pub fn project_folders(&self) -> Result<Vec<Folder>> {
        let m = &self.manifest;
        let p = &m.project;
        let mut out = Vec::with_capacity(3);
        let store = self.store_from_manifest().then_some(&p.store_dir);
        for (what, raw) in [
            ("release_dir", Some(&p.release_dir)),
            ("store_dir", store),
            ("build_dir", Some(&p.build_dir)),
        ] {
            let Some(raw) = raw else { continue };
            let rel = sky_dag::graph::clean_rel(raw.get_ref()).map_err(|e| {
                let hint = if what == "store_dir" {
                    " (a store elsewhere is `--store DIR` or SKYCTL_STORE)"
                } else {
                    ""
                };
                m.error_at(raw.span(), format!("{what}: {e}{hint}"))
            })?;
            out.push(Folder {
                what,
                rel,
                span: raw.span(),
            });
        }
        if !self.store_from_manifest() {
            if let Ok(inside) = self.ws.store_dir.strip_prefix(&self.ws.root) {
                out.push(Folder {
                    what: "--store",
                    rel: inside.to_string_lossy().into_owned(),
                    span: 0..0,
                });
            }
        }
        Ok(out)
    }

    /// The project folders must be apart from each other and from what is not skyctl's
    /// (docs/internals/never.md); each message is located at the folder's key.
    fn check_folders(&self, folders: &[Folder]) -> Result<()> {
        let m = &self.manifest;
        for f in folders {
            if f.rel.is_empty() {
                return Err(m.error_at(
                    f.span.clone(),
                    format!(
                        "{} `.`: the workspace root cannot be {}; name a folder inside it",
                        f.what,
                        f.noun()
                    ),
                ));
            }
            let rules = reserved(&self.manifest_rel, f);
            if let Err(refusal) = sky_dag::writable::may_write(Path::new(&f.rel), &rules) {
                let whose = if refusal.path.starts_with(".skyctl") {
                    "which nothing else may share"
                } else {
                    "which is not skyctl's"
                };
                return Err(m.error_at(
                    f.span.clone(),
                    format!(
                        "{} `{}` {refusal}, {whose}; choose a folder of its own",
                        f.what, f.rel
                    ),
                ));
            }
        }
        for (i, a) in folders.iter().enumerate() {
            for b in &folders[i + 1..] {
                let (inner, outer, relation) = if a.rel == b.rel {
                    (b, a, "is also")
                } else if sky_dag::graph::under(&a.rel, &b.rel) {
                    (a, b, "lies inside")
                } else if sky_dag::graph::under(&b.rel, &a.rel) {
                    (b, a, "lies inside")
                } else {
                    continue;
                };
                // Located at the folder the message is about, or at the other one when that
                // is a default or `--store`.
                let span = if inner.span.is_empty() {
                    outer.span.clone()
                } else {
                    inner.span.clone()
                };
                return Err(m.error_at(
                    span,
                    format!(
                        "{} `{}` {relation} {} (`{} = \"{}\"`); the release tree, the store and the build folder must not overlap",
                        inner.what,
                        inner.rel,
                        outer.noun(),
                        outer.what,
                        outer.rel
                    ),
                ));
            }
        }
        for f in folders {
            let problem = if f.what == "--store" {
                store_folder_problem(&self.ws.store_dir).map(|p| format!("--store `{}` {p}", f.rel))
            } else {
                folder_on_disk(&self.ws.root, f.what, &f.rel)
            };
            if let Some(problem) = problem {
                return Err(m.error_at(f.span.clone(), problem));
            }
        }
        Ok(())
    }

    /// No project folder may be, hold or lie inside a declared source input (a file, a
    /// folder, or the folder a glob starts from): the release swap would delete it, the store
    /// or the build outputs would change it.
    fn check_folder_inputs(&self, folders: &[Folder], graph: &Graph) -> Result<()> {
        use sky_dag::graph::{under, Input};
        for node in &graph.nodes {
            for (input, span) in node.inputs.iter().zip(&node.input_spans) {
                let (path, shown) = match input {
                    Input::Source(p) => (p.as_str(), p.as_str()),
                    Input::Glob { glob, .. } => (glob.literal_dir(), glob.as_str()),
                    Input::Output { .. } => continue,
                };
                for f in folders {
                    let relation = if path == f.rel || under(path, &f.rel) {
                        "holds"
                    } else if !path.is_empty() && under(&f.rel, path) {
                        "lies inside"
                    } else {
                        continue;
                    };
                    let span = if f.span.is_empty() {
                        span.clone()
                    } else {
                        f.span.clone()
                    };
                    return Err(self.manifest.error_at(
                        span,
                        format!(
                            "{} `{}` {relation} the input `{shown}` of node `{}`; {} must be a folder of its own (move it, or the input)",
                            f.what,
                            f.rel,
                            node.id,
                            f.noun()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Pipeline {
    /// The command working directories must not lead out of the workspace through a symlink
    /// (the project folders are checked by [`Pipeline::check_folders`]; `--store` /
    /// `SKYCTL_STORE` are the user's explicit choice and may be anywhere). Outputs and the
    /// release tree are checked with the graph.
    fn check_confined(&self) -> Result<()> {
        let m = &self.manifest;
        let root = &self.ws.root;
        for (what, rel, span) in self.confined_dirs() {
            if let Some(target) = sky_dag::graph::symlink_escape(root, &rel) {
                return Err(m.error_at(
                    span,
                    format!(
                        "{what} `{rel}` leads out of the workspace through a symlink (to `{}`)",
                        target.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Pipeline {
    /// The folders of [`Pipeline::check_confined`]: what names them, the path, where.
    pub fn confined_dirs(&self) -> Vec<(&'static str, String, std::ops::Range<usize>)> {
        let m = &self.manifest;
        let mut dirs = vec![(
            "build_dir",
            m.project.build_dir.get_ref().clone(),
            m.project.build_dir.span(),
        )];
        if self.store_from_manifest() {
            dirs.push((
                "store_dir",
                m.project.store_dir.get_ref().clone(),
                m.project.store_dir.span(),
            ));
        }
        for c in &m.command {
            if let Some(cwd) = &c.cwd {
                dirs.push(("cwd", cwd.get_ref().clone(), cwd.span()));
            }
        }
        dirs
    }

    /// Whether the store in use is the one `[project] store_dir` names.
    pub fn store_from_manifest(&self) -> bool {
        self.ws.store_dir == self.ws.root.join(self.manifest.project.store_dir.get_ref())
    }
}

/// No `pipeline.toml` in `start` or any parent.
#[derive(Debug, thiserror::Error)]
#[error("no pipeline.toml in `{0}` or any parent directory (run `skyctl init` to create one)")]
pub struct NoManifest(pub PathBuf);

fn find_manifest(start: &Path) -> anyhow::Result<PathBuf> {
    let abs = std::path::absolute(start).map_err(|e| DagError::io("resolve", start, e))?;
    let mut dir = Some(abs.as_path());
    while let Some(d) = dir {
        let f = d.join(MANIFEST);
        if f.is_file() {
            return Ok(f);
        }
        dir = d.parent();
    }
    Err(NoManifest(start.to_path_buf()).into())
}

/// A pipeline is used where its workspace is wanted (store, lock, state, queries).
impl std::ops::Deref for Pipeline {
    type Target = Workspace;
    fn deref(&self) -> &Workspace {
        &self.ws
    }
}
