//! The model operations that both the commands and the node kinds perform: compute paths,
//! calibration, quantization, benchmarks, golden reports. Commands add argument parsing and
//! printing; kinds add inputs, outputs and logs.

pub mod bench;
pub mod calibrate;
pub mod compute;
pub mod golden_table;
pub mod kernels;
pub mod names;
pub mod out_path;
pub mod policy;
pub mod quantize;
pub mod tune;

/// Whether the running build was told to stop (SIGINT, SIGTERM): the check that long
/// built-in work (calibration, golden suites, conversion) makes between its steps. Outside a
/// build no handler is installed and a signal ends the process as usual, so this stays false.
pub fn stop_requested() -> bool {
    sky_dag::interrupt::requested().is_some()
}
