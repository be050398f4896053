//! One module per subcommand: its clap arguments and a short handler.

pub mod inspect;
pub mod convert;
pub mod random;
pub mod ask;
pub mod calibrate;
pub mod quantize;
pub mod bench;
pub mod golden;
pub mod kernels;
pub mod init;
pub mod build;
pub mod status;
pub mod explain;
pub mod graph;
pub mod verify;
pub mod gc;
pub mod clean;
pub mod store;
