//! The compiled-graph cache of `skyctl build`: the checked graph of the last manifest, saved in
//! `.skyctl/state-v1/graph.bin` ([`sky_dag::compiled`]), so a build whose manifest did not
//! change skips parsing the TOML and expanding it (most of a no-op build of a big pipeline).
//!
//! The graph is a function of: the manifest's bytes, the file name it is shown under, the
//! workspace root, the store override (`--store` / `SKYCTL_STORE`), the values of the
//! environment variables the manifest declares, and the skyctl executable (its version, the
//! engine's key format, every kind's name and version, and the executable file itself: device,
//! inode, size and mtime, so any rebuilt or reinstalled binary compiles again). All but
//! the environment go into the cache key; the variables' names and values are in the payload
//! and compared one by one. The checks the graph makes against the disk (symlinks on the way
//! to the project folders and outputs, cwds leading out of the workspace, a `.git` in a
//! project folder, a store folder holding what is not the store's) are made again on every
//! load; if one fails, or anything else does not match, or the file is damaged, the build
//! parses the manifest as if there were no cache (and reports what is wrong the usual way).
//! Writing the cache can fail without harm: it is only a cache.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use sky_dag::codec::{Reader, Writer};
use sky_dag::key::{Digest, StableHasher};
use sky_dag::{Graph, Registry, Source, Workspace};

use super::plan::Planner;
use super::{ManifestFile, Pipeline};

/// Domain of the cache key; bump when what the key covers changes.
const CACHE_FORMAT: &str = "skyctl-compiled-graph-v3";

/// What `skyctl build` needs of an opened pipeline.
#[derive(Debug)]
pub struct Compiled {
    /// Where things are.
    pub ws: Workspace,
    /// The checked graph.
    pub graph: Graph,
    /// `[cache] remote`, if set.
    pub remote: Option<String>,
    /// `[execute]` and the nodes' resources.
    pub execute: crate::pipeline::execute::ExecuteConfig,
    /// Whether the graph came from the cache.
    pub cached: bool,
    /// The cache key (`None`: the executable could not be identified): a full build leaves
    /// its no-op proof under it ([`sky_dag::noop`]).
    pub key: Option<Digest>,
    /// The no-op proof held but for these edited files, and vouched for the outputs in
    /// place of the disk checks ([`sky_dag::BuildOptions::edited`]).
    pub edited: Option<std::sync::Arc<sky_dag::noop::Edited>>,
}

/// What the manifest names beside the graph (the cache payload).
#[derive(Debug, Default, PartialEq)]
struct Extra {
    /// Declared environment variables and the values the expansion read.
    env: Vec<(String, Option<String>)>,
    /// `[project] store_dir`.
    store_dir: String,
    /// The folders checked for symlinks leading out (build_dir, command cwds; the store when
    /// it is the manifest's).
    confined: Vec<String>,
    /// The project folders checked on the disk ([`super::folder_on_disk`]): which key names
    /// each, and its workspace path.
    folders: Vec<(String, String)>,
    /// `[cache] remote`.
    remote: Option<String>,
    /// `[execute]` and the nodes' resources ([`crate::pipeline::execute::ExecuteConfig::encode`]).
    execute: String,
}

impl Extra {
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.len(self.env.len());
        for (k, v) in &self.env {
            w.str(k);
            w.opt_str(v.as_deref());
        }
        w.str(&self.store_dir);
        w.len(self.confined.len());
        for c in &self.confined {
            w.str(c);
        }
        w.len(self.folders.len());
        for (what, rel) in &self.folders {
            w.str(what);
            w.str(rel);
        }
        w.opt_str(self.remote.as_deref());
        w.str(&self.execute);
        w.buf
    }

    fn decode(b: &[u8]) -> Option<Extra> {
        let mut r = Reader::new(b);
        let n = r.count(5)?;
        let mut env = Vec::with_capacity(n);
        for _ in 0..n {
            env.push((r.str()?.to_string(), r.opt_str()?.map(str::to_string)));
        }
        let store_dir = r.str()?.to_string();
        let n = r.count(4)?;
        let mut confined = Vec::with_capacity(n);
        for _ in 0..n {
            confined.push(r.str()?.to_string());
        }
        let n = r.count(8)?;
        let mut folders = Vec::with_capacity(n);
        for _ in 0..n {
            folders.push((r.str()?.to_string(), r.str()?.to_string()));
        }
        let remote = r.opt_str()?.map(str::to_string);
        let execute = r.str()?.to_string();
        r.is_empty().then_some(Extra {
            env,
            store_dir,
            confined,
            folders,
            remote,
            execute,
        })
    }
}

/// The running executable's identity: (device, inode, size, mtime ns). Not the ctime: hard
/// links come and go (cargo's target folder, perf's build-id cache) and would make every
/// build after one compile again; a new or rebuilt binary is a new inode or a new mtime.
fn exe_identity() -> Option<[u64; 4]> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata("/proc/self/exe")
        .or_else(|_| std::env::current_exe().and_then(std::fs::metadata))
        .ok()?;
    let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n) as u64;
    Some([
        md.dev(),
        md.ino(),
        md.size(),
        ns(md.mtime(), md.mtime_nsec()),
    ])
}

/// The cache key of `file` opened with `store_override` by this executable; `None` when the
/// executable cannot be identified (then nothing is cached).
fn cache_key(
    file: &ManifestFile,
    store_override: Option<&Path>,
    registry: &Registry,
) -> Option<Digest> {
    let exe = exe_identity()?;
    let mut h = StableHasher::new(CACHE_FORMAT);
    h.str(env!("CARGO_PKG_VERSION"));
    h.str(sky_dag::key::KEY_FORMAT);
    for v in exe {
        h.u64(v);
    }
    let names = registry.names();
    h.u64(names.len() as u64);
    for name in names {
        h.str(name);
        h.u64(registry.get(name).map_or(0, |k| u64::from(k.version())));
    }
    h.bytes(file.shown.as_os_str().as_encoded_bytes());
    h.bytes(file.root.as_os_str().as_encoded_bytes());
    h.str(&file.manifest_rel);
    match store_override {
        None => h.tag(0),
        Some(s) => {
            h.tag(1);
            h.bytes(s.as_os_str().as_encoded_bytes());
        }
    }
    h.bytes(file.text.as_bytes());
    Some(h.finish())
}

/// Open `file` for a build: the graph from the cache when it is valid, else parsed, expanded
/// and checked (and cached for the next build).
/// `looked`: what [`noop`] found for the same file and store, so as not to look again.
pub fn open(
    file: ManifestFile,
    store_override: Option<PathBuf>,
    registry: &Registry,
    planners: Vec<Planner>,
    looked: Option<Looked>,
) -> anyhow::Result<Compiled> {
    let (key, checked, edited) = match looked {
        Some(l) => (l.key, Some(l.checked.map(|c| *c)), l.edited),
        None => (
            cache_key(&file, store_override.as_deref(), registry),
            None,
            None,
        ),
    };
    sky_dag::timings::mark("graph key");
    let path = sky_dag::state::StatePaths::new(&file.root).compiled_graph();
    let file = match &key {
        Some(key) => match load(&path, key, file, store_override.as_deref(), checked, edited) {
            Ok(hit) => return Ok(hit),
            Err(file) => file,
        },
        None => file,
    };
    let pipeline = Pipeline::from_file(file, store_override, planners)?;
    let read = RefCell::new(Vec::new());
    let env = |name: &str| {
        let value = super::read_declared(name)?;
        read.borrow_mut().push((name.to_string(), value.clone()));
        Ok(value)
    };
    let mut graph = pipeline.graph_with_env(&env)?;
    let extra = Extra {
        env: read.into_inner(),
        store_dir: pipeline.manifest.project.store_dir.get_ref().clone(),
        confined: confined_dirs(&pipeline),
        folders: pipeline
            .project_folders()?
            .into_iter()
            .filter(|f| f.what != "--store")
            .map(|f| (f.what.to_string(), f.rel))
            .collect(),
        remote: pipeline
            .manifest
            .cache
            .remote
            .as_ref()
            .map(|u| u.get_ref().clone()),
        execute: crate::pipeline::execute::ExecuteConfig::from_manifest(&pipeline.manifest)
            .encode(),
    };
    // Only a graph every kind accepts is cached (a build of any other stops before running).
    let checked = graph.nodes.iter().all(|n| {
        registry
            .get(&n.kind)
            .is_some_and(|k| k.check_params(n.params.value()).is_ok())
    });
    if let (Some(key), true) = (&key, checked) {
        let _ = std::fs::create_dir_all(&pipeline.ws.state.dir)
            .and_then(|()| sky_dag::compiled::write(&path, key, &extra.encode(), &graph, true));
    }
    // The build need not parse them again.
    graph.params_checked = checked;
    let Pipeline { ws, .. } = pipeline;
    Ok(Compiled {
        ws,
        graph,
        execute: crate::pipeline::execute::ExecuteConfig::decode(&extra.execute)
            .unwrap_or_default(),
        remote: extra.remote,
        cached: false,
        key,
        edited: None,
    })
}

/// The checked cache file, the workspace, `[cache] remote` and `[execute]` ([`check`]).
type Checked = (
    sky_dag::compiled::Compiled,
    Workspace,
    Option<String>,
    crate::pipeline::execute::ExecuteConfig,
);

/// What [`noop`] looked at when it could not answer: [`open`] goes on from there.
pub struct Looked {
    key: Option<Digest>,
    checked: Option<Box<Checked>>,
    /// The proof held but for edited files.
    edited: Option<Box<sky_dag::noop::Edited>>,
}

/// The summary of a plain build of everything when nothing changed since the last one, told
/// from its no-op proof ([`sky_dag::noop::check_noop`]) without decoding the graph: the
/// cached graph must be this manifest's, as [`load`] requires, and the build must use no
/// remote cache (`remote_in_use` answers, given `[cache] remote`) and run here. `Err`: build
/// the usual way, from what was looked at.
pub fn noop(
    file: &ManifestFile,
    store_override: Option<&Path>,
    registry: &Registry,
    remote_in_use: impl FnOnce(Option<&str>) -> bool,
) -> Result<sky_dag::report::Summary, Looked> {
    let key = cache_key(file, store_override, registry);
    let Some(k) = key else {
        return Err(Looked {
            key,
            checked: None,
            edited: None,
        });
    };
    let path = sky_dag::state::StatePaths::new(&file.root).compiled_graph();
    let checked = check(&path, &k, file, store_override);
    let verdict = match &checked {
        Some((_, ws, remote, execute))
            if !remote_in_use(remote.as_deref()) && execute.engine(None) == "local" =>
        {
            sky_dag::noop::check_noop(ws, &k)
        }
        _ => Err(None),
    };
    verdict
        .map(sky_dag::report::Summary::from)
        .map_err(|edited| Looked {
            key,
            checked: checked.map(Box::new),
            edited: edited.map(Box::new),
        })
}

/// The folders [`Pipeline::check_confined`] checks, except the store (whether the store is the
/// manifest's is decided again when the cache is loaded).
fn confined_dirs(p: &Pipeline) -> Vec<String> {
    p.confined_dirs()
        .into_iter()
        .filter(|(what, ..)| *what != "store_dir")
        .map(|(_, rel, _)| rel)
        .collect()
}

/// The cached graph, when the file is intact, was written under `key`, the declared variables
/// still have the values it was expanded with, and the disk checks still pass.
fn load(
    path: &Path,
    key: &Digest,
    file: ManifestFile,
    store_override: Option<&Path>,
    checked: Option<Option<Checked>>,
    edited: Option<Box<sky_dag::noop::Edited>>,
) -> Result<Compiled, ManifestFile> {
    let checked = checked.unwrap_or_else(|| check(path, key, &file, store_override));
    sky_dag::timings::mark("graph read + checks");
    match checked {
        Some((compiled, ws, remote, execute)) => {
            // The manifest's text moves into the graph (for error locations), uncopied.
            let source = Source {
                file: file.shown,
                text: file.text,
            };
            let graph = compiled.graph(source);
            sky_dag::timings::mark("graph decode");
            // The proof vouches for the outputs unless an edited file is one: only the release
            // folder's path is checked then.
            let edited = edited.filter(|e| graph.as_ref().is_ok_and(|g| e.vouches_for_outputs(g)));
            let passes = |graph: &Graph| match &edited {
                Some(_) => graph.release_dir_passes(&ws.root),
                None => graph.disk_checks_pass(&ws.root),
            };
            let source = match graph {
                Ok(graph) if passes(&graph) => {
                    return Ok(Compiled {
                        ws,
                        graph,
                        remote,
                        execute,
                        cached: true,
                        key: Some(*key),
                        edited: edited.map(|e| std::sync::Arc::new(*e)),
                    })
                }
                Ok(graph) => graph.source,
                Err(source) => source,
            };
            Err(ManifestFile {
                shown: source.file,
                text: source.text,
                root: file.root,
                manifest_rel: file.manifest_rel,
            })
        }
        None => Err(file),
    }
}

/// The compiled file, the workspace and `[cache] remote`, when the file is intact, was
/// written under `key`, the declared variables still have the values it was expanded with,
/// and the folders it names do not lead out of the workspace.
fn check(
    path: &Path,
    key: &Digest,
    file: &ManifestFile,
    store_override: Option<&Path>,
) -> Option<Checked> {
    let compiled = sky_dag::compiled::Compiled::read(path)?;
    if compiled.key() != key {
        return None;
    }
    let extra = Extra::decode(compiled.extra())?;
    if extra
        .env
        .iter()
        .any(|(name, value)| super::read_declared(name).ok().as_ref() != Some(value))
    {
        return None;
    }
    let root = &file.root;
    let manifest_store = root.join(&extra.store_dir);
    let store_dir = store_override.map_or_else(|| manifest_store.clone(), Path::to_path_buf);
    let ws = Workspace::new(root, &store_dir).ok()?;
    let store_from_manifest = ws.store_dir == root.join(&extra.store_dir);
    let store_checked = store_from_manifest.then_some(&extra.store_dir);
    if extra
        .confined
        .iter()
        .chain(store_checked)
        .any(|rel| sky_dag::graph::symlink_escape(root, rel).is_some())
    {
        return None;
    }
    if extra
        .folders
        .iter()
        .any(|(what, rel)| super::folder_on_disk(root, what, rel).is_some())
    {
        return None;
    }
    let execute = crate::pipeline::execute::ExecuteConfig::decode(&extra.execute)?;
    Some((compiled, ws, extra.remote, execute))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_round_trips_and_damage_is_refused() {
        let e = Extra {
            env: vec![("A".into(), Some("1".into())), ("B".into(), None)],
            store_dir: ".skyctl".into(),
            confined: vec!["build".into(), "sub".into()],
            folders: vec![("release_dir".into(), "site/public".into())],
            remote: Some("http://x/".into()),
            execute: "{}".into(),
        };
        let b = e.encode();
        assert_eq!(Extra::decode(&b), Some(e));
        for cut in 0..b.len() {
            assert_eq!(Extra::decode(&b[..cut]), None, "cut at {cut}");
        }
    }
}
