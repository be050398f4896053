//! The engine's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the engine before or around running nodes.
///
/// A node that runs and fails is not an `DagError`: it is a node outcome reported through the
/// [`crate::report::Reporter`], and the build ends with exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum DagError {
    /// A problem in the declaration file, located by file, line and column (1-based).
    #[error("{file}:{line}:{col}: {message}")]
    Located {
        /// The declaration file as given.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A problem in the declaration file that has no single location.
    #[error("{file}: {message}")]
    Unlocated {
        /// The declaration file as given.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A file-system operation failed.
    #[error("{action} `{path}`: {source}")]
    Io {
        /// What we were doing ("read", "write", "rename", ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A node uses a stage kind that this build of skyctl does not have.
    #[error("node `{node}`: stage kind `{kind}` is not available in this build")]
    UnknownKind {
        /// The node id.
        node: String,
        /// The kind name.
        kind: String,
    },
    /// A node's parameters do not fit its kind's `Params`.
    #[error("node `{node}`: bad parameters: {message}")]
    Params {
        /// The node id.
        node: String,
        /// What serde said.
        message: String,
    },
    /// A target named on the command line matches no node, group or kind.
    #[error("no node, {group} or kind named `{name}`{hint}")]
    UnknownTarget {
        /// What the front end calls a node group ("model").
        group: String,
        /// The name as given.
        name: String,
        /// " (did you mean `x`?)" or empty.
        hint: String,
    },
    /// A skyctl run by a node of a build asked for a lock that build holds: waiting would
    /// never end.
    #[error("{what} `{}` is locked by the build this command runs inside (it was started by a node of that build); a node cannot build, clean, verify or collect the workspace or store it runs in: run this command outside the build", path.display())]
    InsideItsBuild {
        /// "workspace" or "store".
        what: &'static str,
        /// The lock's folder.
        path: PathBuf,
    },
    /// A build that cannot write the workspace state (see
    /// [`crate::workspace::WorkspaceLock`]) would have to write.
    #[error("the state at `{}` is read-only for this user (owned by {owner}); the build needs to write {needs}: run it as the owner of the workspace (a build that only serves what is built, a no-op build or `verify`, works read-only)", path.display())]
    ReadOnlyState {
        /// The folder this user cannot write.
        path: PathBuf,
        /// Its owner, in words.
        owner: String,
        /// What the build would write.
        needs: String,
    },
    /// The content store is damaged in a way the engine cannot repair by re-running a node.
    #[error("store `{path}`: {message}")]
    Store {
        /// The offending store path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A declared input leads out of the workspace through a symlink.
    #[error("{location}node `{node}`: input `{path}` leads out of the workspace through a symlink (to `{target}`); inputs must stay inside it")]
    InputOutside {
        /// `FILE:LINE:COL: ` of the declaration, or empty.
        location: String,
        /// The node id.
        node: String,
        /// The workspace-relative input path.
        path: String,
        /// Where it leads.
        target: PathBuf,
    },
    /// An input that cannot be hashed as it is: a special file, a name that is not UTF-8,
    /// a folder that cannot be listed, or a glob that matches nothing.
    #[error("{location}node `{node}`: input `{path}` {message}")]
    BadInput {
        /// `FILE:LINE:COL: ` of the declaration, or empty.
        location: String,
        /// The node id.
        node: String,
        /// The input as declared (a path or a glob).
        path: String,
        /// What is wrong with it, and what to do.
        message: String,
    },
    /// An input file or directory that a node declares does not exist.
    #[error("{location}node `{node}`: input `{path}` does not exist")]
    MissingInput {
        /// `FILE:LINE:COL: ` of the declaration, or empty.
        location: String,
        /// The node id.
        node: String,
        /// The workspace-relative input path.
        path: String,
    },
}

impl DagError {
    /// Shorthand for [`DagError::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DagError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Result alias for the engine.
pub type Result<T, E = DagError> = std::result::Result<T, E>;
