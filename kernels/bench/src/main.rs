//! `kernel-bench`: the built-in kernels timed on their own, against a device-to-device copy
//! of the same bytes and a large one, against NVIDIA's NPP where it has the same conversion,
//! and against candidate variants; every output checked against the plugins' CPU reference.
//! See docs/benchmarks.md ("The kernels on their own").
#![deny(unsafe_code)]

mod compare;
mod npp;
mod run;
mod variants;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Time the built-in kernels (generator, rgb-process, yuv420, yuv-to-rgb) on cuda:0.
#[derive(Debug, Parser)]
#[command(name = "kernel-bench")]
pub struct Args {
    /// Launches timed back to back per measurement (after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 500)]
    pub launches: u32,
    /// Frame sizes, WIDTHxHEIGHT, comma-separated.
    #[arg(long, default_value = "1920x1080,3840x2160", value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// Frame sizes at which every kernel and variant is run and checked against the CPU
    /// reference too (timed, but without NPP): odd sizes, so that the kernels' partial-group
    /// and odd-row paths run on the GPU. Comma-separated; empty for none.
    #[arg(long, default_value = "1917x1079", value_delimiter = ',')]
    pub check_sizes: Vec<String>,
    /// Only these kernels (gen, grade, yuv420, yuv-to-rgb), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Folder holding libnppicc (and libnppc), looked in before the usual places.
    #[arg(long)]
    pub npp_dir: Option<PathBuf>,
    /// Do not load NPP.
    #[arg(long)]
    pub no_npp: bool,
    /// Production kernels only, no candidate variants.
    #[arg(long)]
    pub no_variants: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run::run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("kernel-bench: some outputs differ from the CPU reference (see the check column)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("kernel-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}
