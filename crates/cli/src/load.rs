//! What `strata run` and `strata serve` share: the model opened by the engine flags, and the decoder
//! on the GPU when one takes it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use strata_cuda::backend::budget::plan_bytes;
use strata_cuda::backend::decoder::CudaDecoder;
use strata_cuda::backend::forward::CudaForward;
use strata_cuda::Gpu;
use strata_model::decoder::{CpuDecoder, Decoder};
use strata_model::{KvMode, Model, RopeScaling, State};

/// The model, where it runs, and its context.
#[derive(clap::Args, Clone)]
pub struct EngineArgs {
    /// Model file (or any shard of a set). Without it, the built-in model (a small one trained on English
    /// text: models/README.md).
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// Where the forward pass runs: cuda (GPU 0), cpu (the reference engine), or auto (the GPU when
    /// one opens, else the CPU). Both give the same bits.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// KV cache storage: fp16, int8, or f32 (unrounded: for checks against float references).
    #[arg(long, default_value = "fp16")]
    pub kv: KvMode,
    /// Context cells (default: the model's trained context).
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Position scaling: none, linear or yarn. Default: yarn when --max-context exceeds the trained
    /// context, else none.
    #[arg(long)]
    pub rope_scaling: Option<String>,
    /// Scaling factor for linear or yarn (default: max-context / trained context).
    #[arg(long)]
    pub rope_scale: Option<f64>,
    /// The MTP draft layer from a separate MTP-only GGUF (the converter's `--mtp` output), in place of
    /// the model file's own; loaded and checked against the model (speculative decoding uses it).
    #[arg(long)]
    pub mtp: Option<PathBuf>,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The model opened by the flags (threads set, position scaling, the MTP layer attached), and the
/// context in cells.
pub fn open_model(a: &EngineArgs) -> Result<(Model, usize)> {
    if let Some(t) = a.threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global().context("setting up threads")?;
    }
    let path = match &a.model {
        Some(p) => p.clone(),
        None => crate::default_model::path()?,
    };
    let mut model = Model::open(&path, RopeScaling::None).with_context(|| format!("loading {}", path.display()))?;
    let trained = model.config.context_length;
    let max_context = a.max_context.unwrap_or(trained);
    if max_context == 0 {
        bail!("--max-context must be at least 1");
    }
    if a.rope_scaling.is_some() || a.rope_scale.is_some() || max_context > trained {
        model.rope.scaling = rope_scaling(a.rope_scaling.as_deref(), a.rope_scale, max_context, trained)?;
    }
    if let Some(p) = &a.mtp {
        model.attach_mtp(p).with_context(|| format!("loading the MTP layer from {}", p.display()))?;
    }
    eprintln!("model: {}", model.describe());
    for note in &model.config.notes {
        eprintln!("note: {note}");
    }
    Ok((model, max_context))
}

/// Reads the PLE table's pages ahead in the background (layers/ple.rs `warm_table`), unless
/// `STRATA_PLE_WARM=0`.
pub fn warm_ple(model: &Model) {
    if !crate::env::settings().ple_warm {
        return;
    }
    if let Some(w) = &model.weights.ple {
        strata_model::layers::ple::warm_table(w);
    }
}

/// The GPU to run on, or `None` for the CPU, from `--device`.
pub fn open_device(a: &EngineArgs) -> Result<Option<Arc<Gpu>>> {
    match a.device.as_str() {
        "cpu" => Ok(None),
        "cuda" | "gpu" => Ok(Some(Gpu::new(0, crate::env::settings().clone()).context("--device cuda")?)),
        "auto" => match Gpu::new(0, crate::env::settings().clone()) {
            Ok(gpu) => Ok(Some(gpu)),
            Err(e) => {
                eprintln!("note: running on the CPU ({e})");
                Ok(None)
            }
        },
        other => bail!("--device {other:?}: use auto, cuda or cpu"),
    }
}

/// Prints what the model takes on the GPU and refuses one that does not fit, with the numbers.
fn check_fits(gpu: &Gpu, model: &Model, kv: KvMode, cells: usize) -> Result<()> {
    let plan = plan_bytes(model, kv, cells);
    let need = plan.weights + plan.caches + plan.scratch;
    let (free, _) = gpu.memory()?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    eprintln!(
        "device: {}: weights {:.2} GiB + caches for {cells} cells {:.2} GiB + scratch {:.2} GiB; {:.2} GiB free",
        gpu.name,
        gib(plan.weights),
        gib(plan.caches),
        gib(plan.scratch),
        gib(free as u64)
    );
    if need > free as u64 {
        bail!(
            "the model, its caches and scratch need {:.2} GiB on {}, {:.2} GiB free: lower --max-context, use \
             --kv int8, or --device cpu",
            gib(need),
            gpu.name,
            gib(free as u64)
        );
    }
    Ok(())
}

/// The model's weights and a conversation of `cells` on the GPU.
fn cuda_decoder<'a>(
    gpu: Arc<Gpu>,
    model: &'a Model,
    kv: KvMode,
    cells: usize,
    saved: Option<&State>,
) -> Result<CudaDecoder<'a>> {
    if !strata_cuda::select::plan::is_kept(&gpu) {
        eprintln!("note: first start on this card: compiling the kernels and checking each variant bit for bit (once)");
    }
    let started = strata_cuda::select::start::start(&gpu).context("compiling the kernels")?;
    let plan = started.plan;
    eprintln!(
        "kernels: HC read {}, QSA scorer {}, QSA top-k {} ({})",
        plan.hc.variant.name(),
        plan.scores.variant.name(),
        plan.topk.variant.name(),
        if started.first { "chosen now" } else { "kept from an earlier start" }
    );
    if started.first {
        eprintln!(
            "note: {}; kept for later starts (matvec layouts: {})",
            started.note,
            plan.matvec.variant.summary()
        );
    }
    let fwd = CudaForward::upload(gpu, model, plan.variants()).context("copying the weights to the GPU")?;
    let (state, pos) = match saved {
        Some(s) => (fwd.state_from_host(s, cells).context("copying the saved state to the GPU")?, s.pos),
        None => (fwd.new_state(kv, cells).context("allocating the caches")?, 0),
    };
    Ok(CudaDecoder::new(fwd, state, pos))
}

/// The decoder on the GPU, or `None` for the CPU: under `--device auto` a model the card cannot take
/// (too large, or a weight layout without kernels) runs on the CPU, with a note; `--device cuda`
/// refuses it.
pub fn try_cuda<'a>(
    a: &EngineArgs,
    gpu: Option<Arc<Gpu>>,
    model: &'a Model,
    max_context: usize,
    saved: Option<&State>,
) -> Result<Option<CudaDecoder<'a>>> {
    let Some(gpu) = gpu else { return Ok(None) };
    let dec =
        check_fits(&gpu, model, a.kv, max_context).and_then(|()| cuda_decoder(gpu, model, a.kv, max_context, saved));
    match dec {
        Ok(dec) => Ok(Some(dec)),
        Err(e) if a.device == "auto" => {
            eprintln!("note: running on the CPU: {e:#}");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The decoder: `cuda` when [`try_cuda`] gave one, else the CPU's, holding `saved` or a fresh conversation.
pub fn decoder<'a>(
    cuda: Option<CudaDecoder<'a>>,
    model: &'a Model,
    kv: KvMode,
    saved: Option<State>,
) -> Result<Box<dyn Decoder + 'a>> {
    Ok(match cuda {
        Some(d) => Box::new(d),
        None => {
            let state = match saved {
                Some(s) => s,
                None => model.new_state(kv)?,
            };
            Box::new(CpuDecoder { model, state })
        }
    })
}

/// Spec §8: YaRN by default past the trained context, with F = max_context / trained.
fn rope_scaling(kind: Option<&str>, scale: Option<f64>, max_context: usize, trained: usize) -> Result<RopeScaling> {
    let factor = scale.unwrap_or(max_context as f64 / trained as f64).max(1.0);
    if !(factor.is_finite() && factor > 0.0) {
        bail!("--rope-scale must be a positive number");
    }
    Ok(match kind {
        None if max_context > trained => RopeScaling::Yarn { factor, orig_ctx: trained as u64 },
        None | Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear(factor),
        Some("yarn") => RopeScaling::Yarn { factor, orig_ctx: trained as u64 },
        Some(other) => bail!("--rope-scaling {other:?}: use none, linear or yarn"),
    })
}
