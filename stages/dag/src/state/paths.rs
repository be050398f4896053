//! Where the workspace's own state files are.

use std::path::{Path, PathBuf};

/// Paths of the workspace's own state.
#[derive(Debug, Clone)]
pub struct StatePaths {
    /// `.skyctl/state-v1`.
    pub dir: PathBuf,
}

impl StatePaths {
    /// State under `root/.skyctl/state-v1`.
    pub fn new(root: &Path) -> StatePaths {
        StatePaths {
            dir: root.join(".skyctl").join("state-v1"),
        }
    }
    /// The stat cache file.
    pub fn statcache(&self) -> PathBuf {
        self.dir.join("statcache")
    }
    /// The last build record.
    pub fn last_build(&self) -> PathBuf {
        self.dir.join("last-build.bin")
    }
    /// Changes to the last build record appended since it was written ([`super::LastBuild`]).
    pub fn last_build_log(&self) -> PathBuf {
        self.dir.join("last-build.log")
    }
    /// The key materials of the last build record ([`super::LastBuild`]).
    pub fn materials(&self) -> PathBuf {
        self.dir.join("materials.log")
    }
    /// The compiled graph of the last manifest built (a front end's cache,
    /// [`crate::compiled`]).
    pub fn compiled_graph(&self) -> PathBuf {
        self.dir.join("graph.bin")
    }
    /// The workspace lock file.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    /// `.skyctl/state-v1/children.log`: the process groups of running command nodes.
    pub fn children(&self) -> PathBuf {
        self.dir.join("children.log")
    }
    /// `.skyctl/state-v1/failures.json`: each node's failure in the last build that ran it.
    pub fn failures(&self) -> PathBuf {
        self.dir.join("failures.json")
    }
    /// `.skyctl/state-v1/remotes`: the remote caches (shown URLs, one a line) that results of
    /// this workspace went to or came from: a front end's note, read for its hints.
    pub fn remotes(&self) -> PathBuf {
        self.dir.join("remotes")
    }
    /// `.skyctl/state-v1/outputs.log`: the outputs of nodes about to run ([`super::Journal`]).
    pub fn journal(&self) -> PathBuf {
        self.dir.join("outputs.log")
    }
    /// `.skyctl/state-v1/noop-proof`: what the last clean full build looked at
    /// ([`crate::noop`]).
    pub fn noop_proof(&self) -> PathBuf {
        self.dir.join("noop-proof")
    }
}
