//! The model operations that both the commands and the node kinds perform: compute paths,
//! calibration, quantization, benchmarks, golden reports. Commands add argument parsing and
//! printing; kinds add inputs, outputs and logs.

pub mod bench;
pub mod calibrate;
pub mod compute;
pub mod golden_table;
pub mod kernels;
pub mod policy;
pub mod quantize;
pub mod tune;
