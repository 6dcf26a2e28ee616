//! Host side of kernels/hc.cu: the hyper-connection read and write for a window of T = 1..8 tokens.

use cudarc::driver::LaunchConfig;
use strata_model::weights::HcWeights;

use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};

pub const MAX_T: usize = 8;

/// One read's weights on the device: BF16 words as the file has them, or F32 (`f32_weights`) when any of
/// the three matrices is of another type (F32, or Q8_0 and the like dequantized on upload: exact, each
/// value the f32 that the CPU's dequantization gives).
pub struct HcGpu {
    pub n: usize,
    pub hc: usize,
    pub r: usize,
    pub f32_weights: bool,
    /// The norm's epsilon (the file's rms epsilon).
    pub eps: f32,
    /// The read's variant (the plan's).
    pub variant: HcVariant,
    norm: Buf<f32>,
    down: Buf<u8>,
    up: Buf<u8>,
    inject: Option<Buf<u8>>,
}

/// A matrix's bytes for the kernels: as stored for BF16, else every row dequantized to f32.
fn weight_bytes(m: &strata_model::ops::matvec::Matrix, f32_weights: bool) -> Vec<u8> {
    if !f32_weights {
        return m.bytes.to_vec();
    }
    let mut row = vec![0f32; m.cols];
    let mut out = Vec::with_capacity(m.rows * m.cols * 4);
    for r in 0..m.rows {
        m.row(r, &mut row);
        out.extend(row.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}

impl HcGpu {
    /// The read's weights for `hc` streams, its norm with epsilon `eps`, read by `variant`.
    pub fn upload(gpu: &Gpu, w: &HcWeights, hc: usize, eps: f32, variant: HcVariant) -> Result<HcGpu, CudaError> {
        let wide = w.norm.len();
        let (n, r) = (wide / hc, w.down.rows);
        if !wide.is_multiple_of(8) || !r.is_multiple_of(8) || !n.is_multiple_of(8) || n / 8 > 1024 || r > 512 || hc > 4
        {
            return Err(CudaError::Shape(format!(
                "HC dims: multiples of 8, n ≤ 8192, r ≤ 512, hc ≤ 4 (n {n}, r {r}, hc {hc})"
            )));
        }
        let bf16 = strata_gguf::GgmlType::BF16;
        let f32_weights = w.down.ty != bf16 || w.up.ty != bf16 || w.inject.as_ref().is_some_and(|m| m.ty != bf16);
        let upload = |m| Buf::from_host(gpu, &weight_bytes(m, f32_weights));
        Ok(HcGpu {
            n,
            hc,
            r,
            f32_weights,
            eps,
            variant,
            norm: Buf::from_host(gpu, &w.norm)?,
            down: upload(&w.down)?,
            up: upload(&w.up)?,
            inject: w.inject.as_ref().map(upload).transpose()?,
        })
    }

    /// The kernel `name` for this read's weight type.
    fn kernel(&self, name: &'static str) -> &'static str {
        crate::runtime::device::kernel_name([name, if self.f32_weights { "_f32" } else { "" }, ""])
    }
}

impl HcGpu {
    pub fn has_inject(&self) -> bool {
        self.inject.is_some()
    }
}

/// Work buffers of one read for up to MAX_T tokens.
pub struct HcScratch {
    pub xn: Buf<f32>,
    pub lo: Buf<f32>,
    pub inj: Buf<f32>,
    pub mixed: Buf<f32>,
}

impl HcScratch {
    pub fn new(gpu: &Gpu, n: usize, hc: usize, r: usize) -> Result<HcScratch, CudaError> {
        Ok(HcScratch {
            xn: Buf::zeros(gpu, MAX_T * hc * n)?,
            lo: Buf::zeros(gpu, MAX_T * r)?,
            inj: Buf::zeros(gpu, MAX_T * hc)?,
            mixed: Buf::zeros(gpu, MAX_T * n)?,
        })
    }

    /// Work buffers of one read of a long window of `t` tokens ([`hc_read_long`]), left unset: the read
    /// writes every value it reads back.
    pub fn window(gpu: &Gpu, (n, hc, r): (usize, usize, usize), t: usize) -> Result<HcScratch, CudaError> {
        Ok(HcScratch {
            xn: Buf::uninit(gpu, t * hc * n)?,
            lo: Buf::uninit(gpu, t * r)?,
            inj: Buf::uninit(gpu, t * hc)?,
            mixed: Buf::uninit(gpu, t * n)?,
        })
    }
}

/// The previous half's output and inject scalars, written into R before this read.
pub struct Pending<'a> {
    pub y: &'a Buf<f32>,
    pub inj: &'a Buf<f32>,
}

impl<'a> Pending<'a> {
    /// A pending write of a y that is made.
    pub fn of(y: &'a Buf<f32>, inj: &'a Buf<f32>) -> Pending<'a> {
        Pending { y, inj }
    }
}

/// How a read is cut into kernels; every variant gives the plain one's bits.
/// - `split` (`STRATA_HC_SPLIT` 0/1): one block per (stream, token) for the norm, one block per row for down
///   and a block per 4 outputs for up, chunk sums in parallel; else a block per token and a warp per row.
/// - `up75` (`STRATA_GR_UP75`): the row-batched up kernel (all weight loads first, lo in shared memory).
/// - `down_tg` (`STRATA_GR_DOWN_TG=n`, 0 off): token groups of n for the split down kernel.
///
/// `STRATA_SM75_PERF=1` turns on the variants measured on sm_75 (up75, token groups of 2); each switch
/// overrides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcVariant {
    pub split: bool,
    /// `STRATA_HC_SPLIT=2`: split, with the staged down kernel (activations and weights double-buffered
    /// through shared memory in tiles of 64 chunks).
    pub staged: bool,
    pub up75: bool,
    pub down_tg: u8,
}

impl HcVariant {
    pub const PLAIN: HcVariant = HcVariant { split: false, staged: false, up75: false, down_tg: 0 };
    pub const SPLIT: HcVariant = HcVariant { split: true, staged: false, up75: false, down_tg: 0 };
    /// The candidates of the start-up choice (and of the parity tools).
    pub const ALL: [HcVariant; 6] = [
        HcVariant::PLAIN,
        HcVariant::SPLIT,
        HcVariant { split: true, staged: true, up75: false, down_tg: 0 },
        HcVariant { split: true, staged: false, up75: true, down_tg: 0 },
        HcVariant { split: true, staged: false, up75: false, down_tg: 2 },
        HcVariant { split: false, staged: false, up75: true, down_tg: 0 },
    ];

    /// The variant the switches force, if any is set (`STRATA_HC_SPLIT`, `STRATA_GR_UP75`,
    /// `STRATA_GR_DOWN_TG`; `STRATA_SM75_PERF=1` means split+up75+tg2 where those are unset).
    pub fn forced(s: &crate::runtime::settings::Settings) -> Option<HcVariant> {
        let sm75 = s.sm75_perf;
        if !sm75 && s.hc_split.is_none() && s.gr_up75.is_none() && s.gr_down_tg.is_none() {
            return None;
        }
        Some(HcVariant {
            staged: s.hc_split == Some(2),
            split: s.hc_split.is_none_or(|v| v != 0),
            up75: s.gr_up75.unwrap_or(sm75),
            down_tg: s.gr_down_tg.unwrap_or(if sm75 { 2 } else { 0 }).min(8),
        })
    }

    pub fn name(self) -> String {
        let mut n = if self.staged {
            "staged"
        } else if self.split {
            "split"
        } else {
            "plain"
        }
        .to_string();
        if self.up75 {
            n.push_str("+up75");
        }
        if self.down_tg > 0 {
            n.push_str(&format!("+tg{}", self.down_tg));
        }
        n
    }
}

/// The stages of a read, for timing them one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Norm,
    Down,
    Up,
}

const WARPS: u32 = 4;
const SPLIT_THREADS: u32 = 256;
/// Chunks per tile of gr_down_staged (STAGE_CH in hc.cu).
const STAGE_CH: usize = 64;
/// Outputs per block of gr_up_split (UP_D in hc.cu).
const UP_D: usize = 4;

/// The read of `t` tokens by the weights' variant (the plan's): `r_out = R + pending write` (r_out may be r_in: pass the same pointer), then
/// `s.mixed` (t·n) and `s.inj` (t·hc, with inject rows).
#[allow(clippy::too_many_arguments)]
pub fn hc_read(
    gpu: &Gpu,
    w: &HcGpu,
    r_in: u64,
    r_out: u64,
    pending: Option<Pending>,
    t: usize,
    s: &HcScratch,
) -> Result<(), CudaError> {
    hc_read_with(gpu, w.variant, w, r_in, r_out, pending, t, s, None)
}

/// [`hc_read`] with a chosen variant; `only` runs a single stage (benches).
#[allow(clippy::too_many_arguments)]
pub fn hc_read_with(
    gpu: &Gpu,
    v: HcVariant,
    w: &HcGpu,
    r_in: u64,
    r_out: u64,
    pending: Option<Pending>,
    t: usize,
    s: &HcScratch,
    only: Option<Stage>,
) -> Result<(), CudaError> {
    if t == 0 || t > MAX_T {
        return Err(CudaError::Shape(format!("an HC read takes 1..={MAX_T} tokens, not {t}")));
    }
    let (n, hc, r) = (w.n, w.hc, w.r);
    let wide = hc * n;
    let run = |stage| only.is_none() || only == Some(stage);
    if run(Stage::Norm) {
        norm(gpu, v, w, (r_in, r_out), pending.as_ref(), s, t)?;
    }
    let n_inj = if w.inject.is_some() { hc } else { 0 };
    let rows = (r + n_inj) as u32;
    if run(Stage::Down) {
        let wi = w.inject.as_ref().map(|b| b.ptr(gpu)).unwrap_or(0);
        let mut args = vec![
            Arg::Ptr(w.down.ptr(gpu)),
            Arg::Ptr(wi),
            Arg::Ptr(s.xn.ptr(gpu)),
            Arg::Ptr(s.lo.ptr(gpu)),
            Arg::Ptr(s.inj.ptr(gpu)),
            Arg::I32(wide as i32),
            Arg::I32(r as i32),
            Arg::I32(n_inj as i32),
            Arg::I32(hc as i32),
            Arg::I32(t as i32),
        ];
        if v.staged
            && !w.f32_weights
            && (wide / 8) % STAGE_CH == 0
            && t * STAGE_CH * 8 / 4 <= 4 * SPLIT_THREADS as usize
        {
            let smem = (t * wide / 8 + 2 * t * STAGE_CH * 8) * 4 + 2 * STAGE_CH * 16;
            let f = gpu.function(&crate::ops::sources::HC_FILE, "gr_down_staged")?;
            use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_SMEM;
            f.set_attribute(MAX_SMEM, smem as i32).check("allowing gr_down_staged its shared memory")?;
            let cfg = LaunchConfig {
                grid_dim: (rows, 1, 1),
                block_dim: (SPLIT_THREADS, 1, 1),
                shared_mem_bytes: smem as u32,
            };
            launch(gpu, &f, "gr_down_staged", cfg, &args)?;
        } else {
            let (name, cfg) = match v.split {
                false => (
                    "gr_down",
                    LaunchConfig {
                        grid_dim: (rows.div_ceil(WARPS), 1, 1),
                        block_dim: (32 * WARPS, 1, 1),
                        shared_mem_bytes: 0,
                    },
                ),
                true => {
                    let tg = v.down_tg as usize;
                    args.push(Arg::I32(tg as i32));
                    let (groups, per) = if tg > 0 { (t.div_ceil(tg), tg.min(t)) } else { (1, t) };
                    (
                        "gr_down_split",
                        LaunchConfig {
                            grid_dim: (rows, groups as u32, 1),
                            block_dim: (SPLIT_THREADS, 1, 1),
                            shared_mem_bytes: (per * wide / 8) as u32 * 4,
                        },
                    )
                }
            };
            let name = w.kernel(name);
            launch(gpu, &gpu.function(&crate::ops::sources::HC_FILE, name)?, name, cfg, &args)?;
        }
    }
    if run(Stage::Up) {
        let (name, cfg) = match (v.up75, v.split) {
            (true, _) => (
                "gr_up75",
                LaunchConfig {
                    grid_dim: ((n as u32).div_ceil(WARPS), 1, 1),
                    block_dim: (32 * WARPS, 1, 1),
                    shared_mem_bytes: (t * r * 4) as u32,
                },
            ),
            (false, false) => (
                "gr_up",
                LaunchConfig {
                    grid_dim: ((n as u32).div_ceil(WARPS), 1, 1),
                    block_dim: (32 * WARPS, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            (false, true) => {
                let rows = UP_D * hc;
                let floats = t * r + rows * t * (r / 8) + rows * t;
                (
                    "gr_up_split",
                    LaunchConfig {
                        grid_dim: ((n as u32).div_ceil(UP_D as u32), 1, 1),
                        block_dim: (SPLIT_THREADS, 1, 1),
                        shared_mem_bytes: floats as u32 * 4,
                    },
                )
            }
        };
        let args = [
            Arg::Ptr(w.up.ptr(gpu)),
            Arg::Ptr(s.lo.ptr(gpu)),
            Arg::Ptr(s.xn.ptr(gpu)),
            Arg::Ptr(s.mixed.ptr(gpu)),
            Arg::I32(r as i32),
            Arg::I32(n as i32),
            Arg::I32(hc as i32),
            Arg::I32(t as i32),
        ];
        let name = w.kernel(name);
        launch(gpu, &gpu.function(&crate::ops::sources::HC_FILE, name)?, name, cfg, &args)?;
    }
    Ok(())
}

/// Tokens a block of the long-window kernels takes (a warp's lanes; hc.cu's gr_down_long, gr_up_long).
const LONG_TOKENS: usize = 32;
/// Rows a block of gr_down_long (LD_ROWS), outputs d a block of gr_up_long (LU_WARPS · LU_D), threads a block.
const LONG_DOWN_ROWS: usize = 8;
const LONG_UP_D: usize = 16;
const LONG_THREADS: u32 = 256;

/// Shared memory `gr_up_long` takes: the 32 tokens' lo, each row padded by 4 floats, then the block's hc
/// rows of each of its outputs d (BF16, or F32).
fn long_up_smem(w: &HcGpu) -> usize {
    LONG_TOKENS * (w.r + 4) * 4 + w.hc * LONG_UP_D * w.r * if w.f32_weights { 4 } else { 2 }
}

/// Whether this card can take `w`'s reads by [`hc_read_long`] (`gr_up_long`'s shared memory).
pub fn can_read_long(gpu: &Gpu, w: &HcGpu) -> bool {
    long_up_smem(w) <= gpu.smem_optin as usize
}

/// The read of a prompt window of any `t` tokens with each weight chunk read once for 32 of them
/// (`STRATA_HC_LONG`; hc.cu's long-window kernels): the split norm over every token, then `gr_down_long`
/// and `gr_up_long`, whose lanes each make a (row, token) sum in § dot's order. `s` holds `t` tokens
/// ([`HcScratch::window`]); the outputs as [`hc_read`]'s.
pub fn hc_read_long(
    gpu: &Gpu,
    w: &HcGpu,
    (r_in, r_out): (u64, u64),
    pending: Option<Pending>,
    t: usize,
    s: &HcScratch,
) -> Result<(), CudaError> {
    let (n, hc, r) = (w.n, w.hc, w.r);
    if t == 0 || s.xn.len() < t * hc * n || s.lo.len() < t * r || s.inj.len() < t * hc || s.mixed.len() < t * n {
        return Err(CudaError::Shape(format!("a long HC read of {t} tokens over buffers for fewer")));
    }
    if !can_read_long(gpu, w) {
        return Err(CudaError::Shape(format!("a long HC read of r = {r} needs more shared memory than the card has")));
    }
    norm(gpu, HcVariant::SPLIT, w, (r_in, r_out), pending.as_ref(), s, t)?;
    let groups = t.div_ceil(LONG_TOKENS) as u32;
    let n_inj = if w.inject.is_some() { hc } else { 0 };
    let i = |v: usize| Arg::I32(v as i32);
    let p = |b: &Buf<f32>| Arg::Ptr(b.ptr(gpu));
    let wi = w.inject.as_ref().map_or(0, |b| b.ptr(gpu));
    let down = [Arg::Ptr(w.down.ptr(gpu)), Arg::Ptr(wi), p(&s.xn), p(&s.lo), p(&s.inj)];
    let args = [&down[..], &[i(hc * n), i(r), i(n_inj), i(hc), i(t)]].concat();
    let cfg = LaunchConfig {
        grid_dim: ((r + n_inj).div_ceil(LONG_DOWN_ROWS) as u32, groups, 1),
        block_dim: (LONG_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let name = w.kernel("gr_down_long");
    launch(gpu, &gpu.function(&crate::ops::sources::HC_FILE, name)?, name, cfg, &args)?;
    let smem = long_up_smem(w);
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(LONG_UP_D) as u32, groups, 1),
        block_dim: (LONG_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let name = w.kernel("gr_up_long");
    let f = gpu.function(&crate::ops::sources::HC_FILE, name)?;
    if smem > 48 << 10 {
        use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_SMEM;
        f.set_attribute(MAX_SMEM, smem as i32).check("allowing gr_up_long its shared memory")?;
    }
    let up = [Arg::Ptr(w.up.ptr(gpu)), p(&s.lo), p(&s.xn), p(&s.mixed)];
    launch(gpu, &f, name, cfg, &[&up[..], &[i(r), i(n), i(hc), i(t)]].concat())
}

/// The read's first kernel: the pending write and the norms.
fn norm(
    gpu: &Gpu,
    v: HcVariant,
    w: &HcGpu,
    (r_in, r_out): (u64, u64),
    pending: Option<&Pending>,
    s: &HcScratch,
    t: usize,
) -> Result<(), CudaError> {
    let (n, hc) = (w.n, w.hc);
    let (py, pinj, has) = match &pending {
        Some(p) => (p.y.ptr(gpu), p.inj.ptr(gpu), 1),
        None => (0, 0, 0),
    };
    let args = [
        Arg::Ptr(r_in),
        Arg::Ptr(r_out),
        Arg::Ptr(py),
        Arg::Ptr(pinj),
        Arg::I32(has),
        Arg::Ptr(w.norm.ptr(gpu)),
        Arg::Ptr(s.xn.ptr(gpu)),
        Arg::I32(n as i32),
        Arg::I32(hc as i32),
        Arg::F32(w.eps),
    ];
    let (name, cfg) = match v.split {
        false => (
            "gr_norm",
            LaunchConfig { grid_dim: (t as u32, 1, 1), block_dim: (32 * hc as u32, 1, 1), shared_mem_bytes: 0 },
        ),
        true => ("gr_norm_split", split_norm_config(n, hc, t)),
    };
    launch(gpu, &gpu.function(&crate::ops::sources::HC_FILE, name)?, name, cfg, &args)
}

/// The split norm kernels' launch: a block per (stream, token), a thread per chunk of the stream.
fn split_norm_config(n: usize, hc: usize, t: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (hc as u32, t as u32, 1),
        block_dim: ((n / 8).next_multiple_of(32) as u32, 1, 1),
        shared_mem_bytes: (n / 8 + 1) as u32 * 4,
    }
}

/// `R += y·2σ(inj/hc)` for `t` tokens.
pub fn hc_write(
    gpu: &Gpu,
    r: u64,
    y: &Buf<f32>,
    inj: &Buf<f32>,
    n: usize,
    hc: usize,
    t: usize,
) -> Result<(), CudaError> {
    let f = gpu.function(&crate::ops::sources::HC_FILE, "gr_write")?;
    let total = (t * hc * n) as u32;
    let cfg = LaunchConfig { grid_dim: (total.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let args = [
        Arg::Ptr(r),
        Arg::Ptr(y.ptr(gpu)),
        Arg::Ptr(inj.ptr(gpu)),
        Arg::I32(n as i32),
        Arg::I32(hc as i32),
        Arg::I32(t as i32),
    ];
    launch(gpu, &f, "gr_write", cfg, &args)
}
