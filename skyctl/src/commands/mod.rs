//! One module per subcommand: its clap arguments and a short handler.

pub mod ask;
pub mod bench;
pub mod build;
pub mod calibrate;
pub mod clean;
pub mod convert;
pub mod explain;
pub mod gc;
pub mod golden;
pub mod graph;
pub mod init;
pub mod inspect;
pub mod kernels;
pub mod quantize;
pub mod random;
pub mod status;
pub mod store;
pub mod verify;
