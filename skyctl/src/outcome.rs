//! What a command handler reports back; only [`crate::cli`] turns it into an exit code.

/// The result of a command that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything asked for was done, and every check passed.
    Success,
    /// It ran, and the answer is no: a node or golden failed, something is stale.
    Failed,
    /// Some of the input was bad (reported as it was met); the rest was done.
    BadInput,
    /// A signal (SIGINT, SIGTERM) stopped it; exits with 128 + the signal number.
    Interrupted(i32),
}
