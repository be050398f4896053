//! Progress as events. The engine emits [`Event`]s to a [`Reporter`]; the CLI decides how they
//! look (a TTY bar, plain lines, JSON lines), and tests collect them.

use serde::Serialize;

use crate::failure::NodeFailure;
use crate::key::Digest;
use crate::scan::DirtyReason;

/// How a node ended in one build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// It ran.
    Executed,
    /// Its result was already in the workspace.
    Cached,
    /// Its result was copied out of the store.
    Restored,
    /// Its result was downloaded from the remote cache.
    Remote,
    /// It ran and failed (or its outputs were not as declared).
    Failed,
    /// It did not run (a dependency failed, or the build stopped).
    Skipped,
}

/// Where a node's job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for resources.
    Queued,
    /// Started on a machine.
    Running,
}

/// Something that happened during a build.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The build is about to check `total` nodes.
    Plan {
        /// Selected nodes.
        total: usize,
    },
    /// A node started running.
    Started {
        /// Node id.
        node: String,
        /// Kind.
        kind: String,
        /// Why it runs.
        why: DirtyReason,
    },
    /// A node ended.
    Finished {
        /// Node id.
        node: String,
        /// Kind.
        kind: String,
        /// How.
        status: NodeStatus,
        /// Its key, when known.
        key: Option<Digest>,
        /// Why it ran or was restored.
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<DirtyReason>,
        /// Wall time in seconds (0 for cache hits).
        seconds: f64,
        /// The error, for failures and skips (the message people read).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Why it failed, for machines: `{"kind": "missing_output", "path": ...}` (the kinds
        /// are [`NodeFailure::kind`]); for a skip, `{"kind": "dependency_failed", ...}`.
        #[serde(skip_serializing_if = "Option::is_none")]
        failure: Option<NodeFailure>,
        /// The end of the node's log, for failures.
        #[serde(skip_serializing_if = "Option::is_none")]
        log_tail: Option<String>,
    },
    /// A node that runs elsewhere changed state: its job was queued or started.
    Job {
        /// Node id.
        node: String,
        /// The engine (`slurm`).
        engine: String,
        /// The engine's job id.
        job: String,
        /// Queued or running.
        state: JobState,
        /// Why it is queued, or the host it runs on.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A message for the user (waiting for a lock, a damaged blob, the release update).
    Note {
        /// The message.
        message: String,
    },
}

/// Receives events on the coordinator thread.
pub trait Reporter {
    /// One event.
    fn event(&mut self, e: &Event);
    /// Time passes (refresh a progress display).
    fn tick(&mut self) {}
}

/// A reporter that keeps every event (tests, `--dry-run` collection).
#[derive(Default, Debug)]
pub struct Collect(pub Vec<Event>);

impl Reporter for Collect {
    fn event(&mut self, e: &Event) {
        self.0.push(e.clone());
    }
}

/// The outcome of a build.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Summary {
    /// Nodes that ran.
    pub executed: usize,
    /// Nodes whose results came from the workspace or the store.
    pub cached: usize,
    /// Nodes that failed.
    pub failed: usize,
    /// Nodes that did not run.
    pub skipped: usize,
    /// Wall time of the whole build.
    pub seconds: f64,
    /// What the remote cache did (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::remote::RemoteStats>,
    /// The ids of the nodes that failed, in the order they failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<String>,
    /// What became of the release tree (absent when the build does not write one: a graph
    /// without release files, or a build of chosen targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseOutcome>,
}

impl From<crate::noop::Proved> for Summary {
    /// A build the no-op proof answered: every node cached, the release as it was.
    fn from(p: crate::noop::Proved) -> Summary {
        Summary {
            cached: p.nodes,
            seconds: p.seconds,
            release: p.release_dir.map(|dir| ReleaseOutcome {
                dir,
                published: true,
                blocked_by: Vec::new(),
            }),
            ..Summary::default()
        }
    }
}

/// The release tree after a full build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReleaseOutcome {
    /// The release directory, workspace-relative.
    pub dir: String,
    /// Whether it holds this build's release (written now, or already up to date).
    pub published: bool,
    /// The failed or skipped nodes the release depends on, which kept it as it was: nodes its
    /// files come from (and their inputs) and checks of what it publishes.
    pub blocked_by: Vec<String>,
}

/// An error and its causes as one line, each thing said once: a cause whose text is already
/// part of the line is skipped, and one that repeats the whole line so far replaces it (an
/// error that prints its source, wrapped in a context that names the same file, would
/// otherwise read `a.json: a.json: ...: No such file (os error 2): No such file (os error 2)`).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() && text.contains(&line) {
            line = text;
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod chain_tests {
    use super::error_chain;

    #[derive(Debug)]
    struct WithSource(&'static str, std::io::Error);
    impl std::fmt::Display for WithSource {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.0, self.1)
        }
    }
    impl std::error::Error for WithSource {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    #[test]
    fn each_thing_is_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(WithSource("a.bin", io()));
        assert_eq!(error_chain(&e), "a.bin: No such file");
        let e = anyhow::Error::new(WithSource("dir/a.bin", io())).context("dir");
        assert_eq!(error_chain(&e), "dir/a.bin: No such file");
        let e = anyhow::Error::new(io())
            .context("loading m")
            .context("node `m/convert`");
        assert_eq!(error_chain(&e), "node `m/convert`: loading m: No such file");
    }
}
