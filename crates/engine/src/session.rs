//! A session: a model opened with its options, on the device they name, ready to make decoders (one
//! conversation's state each). `strata run`, `strata serve` and `strata perplexity` all start here.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::draft_vocab::DraftVocab;
use anyhow::{bail, Context, Result};
use strata_cuda::backend::budget::{memory_plan, ExpertHome, Gib};
use strata_cuda::backend::decoder::CudaDecoder;
use strata_cuda::backend::forward::CudaForward;
use strata_cuda::backend::weights::Placing;
use strata_cuda::{Gpu, Settings};
use strata_model::decoder::{CpuDecoder, Decoder};
use strata_model::{KvMode, Model, RopeScaling, State};

/// Where the forward pass runs. Both give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The GPU when one opens and holds at least the model's dense part (the routed experts that do not
    /// fit then stay in host memory), else the CPU (with a note saying why, in numbers).
    Auto,
    /// GPU 0; an error when it cannot run the model.
    Cuda,
    /// The reference engine.
    Cpu,
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Device, String> {
        match s {
            "auto" => Ok(Device::Auto),
            "cuda" | "gpu" => Ok(Device::Cuda),
            "cpu" => Ok(Device::Cpu),
            other => Err(format!("{other:?}: use auto, cuda or cpu")),
        }
    }
}

/// What a session is opened with.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The model file (or any shard of a set).
    pub model: PathBuf,
    /// The MTP draft layer from a separate MTP-only file, in place of the model file's own.
    pub mtp: Option<PathBuf>,
    pub device: Device,
    pub kv: KvMode,
    /// Context cells (default: the model's trained context).
    pub context: Option<usize>,
    /// Position scaling (none, linear or yarn) and its factor; default: yarn past the trained context.
    pub rope_scaling: Option<String>,
    pub rope_scale: Option<f64>,
    /// CPU threads (default: all cores).
    pub threads: Option<usize>,
    /// The tokens a draft chooses among: the K seen most often (0: the whole vocabulary; draft_vocab.rs).
    pub draft_vocab: usize,
    /// A VRAM budget in bytes: where the model exceeds it, the routed experts stay in host memory and
    /// the card holds a cache of them (docs/PLACEMENT.md). None: the whole model on the card.
    pub gpu_mem: Option<u64>,
    /// Routed experts in host memory left in the file's mapping, not locked in RAM.
    pub mmap_experts: bool,
    pub settings: Settings,
}

/// A model opened on its device.
pub struct Session {
    pub model: Model,
    /// Context cells.
    pub context: usize,
    pub kv: KvMode,
    device: Device,
    /// The card, when the device is not the CPU and one opened.
    gpu: Option<Arc<Gpu>>,
    settings: Settings,
    draft_vocab: usize,
    gpu_mem: Option<u64>,
    mmap_experts: bool,
}

impl Session {
    /// Opens the device and the model (threads set, position scaling, the MTP layer attached), and says
    /// what was opened on standard error.
    pub fn open(o: SessionOptions) -> Result<Session> {
        if let Some(t) = o.threads {
            if t == 0 {
                bail!("--threads must be at least 1");
            }
            rayon::ThreadPoolBuilder::new().num_threads(t).build_global().context("setting up threads")?;
        }
        let gpu = open_gpu(o.device, &o.settings)?;
        if gpu.is_none() && o.gpu_mem.is_some() {
            eprintln!("note: --gpu-mem is a budget for the GPU; the CPU runs with the whole model in RAM");
        }
        let path = &o.model;
        let mut model = Model::open(path, RopeScaling::None).with_context(|| format!("loading {}", path.display()))?;
        let trained = model.config.context_length;
        let context = o.context.unwrap_or(trained);
        if context == 0 {
            bail!("--max-context must be at least 1");
        }
        if o.rope_scaling.is_some() || o.rope_scale.is_some() || context > trained {
            model.rope.scaling = rope_scaling(o.rope_scaling.as_deref(), o.rope_scale, context, trained)?;
        }
        if let Some(p) = &o.mtp {
            model.attach_mtp(p).with_context(|| format!("loading the MTP layer from {}", p.display()))?;
        }
        eprintln!("model: {}", model.describe());
        for note in &model.config.notes {
            eprintln!("note: {note}");
        }
        if o.draft_vocab > model.config.vocab {
            bail!("--draft-vocab {} exceeds the vocabulary of {} tokens", o.draft_vocab, model.config.vocab);
        }
        let draft_vocab = o.draft_vocab;
        Ok(Session {
            model,
            context,
            kv: o.kv,
            device: o.device,
            gpu,
            settings: o.settings,
            draft_vocab,
            gpu_mem: o.gpu_mem,
            mmap_experts: o.mmap_experts,
        })
    }

    /// A decoder of `cells` context cells holding `saved` (or a fresh conversation), on the GPU when the
    /// session has one that takes the model, and where it runs (`cuda: <card>` or `cpu`). Under
    /// [`Device::Auto`] a model the card cannot take (not even its dense part fits, a weight layout without
    /// kernels) runs on the CPU, with a note. The PLE table's pages are then read ahead in the background.
    pub fn decoder(&self, cells: usize, saved: Option<State>) -> Result<(Box<dyn Decoder + '_>, String)> {
        let cuda = match &self.gpu {
            Some(gpu) => {
                let dec = placement(gpu, &self.model, self.kv, cells, (self.gpu_mem, self.mmap_experts))
                    .and_then(|held| cuda_decoder(gpu.clone(), &self.model, self.kv, cells, saved.as_ref(), held));
                match dec {
                    Ok(d) => Some(d),
                    Err(e) if self.device == Device::Auto => {
                        eprintln!("note: running on the CPU: {e:#}");
                        None
                    }
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        self.warm_ple();
        let (dec, on): (Box<dyn Decoder + '_>, String) = match cuda {
            Some(d) => (Box::new(d), format!("cuda: {}", self.gpu.as_ref().map_or("", |g| g.name.as_str()))),
            None => {
                let state = match saved {
                    Some(s) => s,
                    None => self.model.new_state(self.kv)?,
                };
                (Box::new(CpuDecoder::new(&self.model, state)), "cpu".to_string())
            }
        };
        Ok((dec, on))
    }

    /// The draft vocabulary for one decoder's generations (`--draft-vocab K`; None for the whole
    /// vocabulary): one a decoder, since the list it gives is the one that decoder holds.
    pub fn draft_vocab(&self) -> Option<Arc<Mutex<DraftVocab>>> {
        let (k, vocab) = (self.draft_vocab, self.model.config.vocab);
        let make = if self.settings.draft_by_id { DraftVocab::by_id } else { DraftVocab::new };
        (k > 0).then(|| Arc::new(Mutex::new(make(k, vocab))))
    }

    /// Reads the PLE table's pages ahead in the background (its rows are read on the host each token),
    /// unless `STRATA_PLE_WARM=0`.
    fn warm_ple(&self) {
        if let (true, Some(w)) = (self.settings.ple_warm, &self.model.weights.ple) {
            strata_model::layers::ple::warm_table(w);
        }
    }
}

/// The card `device` asks for: none for the CPU, an error under [`Device::Cuda`] when none opens, a note
/// and none under [`Device::Auto`].
fn open_gpu(device: Device, settings: &Settings) -> Result<Option<Arc<Gpu>>> {
    match device {
        Device::Cpu => Ok(None),
        Device::Cuda => Ok(Some(Gpu::new(0, settings.clone()).context("--device cuda")?)),
        Device::Auto => match Gpu::new(0, settings.clone()) {
            Ok(gpu) => Ok(Some(gpu)),
            Err(e) => {
                eprintln!("note: running on the CPU ({e})");
                Ok(None)
            }
        },
    }
}

/// VRAM the default budget leaves free for what the plan does not count: the kernels' modules, the
/// graphs' own memory, the driver's pools.
const VRAM_MARGIN: u64 = 512 << 20;

/// Where the model goes on the card, by the memory plan (backend/budget.rs), printed in numbers: None
/// when the whole model fits, else the experts a MoE block holds on the card while the rest stay in host
/// memory: their pages locked in RAM where it holds them beside a reserve, else (or with `map`) left in
/// the file's mapping. The budget is `--gpu-mem`, or the card's free memory less [`VRAM_MARGIN`]. A
/// budget that holds not even the dense part is refused in numbers (and `--device auto` then runs on the
/// CPU, saying so).
fn placement(
    gpu: &Gpu,
    model: &Model,
    kv: KvMode,
    cells: usize,
    (budget, map): (Option<u64>, bool),
) -> Result<Option<Placing>> {
    let (free, _) = gpu.memory()?;
    let free = free as u64;
    let (budget, whose) = match budget {
        Some(b) => (b, "--gpu-mem".to_string()),
        None => (free.saturating_sub(VRAM_MARGIN), format!("{}: {} free", gpu.name, Gib(free))),
    };
    // Where the host's available memory cannot be read, as good as unbounded.
    let host = strata_model::placement::available_memory().unwrap_or(u64::MAX / 2);
    let plan = memory_plan(
        model,
        kv,
        cells,
        budget,
        host,
        (map, strata_cuda::backend::budget::Window::from_settings(&gpu.settings)),
    )
    .context(whose.clone())?;
    eprintln!("memory: {plan} ({cells} cells; budget {} on {}, {} free)", Gib(budget), gpu.name, Gib(free));
    if matches!(plan.home, ExpertHome::Mapped { .. }) && !map {
        eprintln!(
            "note: the routed experts ({}) are not locked in RAM: {} available, and {} kept for the rest; they \
             stay in the file's mapping, read as the page cache holds them",
            Gib(plan.experts),
            Gib(host),
            Gib(strata_cuda::backend::budget::HOST_RESERVE)
        );
    }
    if plan.device_bytes() > free {
        bail!("{whose}: the plan takes {} on {}, {} free", Gib(plan.device_bytes()), gpu.name, Gib(free));
    }
    let pin = matches!(plan.home, ExpertHome::Pinned { .. });
    // The cache starts from the routing counts earlier runs of this model left (docs/PLACEMENT.md).
    let counts =
        gpu.settings.cache.as_ref().map(|dir| strata_model::routing_file::path_for(dir, model.gguf.first().path()));
    Ok(plan.per_block().map(|held| Placing { held, pin, counts, window: plan.window }))
}

/// The kernels loaded and the variants chosen (select/start.rs, said on a first start), then the model's
/// weights (`held` experts of each MoE block on the card, the rest in host memory, where placed) and a
/// conversation of `cells` on the GPU.
fn cuda_decoder<'a>(
    gpu: Arc<Gpu>,
    model: &'a Model,
    kv: KvMode,
    cells: usize,
    saved: Option<&State>,
    placing: Option<Placing>,
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
        eprintln!("note: {}; kept for later starts (matvec layouts: {})", started.note, plan.matvec.variant.summary());
    }
    let fwd =
        CudaForward::upload_placed(gpu, model, plan.variants(), placing).context("copying the weights to the GPU")?;
    let (state, pos) = match saved {
        Some(s) => (fwd.state_from_host(s, cells).context("copying the saved state to the GPU")?, s.pos),
        None => (fwd.new_state(kv, cells).context("allocating the caches")?, 0),
    };
    Ok(CudaDecoder::new(fwd, state, pos))
}

/// Spec §8: YaRN by default past the trained context, with F = context / trained.
fn rope_scaling(kind: Option<&str>, scale: Option<f64>, context: usize, trained: usize) -> Result<RopeScaling> {
    if scale.is_some_and(|s| !(s.is_finite() && s >= 1.0)) {
        bail!("--rope-scale must be a number of at least 1 (the factor the context is stretched by)");
    }
    let factor = scale.unwrap_or(context as f64 / trained as f64).max(1.0);
    Ok(match kind {
        None if context > trained => RopeScaling::Yarn { factor, orig_ctx: trained as u64 },
        None | Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear(factor),
        Some("yarn") => RopeScaling::Yarn { factor, orig_ctx: trained as u64 },
        Some(other) => bail!("--rope-scaling {other:?}: use none, linear or yarn"),
    })
}

#[cfg(test)]
mod tests {
    use super::{rope_scaling, Device};
    use strata_model::RopeScaling;

    #[test]
    fn devices_are_named_and_others_refused() {
        assert_eq!("auto".parse::<Device>(), Ok(Device::Auto));
        assert_eq!("gpu".parse::<Device>(), Ok(Device::Cuda));
        assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
        assert!("tpu".parse::<Device>().unwrap_err().contains("use auto, cuda or cpu"));
    }

    #[test]
    fn yarn_is_the_default_past_the_trained_context() {
        assert!(
            matches!(rope_scaling(None, None, 8192, 4096).unwrap(), RopeScaling::Yarn { factor, .. } if factor == 2.0)
        );
        assert!(matches!(rope_scaling(None, None, 2048, 4096).unwrap(), RopeScaling::None));
        assert!(
            matches!(rope_scaling(Some("linear"), Some(3.0), 2048, 4096).unwrap(), RopeScaling::Linear(f) if f == 3.0)
        );
        assert!(rope_scaling(Some("ntk"), None, 2048, 4096).is_err());
        assert!(rope_scaling(None, Some(f64::NAN), 2048, 4096).is_err());
        assert!(rope_scaling(Some("yarn"), Some(0.5), 2048, 4096).is_err());
    }
}
