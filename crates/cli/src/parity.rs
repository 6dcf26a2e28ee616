//! `strata parity ...`: the GPU parity tools. Each exits non-zero on the first differing byte and prints
//! `OK` with the number of cases otherwise.

use anyhow::{bail, Result};
use clap::Subcommand;
use strata_cuda::{parity, Gpu};

#[derive(Subcommand)]
#[allow(non_camel_case_types)]
pub enum ParityCommand {
    /// The hyper-connection read, T = 1..8, against the CPU (with and without pending write and inject).
    #[command(name = "gr_parity")]
    gr_parity {
        /// Also run the full model's geometry (n 2560, r 320), not only the tiny one.
        #[arg(long)]
        selftest: bool,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// A window of T = 1..8 tokens against T single-token calls, in and out of place.
    #[command(name = "gr_multi_parity")]
    gr_multi_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub fn run(c: ParityCommand) -> Result<()> {
    let gpu = Gpu::new(0)?;
    eprintln!("device: {} ({}), driver {}", gpu.name, gpu.arch_name(), gpu.driver_version);
    let choice = strata_cuda::select::hc_variant(&gpu);
    eprintln!("HC read variant: {} ({})", choice.variant.name(), choice.reason);
    let outcome = match c {
        ParityCommand::gr_parity { selftest, seed } => {
            let mut dims = vec![(256, 4, 32)];
            if selftest {
                dims.push((2560, 4, 320));
            }
            parity::gr_parity(&gpu, &dims, seed)
        }
        ParityCommand::gr_multi_parity { seed } => parity::gr_multi_parity(&gpu, 2560, 4, 320, seed),
    };
    match outcome {
        Ok(cases) => {
            println!("OK {cases} cases");
            Ok(())
        }
        Err(first) => bail!("FAIL: {first}"),
    }
}
