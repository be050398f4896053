//! The node kinds of skyctl's pipelines, each with its `NAME`, `VERSION` and typed `Params`
//! (see [`sky_dag::kind`] for the contract). [`super::pipeline::expand`] builds the params;
//! the work itself is in [`crate::ops`] and the stage crates.

pub mod bench;
pub mod calibrate;
pub mod convert;
pub mod golden_gen;
pub mod golden_kernels;
pub mod golden_model;
pub mod kernel_harness;
pub mod manifest;
pub mod quantize;
pub mod site;
pub mod tune;

use sky_dag::Registry;

/// Every kind this build of skyctl has. In `command` nodes, argv[0] `skyctl` is this binary.
pub fn registry() -> Registry {
    let mut r = Registry::default();
    r.add(sky_dag::command::Command::with_self_name("skyctl"));
    r.add(calibrate::Calibrate);
    r.add(quantize::Quantize);
    r.add(tune::Tune);
    r.add(bench::Bench);
    r.add(manifest::Manifest);
    r.add(convert::Convert);
    r.add(golden_model::GoldenModel);
    r.add(golden_gen::GoldenGen);
    r.add(kernel_harness::KernelHarness);
    r.add(golden_kernels::GoldenKernels);
    r.add(site::Site);
    r
}
