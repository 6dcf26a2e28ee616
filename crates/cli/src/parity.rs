//! `strata parity ...`: the GPU parity tools. Each exits non-zero on the first differing byte and prints
//! `OK` with the number of cases otherwise.

use anyhow::{bail, Result};
use clap::Subcommand;
use strata_cuda::tools::parity;
use strata_cuda::Gpu;

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
    /// Matrix-vector products for every type with a GPU kernel against the CPU (T = 1..8).
    #[command(name = "matvec_parity")]
    matvec_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The device's token draw (temperature, top-k, top-p) against the CPU's on rows built to find order
    /// and tie mistakes.
    #[command(name = "sample_parity")]
    sample_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// A GDN layer over a sequence in windows of T = 1..8 against the CPU (outputs and state).
    #[command(name = "gdn_parity")]
    gdn_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The MoE (routing, experts of each type, shared expert) for T = 1..8 tokens against the CPU.
    #[command(name = "moe_parity")]
    moe_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// An attention layer (QSA and dense; fp16, int8, f32 KV) over a sequence in windows against the CPU.
    #[command(name = "attn_parity")]
    attn_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The whole forward pass on the GPU against the CPU, logits bit for bit (windows of every T = 1..8),
    /// and the MTP layer's drafts when the model has one.
    #[command(name = "forward_parity")]
    forward_parity {
        /// The model file.
        model: std::path::PathBuf,
        /// Tokens to run.
        #[arg(long, default_value_t = 90)]
        tokens: usize,
        /// KV cache storage: fp16, int8 or f32.
        #[arg(long, default_value = "fp16")]
        kv: strata_model::KvMode,
    },
    /// QSA block scores against the CPU (Q = 1..8, full indexer geometry).
    #[command(name = "qsa_parity")]
    qsa_parity {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Exact QSA top-k against the CPU: `--selftest` (with the greedy token's argmax), or CTX Q REPS CAPACITY MODE (MODE 0 decode calls,
    /// 1 prompt calls; REPS calls with fresh scores).
    #[command(name = "qsa_topk_parity")]
    qsa_topk_parity {
        #[arg(long)]
        selftest: bool,
        args: Vec<usize>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub fn run(c: ParityCommand) -> Result<()> {
    let gpu = Gpu::new(0, crate::env::settings().clone())?;
    eprintln!("device: {} ({}), driver {}", gpu.name, gpu.arch_name(), gpu.driver_version);
    let plan = strata_cuda::select::plan::plan(&gpu);
    eprintln!("HC read variant: {} ({})", plan.hc.variant.name(), plan.hc.reason);
    eprintln!("QSA scorer: {} ({})", plan.scores.variant.name(), plan.scores.reason);
    eprintln!("QSA top-k: {} ({})", plan.topk.variant.name(), plan.topk.reason);
    eprintln!("matvec layouts: {}", plan.matvec.variant.summary());
    let outcome = match c {
        ParityCommand::gr_parity { selftest, seed } => {
            let mut dims = vec![(256, 4, 32)];
            if selftest {
                dims.push((2560, 4, 320));
            }
            parity::gr_parity(&gpu, &dims, seed)
        }
        ParityCommand::gr_multi_parity { seed } => parity::gr_multi_parity(&gpu, 2560, 4, 320, seed),
        ParityCommand::qsa_parity { seed } => parity::qsa_parity(&gpu, seed),
        ParityCommand::matvec_parity { seed } => parity::matvec_parity(&gpu, seed),
        ParityCommand::gdn_parity { seed } => parity::gdn_parity(&gpu, seed),
        ParityCommand::sample_parity { seed } => parity::sample_parity(&gpu, seed),
        ParityCommand::moe_parity { seed } => parity::moe_parity(&gpu, seed),
        ParityCommand::attn_parity { seed } => parity::attn_parity(&gpu, seed),
        ParityCommand::forward_parity { model, tokens, kv } => {
            let m = strata_model::Model::open(&model, strata_model::RopeScaling::None)?;
            parity::forward_parity(&gpu, &m, tokens, kv)
        }
        ParityCommand::qsa_topk_parity { selftest: true, seed, .. } => parity::qsa_topk_selftest(&gpu, seed),
        ParityCommand::qsa_topk_parity { selftest: false, args, seed } => {
            let [ctx, q, reps, cap, mode] = args[..] else {
                bail!("qsa_topk_parity: give --selftest or CTX Q REPS CAPACITY MODE");
            };
            if q == 0 || q > 8 || ctx == 0 || ctx + q > cap + 1 || cap % 4 != 0 {
                bail!("qsa_topk_parity: need 1 ≤ Q ≤ 8, 1 ≤ CTX and CTX + Q − 1 ≤ CAPACITY (a multiple of 4)");
            }
            (0..reps.max(1)).try_fold(0, |n, i| {
                let cells: Vec<usize> = if mode == 0 {
                    (0..q).map(|k| ctx + k).collect()
                } else {
                    (0..q).map(|k| 1 + (ctx * (k + 1) * 7919 + i) % ctx).collect()
                };
                let pattern = [
                    parity::Pattern::Continuous,
                    parity::Pattern::Levels64,
                    parity::Pattern::AllEqual,
                    parity::Pattern::Special,
                ][i % 4];
                parity::topk_case(&gpu, &cells, cap, 2048, 4, pattern, seed + i as u64).map(|_| n + 1)
            })
        }
    };
    match outcome {
        Ok(cases) => {
            println!("OK {cases} cases");
            Ok(())
        }
        Err(first) => bail!("FAIL: {first}"),
    }
}
