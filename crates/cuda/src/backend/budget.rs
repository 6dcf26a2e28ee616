//! What a model takes on the device: the bytes a decode step reads (its floor) and the memory it needs.

use strata_model::config::LayerKind;
use strata_model::kv::KvMode;
use strata_model::Model;

/// The bytes one decode step reads at a depth of `cells`: every weight but the embedding table (one row),
/// the host-side PLE table and the MTP block, the routed experts scaled to the chosen share, and per
/// attention layer the K and V cells it attends (all on a dense layer, `top_k` on a QSA layer) and the block
/// keys it scores, per GDN layer its state matrices read and written. The floor of a step is these bytes over the card's copy bandwidth.
pub fn decode_bytes(model: &Model, kv: KvMode, cells: usize) -> u64 {
    window_bytes(model, kv, cells, 1)
}

/// The bytes a window of `t` tokens reads at a depth of `cells`, each once (docs/SPECULATION.md): the
/// weights as a step reads them, but the routed experts at the share the window's tokens choose between
/// them (with the router spreading tokens evenly, E·(1 − (1 − k/E)^t) distinct experts of E a layer), the
/// K and V cells once for all its queries (a QSA layer's selections taken as one: the least), and per
/// GDN layer its state read and written once plus the t − 1 rewind slots a verify window writes.
pub fn window_bytes(model: &Model, kv: KvMode, cells: usize, t: usize) -> u64 {
    let c = &model.config;
    let t = t.max(1);
    let e = c.n_expert.max(1) as f64;
    let share = 1.0 - (1.0 - c.n_expert_used as f64 / e).powi(t as i32);
    let weights: f64 = model
        .gguf
        .tensors()
        .filter(|(_, t)| !matches!(t.name.as_str(), "per_layer_token_embd.weight" | "token_embd.weight"))
        .filter(|(_, t)| !t.name.contains(".nextn."))
        .map(|(_, t)| {
            let b = t.ty.bytes_for(t.n_elements).unwrap_or(0) as f64;
            if t.name.contains("_exps") {
                b * share
            } else {
                b
            }
        })
        .sum();
    let per_cell = kv.cell_bytes(c.n_head_kv * c.head_dim) as f64;
    let cells = cells + t - 1;
    let attn: f64 = c
        .kinds
        .iter()
        .map(|k| match *k {
            LayerKind::Attn { ratio: 0 } => 2.0 * per_cell * cells as f64,
            LayerKind::Attn { ratio } => {
                2.0 * per_cell * cells.min(c.idx_top_k) as f64 + 4.0 * (c.idx_dim * cells / ratio) as f64
            }
            // The recurrent matrices, read and written, and the window's slots written.
            LayerKind::Gdn => (2 + t - 1) as f64 * 4.0 * (c.ssm_heads * c.ssm_state * c.ssm_state) as f64,
        })
        .sum();
    (weights + attn) as u64
}

/// What a model takes on the device at a context of `cells`, in bytes.
pub struct DevicePlan {
    /// Every weight but the host-side PLE table and the MTP block.
    pub weights: u64,
    /// K and V in the KV mode, and the indexer's raw and block keys (f32), of every attention layer.
    pub caches: u64,
    /// The largest temporaries of a prompt window: attention scores over every cell, the logits, the
    /// expert activations, the window's streams.
    pub scratch: u64,
}

/// What a step's scratch is sized for: the tokens of a prompt window (`STRATA_PROMPT_WINDOW`; at least a
/// verify window's 8), and whether the trunk's layers take their temporaries from two areas in turn
/// (`STRATA_ARENA_LAYERS`), not each from its own.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub tokens: usize,
    pub arena_layers: bool,
    /// Whether a placed plan may choose a longer window ([`PLACED_WINDOWS`]): where none was asked for,
    /// the layers share two areas (so its scratch is a few layers' worth, not the cache's share) and the
    /// windows bring their experts over the bus (`STRATA_WINDOW_STREAM` with `STRATA_ASK_MISSES_ONLY`;
    /// and the experts pinned, which the plan decides).
    pub longer_when_placed: bool,
}

/// The windows a placed plan tries, longest first, for a prompt read where no window was asked for: a
/// placed window brings each expert it does not hold over the bus once for all its tokens, so the
/// longer, the fewer bytes a token (a 512-token prompt at 12 GiB on an H100: 52.6 tok/s in windows of 8,
/// 90.1 in 64, 132.4 in 256; bench/results/2026-12-07-h100-arena-layers/).
pub const PLACED_WINDOWS: [usize; 3] = [256, 128, 64];

/// The share of a placed plan's budget a longer window's scratch may take (a sixteenth): beyond it the
/// cache it costs would slow decode more than the window speeds the prompt.
const PLACED_SCRATCH_SHARE: u64 = 16;

impl Window {
    /// A window of `tokens`, each layer's temporaries its own.
    pub fn of(tokens: usize) -> Window {
        Window { tokens, arena_layers: false, longer_when_placed: false }
    }

    /// The settings' window.
    pub fn from_settings(s: &crate::Settings) -> Window {
        Window {
            tokens: s.prompt_window(),
            arena_layers: s.arena_layers,
            longer_when_placed: s.prompt_window.is_none() && s.arena_layers && s.window_stream && s.ask_misses_only,
        }
    }
}

pub fn plan_bytes(model: &Model, kv: KvMode, cells: usize, window: Window) -> DevicePlan {
    let layers_kept = if window.arena_layers { 2 } else { model.config.n_layer };
    let window = window.tokens.max(crate::ops::matvec::MAX_T) as u64;
    let weights: u64 = model
        .gguf
        .tensors()
        .filter(|(_, t)| t.name != "per_layer_token_embd.weight" && !t.name.contains(".nextn."))
        .map(|(_, t)| t.ty.bytes_for(t.n_elements).unwrap_or(0))
        .sum();
    let c = &model.config;
    let per_cell = kv.cell_bytes(c.n_head_kv * c.head_dim) as u64;
    let attn_layers = (0..c.n_layer).filter(|&l| c.is_attn(l)).count() as u64;
    let caches = attn_layers * cells as u64 * (2 * per_cell + 2 * 4 * c.idx_dim as u64);
    let per_token = c.n_head * cells
        + 2 * c.n_expert
        + c.n_expert_used * (3 * c.expert_ff + c.n_embd)
        + 3 * c.shexp_ff
        + 4 * c.hc * c.n_embd;
    // A step run as one graph keeps every temporary of its layers at once (graph.rs: its arena does not
    // reuse memory within a step), about this many floats a token a layer, plus a chunk of arena and one
    // of staging at least.
    let per_layer = 4 * (c.n_embd + c.hc)
        + 2 * c.n_expert
        + c.n_expert_used * (3 * c.expert_ff + c.n_embd)
        + 3 * c.shexp_ff
        + 2 * c.ssm_conv_channels()
        + 4 * c.n_head * c.head_dim
        + 4 * c.n_embd;
    // The logits: a prompt window's head runs on its last token, a verify window's on its 8 at most.
    let logits = 4 * (crate::ops::matvec::MAX_T * c.vocab) as u64;
    let arena = (layers_kept.min(c.n_layer) * per_layer) as u64 * 4 * window + logits;
    let chunks = 2 * crate::runtime::recorder::CHUNK as u64;
    let scratch = 4 * window * per_token as u64 + logits + arena.max(chunks);
    DevicePlan { weights, caches, scratch }
}

/// Where the routed experts live when the model does not fit the card (docs/PLACEMENT.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertHome {
    /// Every expert on the device, as when the budget holds the whole model.
    Device,
    /// In pinned host memory, the hottest in a VRAM cache of `slots` experts.
    Pinned { slots: usize },
    /// Mapped from the file (RAM short, or `--mmap-experts`), the hottest in a VRAM cache of `slots`.
    Mapped { slots: usize },
}

/// What a model takes under a VRAM budget, and where its routed experts go.
#[derive(Clone, Debug)]
pub struct MemoryPlan {
    /// The weights that stay on the device whatever the budget: everything but the routed experts.
    pub dense: u64,
    /// Every routed expert of the trunk and the MTP layer.
    pub experts: u64,
    /// One (layer, expert): gate, up and down, the largest of the layers' (a cache slot).
    pub slot_bytes: u64,
    /// Experts the blocks have: blocks × experts a block.
    pub expert_count: usize,
    /// MoE blocks: the trunk's layers, and the MTP layer's where the file has one.
    pub blocks: usize,
    pub caches: u64,
    pub scratch: u64,
    /// The tokens of a prompt window the scratch is sized for (a placed plan's may be longer than asked:
    /// [`PLACED_WINDOWS`]).
    pub window: usize,
    pub home: ExpertHome,
}

/// Why a plan cannot be made, in numbers.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "a VRAM budget of {budget} holds not even the part that must be on the card: dense weights {dense}, \
         caches {caches} and scratch {scratch}, {need} in all (lower --max-context, use --kv int8, or run on the \
         CPU)"
    )]
    TooSmall { budget: Gib, dense: Gib, caches: Gib, scratch: Gib, need: Gib },
}

/// A placed plan's prompt window and its scratch (`scratch_of`): where `window` allows a longer one and
/// the experts are pinned (mapped, the windows cannot stream and a longer one only costs scratch), the
/// longest of [`PLACED_WINDOWS`] whose scratch stays within [`PLACED_SCRATCH_SHARE`] of the `budget` and
/// fits beside the `fixed` part; else the asked window.
fn placed_window(
    window: Window,
    mapped: bool,
    (budget, fixed): (u64, u64),
    scratch_of: impl Fn(usize) -> u64,
) -> (usize, u64) {
    let longer = PLACED_WINDOWS
        .iter()
        .filter(|_| window.longer_when_placed && !mapped)
        .map(|&tokens| (tokens, scratch_of(tokens)))
        .find(|&(_, scratch)| scratch <= budget / PLACED_SCRATCH_SHARE && fixed + scratch <= budget);
    longer.unwrap_or_else(|| (window.tokens, scratch_of(window.tokens)))
}

/// Bytes shown in GiB with two decimals.
#[derive(Clone, Copy, Debug)]
pub struct Gib(pub u64);

impl std::fmt::Display for Gib {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{:.2} GiB", self.0 as f64 / (1u64 << 30) as f64)
    }
}

/// Bytes of the routed experts a host keeps free for everything else when it pins them.
pub const HOST_RESERVE: u64 = 4 << 30;

/// The plan for a VRAM `budget` and `host_free` bytes of available RAM: the whole model on the card
/// where it fits; else the dense part, caches and scratch on the card, the experts in pinned RAM where
/// they fit beside [`HOST_RESERVE`] (or left mapped from the file, where they do not or `map` asks: the
/// whole model still goes on the card where it fits), and a VRAM cache of as many experts as the rest of
/// the budget holds.
pub fn memory_plan(
    model: &Model,
    kv: KvMode,
    cells: usize,
    budget: u64,
    host_free: u64,
    (map, window): (bool, Window),
) -> Result<MemoryPlan, PlanError> {
    let c = &model.config;
    let all = plan_bytes(model, kv, cells, window);
    // The trunk's blocks and the MTP layer's (block n_layer, when the file has one): each is placed.
    let routed = |name: &str| name.contains("_exps") && !name.contains(".nextn.");
    let mut per_layer = vec![0u64; c.n_layer + 1];
    for (_, t) in model.gguf.tensors().filter(|(_, t)| routed(&t.name)) {
        let layer = t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|l| l.parse().ok());
        if let Some(l) = layer.filter(|&l: &usize| l <= c.n_layer) {
            per_layer[l] += t.ty.bytes_for(t.n_elements).unwrap_or(0);
        }
    }
    let blocks = c.n_layer + usize::from(per_layer[c.n_layer] > 0);
    let experts: u64 = per_layer.iter().sum();
    let slot_bytes = per_layer.iter().map(|b| b / c.n_expert.max(1) as u64).max().unwrap_or(0);
    let dense = all.weights - experts;
    let fixed = dense + all.caches + all.scratch;
    let plan = |home, (tokens, scratch)| MemoryPlan {
        dense,
        experts,
        slot_bytes,
        expert_count: blocks * c.n_expert,
        blocks,
        caches: all.caches,
        scratch,
        window: tokens,
        home,
    };
    if fixed > budget {
        let (budget, dense, caches, scratch, need) =
            (Gib(budget), Gib(dense), Gib(all.caches), Gib(all.scratch), Gib(fixed));
        return Err(PlanError::TooSmall { budget, dense, caches, scratch, need });
    }
    if fixed + experts <= budget {
        return Ok(plan(ExpertHome::Device, (window.tokens, all.scratch)));
    }
    // Pinned, a placed window brings its experts over the bus (mapped, it asks the host tile by tile, and
    // a longer window only costs scratch).
    let mapped = map || experts + HOST_RESERVE > host_free;
    let scratch_of = |tokens| plan_bytes(model, kv, cells, Window { tokens, ..window }).scratch;
    let (tokens, scratch) = placed_window(window, mapped, (budget, dense + all.caches), scratch_of);
    let fixed = dense + all.caches + scratch;
    let slots = ((budget - fixed) / slot_bytes.max(1)).min((blocks * c.n_expert) as u64) as usize;
    let home = if mapped { ExpertHome::Mapped { slots } } else { ExpertHome::Pinned { slots } };
    Ok(plan(home, (tokens, scratch)))
}

impl MemoryPlan {
    /// Experts a MoE block holds on the card under this plan: None when every expert is on the card,
    /// else the cache's slots shared evenly over the blocks, at least one a block.
    pub fn per_block(&self) -> Option<usize> {
        match self.home {
            ExpertHome::Device => None,
            ExpertHome::Pinned { slots } | ExpertHome::Mapped { slots } => Some((slots / self.blocks.max(1)).max(1)),
        }
    }

    /// The VRAM the plan takes.
    pub fn device_bytes(&self) -> u64 {
        let cache = match self.home {
            ExpertHome::Device => self.experts,
            ExpertHome::Pinned { slots } | ExpertHome::Mapped { slots } => slots as u64 * self.slot_bytes,
        };
        self.dense + cache + self.caches + self.scratch
    }
}

impl std::fmt::Display for MemoryPlan {
    /// The plan in numbers, as `strata run` prints it at start.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let (dense, caches, scratch) = (Gib(self.dense), Gib(self.caches), Gib(self.scratch));
        write!(f, "VRAM {}: dense weights {dense}, ", Gib(self.device_bytes()))?;
        match self.home {
            ExpertHome::Device => write!(f, "experts {} (all {})", Gib(self.experts), self.expert_count)?,
            ExpertHome::Pinned { slots } | ExpertHome::Mapped { slots } => write!(
                f,
                "expert cache {} ({slots} of {} experts, {:.1} %)",
                Gib(slots as u64 * self.slot_bytes),
                self.expert_count,
                100.0 * slots as f64 / self.expert_count.max(1) as f64
            )?,
        }
        write!(f, ", KV and indexer caches {caches}, scratch {scratch} (prompt windows of {})", self.window)?;
        match self.home {
            ExpertHome::Device => Ok(()),
            ExpertHome::Pinned { .. } => write!(f, "; host RAM: experts {} pinned", Gib(self.experts)),
            ExpertHome::Mapped { .. } => write!(f, "; host: experts {} mapped from the file", Gib(self.experts)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the layers' temporaries in two areas taken in turn (`STRATA_ARENA_LAYERS`), a long window's
    /// scratch keeps two layers' worth of them, not every layer's: what it saves grows with the window.
    #[test]
    fn two_areas_of_layers_keep_a_long_windows_scratch_small() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
        let model = Model::open(path, strata_model::RopeScaling::None).unwrap();
        let n_layer = model.config.n_layer as u64;
        assert!(n_layer > 2, "a model of more than two layers");
        let scratch = |tokens, arena_layers| {
            plan_bytes(&model, KvMode::F16, 4096, Window { tokens, arena_layers, longer_when_placed: false }).scratch
        };
        // Windows long enough that the arena passes its two chunks' minimum either way.
        let (a, b) = (4096, 8192);
        assert!(scratch(a, true) > 2 * crate::runtime::recorder::CHUNK as u64, "{}", scratch(a, true));
        let (saved_a, saved_b) = (scratch(a, false) - scratch(a, true), scratch(b, false) - scratch(b, true));
        assert!(saved_a > 0, "a long window keeps fewer layers' temporaries");
        assert_eq!(saved_b, 2 * saved_a, "the saving a token's: (n_layer − 2) layers' temporaries");
        // Where the plan is not asked for it, every layer keeps its own (the default).
        assert_eq!(scratch(256, false), plan_bytes(&model, KvMode::F16, 4096, Window::of(256)).scratch);
    }

    /// A placed plan reads prompts in the longest of [`PLACED_WINDOWS`] whose scratch stays within its
    /// share of the budget; where none does, the window asked for (8 unless named).
    #[test]
    fn placed_plans_take_the_longest_window_their_share_holds() {
        let gib = 1u64 << 30;
        // Scratch growing with the window: 3 MiB a token.
        let scratch = |tokens: usize| tokens as u64 * (3 << 20);
        let free = Window { tokens: 8, arena_layers: true, longer_when_placed: true };
        let pick = |mapped, budget, fixed| placed_window(free, mapped, (budget, fixed), scratch).0;
        assert_eq!(pick(false, 12 * gib, 5 * gib), 256);
        // 256's 768 MiB passes a sixteenth of 10 GiB (640 MiB); 128's 384 does not.
        assert_eq!(pick(false, 10 * gib, 5 * gib), 128);
        assert_eq!(pick(false, 4 * gib, gib), 64);
        assert_eq!(pick(false, 2 * gib, gib), 8, "a sixteenth holds not even 64's 192 MiB");
        // Within the share, but not beside the fixed part.
        assert_eq!(pick(false, 12 * gib, 12 * gib - scratch(200)), 128);
        // Mapped, or a window asked for: the asked one, with its own scratch.
        assert_eq!(pick(true, 12 * gib, 5 * gib), 8);
        let asked = Window { tokens: 16, longer_when_placed: false, ..free };
        assert_eq!(placed_window(asked, false, (12 * gib, 5 * gib), scratch), (16, scratch(16)));
        assert_eq!(placed_window(free, false, (12 * gib, 5 * gib), scratch), (256, scratch(256)));

        // In the plan: the built-in model's scratch is its arena's two chunks at least (128 MiB), so a
        // budget sixteen times that is needed; below it the window stays the asked one.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
        let model = Model::open(path, strata_model::RopeScaling::None).unwrap();
        let (ram, cells) = (64u64 << 30, 4096);
        let whole = memory_plan(&model, KvMode::F16, cells, u64::MAX / 2, ram, (false, free)).unwrap();
        assert_eq!((whole.home, whole.window), (ExpertHome::Device, 8));
        let at16 = plan_bytes(&model, KvMode::F16, cells, Window { tokens: 16, ..free }).scratch;
        let budget = whole.dense + whole.caches + at16 + whole.experts / 10;
        let plan = memory_plan(&model, KvMode::F16, cells, budget, ram, (false, free)).unwrap();
        assert!(matches!(plan.home, ExpertHome::Pinned { .. }), "{plan}");
        let expected = placed_window(free, false, (budget, plan.dense + plan.caches), |tokens| {
            plan_bytes(&model, KvMode::F16, cells, Window { tokens, ..free }).scratch
        });
        assert_eq!((plan.window, plan.scratch), expected, "{plan}");
        assert!(plan.to_string().contains(&format!("prompt windows of {}", plan.window)), "{plan}");
        assert_eq!(memory_plan(&model, KvMode::F16, cells, budget, ram, (false, asked)).unwrap().window, 16);
    }

    /// A window's floor: one token's is the decode step's; each token more adds its share of experts
    /// not yet chosen, its KV cell and a GDN slot, but never a whole step's weights again.
    #[test]
    fn a_window_reads_the_weights_once_and_the_experts_its_tokens_choose() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
        let model = Model::open(path, strata_model::RopeScaling::None).unwrap();
        let c = &model.config;
        let step = decode_bytes(&model, KvMode::F16, 1000);
        assert_eq!(window_bytes(&model, KvMode::F16, 1000, 1), step);
        let experts: f64 = model
            .gguf
            .tensors()
            .filter(|(_, t)| t.name.contains("_exps") && !t.name.contains(".nextn."))
            .map(|(_, t)| t.ty.bytes_for(t.n_elements).unwrap() as f64)
            .sum();
        let gdn_state = 4 * c.ssm_heads * c.ssm_state * c.ssm_state;
        let gdn_layers = c.kinds.iter().filter(|k| matches!(k, LayerKind::Gdn)).count();
        let mut last = step;
        for t in 2..=8 {
            let b = window_bytes(&model, KvMode::F16, 1000, t);
            assert!(b > last && b < step * t as u64, "T = {t}: {b} bytes against a step's {step}");
            // What the window adds over a step: the experts its other tokens choose, at most (t − 1)
            // tokens' worth, its cells and the GDN slots.
            let share = 1.0 - (1.0 - c.n_expert_used as f64 / c.n_expert as f64).powi(t as i32);
            let more_experts = experts * (share - c.n_expert_used as f64 / c.n_expert as f64);
            let slots = ((t - 1) * gdn_layers * gdn_state) as f64;
            let extra = (b - step) as f64;
            assert!(extra >= more_experts + slots, "T = {t}: {extra} added bytes");
            assert!(
                extra <= more_experts + slots + 1e6,
                "T = {t}: {extra} added bytes, more than experts, slots and cells"
            );
            last = b;
        }
    }

    /// Each budget gets its plan: the whole model, a cache of what the rest holds (pinned or mapped by
    /// the RAM), or a one-line refusal in numbers; a plan never takes more VRAM than its budget.
    #[test]
    fn memory_plans_follow_the_budget_and_the_ram() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
        let model = Model::open(path, strata_model::RopeScaling::None).unwrap();
        let c = &model.config;
        let ram = 64u64 << 30;
        let whole = memory_plan(&model, KvMode::F16, 4096, u64::MAX / 2, ram, (false, Window::of(8))).unwrap();
        assert_eq!(whole.home, ExpertHome::Device);
        assert_eq!(whole.device_bytes(), {
            let p = plan_bytes(&model, KvMode::F16, 4096, Window::of(8));
            p.weights + p.caches + p.scratch
        });
        // The trunk's blocks and the MTP layer's: each placed.
        assert_eq!(whole.blocks, c.n_layer + usize::from(model.weights.mtp.is_some()));
        assert_eq!(whole.expert_count, whole.blocks * c.n_expert);
        assert!(whole.experts > 0 && whole.dense > 0);
        assert_eq!(whole.slot_bytes * whole.expert_count as u64, whole.experts, "one type a layer");
        let fixed = whole.dense + whole.caches + whole.scratch;
        // A budget for the fixed part and a tenth of the experts.
        let budget = fixed + whole.experts / 10;
        let tenth = memory_plan(&model, KvMode::F16, 4096, budget, ram, (false, Window::of(8))).unwrap();
        let slots = (whole.experts / 10 / whole.slot_bytes) as usize;
        assert_eq!(tenth.home, ExpertHome::Pinned { slots });
        assert!(tenth.device_bytes() <= budget);
        let text = tenth.to_string();
        assert!(text.contains(&format!("{slots} of {} experts", whole.expert_count)), "{text}");
        assert!(text.contains("pinned"), "{text}");
        // RAM too short to pin them, or the map asked for: mapped, the same cache.
        let short = memory_plan(&model, KvMode::F16, 4096, budget, whole.experts, (false, Window::of(8))).unwrap();
        assert_eq!(short.home, ExpertHome::Mapped { slots });
        let asked = memory_plan(&model, KvMode::F16, 4096, budget, ram, (true, Window::of(8))).unwrap();
        assert_eq!(asked.home, ExpertHome::Mapped { slots });
        let fits = memory_plan(&model, KvMode::F16, 4096, u64::MAX / 2, ram, (true, Window::of(8))).unwrap();
        assert_eq!(fits.home, ExpertHome::Device, "the map asked for, but the whole model fits the card");
        // Experts a block holds: none named when all are on the card, else the cache shared out.
        assert_eq!(whole.per_block(), None);
        assert_eq!(tenth.per_block(), Some((slots / whole.blocks).max(1)));
        let of = |slots, blocks| MemoryPlan { home: ExpertHome::Mapped { slots }, blocks, ..whole.clone() };
        assert_eq!(of(3, 48).per_block(), Some(1));
        assert_eq!(of(100, 48).per_block(), Some(2));
        assert_eq!(of(100, 49).per_block(), Some(2));
        // Not even the fixed part: refused, in numbers.
        let err =
            memory_plan(&model, KvMode::F16, 4096, fixed - 1, ram, (false, Window::of(8))).unwrap_err().to_string();
        assert!(err.contains("not even") && err.contains("GiB in all"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
}
