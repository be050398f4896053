//! The `skyctl` binary: parse the command line, run one subcommand, map the outcome to an
//! exit code (0 ok, 1 a check answered "no" or a node failed, 2 bad usage or input).

use std::process::ExitCode;

fn main() -> ExitCode {
    skyctl::cli::main()
}
