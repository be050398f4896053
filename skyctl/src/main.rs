//! The `skyctl` binary: parse the command line, run one subcommand, map the outcome to an
//! exit code (0 ok, 1 a check answered "no" or a node failed, 2 bad usage or input).

use std::process::ExitCode;

fn main() -> ExitCode {
    skyctl::cli::main()
}

// A no-op build of a large graph is mostly small allocations (the cached graph, the last
// build's record, the stat cache) made on two threads: glibc grows a second thread's arena a
// few pages at a time (an mprotect and fresh page faults each), and mimalloc does not.
// Built with `no_thp`: mimalloc otherwise asks for transparent huge pages, and a short run
// then has the kernel zero 2 MiB for each first touch (a 5,000-node no-op: 24.6 MiB peak
// instead of 11.7, and about 5% of a one-leaf rebuild's time).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
