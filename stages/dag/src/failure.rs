//! [`NodeFailure`]: why one node failed, as a type. `Display` is the message people read (the
//! same words the engine always printed); [`NodeFailure::kind`] is a stable name for
//! machines, the `failure.kind` of a `--json` `finished` event, and what the workspace state
//! keeps of a node's last failure.

use serde::{Deserialize, Serialize};

/// Why a node failed. Every variant names its subject (an output path, an input, the stage's
/// own message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeFailure {
    /// An output path holds something the engine did not make (a user's file): it is left
    /// alone and the node does not run.
    OutputNotOurs {
        /// The output path.
        path: String,
    },
    /// The last run's output could not be removed before the node ran again.
    StaleOutput {
        /// The output path.
        path: String,
        /// The error.
        message: String,
    },
    /// A folder on the way to an output is a symlink.
    OutputThroughSymlink {
        /// The output path.
        path: String,
        /// The message.
        message: String,
    },
    /// The stage (a kind, or a command's program) returned an error.
    StageError {
        /// The stage's error and its causes.
        message: String,
    },
    /// The stage panicked.
    Panicked {
        /// The panic message.
        message: String,
    },
    /// The run was stopped by a signal (Ctrl-C, SIGTERM).
    Cancelled {
        /// What the stage said as it was stopped.
        message: String,
    },
    /// A declared output was not written.
    MissingOutput {
        /// The output path.
        path: String,
        /// What appeared beside the declared outputs during the run and is not declared (a
        /// misspelt name, say): named, never removed (the engine cannot prove the stage made
        /// it).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        strays: Vec<String>,
    },
    /// A declared output is not of the declared type (a file for a directory, a symlink).
    WrongOutputType {
        /// The output path.
        path: String,
        /// A directory was declared.
        dir: bool,
    },
    /// The stage changed one of its inputs in place.
    InputChanged {
        /// The input path.
        path: String,
    },
    /// The stage wrote into the release tree without declaring it.
    WroteRelease {
        /// The release directory.
        dir: String,
    },
    /// The node's kind is not registered in this build.
    UnknownKind {
        /// The message.
        message: String,
    },
    /// Its key could not be computed (an input could not be read).
    Key {
        /// The message.
        message: String,
    },
    /// Reading or writing the workspace or the store around the run failed.
    Io {
        /// The message.
        message: String,
    },
    /// It ran on another machine (an executor's job: Slurm) and the job failed: the node's
    /// command failed there, the worker refused the job, or the engine ended it (out of
    /// memory or time, cancelled from outside). The message holds the engine's reason.
    RemoteFailed {
        /// The engine's reason and what the job printed last.
        message: String,
    },
    /// The job's machine was lost, or the job ended without leaving its result in the
    /// remote cache.
    RemoteLost {
        /// What was seen.
        message: String,
    },
    /// Not run (a skip): a node it depends on failed.
    DependencyFailed {
        /// The failed node's id.
        node: String,
    },
    /// Not run (a skip): the build stopped after this other node failed (no `--keep-going`).
    StoppedAfterFailure {
        /// The failed node's id.
        node: String,
    },
}

impl NodeFailure {
    /// The stable machine name (`--json` `failure.kind`, documented in docs/reference/exit-codes.md).
    pub fn kind(&self) -> &'static str {
        match self {
            NodeFailure::OutputNotOurs { .. } => "output_not_ours",
            NodeFailure::StaleOutput { .. } => "stale_output",
            NodeFailure::OutputThroughSymlink { .. } => "output_through_symlink",
            NodeFailure::StageError { .. } => "stage_error",
            NodeFailure::Panicked { .. } => "panicked",
            NodeFailure::Cancelled { .. } => "cancelled",
            NodeFailure::MissingOutput { .. } => "missing_output",
            NodeFailure::WrongOutputType { .. } => "wrong_output_type",
            NodeFailure::InputChanged { .. } => "input_changed",
            NodeFailure::WroteRelease { .. } => "wrote_release",
            NodeFailure::UnknownKind { .. } => "unknown_kind",
            NodeFailure::Key { .. } => "key",
            NodeFailure::Io { .. } => "io",
            NodeFailure::RemoteFailed { .. } => "remote_failed",
            NodeFailure::RemoteLost { .. } => "remote_lost",
            NodeFailure::DependencyFailed { .. } => "dependency_failed",
            NodeFailure::StoppedAfterFailure { .. } => "stopped_after_failure",
        }
    }

    /// An I/O failure around the run, from a message.
    pub fn io(message: impl Into<String>) -> NodeFailure {
        NodeFailure::Io {
            message: message.into(),
        }
    }
}

impl std::fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeFailure::OutputNotOurs { path } => write!(
                f,
                "output `{path}` already exists and was not made by skyctl; it is left as it is (move it away, or declare another output path)"
            ),
            NodeFailure::StaleOutput { path, message } => {
                write!(f, "cannot remove old output `{path}`: {message}")
            }
            NodeFailure::OutputThroughSymlink { message, .. }
            | NodeFailure::StageError { message }
            | NodeFailure::Panicked { message }
            | NodeFailure::Cancelled { message }
            | NodeFailure::UnknownKind { message }
            | NodeFailure::Key { message }
            | NodeFailure::Io { message }
            | NodeFailure::RemoteFailed { message }
            | NodeFailure::RemoteLost { message } => f.write_str(message),
            NodeFailure::MissingOutput { path, strays } => {
                write!(f, "declared output `{path}` was not written")?;
                if !strays.is_empty() {
                    let list: Vec<String> = strays.iter().map(|s| format!("`{s}`")).collect();
                    write!(
                        f,
                        "; {} appeared during the run and {} not declared (left as it is: remove it, or fix the name)",
                        list.join(", "),
                        if strays.len() == 1 { "is" } else { "are" }
                    )?;
                }
                Ok(())
            }
            NodeFailure::WrongOutputType { path, dir } => {
                let want = if *dir { "a directory" } else { "a regular file" };
                write!(f, "declared output `{path}` is not {want}")
            }
            NodeFailure::InputChanged { path } => write!(
                f,
                "modified its input `{path}` in place (inputs are read-only: write a declared output instead)"
            ),
            NodeFailure::DependencyFailed { node } => {
                write!(f, "depends on `{node}`, which failed")
            }
            NodeFailure::StoppedAfterFailure { node } => write!(
                f,
                "the build stopped after `{node}` failed (--keep-going builds what does not depend on it)"
            ),
            NodeFailure::WroteRelease { dir } => write!(
                f,
                "wrote into the release directory `{dir}` without declaring it (publish outputs with [[release.publish]])"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_stable_and_serialized_as_the_tag() {
        let f = NodeFailure::MissingOutput {
            path: "build/SHA256SUMS".into(),
            strays: Vec::new(),
        };
        assert_eq!(f.kind(), "missing_output");
        assert_eq!(
            f.to_string(),
            "declared output `build/SHA256SUMS` was not written"
        );
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "missing_output", "path": "build/SHA256SUMS"})
        );
        let back: NodeFailure = serde_json::from_value(json).unwrap();
        assert_eq!(back, f);
        let f = NodeFailure::MissingOutput {
            path: "build/SHA256SUMS".into(),
            strays: vec!["build/SHA256SUM".into()],
        };
        assert_eq!(
            f.to_string(),
            "declared output `build/SHA256SUMS` was not written; `build/SHA256SUM` appeared during the run and is not declared (left as it is: remove it, or fix the name)"
        );
        let f = NodeFailure::WrongOutputType {
            path: "d".into(),
            dir: true,
        };
        assert_eq!(serde_json::to_value(&f).unwrap()["kind"], f.kind());
        assert_eq!(f.to_string(), "declared output `d` is not a directory");
    }
}
