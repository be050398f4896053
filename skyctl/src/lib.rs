//! skyctl: a declarative, content-hashed build tool for small on-device decision models.
//!
//! The binary is thin: [`cli`] parses arguments, hands each subcommand to one function in
//! [`commands`], and maps its [`outcome::Outcome`] to an exit code. The generic engine is the
//! `sky-dag` crate; this crate holds the `pipeline.toml` front end ([`pipeline`]: schema and
//! expansion into node specs), the node kinds ([`kinds`]), and the model operations that
//! kinds and commands share ([`ops`]). The model work itself lives in the stage crates under
//! `stages/`. Arrows point down: cli -> commands -> {pipeline, kinds, ops}; pipeline -> kinds
//! -> ops; nothing points at `cli` or `commands`.

/// `println!` that hands a failed write back (`?`) instead of panicking. A closed pipe
/// (`skyctl graph | head -1`, `skyctl verify | true`) is not a failure: the line is dropped,
/// the command runs on to its real outcome, and that outcome is the exit code
/// ([`outcome::print`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        $crate::outcome::print(format_args!("{}\n", format_args!($($arg)*)))?
    }};
}

/// `print!` the same way as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        $crate::outcome::print(format_args!($($arg)*))?
    }};
}

pub mod cli;
pub mod commands;
pub mod kinds;
pub mod ops;
pub mod outcome;
pub mod pipeline;
pub mod pipeline_args;
pub mod progress;
pub mod remote_args;
pub mod slurm;
