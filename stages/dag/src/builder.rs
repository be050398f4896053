//! `build`: load, scan, plan, run, release, record.
//!
//! One build is a [`BuildSession`] whose phases (prepare: locks and sweeps; run; release;
//! record) run in that order, each on what the one before returned.
//!
//! The [`BuildDriver`] is the scheduler's [`Driver`]: on the coordinator it computes each ready
//! node's key (its upstream outputs are known by then, which is what makes early cutoff work:
//! a re-run node with byte-identical outputs gives its dependents their old keys back), decides
//! fresh / restore / run, and records results. The job it hands to a worker runs the stage,
//! checks and stores the outputs, and writes the action record, in that order, so a record only
//! ever names complete blobs.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{DagError, Result};
use crate::failure::NodeFailure;
use crate::graph::{Graph, NodeIdx};
use crate::key::{Digest, KeyMaterial};
use crate::kind::{DynKind, Registry, StageCtx, StageInput};
use crate::outputs::{ingest, through_real_folders};
use crate::plan::Plan;
use crate::release;
use crate::report::{Event, NodeStatus, Reporter, Summary};
use crate::scan::{DirtyReason, Freshness, Scanner};
use crate::scheduler::{Driver, Panicked, Scheduler, Start};
use crate::state::{LastBuild, NodeState, Preloaded, StoreStamp};
use crate::store::{ActionRecord, OutputRecord, Store};
use crate::workspace::Workspace;

/// Options of a build.
#[derive(Clone, Default)]
pub struct BuildOptions {
    /// Targets: node ids, group names or kind names (empty: everything).
    pub targets: Vec<String>,
    /// Nodes, groups or kinds to re-run even when cached.
    pub rerun: Vec<String>,
    /// Parallel jobs.
    pub jobs: usize,
    /// Continue with independent nodes after a failure.
    pub keep_going: bool,
    /// A shared remote cache: asked on a local miss, filled after a node runs.
    pub remote: Option<crate::remote::RemoteCache>,
    /// Where nodes that must run are run (`None`: here, [`crate::executor::Local`]).
    pub executor: Option<std::sync::Arc<dyn crate::executor::Executor>>,
    /// The front end's key of this graph and invocation, under which a full build leaves a
    /// no-op proof ([`crate::noop`]); `None`: no proof.
    pub noop_proof: Option<Digest>,
    /// The no-op proof under `noop_proof` held for every path but these edited files
    /// ([`crate::noop::check_noop`]), and the caller skipped the graph's disk checks of the
    /// outputs ([`Graph::disk_checks_pass`]), which the proof vouches for. A plain full build
    /// then looks only at the nodes the files lead to: every other node is as the last build
    /// left it. Set only when the proof held; if the lock file shows another build since,
    /// the build makes the disk checks itself and looks at everything.
    pub edited: Option<std::sync::Arc<crate::noop::Edited>>,
    /// The caller exits once the build returns: the last build's record and the stat cache,
    /// thousands of small allocations on a large graph, are left to the process's end instead
    /// of freed one by one (about 0.4 ms of a 5,000-node rebuild).
    pub exiting: bool,
}

/// A folder's (ctime ns, inode), as [`crate::workspace::WorkspaceLock`] records it.
type FolderStamp = (i64, u64);

/// The store's blob fan-out folders (`blobs/00` .. `blobs/ff`) as the last clean full build
/// left them. That build saw the blob of every output it recorded; removing a blob or putting
/// anything else in its place gives its folder a newer ctime. So while the store is the one
/// that build stamped and a folder is unchanged, the blobs in it need no `lstat` each: a no-op
/// build looks at one folder per fan-out byte at most, not at one blob per output.
struct BlobFolders {
    /// The store is the last full build's ([`LastBuild::store`]): the folders may vouch.
    vouching: bool,
    /// Per fan-out byte: 0 not looked at yet, 1 holding every blob the last build recorded
    /// (as the last clean full build left it, or each blob looked at), 2 not known to.
    seen: [std::sync::atomic::AtomicU8; 256],
}

impl BlobFolders {
    fn new(vouching: bool) -> BlobFolders {
        BlobFolders {
            vouching,
            seen: std::array::from_fn(|_| std::sync::atomic::AtomicU8::new(0)),
        }
    }

    /// The folder of `d`'s blob, as the lock file records it.
    fn folder(store: &Store, d: &Digest) -> String {
        let blob = store.blob_path(d);
        blob.parent().unwrap_or(&blob).display().to_string()
    }

    /// Whether every blob of `last`'s outputs is still in the store: each folder the last
    /// clean end recorded settled is unchanged since, and each blob in a folder it did not
    /// record is there (`false`: a build that looks at every blob finds which went). Every
    /// folder then counts as seen whole: this build's clean end may stamp it.
    fn look_at_all(
        &self,
        lock: &crate::workspace::WorkspaceLock,
        root: &Path,
        store: &Store,
        last: &LastBuild,
    ) -> bool {
        use std::sync::atomic::Ordering;
        if !self.vouching {
            return false;
        }
        let mut unstamped = [false; 256];
        for (byte, slot) in self.seen.iter().enumerate() {
            let mut first = [0u8; 32];
            first[0] = byte as u8;
            let folder = Self::folder(store, &Digest(first));
            if lock.settled_stamp(&folder).is_none() {
                unstamped[byte] = true;
                continue;
            }
            if !lock.unchanged_since_clean_end(root, &folder) {
                return false;
            }
            slot.store(1, Ordering::Relaxed);
        }
        let all_there = last
            .nodes
            .values()
            .flat_map(|st| &st.outputs)
            .filter(|o| unstamped[usize::from(o.digest.0[0])])
            .all(|o| store.has_blob(&o.digest));
        if all_there {
            for (slot, _) in self.seen.iter().zip(unstamped).filter(|(_, u)| *u) {
                slot.store(1, Ordering::Relaxed);
            }
        }
        all_there
    }

    /// Whether `d`'s blob is known to be in `store` without looking at it.
    fn vouch(
        &self,
        lock: &crate::workspace::WorkspaceLock,
        root: &Path,
        store: &Store,
        d: &Digest,
    ) -> bool {
        use std::sync::atomic::Ordering;
        if !self.vouching {
            return false;
        }
        let slot = &self.seen[usize::from(d.0[0])];
        match slot.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let same = lock.unchanged_since_clean_end(root, &Self::folder(store, d));
                slot.store(if same { 1 } else { 2 }, Ordering::Relaxed);
                same
            }
        }
    }

    /// The folders to record at a clean end, for the blobs of `digests`: those found
    /// unchanged keep their stamp when the build did not put a blob in them or remove one
    /// (`touched`; no `stat`), and are stamped anew when it did (every blob they held was
    /// there, and the build saw what it changed); a full build that saw every blob stamps the
    /// others anew; any other build keeps only the stamps it had (it did not see every blob of
    /// the folder). The rest are [`CleanEnd::unstamped`].
    fn at_clean_end<'d>(
        &self,
        lock: &crate::workspace::WorkspaceLock,
        store: &Store,
        digests: impl IntoIterator<Item = &'d Digest>,
        saw_every_blob: bool,
        touched: impl Fn(u8) -> bool,
    ) -> CleanEnd {
        use std::sync::atomic::Ordering;
        let mut first: [Option<&Digest>; 256] = [None; 256];
        for d in digests {
            first[usize::from(d.0[0])].get_or_insert(d);
        }
        let mut end = CleanEnd::default();
        for (byte, d) in first.iter().enumerate() {
            let Some(d) = d else { continue };
            let folder = Self::folder(store, d);
            let unchanged = self.seen[byte].load(Ordering::Relaxed) == 1;
            match lock.settled_stamp(&folder) {
                Some(stamp) if unchanged && !touched(byte as u8) => end.kept.push((folder, stamp)),
                _ if saw_every_blob || unchanged => end.fresh.push((byte as u8, folder)),
                Some(stamp) if !saw_every_blob => end.kept.push((folder, stamp)),
                _ => end.unstamped[byte] = true,
            }
        }
        end
    }
}

/// The blob folders a clean end records ([`BlobFolders::at_clean_end`]).
struct CleanEnd {
    /// To stamp as they are now (unless changed within the racy window), by fan-out byte.
    fresh: Vec<(u8, String)>,
    /// To record with the stamp they had.
    kept: Vec<(String, FolderStamp)>,
    /// By fan-out byte: left without a stamp. Nothing vouches for the blobs in such a
    /// folder but their own `lstat`: the no-op proof holds them as they are.
    unstamped: [bool; 256],
}

impl Default for CleanEnd {
    fn default() -> CleanEnd {
        CleanEnd {
            fresh: Vec::new(),
            kept: Vec::new(),
            unstamped: [false; 256],
        }
    }
}

/// Below this many outputs, stats are not taken ahead on another thread (starting one costs
/// more than it saves).
const PREFETCH_MIN: usize = 256;

/// What a worker sends back.
pub struct JobOutput {
    result: std::result::Result<Vec<OutputRecord>, NodeFailure>,
    log: Vec<u8>,
    seconds: f64,
    /// The result came from the remote cache.
    remote: bool,
}

/// Resolve targets and `--rerun` names to node indices.
pub fn resolve(graph: &Graph, names: &[String]) -> Result<Vec<NodeIdx>> {
    let mut out = Vec::new();
    for n in names {
        out.extend(graph.resolve_target(n)?);
    }
    Ok(out)
}

/// Build. Errors are usage/manifest/store problems (exit 2); node failures are counted in the
/// summary (exit 1).
pub fn build(
    ws: &Workspace,
    graph: &Graph,
    registry: &Registry,
    opts: &BuildOptions,
    reporter: &mut dyn Reporter,
) -> Result<Summary> {
    let state = Preloaded::load(&ws.state);
    build_preloaded(ws, graph, registry, opts, reporter, state)
}

/// [`build`] from workspace state read ahead with [`Preloaded::load`].
pub fn build_preloaded(
    ws: &Workspace,
    graph: &Graph,
    registry: &Registry,
    opts: &BuildOptions,
    reporter: &mut dyn Reporter,
    state: Preloaded,
) -> Result<Summary> {
    let (session, statcache) = BuildSession::prepare(ws, graph, registry, opts, reporter, state)?;
    let ran = session.run(statcache, reporter)?;
    let released = session.release(ran)?;
    session.record(released, reporter)
}

/// One build, phase by phase; each phase takes what the one before returned, so each can be
/// run (and tested) on its own:
///
/// - [`BuildSession::prepare`]: targets and plan, the workspace and store locks, the sweep of
///   what a killed build left, the workspace state as it is now, the release folder's check;
/// - [`BuildSession::run`]: the scan and the scheduler ([`Ran`]); each node's last failure is
///   saved when it ends;
/// - [`BuildSession::release`]: the release tree, when the build may write it ([`Released`]);
/// - [`BuildSession::record`]: remote uploads finished, the workspace state, the store's build
///   record, the stat cache; the locks go.
pub(crate) struct BuildSession<'g> {
    ws: &'g Workspace,
    graph: &'g Graph,
    registry: &'g Registry,
    opts: &'g BuildOptions,
    t0: Instant,
    plan: Plan,
    lock: crate::workspace::WorkspaceLock,
    store: Store,
    store_lock: crate::store::StoreLock,
    /// The folders swept for temp files (the outputs' parents, the release tree's).
    temp_dirs: Vec<&'g str>,
    /// The last build's record, as it is with the lock held.
    last: LastBuild,
    stamp: StoreStamp,
    /// Another store than the one the last build filled: each cached node's record is checked.
    verify_store: bool,
    /// Each node's failure in the last build that ran it.
    failures_before: std::collections::BTreeMap<String, NodeFailure>,
    journal: crate::state::Journal,
    /// What the journal of a build that did not end normally noted.
    journaled: std::collections::BTreeSet<String>,
    /// Every recorded output path of the last build, built on the first question that the
    /// node's own record does not answer ([`MadePaths`]).
    made_all: std::sync::OnceLock<std::collections::HashSet<Box<str>>>,
    release_abs: PathBuf,
    /// The declared outputs of the selected nodes, in order, and where each node's start: their
    /// stats are taken ahead on another thread ([`crate::statcache::Prefetch`]).
    ahead: Vec<&'g str>,
    first: Vec<usize>,
    prefetch: crate::statcache::Prefetch,
    /// Every slot of `prefetch` was filled from the graph's disk checks: no stat thread.
    prefetch_taken: bool,
    blob_folders: BlobFolders,
    /// With an edited-files proof ([`BuildOptions::edited`]) that stands: per node, whether
    /// the proof vouches for it (its inputs and outputs, and every node it depends on).
    proven: Option<Vec<bool>>,
}

/// What [`BuildSession::run`] leaves for the release and the record.
pub(crate) struct Ran<'s> {
    scanner: Scanner<'s>,
    reporter: &'s mut dyn Reporter,
    /// The nodes whose key or outputs differ from the last build, and the paths failed runs made.
    delta: LastBuild,
    summary: Summary,
    outputs: Vec<Option<Cow<'s, [OutputRecord]>>>,
    keys: Vec<Option<Digest>>,
    /// Nodes whose record this build added to the store from the workspace outputs.
    stored: usize,
    /// Nodes the release depends on.
    critical: Vec<bool>,
    remote_before: Option<crate::remote::RemoteStats>,
    /// Nodes whose outputs this build wrote (ran, restored, fetched).
    written: Vec<NodeIdx>,
}

/// What [`BuildSession::release`] leaves for the record.
pub(crate) struct Released {
    delta: LastBuild,
    summary: Summary,
    keys: Vec<Digest>,
    stored: usize,
    statcache: crate::statcache::StatCache,
    /// How many nodes of the last build's record the scan matched to this graph's.
    last_matched: usize,
    /// The release tree this build wrote or found up to date (`None`: it did not publish).
    release_files: Option<Vec<crate::state::ReleaseFile>>,
    remote_before: Option<crate::remote::RemoteStats>,
    /// What the no-op proof will say, when this build may leave one.
    proof: Option<crate::noop::Draft>,
}

impl<'g> BuildSession<'g> {
    /// Resolve the targets, take the locks, sweep what a killed build left, and read the
    /// workspace state as it is now. Errors: unknown targets, a lock or store that cannot be
    /// opened, a release folder that is not the engine's.
    pub(crate) fn prepare(
        ws: &'g Workspace,
        graph: &'g Graph,
        registry: &'g Registry,
        opts: &'g BuildOptions,
        reporter: &mut dyn Reporter,
        state: Preloaded,
    ) -> Result<(BuildSession<'g>, crate::statcache::StatCache)> {
        let t0 = Instant::now();
        let targets = resolve(graph, &opts.targets)?;
        let rerun = resolve(graph, &opts.rerun)?;
        let plan = Plan::new(graph, &targets, &rerun);
        let mut waited = false;
        let lock = ws.lock(&mut |msg| {
            waited = true;
            reporter.event(&Event::Note {
                message: msg.to_string(),
            })
        })?;
        // A read-only build serves from a store; it cannot make one.
        if !ws.store_dir.join(crate::store::STORE_VERSION_DIR).is_dir() {
            if let Some(e) = lock.refuse("a new store, as nothing was built here yet") {
                return Err(e);
            }
        }
        let store = ws.store()?;
        let store_lock = store.lock(false)?;
        crate::timings::mark("lock + store open");
        // A user who cannot write the state (a read-only lock) writes and removes nothing:
        // what a killed build left is the owner's next build's to clean up.
        let read_only = lock.is_read_only();
        // A build killed with SIGKILL may have left command nodes running; end them first.
        if !read_only {
            crate::interrupt::track_children(&ws.state.children());
        }
        // What a killed build left: temp files beside the outputs and the release tree (this
        // workspace's lock is held, so none is being written), and the store's temp files of
        // processes that no longer run.
        let mut temp_dirs: Vec<&str> = graph
            .nodes
            .iter()
            .flat_map(|n| &n.outputs)
            .map(|o| o.path.rsplit_once('/').map_or("", |(parent, _)| parent))
            .chain([graph
                .release_dir
                .rsplit_once('/')
                .map_or("", |(parent, _)| parent)])
            .collect();
        temp_dirs.sort_unstable();
        temp_dirs.dedup();
        for d in temp_dirs.iter().filter(|_| !read_only) {
            // A folder as the last build left it when it ended cleanly cannot have gained a
            // temp file: it is not listed (output folders can hold thousands of files).
            if !lock.unchanged_since_clean_end(&ws.root, d) {
                crate::fsutil::sweep_temps(&ws.root.join(d));
            }
        }
        if !read_only {
            // The workspace state too: a kill during its atomic write leaves the temp file
            // there.
            crate::fsutil::sweep_temps(&ws.state.dir);
            store.sweep_dead_temps();
        }
        crate::timings::mark("sweep temps");
        let (last, statcache) = state.current(&ws.state);
        crate::timings::mark("state current");
        let stamp = StoreStamp {
            dir: ws.store_dir.display().to_string(),
            id: store.id(),
        };
        let verify_store = last.store.as_ref() != Some(&stamp);
        // A build that will write the release tree replaces the whole folder: it must be ours.
        if plan.full && !graph.release.is_empty() {
            release::check_ours(&store, &ws.root, &graph.release_dir, &last).map_err(|e| {
                graph.source.error_at(
                    graph.release_span.clone(),
                    format!(
                        "release_dir `{}` {e}; the release tree replaces the whole folder, so choose another release_dir (or move the folder away)",
                        graph.release_dir
                    ),
                )
            })?;
        }
        let blob_folders = BlobFolders::new(!verify_store);
        let proven = match &opts.edited {
            Some(edited) => {
                let stands = edited.stands(opts.noop_proof.as_ref(), &lock.left_digest())
                    && !waited
                    && plan.full
                    && !plan.forced.iter().any(|&f| f)
                    && opts.remote.is_none()
                    && opts.executor.is_none()
                    && !read_only
                    && blob_folders.look_at_all(&lock, &ws.root, &store, &last);
                if stands {
                    crate::timings::mark("nodes the proof vouches for");
                    let proven = proven_nodes(graph, &last, edited);
                    if proven.iter().any(|&p| !p) {
                        store.read_actions_ahead();
                    }
                    Some(proven)
                } else {
                    // Another build ran since the proof was checked: the checks it stood for.
                    if !graph.disk_checks_pass(&ws.root) {
                        return Err(DagError::Store {
                            path: ws.root.clone(),
                            message: "a declared output's path changed while this build \
                                      started (another build ran, or a folder became a \
                                      symlink); run the build again"
                                .into(),
                        });
                    }
                    None
                }
            }
            None => None,
        };
        // The outputs' stats are taken ahead on the other core while the coordinator checks
        // keys (most of a no-op build of a big graph is `stat`).
        let mut first = vec![usize::MAX; graph.nodes.len()];
        let mut ahead: Vec<&str> = Vec::new();
        for &n in &graph.order {
            if plan.selected[n] && !proven.as_ref().is_some_and(|p| p[n]) {
                first[n] = ahead.len();
                ahead.extend(graph.nodes[n].outputs.iter().map(|o| o.path.as_str()));
            }
        }
        let prefetch = crate::statcache::Prefetch::new(ahead.len());
        // The disk checks took one `lstat` of every output already: those are the stats.
        // Only as fresh as those checks: not after waiting for another build's lock, nor when
        // the last build did not end cleanly (it may have left a command writing an output
        // until `track_children` above ended it).
        let stats = graph.take_output_stats();
        let taken = stats
            .filter(|_| !waited && lock.last_ended_cleanly())
            .is_some_and(|stats| {
                let mut flat = 0usize;
                let mut flat_first = Vec::with_capacity(graph.nodes.len());
                for node in &graph.nodes {
                    flat_first.push(flat);
                    flat += node.outputs.len();
                }
                if stats.len() != flat {
                    return false;
                }
                for (n, &slot) in first.iter().enumerate() {
                    if slot == usize::MAX {
                        continue;
                    }
                    for i in 0..graph.nodes[n].outputs.len() {
                        prefetch.fill(slot + i, stats[flat_first[n] + i]);
                    }
                }
                true
            });
        let journal = crate::state::Journal::new(ws.state.journal());
        let session = BuildSession {
            ws,
            graph,
            registry,
            opts,
            t0,
            plan,
            lock,
            store,
            store_lock,
            temp_dirs,
            last,
            stamp,
            verify_store,
            failures_before: crate::state::load_failures(&ws.state),
            journaled: journal.read(),
            journal,
            made_all: std::sync::OnceLock::new(),
            release_abs: ws.root.join(&graph.release_dir),
            prefetch,
            prefetch_taken: taken,
            blob_folders,
            proven,
            ahead,
            first,
        };
        Ok((session, statcache))
    }

    /// Whether the edited-files proof vouches for node `n` ([`BuildSession::proven`]).
    fn is_proven(&self, n: NodeIdx) -> bool {
        self.proven.as_ref().is_some_and(|p| p[n])
    }

    /// Whether this build may leave a no-op proof: the front end asked for one, and it builds
    /// everything, here, without `--rerun` or a remote cache, with the state writable.
    fn may_prove(&self) -> bool {
        self.opts.noop_proof.is_some()
            && self.plan.full
            && !self.plan.forced.iter().any(|&f| f)
            && self.opts.remote.is_none()
            && self.opts.executor.is_none()
            && !self.lock.is_read_only()
    }

    /// The no-op proof of a build that succeeded: what the scan saw, with the outputs this
    /// build wrote and the release tree looked at again as they are now (the scan saw them
    /// before they were written).
    fn draft_proof(
        &self,
        scanner: &mut Scanner<'_>,
        summary: &Summary,
        outputs: &[Option<Cow<'_, [OutputRecord]>>],
        written: &[NodeIdx],
        release_files: &Option<Vec<crate::state::ReleaseFile>>,
    ) -> Option<crate::noop::Draft> {
        let key = self.opts.noop_proof?;
        if summary.failed > 0
            || summary.skipped > 0
            || crate::interrupt::requested().is_some()
            || scanner.witness.as_ref().is_none_or(|w| w.is_spoiled())
        {
            return None;
        }
        scanner.witness.as_mut()?.look_again();
        for &n in written {
            let outs = outputs.get(n)?.as_ref()?;
            if scanner.check_outputs(outs).is_some() {
                return None;
            }
        }
        if let Some(files) = release_files {
            scanner.see_tree(&self.graph.release_dir);
            if !release::up_to_date(scanner, self.graph, &self.ws.root, files, Some(files)) {
                return None;
            }
        }
        let mut witness = scanner.witness.take()?;
        if self.proven.is_some() {
            // What the build did not look at stands as the proof it started from found it.
            witness.carry(self.opts.edited.as_deref()?.carried()?);
        }
        crate::noop::Draft::new(
            key,
            witness,
            &self.ws.root,
            self.plan.len(),
            release_files
                .as_ref()
                .map(|_| self.graph.release_dir.clone()),
        )
    }

    /// Scan and run the selected nodes; save each node's last failure. Nothing else of the
    /// workspace state is written: [`BuildSession::record`] does that.
    pub(crate) fn run<'s>(
        &'s self,
        statcache: crate::statcache::StatCache,
        reporter: &'s mut dyn Reporter,
    ) -> Result<Ran<'s>> {
        let (graph, registry, opts, ws) = (self.graph, self.registry, self.opts, self.ws);
        let plan = &self.plan;
        let mut scanner = Scanner::new(
            &ws.root,
            graph,
            registry,
            &self.store,
            &self.last,
            statcache,
        );
        scanner.check_kinds(&plan.selected)?;
        if self.may_prove() {
            scanner.witness = Some(crate::witness::Witness::with_capacity(
                self.ahead.len() + 64,
            ));
        }
        for &n in &graph.order {
            if plan.selected[n] && !self.is_proven(n) {
                scanner.prefetch(n)?;
            }
        }
        crate::timings::mark("check kinds + prefetch");
        reporter.event(&Event::Plan { total: plan.len() });
        let remote_before = opts.remote.as_ref().map(|r| r.stats());
        let made = MadePaths {
            last: &self.last,
            journaled: &self.journaled,
            all: &self.made_all,
        };
        let mut driver = BuildDriver {
            graph,
            registry,
            store: &self.store,
            root: &ws.root,
            release_abs: &self.release_abs,
            plan,
            scanner,
            reporter,
            outputs: vec![None; graph.nodes.len()],
            keys: vec![None; graph.nodes.len()],
            materials: vec![None; graph.nodes.len()],
            reasons: vec![None; graph.nodes.len()],
            failed: vec![false; graph.nodes.len()],
            first_failure: None,
            failures_before: &self.failures_before,
            outcomes: vec![None; graph.nodes.len()],
            new_last: LastBuild::default(),
            made,
            journal: &self.journal,
            summary: Summary::default(),
            verify_store: self.verify_store,
            blob_folders: &self.blob_folders,
            lock: &self.lock,
            stored: 0,
            written: Vec::new(),
            remote: opts.remote.as_ref(),
            executor: opts.executor.as_deref().unwrap_or(&crate::executor::Local),
            job_seen: std::collections::BTreeMap::new(),
            refused: None,
            proven: self.proven.as_deref(),
            unreported: Vec::new(),
        };
        driver.take_vouched();
        // The scheduler sees only the nodes the proof does not vouch for.
        let unvouched: Option<Vec<bool>> = self.proven.as_ref().map(|proven| {
            (plan.selected.iter().zip(proven))
                .map(|(&selected, &proven)| selected && !proven)
                .collect()
        });
        let exclusive = graph
            .nodes
            .iter()
            .map(|n| n.exclusive || registry.get(&n.kind).is_some_and(|k| k.exclusive()))
            .collect();
        // Nodes the release depends on: a failure elsewhere lets the build go on to the release.
        let critical = graph.release_critical();
        let scheduler = Scheduler {
            deps: &graph.deps,
            exclusive,
            jobs: opts.jobs.max(1),
            keep_going: opts.keep_going,
            stops: critical.clone(),
        };
        let prefetch = &self.prefetch;
        let parallel = !self.prefetch_taken && self.ahead.len() >= PREFETCH_MIN && opts.jobs > 1;
        if parallel || self.prefetch_taken {
            driver.scanner.use_prefetch(prefetch, self.first.clone());
        }
        std::thread::scope(|scope| {
            if parallel {
                let ahead = self.ahead.clone();
                // No thread (the system refused one): the coordinator takes every stat itself.
                let _ = std::thread::Builder::new()
                    .name("stat-ahead".into())
                    .spawn_scoped(scope, || prefetch.run(&ws.root, ahead));
            }
            let selected = unvouched.as_deref().unwrap_or(&plan.selected);
            scheduler.run(selected, &graph.order, &mut driver);
            driver.report_vouched(usize::MAX);
            prefetch.stop();
        });
        crate::timings::mark("schedule (fresh checks)");

        let BuildDriver {
            scanner,
            new_last: delta,
            summary,
            outputs,
            keys,
            reporter,
            stored,
            outcomes,
            refused,
            written,
            ..
        } = driver;
        // A read-only build that met a node it would have to run or restore.
        if let Some(e) = refused {
            return Err(e);
        }
        // Each node's last failure: set by a failed run, cleared by a success.
        let mut failures = self.failures_before.clone();
        for (n, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Some(Some(f)) => {
                    failures.insert(graph.nodes[n].id.clone(), f);
                }
                Some(None) => {
                    failures.remove(&graph.nodes[n].id);
                }
                None => {}
            }
        }
        failures.retain(|id, _| graph.by_id.contains_key(id));
        if failures != self.failures_before && !self.lock.is_read_only() {
            crate::state::save_failures(&ws.state, &failures)
                .map_err(|e| DagError::io("write", ws.state.failures(), e))?;
        }
        Ok(Ran {
            scanner,
            reporter,
            delta,
            summary,
            outputs,
            keys,
            stored,
            critical,
            remote_before,
            written,
        })
    }

    /// The release tree: only from a full build of a graph that declares one (a pipeline that
    /// publishes nothing, such as an empty manifest, leaves it alone), in which every node the
    /// release depends on succeeded; other nodes may have failed (they are in the summary and
    /// make the exit status 1).
    pub(crate) fn release(&self, ran: Ran<'_>) -> Result<Released> {
        let (graph, ws, plan) = (self.graph, self.ws, &self.plan);
        let Ran {
            mut scanner,
            reporter,
            delta,
            mut summary,
            outputs,
            keys,
            stored,
            critical,
            remote_before,
            written,
        } = ran;
        let mut release_files = None;
        let blocked_by: Vec<String> = (0..graph.nodes.len())
            .filter(|&n| plan.selected[n] && critical[n] && outputs[n].is_none())
            .map(|n| graph.nodes[n].id.clone())
            .collect();
        if plan.full && !graph.release.is_empty() {
            summary.release = Some(crate::report::ReleaseOutcome {
                dir: graph.release_dir.clone(),
                published: false,
                blocked_by: blocked_by.clone(),
            });
        }
        if plan.full && blocked_by.is_empty() && !graph.release.is_empty() {
            if let Some(files) = release::expected(graph, &outputs) {
                if let Some(r) = summary.release.as_mut() {
                    r.published = true;
                }
                let last_release = self.last.release.as_deref();
                if !release::up_to_date(&mut scanner, graph, &ws.root, &files, last_release) {
                    let needs = format!("the release tree `{}`", graph.release_dir);
                    if let Some(e) = self.lock.refuse(&needs) {
                        return Err(e);
                    }
                    release::write(&self.store, &ws.root, &graph.release_dir, &files)?;
                    reporter.event(&Event::Note {
                        message: format!(
                            "release `{}` updated ({} files)",
                            graph.release_dir,
                            files.len()
                        ),
                    });
                }
                release_files = Some(files);
            }
        }
        let proof = self.draft_proof(&mut scanner, &summary, &outputs, &written, &release_files);
        let statcache = std::mem::take(&mut scanner.statcache);
        let last_matched = scanner.last_matched();
        crate::timings::mark("release");
        Ok(Released {
            delta,
            summary,
            keys: keys.into_iter().flatten().collect(),
            stored,
            statcache,
            last_matched,
            release_files,
            remote_before,
            proof,
        })
    }

    /// Finish the remote cache's uploads, record the workspace state (only what changed), the
    /// store's build record (the keys of this build, for gc) and the stat cache; clear the
    /// journal; release the locks.
    pub(crate) fn record(self, released: Released, reporter: &mut dyn Reporter) -> Result<Summary> {
        let (graph, ws, plan) = (self.graph, self.ws, &self.plan);
        let Released {
            delta,
            mut summary,
            keys,
            stored,
            mut statcache,
            last_matched,
            release_files,
            remote_before,
            proof,
        } = released;
        if let (Some(remote), Some(before)) = (&self.opts.remote, remote_before) {
            // Uploads read blobs: finish them while the store lock keeps gc away.
            remote.finish();
            for message in remote.take_warnings() {
                reporter.event(&Event::Note { message });
            }
            summary.remote = Some(remote.stats().since(&before));
        }
        let last = self.last;
        // `delta` holds only nodes whose key or outputs differ from the last build.
        let nodes_before = last.nodes.len();
        let last_store = last.store.clone();
        let release_changed = release_files.is_some()
            && (release_files != last.release
                || last.release_dir.as_deref() != Some(graph.release_dir.as_str()));
        let mut new_last = last;
        let changed = !delta.nodes.is_empty() || release_changed;
        // The ids whose state this build changes: updated or added, or no longer in the graph.
        let mut changed_ids: Vec<String> = delta.nodes.keys().cloned().collect();
        new_last.nodes.extend(delta.nodes);
        if last_matched < nodes_before {
            new_last.nodes.retain(|id, _| {
                let keep = graph.by_id.contains_key(id);
                if !keep {
                    changed_ids.push(id.clone());
                }
                keep
            });
        }
        // Failed runs' outputs stay ours until a successful run records them or they are no
        // longer declared.
        let made_before = new_last.made.clone();
        new_last.made.extend(delta.made);
        new_last.made.extend(self.journaled);
        if !new_last.made.is_empty() {
            let recorded: std::collections::HashSet<&str> = new_last
                .nodes
                .values()
                .flat_map(|st| st.outputs.iter().map(|o| o.path.as_str()))
                .collect();
            let declared: std::collections::HashSet<&str> = graph
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().map(|o| o.path.as_str()))
                .collect();
            new_last
                .made
                .retain(|p| declared.contains(p.as_str()) && !recorded.contains(p.as_str()));
        }
        let made_changed = new_last.made != made_before;
        if release_files.is_some() {
            new_last.release = release_files;
            new_last.release_dir = Some(graph.release_dir.clone());
        }
        // Stamp the store only once every node is known to have its record there.
        let stamped = plan.full && summary.failed == 0 && summary.skipped == 0;
        if stamped {
            new_last.store = Some(self.stamp);
        } else if self.verify_store {
            new_last.store = None;
        }
        let changed = changed
            || made_changed
            || new_last.nodes.len() != nodes_before
            || summary.executed > 0
            || stored > 0
            || new_last.store != last_store;
        if changed {
            if let Some(e) = self.lock.refuse("the last build's record") {
                return Err(e);
            }
            let changed_ids: Vec<&str> = changed_ids.iter().map(String::as_str).collect();
            new_last
                .save_changes(&ws.state, &changed_ids)
                .map_err(|e| DagError::io("write", ws.state.last_build(), e))?;
            crate::timings::mark("save last-build");
            self.store.put_build(keys)?;
        }
        crate::timings::mark("store build record");
        // Everything the journal noted is now recorded or in `made`; no child runs.
        self.journal.clear();
        crate::interrupt::untrack_children();
        if !self.lock.is_read_only() {
            let _ = statcache.save_if_worth(&ws.state.statcache());
        }
        crate::timings::mark("save statcache");
        drop(self.store_lock);
        // Nothing of this build is half written: the next one need not look for temp files.
        if summary.failed == 0 && summary.skipped == 0 && crate::interrupt::requested().is_none() {
            let downloaded = summary
                .remote
                .as_ref()
                .is_some_and(|r| r.bytes_downloaded > 0);
            let touched = |byte| downloaded || self.store.blob_folder_touched(byte);
            let digests = || {
                new_last
                    .nodes
                    .values()
                    .flat_map(|st| st.outputs.iter().map(|o| &o.digest))
            };
            let mut end = self.blob_folders.at_clean_end(
                &self.lock,
                &self.store,
                digests(),
                // An edited-files build saw only the blobs of the nodes it looked at.
                stamped && self.proven.is_none(),
                touched,
            );
            let fresh = std::mem::take(&mut end.fresh);
            let left = self.lock.ended_cleanly(
                &ws.root,
                self.temp_dirs.iter().copied(),
                fresh.iter().map(|(_, folder)| folder.as_str()),
                std::mem::take(&mut end.kept),
            );
            if let (Some(draft), Some((left, racy)), true) = (proof, left, stamped) {
                // Folders changed within the racy window are not recorded either.
                for folder in racy {
                    if let Some((byte, _)) = fresh.iter().find(|(_, f)| f == folder) {
                        end.unstamped[usize::from(*byte)] = true;
                    }
                }
                let mut blobs: Vec<_> = digests()
                    .filter(|d| end.unstamped[usize::from(d.0[0])])
                    .map(|d| self.store.blob_path(d))
                    .collect();
                blobs.sort_unstable();
                blobs.dedup();
                crate::noop::write(ws, &self.store.id_path(), draft, left, &blobs);
            }
        }
        if summary.executed > 0 {
            // Bounded lookups: merge the per-build action logs once they pile up (only when no
            // other process uses the store; never waits).
            let _ = self.store.compact_if_many(64);
        }
        summary.seconds = self.t0.elapsed().as_secs_f64();
        if self.opts.exiting {
            std::mem::forget(new_last);
            std::mem::forget(statcache);
        }
        Ok(summary)
    }
}

struct BuildDriver<'a> {
    graph: &'a Graph,
    registry: &'a Registry,
    store: &'a Store,
    root: &'a Path,
    release_abs: &'a Path,
    plan: &'a Plan,
    scanner: Scanner<'a>,
    reporter: &'a mut dyn Reporter,
    /// Each finished node's outputs (the last build's record, borrowed, when unchanged).
    outputs: Vec<Option<Cow<'a, [OutputRecord]>>>,
    /// Each node's key, once known.
    keys: Vec<Option<Digest>>,
    /// The key material of nodes that run (built only where it is needed).
    materials: Vec<Option<KeyMaterial>>,
    reasons: Vec<Option<DirtyReason>>,
    /// Nodes that failed in this build.
    failed: Vec<bool>,
    /// The first node that failed (what stopped the build without `--keep-going`).
    first_failure: Option<NodeIdx>,
    /// Each node's failure in the last build that ran it (`state::load_failures`).
    failures_before: &'a std::collections::BTreeMap<String, NodeFailure>,
    /// How each node that ran or was checked ended: `Some(None)` succeeded, `Some(Some(f))`
    /// failed (skips leave `None`: they say nothing new about the node).
    outcomes: Vec<Option<Option<NodeFailure>>>,
    new_last: LastBuild,
    /// Paths the engine made.
    made: MadePaths<'a>,
    /// Where a node's outputs are noted before it runs.
    journal: &'a crate::state::Journal,
    /// Where nodes run.
    executor: &'a dyn crate::executor::Executor,
    /// The last job id and state reported for each node that runs elsewhere.
    job_seen: std::collections::BTreeMap<String, (String, crate::report::JobState)>,
    summary: Summary,
    /// Whether cached nodes must be checked for an action record in this store.
    verify_store: bool,
    blob_folders: &'a BlobFolders,
    /// Nodes the edited-files proof vouches for ([`BuildSession::proven`]).
    proven: Option<&'a [bool]>,
    /// Of those, the ones not reported yet (the next one last).
    unreported: Vec<NodeIdx>,
    lock: &'a crate::workspace::WorkspaceLock,
    /// Nodes whose record this build added to the store from the workspace outputs.
    stored: usize,
    /// Nodes whose outputs this build wrote (ran, restored, fetched).
    written: Vec<NodeIdx>,
    /// The remote cache, if any.
    remote: Option<&'a crate::remote::RemoteCache>,
    /// Why a read-only build stopped: a node it would have to run or restore.
    refused: Option<DagError>,
}

impl<'a> BuildDriver<'a> {
    /// The value of a key or key-material computation for node `n`; on an error (or an
    /// upstream node whose outputs are unknown, which would be an engine bug) `n` is recorded
    /// as failed with the reason and `None` is returned.
    fn or_fail<T>(&mut self, n: NodeIdx, r: Result<std::result::Result<T, NodeIdx>>) -> Option<T> {
        let message = match r {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(up)) => format!("internal: outputs of `{}` unknown", self.graph.nodes[up].id),
            Err(e) => e.to_string(),
        };
        self.fail(n, 0.0, NodeFailure::Key { message }, None);
        None
    }

    /// Node `n` failed.
    fn fail(&mut self, n: NodeIdx, seconds: f64, failure: NodeFailure, log: Option<&[u8]>) {
        self.failed[n] = true;
        self.first_failure.get_or_insert(n);
        self.outcomes[n] = Some(Some(failure.clone()));
        self.finished(n, NodeStatus::Failed, seconds, Some(failure), log);
    }

    /// The failed node that keeps `n` from running: a failed dependency, or the dependency of
    /// a dependency (skips are reported in no particular order, so this walks up the graph).
    fn blame(&self, n: NodeIdx) -> Option<NodeIdx> {
        let mut seen = vec![false; self.graph.nodes.len()];
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            for &d in &self.graph.deps[x] {
                if self.failed[d] {
                    return Some(d);
                }
                if !seen[d] {
                    seen[d] = true;
                    stack.push(d);
                }
            }
        }
        None
    }

    fn finished(
        &mut self,
        n: NodeIdx,
        status: NodeStatus,
        seconds: f64,
        failure: Option<NodeFailure>,
        log: Option<&[u8]>,
    ) {
        let node = &self.graph.nodes[n];
        match status {
            NodeStatus::Executed
            | NodeStatus::Cached
            | NodeStatus::Restored
            | NodeStatus::Remote => {
                self.outcomes[n] = Some(None);
            }
            NodeStatus::Failed | NodeStatus::Skipped => {}
        }
        if matches!(
            status,
            NodeStatus::Executed | NodeStatus::Restored | NodeStatus::Remote
        ) {
            self.written.push(n);
        }
        match status {
            NodeStatus::Executed => self.summary.executed += 1,
            NodeStatus::Cached | NodeStatus::Restored | NodeStatus::Remote => {
                self.summary.cached += 1
            }
            NodeStatus::Failed => {
                self.summary.failed += 1;
                self.summary
                    .failed_nodes
                    .push(self.graph.nodes[n].id.clone());
            }
            NodeStatus::Skipped => self.summary.skipped += 1,
        }
        let log_tail = log.filter(|l| !l.is_empty()).map(|l| {
            let s = String::from_utf8_lossy(&l[l.len().saturating_sub(4000)..]).into_owned();
            s
        });
        self.reporter.event(&Event::Finished {
            node: node.id.clone(),
            kind: node.kind.clone(),
            status,
            key: self.keys[n],
            why: self.reasons[n].clone(),
            seconds,
            error: failure.as_ref().map(|f| f.to_string()),
            failure,
            log_tail,
        });
        self.remote_warnings();
    }

    /// Report what the remote cache's workers had to warn about.
    fn remote_warnings(&mut self) {
        if let Some(remote) = self.remote {
            for message in remote.take_warnings() {
                self.reporter.event(&Event::Note { message });
            }
        }
    }

    /// Report each job whose state or id changed since the last tick (a queued job that
    /// starts, a lost one submitted again).
    fn job_states(&mut self) {
        let jobs = self.executor.jobs();
        for j in jobs {
            let seen = (j.job.clone(), j.state);
            if self.job_seen.get(&j.node) == Some(&seen) {
                continue;
            }
            self.job_seen.insert(j.node.clone(), seen);
            self.reporter.event(&Event::Job {
                node: j.node,
                engine: self.executor.name().to_string(),
                job: j.job,
                state: j.state,
                detail: j.detail,
            });
        }
    }

    /// Take every node the edited-files proof vouches for as the last build left it, its key
    /// and outputs that build's record, before the scheduler starts (what depends on them
    /// may start at once); their events are put off until jobs run ([`Driver::spare`]).
    fn take_vouched(&mut self) {
        let Some(proven) = self.proven else {
            return;
        };
        for &n in &self.graph.order {
            if !proven[n] || !self.plan.selected[n] {
                continue;
            }
            if let Some(st) = self.scanner.last_state(n) {
                self.keys[n] = Some(st.key);
                self.outputs[n] = Some(Cow::Borrowed(&st.outputs));
                self.unreported.push(n);
            }
        }
        // Reported in order: the list is taken from its end.
        self.unreported.reverse();
    }

    /// Report up to `at_most` of the nodes [`BuildDriver::take_vouched`] took.
    fn report_vouched(&mut self, at_most: usize) {
        for _ in 0..at_most {
            let Some(n) = self.unreported.pop() else {
                return;
            };
            self.finished(n, NodeStatus::Cached, 0.0, None, None);
        }
    }

    fn record(&mut self, n: NodeIdx, outputs: Cow<'a, [OutputRecord]>) {
        let Some(key) = self.keys[n] else {
            self.outputs[n] = Some(outputs);
            return;
        };
        let same = |st: &NodeState| st.key == key && st.outputs[..] == outputs[..];
        if self.scanner.last_state(n).is_some_and(same) {
            self.outputs[n] = Some(outputs);
            return;
        }
        let material = match self.materials[n].take() {
            Some(m) => Some(m),
            // Upstream outputs are known (the key was computed from them).
            None => self
                .scanner
                .material(n, &self.outputs)
                .ok()
                .and_then(Result::ok),
        };
        if let Some(material) = material {
            self.new_last.nodes.insert(
                self.graph.nodes[n].id.clone(),
                NodeState::new(key, &material, outputs.to_vec()),
            );
        }
        self.outputs[n] = Some(outputs);
    }

    /// Materialize the outputs that do not match from the store.
    fn restore(&mut self, outputs: &[OutputRecord]) -> std::result::Result<(), NodeFailure> {
        for o in outputs {
            if self
                .scanner
                .check_outputs(std::slice::from_ref(o))
                .is_some()
            {
                through_real_folders(self.root, &o.path)?;
                self.scanner.statcache.forget_replaced(&o.path);
                self.store
                    .restore(o, &self.root.join(&o.path), true)
                    .map_err(|e| NodeFailure::io(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// A node is up to date in the workspace; make sure this store has its result too (a
    /// `--store` that lacks it): put the workspace outputs in, after checking they still hash
    /// to what was recorded, and write the action record. `Err`: the node must re-run.
    fn ensure_recorded(
        &mut self,
        n: NodeIdx,
        key: &Digest,
        outputs: &[OutputRecord],
    ) -> std::result::Result<(), NodeFailure> {
        // A blob replaced by a directory, symlink or FIFO (or deleted) is stored again from the
        // workspace: one lstat per output, unless its folder is as the last full build left it.
        let blobs_here = outputs.iter().all(|o| {
            self.blob_folders
                .vouch(self.lock, self.root, self.store, &o.digest)
                || self.store.has_blob(&o.digest)
        });
        if blobs_here && (!self.verify_store || self.store.has_action(key)) {
            return Ok(());
        }
        let node = &self.graph.nodes[n];
        for o in outputs {
            let got = ingest(self.store, self.root, &o.path, o.dir)?;
            if got.digest != o.digest {
                return Err(NodeFailure::io(format!(
                    "output `{}` does not match the digest recorded for it",
                    o.path
                )));
            }
        }
        let rec = ActionRecord {
            node: node.id.clone(),
            kind: node.kind.clone(),
            outputs: outputs.to_vec(),
            duration_ms: 0,
            log: None,
            volatile: node.volatile || self.registry.get(&node.kind).is_some_and(|k| k.volatile()),
        };
        self.store
            .put_action(key, &rec)
            .map_err(|e| NodeFailure::io(e.to_string()))?;
        self.stored += 1;
        Ok(())
    }

    fn note_rerun(&mut self, n: NodeIdx, message: &str) {
        self.reporter.event(&Event::Note {
            message: format!(
                "node `{}`: {message}; re-running it",
                self.graph.nodes[n].id
            ),
        });
    }
}

/// The paths the engine made, so it may replace them: the recorded outputs of the last build,
/// outputs of failed runs, what the journal of a build that did not end normally noted. A
/// node's own recorded outputs are looked up first; the set of every recorded output (a node
/// renamed since, say) is only built when that does not answer.
#[derive(Clone, Copy)]
struct MadePaths<'a> {
    last: &'a LastBuild,
    journaled: &'a std::collections::BTreeSet<String>,
    all: &'a std::sync::OnceLock<std::collections::HashSet<Box<str>>>,
}

impl MadePaths<'_> {
    fn contains(&self, own: Option<&NodeState>, rel: &str) -> bool {
        own.is_some_and(|st| st.outputs.iter().any(|o| o.path == rel))
            || self.last.made.contains(rel)
            || self.journaled.contains(rel)
            || self
                .all
                .get_or_init(|| {
                    self.last
                        .nodes
                        .values()
                        .flat_map(|st| st.outputs.iter().map(|o| o.path.as_str().into()))
                        .collect()
                })
                .contains(rel)
    }
}

impl<'a> Driver<'a, JobOutput> for BuildDriver<'a> {
    fn start(&mut self, n: NodeIdx) -> Start<'a, JobOutput> {
        let key = self.scanner.key(n, &self.outputs);
        let Some(key) = self.or_fail(n, key) else {
            return Start::Done(false);
        };
        let (fresh, outs) =
            self.scanner
                .freshness_of_key(n, &key, self.plan.forced[n], &self.outputs);
        self.keys[n] = Some(key);
        // A build that cannot write the state serves only what is up to date.
        if let Freshness::Restore(_) = fresh {
            let node = &self.graph.nodes[n].id;
            let needs = format!("the outputs of node `{node}` (restored from the store)");
            if let Some(e) = self.lock.refuse(&needs) {
                self.refused.get_or_insert(e);
                return Start::Done(false);
            }
        }
        let reason = match fresh {
            Freshness::Fresh => {
                let outs = outs.unwrap_or_default();
                match self.ensure_recorded(n, &key, &outs) {
                    Ok(()) => {
                        self.record(n, outs);
                        self.finished(n, NodeStatus::Cached, 0.0, None, None);
                        return Start::Done(true);
                    }
                    Err(why) => {
                        self.note_rerun(n, &why.to_string());
                        DirtyReason::NoRecord
                    }
                }
            }
            Freshness::Restore(why) => {
                let why =
                    why.for_restore(self.failures_before.contains_key(&self.graph.nodes[n].id));
                let outs = outs.unwrap_or_default();
                let restored = self
                    .restore(&outs)
                    .and_then(|()| self.ensure_recorded(n, &key, &outs));
                match restored {
                    Ok(()) => {
                        self.reasons[n] = Some(why);
                        self.record(n, outs);
                        self.finished(n, NodeStatus::Restored, 0.0, None, None);
                        return Start::Done(true);
                    }
                    Err(why) => {
                        let message = why.to_string();
                        self.note_rerun(n, &message);
                        DirtyReason::StoreDamaged { message }
                    }
                }
            }
            // Never recorded but failed last time: say so.
            Freshness::Dirty(DirtyReason::NewNode) => {
                match self.failures_before.get(&self.graph.nodes[n].id) {
                    Some(f) => DirtyReason::FailedLastBuild { failure: f.clone() },
                    None => DirtyReason::NewNode,
                }
            }
            Freshness::Dirty(why) => why,
        };
        let node = &self.graph.nodes[n];
        if let Some(e) = self.lock.refuse(&format!(
            "the outputs of node `{}`, which must run ({reason})",
            node.id
        )) {
            self.refused.get_or_insert(e);
            return Start::Done(false);
        }
        self.reasons[n] = Some(reason.clone());
        self.reporter.event(&Event::Started {
            node: node.id.clone(),
            kind: node.kind.clone(),
            why: reason,
        });
        let Some(kind) = self.registry.get(&node.kind) else {
            let message = DagError::UnknownKind {
                node: node.id.clone(),
                kind: node.kind.clone(),
            }
            .to_string();
            self.fail(n, 0.0, NodeFailure::UnknownKind { message }, None);
            return Start::Done(false);
        };
        let material = self.scanner.material(n, &self.outputs);
        let Some(material) = self.or_fail(n, material) else {
            return Start::Done(false);
        };
        debug_assert_eq!(material.key(), key, "node `{}`", node.id);
        for o in &node.outputs {
            self.scanner.statcache.forget_replaced(&o.path);
        }
        self.materials[n] = Some(material.clone());
        let job = Job {
            graph: self.graph,
            n,
            kind,
            made: self.made,
            own: self.scanner.last_state(n),
            journal: self.journal,
            store: self.store,
            root: self.root,
            release_abs: self.release_abs,
            release_rel: &self.graph.release_dir,
            material,
            key,
            // A local miss asks the remote; `--rerun` does not.
            fetch: !self.plan.forced[n] && self.remote.is_some_and(|r| r.readable()),
            remote: self.remote,
            executor: self.executor,
        };
        Start::Run(Box::new(move || job.run()))
    }

    fn finish(&mut self, n: NodeIdx, result: std::result::Result<JobOutput, Panicked>) -> bool {
        match result {
            Ok(JobOutput {
                result: Ok(outs),
                seconds,
                remote,
                ..
            }) => {
                self.record(n, Cow::Owned(outs));
                if remote {
                    self.finished(n, NodeStatus::Remote, 0.0, None, None);
                } else {
                    self.finished(n, NodeStatus::Executed, seconds, None, None);
                }
                true
            }
            Ok(JobOutput {
                result: Err(e),
                log,
                seconds,
                ..
            }) => {
                // What it wrote is ours to replace next time.
                for o in &self.graph.nodes[n].outputs {
                    self.new_last.made.insert(o.path.clone());
                }
                self.fail(n, seconds, e, Some(&log));
                false
            }
            Err(Panicked(message)) => {
                self.fail(n, 0.0, NodeFailure::Panicked { message }, None);
                false
            }
        }
    }

    /// Stopped after a failure: a node that is up to date in the workspace is reported as
    /// cached (nothing is restored or run).
    fn settle(&mut self, n: NodeIdx) -> bool {
        if crate::interrupt::requested().is_some() {
            return false;
        }
        let Ok(Ok(key)) = self.scanner.key(n, &self.outputs) else {
            return false;
        };
        let (fresh, outs) =
            self.scanner
                .freshness_of_key(n, &key, self.plan.forced[n], &self.outputs);
        let Freshness::Fresh = fresh else {
            return false;
        };
        let outs = outs.unwrap_or_default();
        if self.ensure_recorded(n, &key, &outs).is_err() {
            return false;
        }
        self.keys[n] = Some(key);
        self.record(n, outs);
        self.finished(n, NodeStatus::Cached, 0.0, None, None);
        true
    }

    fn skip(&mut self, n: NodeIdx) {
        let failure = match (self.blame(n), self.first_failure) {
            // Ctrl-C or SIGTERM: what did not run was cancelled, whatever else failed.
            _ if crate::interrupt::requested().is_some() => NodeFailure::Cancelled {
                message: "not run: the build was interrupted".into(),
            },
            (Some(d), _) => NodeFailure::DependencyFailed {
                node: self.graph.nodes[d].id.clone(),
            },
            (None, Some(f)) => NodeFailure::StoppedAfterFailure {
                node: self.graph.nodes[f].id.clone(),
            },
            (None, None) => NodeFailure::Cancelled {
                message: "the build was stopped".into(),
            },
        };
        self.finished(n, NodeStatus::Skipped, 0.0, Some(failure), None);
    }

    fn spare(&mut self) -> bool {
        self.report_vouched(64);
        !self.unreported.is_empty()
    }

    fn tick(&mut self) {
        self.remote_warnings();
        self.job_states();
        self.reporter.tick();
    }

    fn stop(&mut self) -> bool {
        crate::interrupt::requested().is_some() || self.refused.is_some()
    }
}

/// One node run, owned by a worker.
struct Job<'a> {
    graph: &'a Graph,
    n: NodeIdx,
    kind: &'a dyn DynKind,
    made: MadePaths<'a>,
    /// The node's state in the last build.
    own: Option<&'a NodeState>,
    journal: &'a crate::state::Journal,
    store: &'a Store,
    root: &'a Path,
    release_abs: &'a Path,
    release_rel: &'a str,
    material: KeyMaterial,
    key: Digest,
    /// Ask the remote cache before running.
    fetch: bool,
    remote: Option<&'a crate::remote::RemoteCache>,
    /// Where the node runs.
    executor: &'a dyn crate::executor::Executor,
}

impl Job<'_> {
    /// Whether the engine may replace what is at an output path: nothing is there, or it made
    /// it (recorded, written by a failed run, or content the store holds); an empty directory
    /// too (made by `mkdir -p` for it).
    fn ours(&self, rel: &str, abs: &Path) -> bool {
        let Ok(md) = std::fs::symlink_metadata(abs) else {
            return true;
        };
        if self.made.contains(self.own, rel) {
            return true;
        }
        if md.is_file() {
            return crate::statcache::hash_file(abs).is_ok_and(|d| self.store.has_blob(&d));
        }
        md.is_dir() && std::fs::read_dir(abs).is_ok_and(|mut d| d.next().is_none())
    }

    fn run(self) -> JobOutput {
        let t0 = Instant::now();
        if let Some(outputs) = self.fetch_remote(false) {
            return JobOutput {
                result: Ok(outputs),
                log: Vec::new(),
                seconds: t0.elapsed().as_secs_f64(),
                remote: true,
            };
        }
        let mut log = Vec::new();
        // A fetch cut short by SIGINT/SIGTERM is no reason to run the node.
        let result = match crate::interrupt::requested() {
            Some(sig) if self.fetch => Err(NodeFailure::Cancelled {
                message: format!("interrupted by signal {sig}"),
            }),
            _ => self.execute(&mut log),
        };
        JobOutput {
            result,
            log,
            seconds: t0.elapsed().as_secs_f64(),
            remote: false,
        }
    }

    /// Run the node through the executor: here, or elsewhere with its result taken from the
    /// remote cache as a hit is.
    fn execute(&self, log: &mut Vec<u8>) -> std::result::Result<Vec<OutputRecord>, NodeFailure> {
        let node = &self.graph.nodes[self.n];
        let roles = input_roles(node, &self.material.inputs);
        let task = crate::executor::Task {
            node,
            key: self.key,
            material: &self.material,
            roles: &roles,
            root: self.root,
            store: self.store,
            volatile: node.volatile || self.kind.volatile(),
        };
        match self.executor.execute(&task, &mut || self.run_inner(log))? {
            crate::executor::Executed::Here(outputs) => Ok(outputs),
            crate::executor::Executed::InRemoteCache => {
                self.fetch_remote(true).ok_or_else(|| NodeFailure::RemoteLost {
                    message: format!(
                        "the {} job ended, but its result for node `{}` could not be taken from the remote cache{}",
                        self.executor.name(),
                        node.id,
                        self.remote
                            .map(|r| format!(" `{}`", r.shown_url()))
                            .unwrap_or_default()
                    ),
                })
            }
        }
    }

    /// A remote hit: its blobs are in the store (verified) and its record in the action log;
    /// materialize it like a local hit. `None`: run the node. `ran_elsewhere`: the executor
    /// just ran it (asked even on `--rerun`; not counted as restored).
    fn fetch_remote(&self, ran_elsewhere: bool) -> Option<Vec<OutputRecord>> {
        let remote = self.remote.filter(|_| self.fetch || ran_elsewhere)?;
        let node = &self.graph.nodes[self.n];
        // What is in the way must be ours to replace (else the run below refuses, saying why).
        if !node
            .outputs
            .iter()
            .all(|o| self.ours(&o.path, &self.root.join(&o.path)))
        {
            return None;
        }
        let declared: Vec<(&str, bool)> = node
            .outputs
            .iter()
            .map(|o| (o.path.as_str(), o.dir))
            .collect();
        if node
            .outputs
            .iter()
            .any(|o| through_real_folders(self.root, &o.path).is_err())
        {
            return None;
        }
        let rec = remote.fetch(self.store, &self.key, &declared)?;
        for o in &rec.outputs {
            if let Err(e) = self.store.restore(o, &self.root.join(&o.path), true) {
                // A hit that cannot be put in place is run instead; say so, a silent rerun
                // looks like a cache miss.
                remote.note_unusable(&node.id, &format!("restoring `{}`: {e}", o.path));
                return None;
            }
        }
        if !ran_elsewhere {
            remote.note_restored();
        }
        Some(rec.outputs)
    }

    fn run_inner(&self, log: &mut Vec<u8>) -> std::result::Result<Vec<OutputRecord>, NodeFailure> {
        let node = &self.graph.nodes[self.n];
        let t0 = Instant::now();
        // Stale outputs must not survive a run: a missing output is then really missing, and
        // nothing the stage writes can land in a file shared with the store.
        let mut out_paths = Vec::with_capacity(node.outputs.len());
        for o in &node.outputs {
            // A folder on the way that became a symlink since the graph was checked (another
            // node made it) would take the writes elsewhere.
            through_real_folders(self.root, &o.path)?;
            if !self.ours(&o.path, &self.root.join(&o.path)) {
                return Err(NodeFailure::OutputNotOurs {
                    path: o.path.clone(),
                });
            }
        }
        // Noted before anything is written, so a build killed mid-node knows its own.
        let paths: Vec<&str> = node.outputs.iter().map(|o| o.path.as_str()).collect();
        self.journal
            .note(&paths)
            .map_err(|e| NodeFailure::io(format!("cannot note the outputs it will write: {e}")))?;
        for o in &node.outputs {
            let abs = self.root.join(&o.path);
            crate::fsutil::remove_path(&abs).map_err(|e| NodeFailure::StaleOutput {
                path: o.path.clone(),
                message: e.to_string(),
            })?;
            if let Some(parent) = abs.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    NodeFailure::io(format!("cannot create `{}`: {e}", parent.display()))
                })?;
            }
            out_paths.push(abs);
        }
        let roles = input_roles(node, &self.material.inputs);
        let inputs = self
            .material
            .inputs
            .iter()
            .zip(roles)
            .map(|(i, role)| {
                let path = self.root.join(&i.path);
                StageInput {
                    dir: path.is_dir(),
                    role,
                    rel: i.path.clone(),
                    path,
                }
            })
            .collect();
        // Inputs are read-only: upstream outputs may be hard links to store blobs, and a source
        // changed by the node that reads it would give it a new key every build.
        let upstream: Vec<(&str, Vec<_>)> = node
            .inputs
            .iter()
            .filter_map(|i| match i {
                crate::graph::Input::Output { node: up, output } => {
                    let rel = self.graph.nodes[*up].outputs.get(*output)?.path.as_str();
                    Some((rel, fingerprint(&self.root.join(rel))))
                }
                crate::graph::Input::Source(rel) => {
                    Some((rel.as_str(), fingerprint(&self.root.join(rel))))
                }
                crate::graph::Input::Glob { .. } => None,
            })
            .collect();
        let before = fingerprint(self.release_abs);
        // To name what a run that misses an output wrote instead: the entries of the outputs'
        // folders changed since this moment. Read only on that failure: listing the folders
        // before every run costs a readdir of the whole folder per node, which grows with the
        // graph when its outputs share a folder.
        let started = std::time::SystemTime::now();
        let mut ctx = StageCtx {
            node: &node.id,
            workspace: self.root,
            inputs,
            outputs: out_paths,
            log,
        };
        let run = self.kind.run(node.params.value(), &mut ctx);
        let log_digest = if ctx.log.is_empty() {
            None
        } else {
            self.store.put_bytes(ctx.log).ok()
        };
        run.map_err(|e| {
            let message = crate::report::error_chain(&e);
            // A stage stopped by Ctrl-C or SIGTERM did not fail on its own.
            if crate::interrupt::requested().is_some() {
                NodeFailure::Cancelled { message }
            } else {
                NodeFailure::StageError { message }
            }
        })?;
        if let Some((rel, _)) = upstream
            .iter()
            .find(|(rel, fp)| fingerprint(&self.root.join(rel)) != *fp)
        {
            // The input may be the blob itself (a hard link; root ignores read-only modes):
            // drop the blob if it no longer matches, so nothing ever uses it.
            if let Some(i) = self.material.inputs.iter().find(|i| i.path == *rel) {
                self.store.drop_if_corrupt(&i.digest);
            }
            return Err(NodeFailure::InputChanged {
                path: rel.to_string(),
            });
        }
        let after = fingerprint(self.release_abs);
        if after != before {
            // Whatever it added goes at once; what it changed is rewritten by the next
            // successful build (the release check compares every file).
            let had: std::collections::HashSet<&PathBuf> = before.iter().map(|f| &f.0).collect();
            for (path, ..) in after.iter().rev().filter(|f| !had.contains(&f.0)) {
                let _ = crate::fsutil::remove_path(path);
            }
            return Err(NodeFailure::WroteRelease {
                dir: self.release_rel.to_string(),
            });
        }
        let mut outputs = Vec::with_capacity(node.outputs.len());
        for o in &node.outputs {
            match ingest(self.store, self.root, &o.path, o.dir) {
                Ok(rec) => outputs.push(rec),
                Err(NodeFailure::MissingOutput { path, .. }) => {
                    let strays = changed_entries(self.root, &output_folders(node), started)
                        .into_iter()
                        .filter(|p| !node.outputs.iter().any(|o| o.path == *p))
                        .collect();
                    return Err(NodeFailure::MissingOutput { path, strays });
                }
                Err(e) => return Err(e),
            }
        }
        let rec = ActionRecord {
            node: node.id.clone(),
            kind: node.kind.clone(),
            outputs: outputs.clone(),
            duration_ms: t0.elapsed().as_millis() as u64,
            log: log_digest,
            volatile: node.volatile || self.kind.volatile(),
        };
        self.store
            .put_action(&self.key, &rec)
            .map_err(|e| NodeFailure::io(e.to_string()))?;
        if let Some(remote) = self.remote {
            remote.upload(self.store, self.key, rec);
        }
        Ok(outputs)
    }
}

/// Per node, whether an edited-files proof vouches for it: the last build recorded it, no
/// edited file is one of its inputs (or lies in an input folder, or where a glob input looks),
/// and it depends on no node the proof does not vouch for.
fn proven_nodes(graph: &Graph, last: &LastBuild, edited: &crate::noop::Edited) -> Vec<bool> {
    use crate::graph::Input;
    let recorded = last.aligned(graph);
    let mut proven = vec![false; graph.nodes.len()];
    for &n in &graph.order {
        let untouched = graph.nodes[n].inputs.iter().all(|input| match input {
            Input::Source(rel) => !edited.touches(rel),
            Input::Glob { glob, .. } => !edited.touches(glob.literal_dir()),
            Input::Output { .. } => true,
        });
        proven[n] = untouched && recorded[n].is_some() && graph.deps[n].iter().all(|&d| proven[d]);
    }
    proven
}

/// The folders (workspace paths, "" for the root) that hold a node's outputs.
fn output_folders(node: &crate::graph::Node) -> Vec<&str> {
    let mut dirs: Vec<&str> = node
        .outputs
        .iter()
        .map(|o| o.path.rsplit_once('/').map_or("", |(parent, _)| parent))
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    dirs
}

/// The workspace paths of the entries of these folders whose inode changed at or after
/// `since` (made, written, renamed or linked there by the run; missing folders have none).
fn changed_entries(
    root: &Path,
    dirs: &[&str],
    since: std::time::SystemTime,
) -> std::collections::BTreeSet<String> {
    use std::os::unix::fs::MetadataExt;
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let mut out = std::collections::BTreeSet::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(root.join(d)) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            // File times come from the kernel's coarse clock, up to a tick (1-4 ms) behind.
            let ctime = md.ctime() as i128 * 1_000_000_000 + md.ctime_nsec() as i128;
            if ctime + 5_000_000 < since {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            out.insert(if d.is_empty() {
                name
            } else {
                format!("{d}/{name}")
            });
        }
    }
    out
}

/// A cheap fingerprint of a directory tree (paths, sizes, mtimes, inodes) to detect writes.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    if !dir.exists() {
        return Vec::new();
    }
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let md = e.metadata().ok()?;
            Some((
                e.into_path(),
                md.len(),
                md.mtime() * 1_000_000_000 + md.mtime_nsec(),
                md.ino(),
            ))
        })
        .collect()
}

/// The role of each of `material`'s inputs (empty: none). The key material lists the inputs in
/// declared order, one for a path or an output and one per match of a glob, so a walk along
/// the declarations finds each one's (not the paths: an output restored from another node's
/// record may carry that node's path).
fn input_roles(node: &crate::graph::Node, material: &[crate::key::KeyInput]) -> Vec<String> {
    let mut roles = Vec::with_capacity(material.len());
    if node.input_roles.iter().all(String::is_empty) {
        roles.resize(material.len(), String::new());
        return roles;
    }
    let mut decl = node.inputs.iter().zip(&node.input_roles).peekable();
    for m in material {
        // A glob takes the entries it matches, then gives way to the next declaration.
        while let Some((crate::graph::Input::Glob { glob, .. }, _)) = decl.peek() {
            if glob.matches(&m.path) {
                break;
            }
            decl.next();
        }
        match decl.peek() {
            Some((crate::graph::Input::Glob { .. }, role)) => roles.push(role.to_string()),
            Some((_, role)) => {
                roles.push(role.to_string());
                decl.next();
            }
            None => roles.push(String::new()),
        }
    }
    roles
}

#[cfg(test)]
mod tests {
    //! The engine with an in-process kind: no processes are spawned.

    use super::*;
    use crate::report::Collect;
    use crate::testutil::{cmd, spec};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Registered as `command`: writes the first 3 bytes of its concatenated inputs (so some
    /// input changes leave the output identical), or panics when the command says "panic".
    struct Head3(Arc<AtomicUsize>);

    impl crate::Kind for Head3 {
        const NAME: &'static str = "command";
        const VERSION: u32 = 1;
        type Params = crate::command::Params;
        fn run(&self, params: Self::Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            if params.run[2] == "panic" {
                panic!("stage exploded");
            }
            let mut all = Vec::new();
            for i in &ctx.inputs {
                all.extend(std::fs::read(&i.path)?);
            }
            all.truncate(3);
            for o in &ctx.outputs {
                std::fs::write(o, &all)?;
            }
            Ok(())
        }
    }

    /// A workspace in a temp folder, its graph, the registry and the count of runs.
    type Setup = (
        tempfile::TempDir,
        Workspace,
        Graph,
        Registry,
        Arc<AtomicUsize>,
    );

    fn setup(nodes: Vec<crate::NodeSpec>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.txt"), "abcdef").unwrap();
        let ws = Workspace::new(dir.path(), &dir.path().join(".skyctl")).unwrap();
        let graph = Graph::build(spec(nodes), &crate::Source::default(), &ws.root).unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut reg = Registry::default();
        reg.add(Head3(runs.clone()));
        (dir, ws, graph, reg, runs)
    }

    fn chain() -> Vec<crate::NodeSpec> {
        vec![
            cmd("a", "x", &["in.txt"], &["o/a"]),
            cmd("b", "x", &["o/a"], &["o/b"]),
        ]
    }

    fn opts() -> BuildOptions {
        BuildOptions {
            jobs: 2,
            ..BuildOptions::default()
        }
    }

    /// A chain whose output `o/b` is published as `b.txt` in `site/public`.
    fn setup_with_release(run_b: &str) -> Setup {
        let (dir, ws, _, reg, runs) = setup(Vec::new());
        let mut s = spec(vec![
            cmd("a", "x", &["in.txt"], &["o/a"]),
            cmd("b", run_b, &["o/a"], &["o/b"]),
        ]);
        s.release.push(crate::graph::ReleaseSpec {
            to: "b.txt".into(),
            from: "o/b".into(),
            span: 0..0,
        });
        let graph = Graph::build(s, &crate::Source::default(), &ws.root).unwrap();
        (dir, ws, graph, reg, runs)
    }

    fn prepare<'g>(
        ws: &'g Workspace,
        g: &'g Graph,
        reg: &'g Registry,
        opts: &'g BuildOptions,
    ) -> Result<(BuildSession<'g>, crate::statcache::StatCache)> {
        let state = Preloaded::load(&ws.state);
        BuildSession::prepare(ws, g, reg, opts, &mut Collect::default(), state)
    }

    #[test]
    fn prepare_sweeps_what_a_killed_build_left_and_checks_the_release_folder() {
        let (dir, ws, g, reg, _) = setup_with_release("x");
        let opts = opts();
        std::fs::create_dir_all(dir.path().join("o")).unwrap();
        let temp = dir.path().join(format!("o/{}left", sky_fs::TEMP_PREFIX));
        std::fs::write(&temp, "partial").unwrap();
        let mine = dir.path().join("o/mine.txt");
        std::fs::write(&mine, "kept").unwrap();
        let (session, _) = prepare(&ws, &g, &reg, &opts).unwrap();
        assert!(!temp.exists());
        assert!(mine.exists());
        assert!(session.plan.full && session.verify_store);
        assert_eq!(session.temp_dirs, ["o", "site"]);
        drop(session);

        // A release folder the engine did not write is refused before anything runs.
        std::fs::create_dir_all(dir.path().join("site/public")).unwrap();
        std::fs::write(dir.path().join("site/public/index.html"), "theirs").unwrap();
        let Err(err) = prepare(&ws, &g, &reg, &opts) else {
            panic!("prepared over a foreign release folder");
        };
        assert!(
            err.to_string().contains("release_dir `site/public`"),
            "{err}"
        );
        assert!(!dir.path().join("o/a").exists());
    }

    #[test]
    fn run_runs_the_nodes_and_records_nothing_but_failures() {
        let (dir, ws, g, reg, runs) = setup_with_release("x");
        let opts = opts();
        let (session, statcache) = prepare(&ws, &g, &reg, &opts).unwrap();
        let mut events = Collect::default();
        let ran = session.run(statcache, &mut events).unwrap();
        assert_eq!((ran.summary.executed, ran.summary.failed), (2, 0));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert!(ran.outputs.iter().all(Option::is_some));
        assert_eq!(ran.keys.iter().flatten().count(), 2);
        assert_eq!(ran.delta.nodes.len(), 2);
        assert_eq!(std::fs::read(dir.path().join("o/b")).unwrap(), b"abc");
        // Neither the release tree nor the workspace record is written yet.
        assert!(!dir.path().join("site/public").exists());
        assert!(LastBuild::load(&ws.state).nodes.is_empty());
        assert!(crate::state::load_failures(&ws.state).is_empty());
    }

    #[test]
    fn release_publishes_only_when_every_node_it_needs_succeeded() {
        let (dir, ws, g, reg, _) = setup_with_release("x");
        let opts = opts();
        let (session, statcache) = prepare(&ws, &g, &reg, &opts).unwrap();
        let mut events = Collect::default();
        let released = session
            .release(session.run(statcache, &mut events).unwrap())
            .unwrap();
        let r = released.summary.release.as_ref().unwrap();
        assert!(r.published && r.blocked_by.is_empty(), "{r:?}");
        assert_eq!(released.release_files.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            std::fs::read(dir.path().join("site/public/b.txt")).unwrap(),
            b"abc"
        );
        assert_eq!(released.keys.len(), 2);
        drop(session);

        // `b` panics: the release it feeds is blocked, and the old tree stays.
        let (_dir2, ws2, g2, reg2, _) = setup_with_release("panic");
        let (session, statcache) = prepare(&ws2, &g2, &reg2, &opts).unwrap();
        let released = session
            .release(session.run(statcache, &mut events).unwrap())
            .unwrap();
        let r = released.summary.release.as_ref().unwrap();
        assert!(!r.published, "{r:?}");
        assert_eq!(r.blocked_by, ["b"]);
        assert!(released.release_files.is_none());
        assert!(!ws2.root.join("site/public").exists());
    }

    #[test]
    fn record_writes_the_state_the_next_build_starts_from() {
        let (dir, ws, g, reg, runs) = setup_with_release("x");
        let opts = opts();
        let (session, statcache) = prepare(&ws, &g, &reg, &opts).unwrap();
        let mut events = Collect::default();
        let released = session
            .release(session.run(statcache, &mut events).unwrap())
            .unwrap();
        // The run noted the outputs before writing them; the record clears the note.
        assert!(ws.state.journal().exists());
        let summary = session.record(released, &mut events).unwrap();
        assert_eq!(summary.executed, 2);
        let last = LastBuild::load(&ws.state);
        assert_eq!(last.nodes.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(last.release_dir.as_deref(), Some("site/public"));
        assert!(last.store.is_some());
        assert!(!ws.state.journal().exists());
        // The locks went with the session: a whole build runs, and finds nothing to do.
        let s = build(&ws, &g, &reg, &opts, &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (0, 2));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert!(dir.path().join("site/public/b.txt").exists());
    }

    #[test]
    fn noop_and_early_cutoff_without_processes() {
        let (dir, ws, g, reg, runs) = setup(chain());
        let s = build(&ws, &g, &reg, &opts(), &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (2, 0));
        let s = build(&ws, &g, &reg, &opts(), &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (0, 2));
        // Same first three bytes: `a` re-runs, `b` is cut off.
        std::fs::write(dir.path().join("in.txt"), "abcXYZ").unwrap();
        let mut events = Collect::default();
        let s = build(&ws, &g, &reg, &opts(), &mut events).unwrap();
        assert_eq!((s.executed, s.cached), (1, 1));
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let why_a = events.0.iter().find_map(|e| match e {
            Event::Started { node, why, .. } if node == "a" => Some(why.clone()),
            _ => None,
        });
        assert_eq!(
            why_a,
            Some(DirtyReason::InputChanged {
                path: "in.txt".into()
            })
        );
    }

    /// Build with a no-op proof under `key` until the proof holds (the first builds may leave
    /// files too fresh for their stat to vouch for them).
    fn build_until_proved(ws: &Workspace, g: &Graph, reg: &Registry, key: Digest) {
        let o = BuildOptions {
            noop_proof: Some(key),
            ..opts()
        };
        for _ in 0..4 {
            build(ws, g, reg, &o, &mut Collect::default()).unwrap();
            if crate::noop::check_noop(ws, &key).is_ok() {
                return;
            }
            // Past the stat cache's racy window.
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
        panic!("the proof never held");
    }

    /// The edited-files proof of a build of `g` under `key` that held until `in.txt` was
    /// edited (to `content`), with the options that take it.
    fn edited_after(
        ws: &Workspace,
        g: &Graph,
        reg: &Registry,
        key: Digest,
        content: &str,
    ) -> BuildOptions {
        build_until_proved(ws, g, reg, key);
        std::fs::write(ws.root.join("in.txt"), content).unwrap();
        let with_edited = edited_now(ws, key);
        let edited = with_edited.edited.as_deref().unwrap();
        assert!(edited.vouches_for_outputs(g));
        with_edited
    }

    /// The options of a build that takes the edited-files proof of `key` now, after an edit
    /// of `in.txt` only.
    fn edited_now(ws: &Workspace, key: Digest) -> BuildOptions {
        let Err(Some(edited)) = crate::noop::check_noop(ws, &key) else {
            panic!("an edited source is not an edited-files proof");
        };
        assert_eq!(edited.paths(), ["in.txt"]);
        BuildOptions {
            noop_proof: Some(key),
            edited: Some(Arc::new(edited)),
            ..opts()
        }
    }

    /// The chain, and `c` reading `in2.txt`, built under `key` until its no-op proof holds.
    fn proved_chain_and_c(key: Digest) -> Setup {
        let mut nodes = chain();
        nodes.push(cmd("c", "x", &["in2.txt"], &["o/c"]));
        let (dir, ws, g, reg, runs) = setup(nodes);
        std::fs::write(dir.path().join("in2.txt"), "123456").unwrap();
        build_until_proved(&ws, &g, &reg, key);
        (dir, ws, g, reg, runs)
    }

    #[test]
    fn an_edited_files_proof_vouches_only_while_nothing_else_changed_since() {
        let mut nodes = chain();
        nodes.push(cmd("c", "x", &["in2.txt"], &["o/c"]));
        nodes.push(cmd("d", "x", &["o/c"], &["o/d"]));
        let (dir, ws, g, reg, runs) = setup(nodes);
        std::fs::write(dir.path().join("in2.txt"), "123456").unwrap();
        let key = Digest::of(b"the front end's key");
        let order: Vec<&str> = g.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        // Standing: `c` and `d` are vouched for, `a` and `b` (which reads `a`'s output) not.
        let with_edited = edited_after(&ws, &g, &reg, key, "xyzdef");
        let (session, _) = prepare(&ws, &g, &reg, &with_edited).unwrap();
        assert_eq!(session.proven, Some(vec![false, false, true, true]));
        drop(session);
        // Under another key (another graph) it vouches for nothing.
        let with_edited = edited_after(&ws, &g, &reg, key, "ghidef");
        let other = BuildOptions {
            noop_proof: Some(Digest::of(b"another key")),
            ..with_edited.clone()
        };
        let (session, _) = prepare(&ws, &g, &reg, &other).unwrap();
        assert_eq!(session.proven, None);
        drop(session);
        // Nor once a blob was removed behind the build's back (its folder changed since the
        // proof was checked): the build looks at every node, and stores the blob again.
        let with_edited = edited_after(&ws, &g, &reg, key, "jkldef");
        let c = Digest::of(&std::fs::read(dir.path().join("o/c")).unwrap());
        let blob = ws.store().unwrap().blob_path(&c);
        std::fs::remove_file(&blob).unwrap();
        let (session, _) = prepare(&ws, &g, &reg, &with_edited).unwrap();
        assert_eq!(session.proven, None);
        drop(session);
        build(&ws, &g, &reg, &with_edited, &mut Collect::default()).unwrap();
        assert!(
            std::fs::symlink_metadata(&blob).is_ok(),
            "the blob is stored again"
        );
        // Nor once another build ran (it wrote the lock file) and a file the proof vouched
        // for changed: the build must look at everything again and see it. (Each edit is new
        // content: one the store has a result for is restored, not run.)
        let with_edited = edited_after(&ws, &g, &reg, key, "mnodef");
        let runs_before = runs.load(Ordering::SeqCst);
        let s = build(&ws, &g, &reg, &opts(), &mut Collect::default()).unwrap();
        assert_eq!(s.executed, 2);
        std::fs::write(dir.path().join("in2.txt"), "654321").unwrap();
        let s = build(&ws, &g, &reg, &with_edited, &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (2, 2));
        assert_eq!(runs.load(Ordering::SeqCst), runs_before + 4);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("o/d")).unwrap(),
            "654"
        );
    }

    #[test]
    fn a_proof_holds_the_blobs_no_recorded_folder_vouches_for() {
        let (dir, ws, g, reg, _) = setup(chain());
        let key = Digest::of(b"the front end's key");
        build_until_proved(&ws, &g, &reg, key);
        // A new output: its blob lands in a folder changed just now, within the racy window,
        // which the clean end does not record settled. The proof holds the blob itself.
        std::fs::write(dir.path().join("in.txt"), "pqrdef").unwrap();
        let o = BuildOptions {
            noop_proof: Some(key),
            ..opts()
        };
        let s = build(&ws, &g, &reg, &o, &mut Collect::default()).unwrap();
        assert_eq!(s.executed, 2);
        assert!(crate::noop::check_noop(&ws, &key).is_ok());
        let a = Digest::of(&std::fs::read(dir.path().join("o/a")).unwrap());
        let blob = ws.store().unwrap().blob_path(&a);
        std::fs::remove_file(&blob).unwrap();
        assert!(matches!(crate::noop::check_noop(&ws, &key), Err(None)));
        // The build that looks stores it again.
        let s = build(&ws, &g, &reg, &o, &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (0, 2));
        assert!(
            std::fs::symlink_metadata(&blob).is_ok(),
            "the blob is stored again"
        );
    }

    #[test]
    fn an_edited_files_build_stamps_the_blob_folders_whose_blobs_it_looked_at() {
        let key = Digest::of(b"the front end's key");
        let (dir, ws, g, reg, _) = proved_chain_and_c(key);
        // `c`'s new blob lands in a folder this build changes, possibly within the racy
        // window at its end: then the folder is not recorded settled.
        std::fs::write(dir.path().join("in2.txt"), "789456").unwrap();
        let o = BuildOptions {
            noop_proof: Some(key),
            ..opts()
        };
        build(&ws, &g, &reg, &o, &mut Collect::default()).unwrap();
        let store = ws.store().unwrap();
        let folder = |content: &[u8]| BlobFolders::folder(&store, &Digest::of(content));
        assert_ne!(folder(b"789"), folder(b"stu"), "choose other contents");
        std::thread::sleep(std::time::Duration::from_millis(60));
        // An edit `c` does not read: the build looks at `c`'s blob, vouched for by no stamp,
        // and stamps its folder at the end (it is out of the racy window by then).
        std::fs::write(dir.path().join("in.txt"), "stuvwx").unwrap();
        let with_edited = edited_now(&ws, key);
        let (session, statcache) = prepare(&ws, &g, &reg, &with_edited).unwrap();
        assert_eq!(session.proven, Some(vec![false, false, true]));
        let mut events = Collect::default();
        let ran = session.run(statcache, &mut events).unwrap();
        let released = session.release(ran).unwrap();
        let s = session.record(released, &mut events).unwrap();
        assert_eq!((s.executed, s.cached), (2, 1));
        let lock = ws.try_lock_shared().unwrap();
        assert!(lock.settled_stamp(&folder(b"789")).is_some());
    }

    #[test]
    fn an_edited_files_build_leaves_a_proof_that_covers_what_it_did_not_look_at() {
        let key = Digest::of(b"the front end's key");
        let (dir, ws, g, reg, _) = proved_chain_and_c(key);
        std::fs::write(dir.path().join("in.txt"), "xyzdef").unwrap();
        let with_edited = edited_now(&ws, key);
        let s = build(&ws, &g, &reg, &with_edited, &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (2, 1));
        // The proof it left holds (files too fresh to vouch for by their stat are hashed
        // again)...
        assert!(crate::noop::check_noop(&ws, &key).is_ok());
        // ... and still covers `c`, which that build did not look at: its source and output.
        std::fs::write(dir.path().join("in2.txt"), "654321").unwrap();
        let Err(Some(edited)) = crate::noop::check_noop(&ws, &key) else {
            panic!("a carried source's edit is not seen");
        };
        assert_eq!(edited.paths(), ["in2.txt"]);
        std::fs::write(dir.path().join("in2.txt"), "123456").unwrap();
        std::fs::remove_file(dir.path().join("o/c")).unwrap();
        assert!(
            matches!(crate::noop::check_noop(&ws, &key), Err(None)),
            "a carried output's removal is not seen"
        );
    }

    #[test]
    fn outputs_checked_with_stats_taken_ahead_are_still_checked() {
        // Enough outputs for the stats to be taken on another thread.
        let n = PREFETCH_MIN + 50;
        let mut nodes = vec![cmd("n0", "x", &["in.txt"], &["o/0"])];
        for i in 1..n {
            let (input, output) = (format!("o/{}", i - 1), format!("o/{i}"));
            nodes.push(cmd(
                &format!("n{i}"),
                "x",
                &[input.as_str()],
                &[output.as_str()],
            ));
        }
        let (dir, ws, g, reg, runs) = setup(nodes);
        let s = build(&ws, &g, &reg, &opts(), &mut Collect::default()).unwrap();
        assert_eq!(s.executed, n);
        let s = build(&ws, &g, &reg, &opts(), &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (0, n));
        // An output replaced (not through its hard link) is restored, not trusted.
        let out = dir.path().join("o/200");
        std::fs::remove_file(&out).unwrap();
        std::fs::write(&out, "zzz").unwrap();
        let mut events = Collect::default();
        let s = build(&ws, &g, &reg, &opts(), &mut events).unwrap();
        assert_eq!((s.executed, s.cached), (0, n));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "abc");
        assert!(events.0.iter().any(|e| matches!(e,
            Event::Finished { node, status: NodeStatus::Restored, .. } if node == "n200")));
        // A changed input runs the first node; the others are cut off (same 3 bytes).
        std::fs::write(dir.path().join("in.txt"), "abcdefg").unwrap();
        let s = build(&ws, &g, &reg, &opts(), &mut Collect::default()).unwrap();
        assert_eq!((s.executed, s.cached), (1, n - 1));
        assert_eq!(runs.load(Ordering::SeqCst), n + 1);
    }

    #[test]
    fn a_panicking_stage_fails_its_node_and_the_build_ends() {
        let (_dir, ws, g, reg, _) = setup(vec![cmd("p", "panic", &[], &["o/p"])]);
        let mut events = Collect::default();
        let s = build(&ws, &g, &reg, &opts(), &mut events).unwrap();
        assert_eq!(s.failed, 1);
        let err = events.0.iter().find_map(|e| match e {
            Event::Finished {
                error: Some(err), ..
            } => Some(err.clone()),
            _ => None,
        });
        assert!(err
            .unwrap_or_default()
            .contains("stage panicked: stage exploded"));
        let failure = events.0.iter().find_map(|e| match e {
            Event::Finished {
                failure: Some(f), ..
            } => Some(f.clone()),
            _ => None,
        });
        assert!(
            matches!(&failure, Some(NodeFailure::Panicked { message }) if message.contains("stage exploded")),
            "{failure:?}"
        );
        // Kept for status and explain until the node succeeds.
        let kept = crate::state::load_failures(&ws.state);
        assert_eq!(kept.get("p").map(NodeFailure::kind), Some("panicked"));
    }

    #[test]
    fn unknown_kind_is_an_error_before_running() {
        let (_dir, ws, g, _, _) = setup(chain());
        let e = build(
            &ws,
            &g,
            &Registry::default(),
            &opts(),
            &mut Collect::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "node `a`: stage kind `command` is not available in this build"
        );
    }

    /// `opts()` with a remote cache over `fake`.
    fn with_remote(fake: &Arc<crate::remote::MemoryRemote>, read_only: bool) -> BuildOptions {
        let settings = crate::remote::RemoteSettings {
            shown_url: "mem://cache".into(),
            read_only,
            signer: None,
        };
        BuildOptions {
            remote: Some(crate::remote::RemoteCache::new(fake.clone(), settings)),
            ..opts()
        }
    }

    fn statuses(events: &Collect) -> Vec<(String, NodeStatus)> {
        events
            .0
            .iter()
            .filter_map(|e| match e {
                Event::Finished { node, status, .. } => Some((node.clone(), *status)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn remote_miss_runs_and_uploads_then_another_clone_restores_without_running() {
        let fake = Arc::new(crate::remote::MemoryRemote::new());
        let (_dir, ws, g, reg, runs) = setup(chain());
        let s = build(
            &ws,
            &g,
            &reg,
            &with_remote(&fake, false),
            &mut Collect::default(),
        )
        .unwrap();
        assert_eq!((s.executed, s.failed), (2, 0));
        let r = s.remote.unwrap();
        // Two misses (GET ac/ each), then per node: HEAD + PUT of its blob and its log, PUT ac/.
        assert_eq!((r.restored, r.uploaded, r.warnings), (0, 2, 0));
        let ac: Vec<String> = fake
            .paths()
            .into_iter()
            .filter(|p| p.starts_with("ac/"))
            .collect();
        assert_eq!(ac.len(), 2, "{:?}", fake.paths());
        assert!(fake
            .paths()
            .contains(&format!("cas/{}", Digest::of(b"abc").hex())));

        // A fresh clone: both nodes come from the remote, nothing runs.
        let (dir2, ws2, g2, reg2, runs2) = setup(chain());
        let mut events = Collect::default();
        let s = build(&ws2, &g2, &reg2, &with_remote(&fake, false), &mut events).unwrap();
        assert_eq!((s.executed, s.cached, s.failed), (0, 2, 0));
        assert_eq!(s.remote.unwrap().restored, 2);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(runs2.load(Ordering::SeqCst), 0);
        assert_eq!(
            statuses(&events),
            [
                ("a".into(), NodeStatus::Remote),
                ("b".into(), NodeStatus::Remote)
            ]
        );
        assert_eq!(
            std::fs::read_to_string(dir2.path().join("o/b")).unwrap(),
            "abc"
        );

        // A no-op build sends no request at all.
        let before = fake.calls().len();
        let s = build(
            &ws2,
            &g2,
            &reg2,
            &with_remote(&fake, false),
            &mut Collect::default(),
        )
        .unwrap();
        assert_eq!((s.executed, s.cached), (0, 2));
        assert_eq!(fake.calls().len(), before);
    }

    #[test]
    fn a_read_only_remote_is_asked_but_never_written() {
        let fake = Arc::new(crate::remote::MemoryRemote::new());
        let (_dir, ws, g, reg, _) = setup(chain());
        let s = build(
            &ws,
            &g,
            &reg,
            &with_remote(&fake, true),
            &mut Collect::default(),
        )
        .unwrap();
        assert_eq!(s.executed, 2);
        assert_eq!(s.remote.unwrap().uploaded, 0);
        let calls = fake.calls();
        assert!(calls.iter().all(|c| c.starts_with("GET ac/")), "{calls:?}");
        assert_eq!(calls.len(), 2);
        assert!(fake.paths().is_empty());
    }

    #[test]
    fn a_failing_remote_is_one_warning_and_the_build_succeeds() {
        let fake = Arc::new(crate::remote::MemoryRemote::new());
        fake.fail_with(crate::remote::Failure::Status(500));
        let (_dir, ws, g, reg, runs) = setup(chain());
        let mut events = Collect::default();
        let s = build(&ws, &g, &reg, &with_remote(&fake, false), &mut events).unwrap();
        assert_eq!((s.executed, s.failed), (2, 0));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let r = s.remote.unwrap();
        // The first read fails: reads and writes are off for the rest of the build.
        assert_eq!((r.requests, r.warnings, r.uploaded), (1, 1, 0));
        assert_eq!(fake.calls().len(), 1);
        let notes: Vec<&String> = events
            .0
            .iter()
            .filter_map(|e| match e {
                Event::Note { message } if message.contains("remote cache") => Some(message),
                _ => None,
            })
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("warning: remote cache mem://cache: GET ac/"),
            "{notes:?}"
        );
        assert!(
            notes[0].ends_with(
                ": answered 500 Internal Server Error; building without the remote cache"
            ),
            "{notes:?}"
        );
    }

    #[test]
    fn a_refused_upload_is_one_warning_and_reads_go_on() {
        let fake = Arc::new(crate::remote::MemoryRemote::new());
        fake.refuse_writes();
        let (_dir, ws, g, reg, _) = setup(chain());
        let mut events = Collect::default();
        let s = build(&ws, &g, &reg, &with_remote(&fake, false), &mut events).unwrap();
        assert_eq!((s.executed, s.failed), (2, 0));
        let r = s.remote.unwrap();
        assert_eq!((r.uploaded, r.warnings), (0, 1));
        assert!(fake.paths().is_empty());
        assert!(events.0.iter().any(|e| matches!(e, Event::Note { message }
            if message.contains(": answered 403 Forbidden; not uploading to it for the rest of this build"))));
    }

    #[test]
    fn a_corrupt_remote_blob_is_a_warning_and_a_miss_and_is_uploaded_again() {
        let fake = Arc::new(crate::remote::MemoryRemote::new());
        let (_dir, ws, g, reg, _) = setup(vec![cmd("a", "x", &["in.txt"], &["o/a"])]);
        build(
            &ws,
            &g,
            &reg,
            &with_remote(&fake, false),
            &mut Collect::default(),
        )
        .unwrap();
        let blob = format!("cas/{}", Digest::of(b"abc").hex());
        // Same size, other bytes: only the digest check can tell.
        fake.insert(&blob, b"xyz".to_vec());
        let (_dir2, ws2, g2, reg2, runs2) = setup(vec![cmd("a", "x", &["in.txt"], &["o/a"])]);
        let mut events = Collect::default();
        let s = build(&ws2, &g2, &reg2, &with_remote(&fake, false), &mut events).unwrap();
        assert_eq!((s.executed, s.failed), (1, 0));
        assert_eq!(runs2.load(Ordering::SeqCst), 1);
        assert!(events.0.iter().any(|e| matches!(e, Event::Note { message }
            if message.contains(&format!("{blob}: content does not match its digest")))));
        // The node ran here, and its good blob replaced the bad one.
        assert_eq!(fake.get(&blob).unwrap(), b"abc");
    }
}
