//! `skyctl kernels`: run a kernel implementation over golden inputs (the harness side of the
//! kernel-verification node), and list the files a harness reads and writes.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use serde_json::json;

/// Arguments of `skyctl kernels`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `skyctl kernels` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Compute every kernel output from the input files in IN_DIR and write them to OUT_DIR.
    Run {
        /// Which implementation runs the kernels.
        #[arg(long = "impl", value_enum)]
        implementation: Impl,
        /// Directory holding the golden input files.
        in_dir: PathBuf,
        /// Directory to write the output files into (created if missing).
        out_dir: PathBuf,
        /// (cuda) the directory of the compiled PTX (`skyctl cuda compile --out`).
        #[arg(long, value_name = "DIR", default_value = "build/cuda/ptx")]
        ptx: PathBuf,
    },
    /// List the input files a harness reads and the output files it must write.
    Files {
        /// Print JSON ({"inputs": [...], "outputs": [...]}, file names) instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Kernel implementations `skyctl kernels run` can drive.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Impl {
    /// The CPU reference kernels of sky-kernels (recomputed from the inputs; the stored golden
    /// outputs are not read).
    Cpu,
    /// The CUDA reference kernels of sky-cuda on the first GPU, from the PTX in --ptx (the
    /// driver is loaded at run time; without one this exits 2).
    Cuda,
}

/// Run `skyctl kernels`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    // The outputs go beside nothing the run reads: written into the inputs' folder they would
    // replace the stored golden outputs the run is checked against.
    if let Command::Run {
        in_dir,
        out_dir,
        ptx,
        implementation,
    } = &args.command
    {
        let mut reads = vec![(in_dir.as_path(), "the golden inputs folder")];
        if matches!(implementation, Impl::Cuda) {
            reads.push((ptx.as_path(), "the PTX folder"));
        }
        crate::ops::out_path::check("kernels run", out_dir, &reads)?;
    }
    let out = match args.command {
        Command::Run {
            implementation: Impl::Cuda,
            in_dir,
            out_dir,
            ptx,
        } => {
            let run = sky_cuda::run_cuda(&ptx, &in_dir, &out_dir)?;
            let mut s = format!(
                "cuda: {} (sm_{}{}, driver {}.{}): wrote {} output files to {}\n",
                run.device,
                run.capability.0,
                run.capability.1,
                run.driver_version / 1000,
                run.driver_version % 1000 / 10,
                run.files.len(),
                out_dir.display()
            );
            for (name, t) in &run.timings {
                s.push_str(&format!(
                    "  {name:<20} {:>10.1} us\n",
                    t.as_secs_f64() * 1e6
                ));
            }
            s
        }
        Command::Run {
            implementation: Impl::Cpu,
            in_dir,
            out_dir,
            ..
        } => {
            let files = sky_kernels::run_cpu(&in_dir, &out_dir)?;
            format!(
                "cpu: wrote {} output files to {}\n",
                files.len(),
                out_dir.display()
            )
        }
        Command::Files { json } => {
            let bin = |f: &sky_kernels::FileSpec| format!("{}.bin", f.name);
            let inputs: Vec<String> = sky_kernels::input_files().map(bin).collect();
            let outputs: Vec<String> = sky_kernels::output_files().map(bin).collect();
            if json {
                format!(
                    "{}\n",
                    serde_json::to_string_pretty(&json!({ "inputs": inputs, "outputs": outputs }))?
                )
            } else {
                let mut s = String::new();
                inputs
                    .iter()
                    .for_each(|n| s.push_str(&format!("input  {n}\n")));
                outputs
                    .iter()
                    .for_each(|n| s.push_str(&format!("output {n}\n")));
                s
            }
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(Outcome::Success),
    }
}
