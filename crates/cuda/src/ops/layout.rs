//! How a product's rows are spread over the card (the matvec layouts, kernels/matvec.cu) and which
//! layout each weight type runs (the plan's [`Layouts`]). Every layout gives the same sums.

use cudarc::driver::LaunchConfig;
use strata_gguf::GgmlType;

/// The most warps that share a row (kernels/matvec.cu: a block per row).
pub(crate) const ROW_WARPS: usize = 4;
/// Warps per block in the warp layout.
pub(crate) const WARP_ROWS: u32 = 8;
/// The warp layout's short rows: a warp takes SHORT_ROWS rows (kernels/matvec.cu) of at most SHORT_COLS
/// values for a single token.
pub(crate) const SHORT_COLS: usize = 1024;
pub(crate) const SHORT_ROWS: usize = 4;
/// The warp layout's window kernels (T > 1): a warp takes MULTI_ROWS rows (kernels/matvec.cu).
pub(crate) const MULTI_ROWS: usize = 4;

/// How a product's rows are spread over the card; all give the same sums (kernels/matvec.cu), and the
/// plan picks the fastest per weight type, for the dense products and the experts' apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A block per row, its warps side by side over the row.
    Block,
    /// A warp per row, 8 rows a block.
    Warp,
    /// A few rows a block (up to 32, up to 8 warps): the block first copies its rows' bytes into shared
    /// memory with wide loads, then each warp decodes its rows from there. Needs one row to fit in shared
    /// memory.
    Staged,
    /// The staged layout with twice the rows a block (32 KB of them): fewer blocks, so a product of
    /// many rows (the GDN and attention projections) fits the card in one wave of blocks.
    Wide,
    /// The staged layout's groups of rows, several a block through two shared-memory buffers: the next
    /// group is copied (asynchronously, on sm_80+) while the warps decode this one, and the grid holds
    /// about STREAM_WARPS_PER_SM warps a multiprocessor, so copies and decoding overlap across the whole
    /// product. One token's and a window's dense products; the experts' gathers run the staged layout.
    Stream,
}

/// The stream layout's target of warps per multiprocessor: fewer blocks than the staged layout's (which
/// held 64 warps and lost to it at 26 on the H200), enough to keep each block's groups in turn.
pub(crate) const STREAM_WARPS_PER_SM: usize = 32;

/// Shared memory the staged layout may use per block (the default limit, no opt-in).
pub(crate) const STAGE_SHARED: usize = 48 << 10;
/// The staged layout takes as many rows a block (at most 32) as fill this many bytes.
pub(crate) const STAGE_TARGET: usize = 16 << 10;

impl Layout {
    pub const ALL: [Layout; 5] = [Layout::Block, Layout::Warp, Layout::Staged, Layout::Wide, Layout::Stream];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Block => "block",
            Layout::Warp => "warp",
            Layout::Staged => "staged",
            Layout::Wide => "wide",
            Layout::Stream => "stream",
        }
    }

    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether the warp layout takes `t` tokens' rows of `cols` values with its short-row kernels (a warp to
    /// SHORT_ROWS rows).
    pub(crate) fn short(t: usize, cols: usize) -> bool {
        t == 1 && cols <= SHORT_COLS
    }

    /// The kernel's name suffix.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Layout::Block => "",
            Layout::Warp => "_warp",
            Layout::Staged | Layout::Wide => "_staged",
            Layout::Stream => "_stream",
        }
    }

    /// Rows per block of the staged layout (per group of the stream layout) for rows of `row_bytes`
    /// bytes, and the shared memory they take (16 bytes either side for the copy's alignment; the stream
    /// layout's two buffers of whole 16-byte words); `None` when one row does not fit (the block layout
    /// is used instead).
    pub(crate) fn staged_rows(self, row_bytes: usize) -> Option<(usize, usize)> {
        // Up to 8 rows, a warp each; past 16, a multiple of the 8 warps, so no warp idles in a last round.
        let target = if self == Layout::Wide { 2 * STAGE_TARGET } else { STAGE_TARGET };
        let fit = target / row_bytes.max(1);
        let rows = if fit >= 16 { fit.min(32) / 8 * 8 } else { fit.clamp(1, 8) };
        let shared = match self {
            Layout::Stream => 2 * ((rows * row_bytes + 32) / 16 * 16),
            _ => rows * row_bytes + 32,
        };
        (shared <= STAGE_SHARED).then_some((rows, shared))
    }

    /// The stream layout's groups a block, for `rows` rows in groups of `rpb` (a warp a row, up to 8), on
    /// `sms` multiprocessors.
    pub(crate) fn stream_groups(rows: usize, rpb: usize, sms: usize) -> usize {
        let blocks_per_sm = (STREAM_WARPS_PER_SM / rpb.clamp(1, 8)).max(1);
        rows.div_ceil(rpb).div_ceil(blocks_per_sm * sms.max(1)).max(1)
    }

    /// The layout the experts' gathers run for this one (the stream layout has no gather kernel: its
    /// grid is the rows of one slot, few, and the staged one is its gather).
    pub(crate) fn for_gather(self) -> Layout {
        if self == Layout::Stream {
            Layout::Staged
        } else {
            self
        }
    }

    /// The layout that runs: this one, or the block layout where the staged ones cannot.
    pub(crate) fn usable(self, row_bytes: usize) -> Layout {
        match self {
            Layout::Staged | Layout::Wide | Layout::Stream if self.staged_rows(row_bytes).is_none() => Layout::Block,
            l => l,
        }
    }

    /// Whether the kernels take the rows per block (the staged layouts).
    pub(crate) fn staged(self) -> bool {
        matches!(self, Layout::Staged | Layout::Wide | Layout::Stream)
    }

    /// The kernel this layout runs for `t` tokens' rows of `cols` values (the experts' gathers with
    /// `gather`): its name's kind and the layout whose suffix it has.
    pub(crate) fn kernel(self, t: usize, cols: usize, gather: bool) -> (&'static str, Layout) {
        match (self, gather) {
            (Layout::Warp, true) if Layout::short(1, cols) => ("_gather_short", Layout::Warp),
            (_, true) => ("_gather", self),
            (Layout::Warp, false) if Layout::short(t, cols) => ("_short", self),
            (Layout::Warp, false) if t > 1 => ("_multi", self),
            // One token in the staged layouts: the kernel compiled without the window's code, so fewer
            // registers and more blocks a multiprocessor.
            (Layout::Staged | Layout::Wide, false) if t == 1 => ("_one", self),
            _ => ("", self),
        }
    }

    /// The launch of `rows` rows of `cols` values (`row_bytes` bytes each) for `t` tokens (`slots` gathered
    /// slots of one token each) on `sms` multiprocessors, and the staged layouts' rows per block or group
    /// (an extra kernel argument; 0 for the others).
    pub(crate) fn config(
        self,
        rows: usize,
        cols: usize,
        row_bytes: usize,
        (t, slots): (usize, usize),
        sms: usize,
    ) -> (LaunchConfig, usize) {
        let (grid_x, threads, shared, rpb) = match self {
            Layout::Block => (rows as u32, 32 * cols.div_ceil(8 * 32).clamp(1, ROW_WARPS) as u32, 0, 0),
            Layout::Warp => {
                let per_warp = match t {
                    1 if Layout::short(t, cols) => SHORT_ROWS,
                    1 => 1,
                    _ => MULTI_ROWS,
                };
                ((rows.div_ceil(per_warp) as u32).div_ceil(WARP_ROWS), 32 * WARP_ROWS, 0, 0)
            }
            Layout::Staged | Layout::Wide => {
                let (rpb, shared) = self.staged_rows(row_bytes).expect("usable() checked");
                (rows.div_ceil(rpb) as u32, 32 * rpb.min(8) as u32, shared as u32, rpb)
            }
            Layout::Stream => {
                let (rpb, shared) = self.staged_rows(row_bytes).expect("usable() checked");
                let blocks = rows.div_ceil(rpb).div_ceil(Layout::stream_groups(rows, rpb, sms));
                (blocks as u32, 32 * rpb.min(8) as u32, shared as u32, rpb)
            }
        };
        let cfg =
            LaunchConfig { grid_dim: (grid_x, slots as u32, 1), block_dim: (threads, 1, 1), shared_mem_bytes: shared };
        (cfg, rpb)
    }
}

/// The weight types with a GPU matrix-vector kernel.
pub const TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q2_0,
    GgmlType::Q5_0,
    GgmlType::IQ2_XS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// The kernel for a weight type, or `None` where there is none yet.
pub(crate) fn kernel(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::F32 => "matvec_f32",
        GgmlType::F16 => "matvec_f16",
        GgmlType::BF16 => "matvec_bf16",
        GgmlType::Q8_0 => "matvec_q8_0",
        GgmlType::Q4_0 => "matvec_q4_0",
        GgmlType::Q2_0 => "matvec_q2_0",
        GgmlType::Q5_0 => "matvec_q5_0",
        GgmlType::IQ2_XS => "matvec_iq2_xs",
        GgmlType::IQ3_XXS => "matvec_iq3_xxs",
        GgmlType::IQ3_S => "matvec_iq3_s",
        GgmlType::Q3_K => "matvec_q3_k",
        GgmlType::Q4_K => "matvec_q4_k",
        GgmlType::Q5_K => "matvec_q5_k",
        GgmlType::Q6_K => "matvec_q6_k",
        GgmlType::IQ4_NL => "matvec_iq4_nl",
        GgmlType::IQ4_XS => "matvec_iq4_xs",
        _ => return None,
    })
}

/// The layout of each type's products (the plan's choice): the dense ones of a single token, the dense
/// ones of a prompt window (T > 1) and the experts' apart; a type not listed runs in the block layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layouts {
    pub dense: Vec<(GgmlType, Layout)>,
    pub gather: Vec<(GgmlType, Layout)>,
    pub window: Vec<(GgmlType, Layout)>,
}

impl Layouts {
    /// Every type in one layout.
    pub fn all(layout: Layout) -> Layouts {
        let every: Vec<_> = TYPES.iter().map(|&t| (t, layout)).collect();
        Layouts { dense: every.clone(), gather: every.clone(), window: every }
    }

    /// One line: each type's layout where it is not the block one, for one token, the experts and a
    /// window ("dense: Q4_K staged, …; experts: …; windows: …").
    pub fn summary(&self) -> String {
        let list = |v: &[(GgmlType, Layout)]| {
            let named: Vec<String> = v.iter().map(|(t, l)| format!("{t} {}", l.name())).collect();
            if named.is_empty() {
                "block for all".into()
            } else {
                named.join(", ")
            }
        };
        format!("dense: {}; experts: {}; windows: {}", list(&self.dense), list(&self.gather), list(&self.window))
    }

    /// The layout of a dense product of `t` tokens.
    pub fn dense_for(&self, ty: GgmlType, t: usize) -> Layout {
        Layouts::find(if t > 1 { &self.window } else { &self.dense }, ty)
    }

    fn find(list: &[(GgmlType, Layout)], ty: GgmlType) -> Layout {
        list.iter().find(|(t, _)| *t == ty).map_or(Layout::Block, |&(_, l)| l)
    }

    pub fn dense(&self, ty: GgmlType) -> Layout {
        Layouts::find(&self.dense, ty)
    }

    pub fn gather(&self, ty: GgmlType) -> Layout {
        Layouts::find(&self.gather, ty)
    }

    /// `dense=Q6_K:warp+Q4_K:staged,gather=Q2_0:staged,window=-` (`-` for an empty list): one word, for the
    /// kept plan.
    pub fn name(&self) -> String {
        let list = |v: &[(GgmlType, Layout)]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.iter().map(|(t, l)| format!("{t}:{}", l.name())).collect::<Vec<_>>().join("+")
            }
        };
        format!("dense={},gather={},window={}", list(&self.dense), list(&self.gather), list(&self.window))
    }

    /// The inverse of [`Layouts::name`]; `None` for anything else.
    /// `STRATA_MATVEC`: one layout for every type (a layout's name), or a plan's own list
    /// (`dense=Q4_K:staged+Q8_0:warp,gather=Q2_0:warp,window=-`: a type not named takes `block`).
    pub fn forced(s: &crate::runtime::settings::Settings) -> Option<Layouts> {
        let v = s.matvec.as_deref()?;
        let l = Layout::from_name(v).map(Layouts::all).or_else(|| Layouts::parse(v));
        if l.is_none() {
            eprintln!("note: STRATA_MATVEC={v:?} is neither a layout nor a plan's list: the plan's layouts are used");
        }
        l
    }

    pub fn parse(name: &str) -> Option<Layouts> {
        let (dense, rest) = name.split_once(',')?;
        let (gather, window) = rest.split_once(',')?;
        let list = |s: &str, key: &str| -> Option<Vec<(GgmlType, Layout)>> {
            let v = s.strip_prefix(key)?;
            if v == "-" {
                return Some(Vec::new());
            }
            v.split('+')
                .map(|e| {
                    let (t, l) = e.split_once(':')?;
                    Some((GgmlType::from_name(t).filter(|t| supported(*t))?, Layout::from_name(l)?))
                })
                .collect()
        };
        Some(Layouts {
            dense: list(dense, "dense=")?,
            gather: list(gather, "gather=")?,
            window: list(window, "window=")?,
        })
    }
}

/// The types with a GPU matrix-vector kernel.
pub fn supported(ty: GgmlType) -> bool {
    kernel(ty).is_some()
}
