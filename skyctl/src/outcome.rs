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

/// Set once a write to stdout found the reader gone.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Write to stdout (what `outln!` and `out!` expand to). A reader that went away
/// (`io::ErrorKind::BrokenPipe`) is not an error: this and every later write are dropped, so
/// the command runs on and its [`Outcome`] (a failed suite, a damaged store, a stale node) is
/// still the exit code; `skyctl verify | true` never turns a failure into success. Any other
/// write error is handed back.
pub fn print(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::sync::atomic::Ordering;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    match std::io::stdout().lock().write_fmt(args) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}
