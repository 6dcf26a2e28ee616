//! The settings: every switch of the engine in one value, read once at start-up (the command line's
//! crates read the environment and hand a lookup to [`Settings::read`]) and passed down inside the
//! [`Gpu`](crate::Gpu). Nothing below start-up reads the environment. [`SWITCHES`] lists each switch with
//! its meaning and default; docs/DETAILS.md's switch table is checked against it (tests/switches.rs).
//!
//! Every kernel variant gives the same bits (docs/ARITHMETIC.md): a switch changes speed only, except
//! `STRATA_SKIP`, which is for timing and says so.

use std::path::PathBuf;

/// One switch: its environment name, its values and what they mean, and its default.
/// Stream slots a placed block takes unless `STRATA_STREAM_SLOTS` says otherwise.
pub const DEFAULT_STREAM_SLOTS: usize = 8;
/// Guess slots a placed block takes unless `STRATA_GUESS_SLOTS` says otherwise, guessed a stage early:
/// at 12 GiB on an H100 decode went from 42.3 to 56.7 tok/s (uniform router, medians of two) and from
/// 59.2 to 72.5 (Zipf), where 4 and 16 did no better (bench/results/2026-12-07-h100-early-guess/).
pub const DEFAULT_GUESS_SLOTS: usize = 8;
/// Tokens a prompt window takes on the GPU unless `STRATA_PROMPT_WINDOW` says otherwise: the kernels'
/// widest window (`ops::matrix::MAX_T`, which a test there checks it equals).
pub const DEFAULT_PROMPT_WINDOW: usize = 8;

pub struct Switch {
    pub name: &'static str,
    pub meaning: &'static str,
    pub default: &'static str,
}

const fn sw(name: &'static str, meaning: &'static str, default: &'static str) -> Switch {
    Switch { name, meaning, default }
}

/// Every switch the engine reads, in the order docs/DETAILS.md's table lists them.
pub const SWITCHES: &[Switch] = &[
    // The seeds' seven switches: their names and meanings are the seeds' interface.
    sw("STRATA_HC_SPLIT", "HC read: 0 plain, 1 split, 2 staged", "the plan's choice"),
    sw("STRATA_GR_UP75", "HC read: 1 the row-batched up kernel (made for sm_75), 0 not", "the plan's choice"),
    sw("STRATA_GR_DOWN_TG", "HC read: token groups of n for the split down kernel (0 none; at most 8)", "the plan's choice"),
    sw("STRATA_SM75_PERF", "1: the sm_75 variants on any card (HC split+up75+tg2, the halving scorer, the split top-k); each switch above overrides its part", "off"),
    sw("STRATA_SCORES_HALVE", "QSA scorer: 0 butterfly, 1 recursive halving", "the plan's choice"),
    sw("STRATA_TOPK_SPLIT", "QSA top-k: 0 wide (a block a query), 1 split (chunks over many blocks)", "the plan's choice"),
    sw("STRATA_QSA_CLUSTER", "QSA top-k: 1 one launch, a cluster of 8 blocks a query (sm_90+)", "the plan's choice"),
    // Other forced variants.
    sw("STRATA_SCORES_STREAM", "QSA scorer: 1 the streaming scorer", "the plan's choice"),
    sw("STRATA_MATVEC", "matvec layout: one of block, warp, staged, wide, stream for every type, or a plan's list (dense=…,gather=…,window=…)", "the plan's choice"),
    // Kill switches of default paths (0 turns the path off; the same bits either way).
    sw("STRATA_GRAPH", "0: every op issued on the stream (no graphs); lanes: print the first step's lanes; debug: say where a step's graph differs from the kept one", "graphs on"),
    sw("STRATA_GRAPH_SPLIT", "ops a step's graph holds before it is split into two launched apart (0: never split)", "the engine's default"),
    sw("STRATA_PDL", "0: plain edges inside a step's graph, no programmatic launches", "on (sm_90+)"),
    sw("STRATA_PDL_JOIN", "0: plain edges into the kernels that join the side lane", "on"),
    sw("STRATA_SIDE", "0: no side lane in a step's graph", "on"),
    sw("STRATA_OVERLAP", "0: each decode step and verify window recorded only once its tokens are known", "on"),
    sw("STRATA_CHAIN_AHEAD", "1: while drafting, the next pass's draft chain recorded while its verify window runs, for that window kept whole", "off"),
    sw("STRATA_GLU", "0: the experts' gate and up products, then the activation, as separate launches", "on"),
    sw("STRATA_DOWN_COMBINE", "0: the experts' down products and the MoE combination as two launches", "on"),
    sw("STRATA_QDOT_ONCE", "0: every block of a § qdot product quantizes its own inputs", "on"),
    sw("STRATA_QDOT_STAGE", "0: one-token § qdot products without the staged copy of their rows", "on"),
    sw("STRATA_QDOT_WINDOW_SMEM", "1: a window's § qdot products copy its quantized inputs into shared memory before their rows", "off"),
    sw("STRATA_QDOT_MMA", "1: a window's dense § qdot products by int8 tensor-core sums (sm_75+; exact, slower at T ≤ 8)", "off"),
    sw("STRATA_QDOT_SHARE", "0: windows of 2..8 tokens run the dense § qdot kernels of a row a warp, not those taking 2 or 4 rows a warp with each piece's inputs loaded once for them", "on"),
    sw("STRATA_Q2_0_PAIRS", "0: the experts' Q2_0 weights kept on the device as the file lays them out, not two blocks at a time with the scales first (each piece's codes then 4-byte aligned; the same bytes, moved)", "on"),
    sw("STRATA_COMBINE_STAGE", "0: the experts' fused down product and combination reads each slot's rows from global memory, not copied into shared memory first", "on"),
    sw("STRATA_QDOT_NARROW", "1: windows of T ≤ 2 and T ≤ 4 run dense § qdot kernels compiled for that many tokens, bounded to more blocks", "off"),
    sw("STRATA_ROUTER_QUANTIZE", "0: the experts' input quantized by a launch of its own, not by the router's", "on"),
    sw("STRATA_GDN_QUANTIZE", "0: the GDN output quantized by a launch of its own, not by the delta kernel", "on"),
    sw("STRATA_GDN_FUSE", "0: the GDN conv by its own kernel, not in the qkv product's epilogue", "on"),
    sw("STRATA_HOST_EXPERTS", "N: the card holds N routed experts a block, the host computes the rest (docs/PLACEMENT.md)", "all on the card"),
    sw("STRATA_CACHE_EVERY", "K: passes between two re-ranks of the card's expert cache (backend/cache.rs)", "8"),
    sw("STRATA_CACHE_SWAPS", "S: the most experts a re-rank of the card's expert cache copies in", "128"),
    sw("STRATA_STREAM_SLOTS", "S: experts a placed block brings over the bus a request, not held (where its experts' pages are locked)", "8"),
    sw("STRATA_GUESS_SLOTS", "G: slots a placed block fills with the experts it guesses it will need, brought over the bus before its router runs (docs/PLACEMENT.md, \"Guessed experts\"; needs stream slots; 0: none)", "8"),
    sw("STRATA_SIDE_COPY_BLOCKS", "B: the most blocks the copies over the bus take while they run beside other work (a placed block's guess slots beside its mixer, a placed window's next chunk beside this chunk's gathers), shared over their experts' projections (3..=4096)", "192"),
    sw("STRATA_GUESS_EARLY", "0: a placed block's guessed experts named by its router on its mixer's input and brought over the bus while the mixer runs. Otherwise a stage earlier, by its router on the block before's MoE input, brought over from that block's MoE on", "on"),
    sw("STRATA_GUESS_MIXER_SLOTS", "M (0..=64): with the early guess, M more guess slots a placed block fills at its mixer, by its router on the mixer's input, with the experts the early guess and the cache left out, on a lane of their own (0: none)", "0"),
    sw("STRATA_ASK_MISSES_ONLY", "0: a placed block asks the host at every request and the host counts the routings, not the card counting them and asking only for slots left to the host (13 % slower decode at 12 GiB; no placed prompt windows)", "on"),
    sw("STRATA_WINDOW_STREAM", "0: a placed block's prompt window longer than 8 tokens asks the host and streams tile by tile, not bringing each expert it does not hold over the bus once for the whole window (docs/PLACEMENT.md, \"Prompt windows\")", "on"),
    sw("STRATA_HC_LONG", "1: a prompt window longer than 8 tokens reads the streams with each HC weight read once for 32 tokens (a lane a token making each sum in § dot's order), not tile by tile", "off"),
    sw("STRATA_MOE_GROUPED", "1: a prompt window longer than 8 tokens, every expert on the card, runs its experts' products over the window's slots grouped by expert (each expert's rows unpacked once for up to 8 of its slots, int8 tensor-core sums; sm_75+), not tile by tile", "off"),
    sw("STRATA_WINDOW_OVERLAP", "0: a placed prompt window's chunks of experts copied over the bus and computed in turn, in one staging area. Otherwise two: a chunk copied into one while the chunk before is computed from the other", "on"),
    sw("STRATA_ARENA_LAYERS", "0: a recorded step's temporaries of each trunk layer from memory of its own, not from one of two areas that layer l + 2 takes again: a window's scratch 48 layers' worth rather than two, and a placed run's prompt windows 8 tokens", "on"),
    sw("STRATA_DRAFT_BY_ID", "1: a draft vocabulary of K (`--draft-vocab`) is the first K ids, not the K tokens seen most often (an A/B of the ranking)", "off"),
    sw("STRATA_PROMPT_WINDOW", "N: tokens a prompt window takes (1..=256); past the kernels' 8, each op runs over tiles of 8", "8; placed, the longest of 256, 128, 64 whose scratch stays within a sixteenth of the budget"),
    sw("STRATA_GDN_SPLIT", "1: the GDN rule of a head of 128 columns by one block, not a cluster of 2 (sm_90+); 4: a cluster of 4", "2"),
    sw("STRATA_QKV_ONCE", "0: each of attention's q, k, v products quantizes its input itself", "on"),
    sw("STRATA_KV_FUSE", "0: norm_rope then kv_store, not one launch", "on"),
    sw("STRATA_PLE_SPLIT", "0: the PLE gate by one block a token, not a thread a chunk of 8", "on"),
    sw("STRATA_PLE_WARM", "0: the PLE table is not read ahead at load", "on"),
    sw("STRATA_CPU_VECTOR", "the host's § qdot kernels: scalar, avx2 or avx512 (VNNI); a level the CPU lacks is refused", "the best the CPU has"),
    sw("STRATA_Q2_0_WIDE", "0: Q2_0 at the avx512 level by the 256-bit kernel, not the 512-bit one (ops/qdot_avx512.rs)", "on"),
    // Speed work and tools.
    sw("STRATA_DEFINES", "NAME=VALUE … (spaces or commas): macros defined before every kernel file", "none"),
    sw("STRATA_PROFILE", "1: time each op family; kernels: each kernel (synchronises: slower)", "off"),
    sw("STRATA_GAPS", "1: measure the card's idle time between a step's kernels", "off"),
    sw("STRATA_HOST_PROFILE", "1: the host's time recording each step, by op (steps still run as graphs)", "off"),
    sw("STRATA_SKIP", "NAME,PREFIX*,…: kernels left out of each step's graph, for timing only (the output is garbage)", "none"),
    sw("STRATA_BENCH_WARM", "1: `strata bench matvec` reads one weight set again (from the L2 where it fits)", "off"),
    sw("STRATA_CACHE", "where compiled kernels, plans and the built-in model are kept", "$XDG_CACHE_HOME/strata or ~/.cache/strata"),
    sw("STRATA_API_KEY", "`strata serve`: the key clients must send (as --api-key)", "none"),
];

/// What `STRATA_PROFILE` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileMode {
    /// Time each op family.
    Families,
    /// Time each kernel.
    Kernels,
}

/// `STRATA_GRAPH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphMode {
    On,
    Off,
    /// Print the first decode step's lanes.
    Lanes,
    /// Say where a step's graph first parts from the kept one of the same length.
    Debug,
}

/// The engine's switches, read once.
#[derive(Clone, Debug)]
pub struct Settings {
    pub hc_split: Option<u8>,
    pub gr_up75: Option<bool>,
    pub gr_down_tg: Option<u8>,
    pub sm75_perf: bool,
    pub scores_halve: Option<bool>,
    pub topk_split: Option<bool>,
    pub qsa_cluster: bool,
    pub scores_stream: bool,
    pub matvec: Option<String>,
    pub graph: GraphMode,
    pub graph_split: Option<usize>,
    pub pdl: bool,
    pub pdl_join: bool,
    pub side: bool,
    pub overlap: bool,
    /// `STRATA_CHAIN_AHEAD`: the next draft chain recorded while a verify window runs (speculate.rs
    /// `ChainAhead`).
    pub chain_ahead: bool,
    pub glu: bool,
    pub down_combine: bool,
    pub qdot_once: bool,
    pub qdot_stage: bool,
    pub qdot_mma: bool,
    pub qdot_window_smem: bool,
    /// `STRATA_QDOT_NARROW=1`: windows of T ≤ 2 and T ≤ 4 run the dense kernels compiled for that many
    /// tokens (`_g_w2`, `_g_w4`), bounded to more blocks a multiprocessor.
    pub qdot_narrow: bool,
    /// `STRATA_QDOT_SHARE` (on): windows of 2..8 tokens take their dense products' rows 2 or 4 a warp,
    /// each piece's inputs loaded once for them (qdot.cu's qdot_rows_share); off: a row a warp.
    pub qdot_share: bool,
    /// `STRATA_COMBINE_STAGE` (on): the fused down product and combination over inputs quantized once
    /// copies each slot's rows into shared memory where they fit (`_g_gather_combine_st`).
    pub combine_stage: bool,
    /// `STRATA_Q2_0_PAIRS` (on): the experts' Q2_0 matrices in the pair layout (ops/matrix.rs
    /// `pair_q2_0_blocks`), run by qdot.cu's `qdot_q2_0p` kernels; `0` keeps the file's layout.
    pub q2_0_pairs: bool,
    pub router_quantize: bool,
    pub gdn_quantize: bool,
    pub gdn_fuse: bool,
    /// `STRATA_GDN_SPLIT` (2): CTAs a value head of the GDN rule on sm_90 and later (2 or 4: a cluster of
    /// them, each a share of the head's columns, gdn.cu's `gdn_delta_128*_c<G>`; 1: one block a head).
    pub gdn_split: usize,
    /// `STRATA_HOST_EXPERTS=N`: routed experts a block the card holds, the rest computed by the host
    /// (ops/misses.rs); None: every expert on the card.
    pub host_experts: Option<usize>,
    /// `STRATA_CACHE_EVERY=K`: passes between two re-ranks of the card's expert cache (default 8).
    pub cache_every: usize,
    /// `STRATA_CACHE_SWAPS=S`: the most experts a re-rank copies into the card's cache (default 128).
    pub cache_swaps: usize,
    /// `STRATA_STREAM_SLOTS=S`: each placed block's stream slots, experts it does not hold brought over
    /// the bus from the locked pages and computed by the card's kernels (docs/PLACEMENT.md). Default 8:
    /// at 12 GiB it took decode from 24.9 to 46.7 tok/s (uniform router) and 32.0 to 58.6 (Zipf), where
    /// more slots gained nothing (bench/results/2026-12-07-h100-stream-slots/).
    pub stream_slots: usize,
    /// Whether `STRATA_STREAM_SLOTS` was given (its notes are said, and the parity runs'
    /// `STRATA_HOST_EXPERTS` locks the pages, only then).
    pub stream_slots_asked: bool,
    /// `STRATA_GUESS_SLOTS`: slots a placed block fills with its guessed experts (default
    /// [`DEFAULT_GUESS_SLOTS`]).
    pub guess_slots: usize,
    /// `STRATA_SIDE_COPY_BLOCKS`: blocks the copies over the bus take beside other work.
    pub side_copy_blocks: usize,
    /// `STRATA_GUESS_EARLY` (on by default): the guess a stage earlier, from the block before's MoE
    /// input, not from the block's own mixer input.
    pub guess_early: bool,
    /// `STRATA_GUESS_MIXER_SLOTS`: with the early guess, slots of a second guess at the mixer.
    pub guess_mixer_slots: usize,
    /// `STRATA_ASK_MISSES_ONLY`: placed blocks count their routings on the card.
    pub ask_misses_only: bool,
    /// `STRATA_WINDOW_STREAM`: a placed block's long prompt window brings each expert it does not hold
    /// over the bus once (ops/moe/window.rs).
    pub window_stream: bool,
    /// `STRATA_HC_LONG` (off until timed on a card): a prompt window past 8 tokens reads the streams by
    /// hc.cu's long-window kernels (ops/hc.rs `hc_read_long`), not tile by tile.
    pub hc_long: bool,
    /// `STRATA_MOE_GROUPED` (off until timed on a card): a prompt window past the kernels' 8 tokens runs its routed experts'
    /// products over its slots grouped by expert (ops/moe/grouped.rs), where the whole model is on the card.
    pub moe_grouped: bool,
    /// `STRATA_WINDOW_OVERLAP` (on by default): two staging areas for the placed prompt windows
    /// (ops/moe/window.rs): a 512-token prompt at 12 GiB 124.1 → 135.5 and 97.3 → 114.6 tok/s on an H100
    /// (bench/results/2026-12-07-h100-early-guess/).
    pub window_overlap: bool,
    /// `STRATA_ARENA_LAYERS`: the trunk's layers take their temporaries from two areas in turn
    /// (runtime/graph.rs `layer_scope`).
    pub arena_layers: bool,
    /// `STRATA_DRAFT_BY_ID`: a draft vocabulary of K is the first K ids.
    pub draft_by_id: bool,
    /// Tokens a prompt window takes (`STRATA_PROMPT_WINDOW`); None: [`DEFAULT_PROMPT_WINDOW`], or where
    /// the experts are placed, the memory plan's choice (backend/budget.rs `Window`).
    pub prompt_window: Option<usize>,
    pub qkv_once: bool,
    pub kv_fuse: bool,
    pub ple_split: bool,
    pub ple_warm: bool,
    /// `STRATA_CPU_VECTOR`: the host's vector level (None: the best the CPU has).
    pub cpu_vector: Option<strata_model::ops::vector::Vector>,
    /// `STRATA_Q2_0_WIDE`: Q2_0 at the avx512 level by the 512-bit kernel (off: the 256-bit one).
    pub q2_0_wide: bool,
    /// The `#define` lines of `STRATA_DEFINES` (NAME=VALUE … parted by spaces or commas: a kernel's
    /// compile-time variant tried without a rebuild), put before every kernel file.
    pub defines: String,
    pub profile: Option<ProfileMode>,
    pub gaps: bool,
    pub host_profile: bool,
    pub skip: String,
    pub bench_warm: bool,
    /// `STRATA_CACHE`, else `$XDG_CACHE_HOME/strata`, else `~/.cache/strata`; None: nothing kept on disk.
    pub cache: Option<PathBuf>,
}

impl Default for Settings {
    /// Every default: what runs with no switch set.
    fn default() -> Settings {
        Settings::read(&|_| None).0
    }
}

impl Settings {
    /// The prompt window asked for, else [`DEFAULT_PROMPT_WINDOW`] (a placed run's plan may choose longer).
    pub fn prompt_window(&self) -> usize {
        self.prompt_window.unwrap_or(DEFAULT_PROMPT_WINDOW)
    }

    /// The settings from `get` (a switch's value, None where unset), and a note for each value that is not
    /// one of the switch's (that switch then keeps its default).
    pub fn read(get: &dyn Fn(&str) -> Option<String>) -> (Settings, Vec<String>) {
        let mut notes = Vec::new();
        let mut r = Reader { get, notes: &mut notes };
        let window_smem = r.flag("STRATA_QDOT_WINDOW_SMEM").unwrap_or(false);
        let s = Settings {
            hc_split: r.number("STRATA_HC_SPLIT", 0..=2).map(|v| v as u8),
            gr_up75: r.flag("STRATA_GR_UP75"),
            gr_down_tg: r.number("STRATA_GR_DOWN_TG", 0..=8).map(|v| v as u8),
            sm75_perf: r.flag("STRATA_SM75_PERF").unwrap_or(false),
            scores_halve: r.flag("STRATA_SCORES_HALVE"),
            topk_split: r.flag("STRATA_TOPK_SPLIT"),
            qsa_cluster: r.flag("STRATA_QSA_CLUSTER").unwrap_or(false),
            scores_stream: r.flag("STRATA_SCORES_STREAM").unwrap_or(false),
            matvec: r.text("STRATA_MATVEC"),
            graph: r.choice(
                "STRATA_GRAPH",
                &[
                    ("1", GraphMode::On),
                    ("0", GraphMode::Off),
                    ("lanes", GraphMode::Lanes),
                    ("debug", GraphMode::Debug),
                ],
            ),
            graph_split: r.number("STRATA_GRAPH_SPLIT", 0..=usize::MAX),
            pdl: r.on("STRATA_PDL"),
            pdl_join: r.on("STRATA_PDL_JOIN"),
            side: r.on("STRATA_SIDE"),
            overlap: r.on("STRATA_OVERLAP"),
            chain_ahead: r.flag("STRATA_CHAIN_AHEAD").unwrap_or(false),
            glu: r.on("STRATA_GLU"),
            down_combine: r.on("STRATA_DOWN_COMBINE"),
            qdot_once: r.on("STRATA_QDOT_ONCE"),
            qdot_stage: r.on("STRATA_QDOT_STAGE"),
            qdot_mma: r.flag("STRATA_QDOT_MMA").unwrap_or(false),
            qdot_window_smem: window_smem,
            qdot_narrow: r.flag("STRATA_QDOT_NARROW").unwrap_or(false),
            qdot_share: r.on("STRATA_QDOT_SHARE"),
            combine_stage: r.on("STRATA_COMBINE_STAGE"),
            q2_0_pairs: r.on("STRATA_Q2_0_PAIRS"),
            router_quantize: r.on("STRATA_ROUTER_QUANTIZE"),
            gdn_quantize: r.on("STRATA_GDN_QUANTIZE"),
            gdn_fuse: r.on("STRATA_GDN_FUSE"),
            gdn_split: r.choice("STRATA_GDN_SPLIT", &[("2", 2), ("1", 1), ("4", 4)]),
            host_experts: r.number("STRATA_HOST_EXPERTS", 1..=usize::MAX),
            cache_every: r.number("STRATA_CACHE_EVERY", 1..=1 << 20).unwrap_or(8),
            cache_swaps: r.number("STRATA_CACHE_SWAPS", 0..=1 << 20).unwrap_or(128),
            stream_slots: r.number("STRATA_STREAM_SLOTS", 0..=64).unwrap_or(DEFAULT_STREAM_SLOTS),
            stream_slots_asked: r.text("STRATA_STREAM_SLOTS").is_some(),
            guess_slots: r.number("STRATA_GUESS_SLOTS", 0..=64).unwrap_or(DEFAULT_GUESS_SLOTS),
            side_copy_blocks: r.number("STRATA_SIDE_COPY_BLOCKS", 3..=4096).unwrap_or(192),
            guess_early: r.on("STRATA_GUESS_EARLY"),
            guess_mixer_slots: r.number("STRATA_GUESS_MIXER_SLOTS", 0..=64).unwrap_or(0),
            ask_misses_only: r.on("STRATA_ASK_MISSES_ONLY"),
            window_stream: r.on("STRATA_WINDOW_STREAM"),
            hc_long: r.flag("STRATA_HC_LONG").unwrap_or(false),
            moe_grouped: r.flag("STRATA_MOE_GROUPED").unwrap_or(false),
            window_overlap: r.on("STRATA_WINDOW_OVERLAP"),
            arena_layers: r.on("STRATA_ARENA_LAYERS"),
            draft_by_id: r.flag("STRATA_DRAFT_BY_ID").unwrap_or(false),
            prompt_window: r.number("STRATA_PROMPT_WINDOW", 1..=256),
            qkv_once: r.on("STRATA_QKV_ONCE"),
            kv_fuse: r.on("STRATA_KV_FUSE"),
            ple_split: r.on("STRATA_PLE_SPLIT"),
            ple_warm: r.on("STRATA_PLE_WARM"),
            q2_0_wide: r.on("STRATA_Q2_0_WIDE"),
            cpu_vector: r.text("STRATA_CPU_VECTOR").and_then(|v| match strata_model::ops::vector::Vector::parse(&v) {
                Ok(v) => Some(v),
                Err(e) => {
                    r.notes.push(format!("{e}; the best the CPU has is used"));
                    None
                }
            }),
            defines: {
                let (text, bad) = defines(&r.text("STRATA_DEFINES").unwrap_or_default());
                for b in bad {
                    r.notes
                        .push(format!("STRATA_DEFINES: `{b}` is not NAME or NAME=VALUE (letters, digits, _); ignored"));
                }
                // The compile-time form of the § qdot kernels (qdot.cu's QDOT_WINDOW_SMEM), so that without
                // the setting the kernels are the ones checked on a device.
                text + if window_smem { "#define QDOT_WINDOW_SMEM 1\n" } else { "" }
            },
            profile: match r.text("STRATA_PROFILE").as_deref() {
                None | Some("0") => None,
                Some("1") => Some(ProfileMode::Families),
                Some("kernels") => Some(ProfileMode::Kernels),
                Some(v) => r.bad("STRATA_PROFILE", v, None),
            },
            gaps: r.flag("STRATA_GAPS").unwrap_or(false),
            host_profile: r.flag("STRATA_HOST_PROFILE").unwrap_or(false),
            skip: r.text("STRATA_SKIP").unwrap_or_default(),
            bench_warm: r.flag("STRATA_BENCH_WARM").unwrap_or(false),
            cache: r.text("STRATA_CACHE").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| {
                let home = |k: &str| get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
                home("XDG_CACHE_HOME")
                    .map(|d| d.join("strata"))
                    .or_else(|| home("HOME").map(|h| h.join(".cache/strata")))
            }),
        };
        (s, notes)
    }

    /// The names among `names` that look like switches (`STRATA_…`) but are none: a misspelt switch would
    /// otherwise change nothing, silently.
    pub fn unknown<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
        // Read by the tests and the bench scripts, not by the engine.
        const NOT_SWITCHES: [&str; 6] = [
            "STRATA_REQUIRE_GPU",
            "STRATA_PTXAS",
            "STRATA_COMPILE_ONLY",
            "STRATA_MUTANTS",
            "STRATA_BIN",
            "STRATA_BUILT_AT",
        ];
        names
            .filter(|n| n.starts_with("STRATA_") && !NOT_SWITCHES.contains(n))
            .filter(|n| SWITCHES.iter().all(|s| s.name != *n))
            .collect()
    }
}

/// The `#define` lines of a `STRATA_DEFINES` value, and the entries refused.
fn defines(value: &str) -> (String, Vec<String>) {
    let word = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let (mut text, mut bad) = (String::new(), Vec::new());
    for entry in value.split(|c: char| c.is_whitespace() || c == ',').filter(|e| !e.is_empty()) {
        let (name, val) = entry.split_once('=').unwrap_or((entry, ""));
        if word(name) && !name.starts_with(|c: char| c.is_ascii_digit()) && (val.is_empty() || word(val)) {
            text += &format!("#define {name} {val}\n");
        } else {
            bad.push(entry.to_string());
        }
    }
    (text, bad)
}

/// Reads switch values, noting the ones it cannot take.
struct Reader<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
    notes: &'a mut Vec<String>,
}

impl Reader<'_> {
    fn text(&mut self, name: &str) -> Option<String> {
        debug_assert!(SWITCHES.iter().any(|s| s.name == name), "{name} is not in SWITCHES");
        (self.get)(name)
    }

    /// `v` is not a value of `name`: noted, and `keep` is used.
    fn bad<T>(&mut self, name: &str, v: &str, keep: T) -> T {
        self.notes.push(format!("{name}={v:?} is not one of its values; its default is used (docs/DETAILS.md)"));
        keep
    }

    /// One of `values` (a value's text and what it reads as), the first being the default: unset reads as
    /// it, and any other text is noted and reads as it.
    fn choice<T: Copy>(&mut self, name: &str, values: &[(&str, T)]) -> T {
        let keep = values[0].1;
        match self.text(name) {
            None => keep,
            Some(v) => match values.iter().find(|(text, _)| *text == v) {
                Some(&(_, value)) => value,
                None => self.bad(name, &v, keep),
            },
        }
    }

    /// `0` or `1`; unset is None.
    fn flag(&mut self, name: &str) -> Option<bool> {
        match self.text(name)?.as_str() {
            "0" => Some(false),
            "1" => Some(true),
            v => {
                let v = v.to_string();
                self.bad(name, &v, None)
            }
        }
    }

    /// A default path's kill switch: off only with `0`.
    fn on(&mut self, name: &str) -> bool {
        self.flag(name).unwrap_or(true)
    }

    fn number(&mut self, name: &str, range: std::ops::RangeInclusive<usize>) -> Option<usize> {
        let v = self.text(name)?;
        match v.parse::<usize>() {
            Ok(n) if range.contains(&n) => Some(n),
            _ => self.bad(name, &v, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> (Settings, Vec<String>) {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::read(&move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_are_the_paths_that_run_with_nothing_set() {
        let s = Settings::default();
        assert!(s.glu && s.down_combine && s.pdl && s.side && s.overlap && s.qdot_once && s.kv_fuse);
        assert_eq!((s.hc_split, s.scores_halve, s.graph, s.profile), (None, None, GraphMode::On, None));
    }

    #[test]
    fn values_are_read_and_bad_ones_named() {
        let (s, notes) = read(&[("STRATA_GLU", "0"), ("STRATA_HC_SPLIT", "2"), ("STRATA_PROFILE", "kernels")]);
        assert_eq!((s.glu, s.hc_split, s.profile), (false, Some(2), Some(ProfileMode::Kernels)));
        assert!(notes.is_empty(), "{notes:?}");
        let (s, notes) = read(&[("STRATA_GLU", "off"), ("STRATA_GR_DOWN_TG", "9"), ("STRATA_GRAPH", "x")]);
        assert_eq!((s.glu, s.gr_down_tg, s.graph), (true, None, GraphMode::On));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].starts_with("STRATA_GR_DOWN_TG=\"9\""), "{notes:?}");
    }

    #[test]
    fn the_window_smem_is_a_setting_and_a_kernel_macro() {
        assert_eq!(read(&[]).0.defines, "");
        let (s, _) = read(&[("STRATA_QDOT_WINDOW_SMEM", "1")]);
        assert!(s.qdot_window_smem && s.defines == "#define QDOT_WINDOW_SMEM 1\n", "{:?}", s.defines);
        let (s, _) = read(&[("STRATA_Q2_0_PAIRS", "0")]);
        assert!(!s.q2_0_pairs && s.defines.is_empty(), "{:?}", s.defines);
        assert!(Settings::default().q2_0_pairs);
    }

    #[test]
    fn the_narrow_window_kernels_are_a_setting() {
        assert!(!read(&[]).0.qdot_narrow);
        assert!(Settings::default().qdot_share && Settings::default().combine_stage);
        assert!(!read(&[("STRATA_QDOT_SHARE", "0")]).0.qdot_share);
        assert!(!read(&[("STRATA_COMBINE_STAGE", "0")]).0.combine_stage);
        assert_eq!(read(&[("STRATA_GRAPH", "lanes")]).0.graph, GraphMode::Lanes);
        let (s, notes) = read(&[("STRATA_GRAPH", "no")]);
        assert!(s.graph == GraphMode::On && notes.len() == 1 && notes[0].contains("STRATA_GRAPH"), "{notes:?}");
        let (s, notes) = read(&[("STRATA_QDOT_SHARE", "st")]);
        assert!(s.qdot_share && notes.len() == 1, "{notes:?}");
        let (s, notes) = read(&[("STRATA_QDOT_NARROW", "1")]);
        assert_eq!((s.qdot_narrow, notes.len()), (true, 0));
        let (s, notes) = read(&[("STRATA_QDOT_NARROW", "yes")]);
        assert_eq!((s.qdot_narrow, notes.len()), (false, 1), "{notes:?}");
    }

    #[test]
    fn the_gdn_split_is_one_two_or_four() {
        assert_eq!(Settings::default().gdn_split, 2);
        assert_eq!(read(&[("STRATA_GDN_SPLIT", "4")]).0.gdn_split, 4);
        assert_eq!(read(&[("STRATA_GDN_SPLIT", "1")]).0.gdn_split, 1);
        let (s, notes) = read(&[("STRATA_GDN_SPLIT", "3")]);
        assert!(s.gdn_split == 2 && notes.len() == 1 && notes[0].starts_with("STRATA_GDN_SPLIT"), "{notes:?}");
    }

    #[test]
    fn a_misspelt_switch_is_named() {
        let names = ["STRATA_GLU", "STRATA_GLUE", "PATH", "STRATA_REQUIRE_GPU"];
        assert_eq!(Settings::unknown(names.into_iter()), vec!["STRATA_GLUE"]);
    }

    #[test]
    fn every_switch_is_listed_once() {
        for (i, s) in SWITCHES.iter().enumerate() {
            assert!(SWITCHES[..i].iter().all(|o| o.name != s.name), "{} twice", s.name);
            assert!(!s.meaning.is_empty() && !s.default.is_empty(), "{}", s.name);
        }
    }

    #[test]
    fn defines_are_names_with_optional_values() {
        let (text, bad) = defines(" MATVEC_PREFETCH=1  LEVEL=0 FLAG ");
        assert_eq!(text, "#define MATVEC_PREFETCH 1\n#define LEVEL 0\n#define FLAG \n");
        assert!(bad.is_empty());
        let (text, bad) = defines("QDOT_ROW_AHEAD=0,HC_EARLY=2,, FLAG");
        assert_eq!(text, "#define QDOT_ROW_AHEAD 0\n#define HC_EARLY 2\n#define FLAG \n");
        assert!(bad.is_empty());
    }

    #[test]
    fn defines_refuse_what_could_inject_code() {
        let (text, bad) = defines("1X=2 A=b;c =3 B=(1) OK=2");
        assert_eq!(text, "#define OK 2\n");
        assert_eq!(bad, ["1X=2", "A=b;c", "=3", "B=(1)"]);
    }
}
