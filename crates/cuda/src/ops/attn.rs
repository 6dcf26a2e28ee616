//! Host side of kernels/attn.cu: an attention layer (spec §5) for a window of T = 1..8 tokens on the
//! device — QSA with its block indexer, or dense when the block size is 0 — the twin of
//! strata_model::layers::qsa (the same bits). The cache holds `capacity` cells, allocated up front.

use cudarc::driver::LaunchConfig;
use strata_model::kv::{KvMode, KvStore, INT8_GROUP};
use strata_model::ops::act::rsqrt;
use strata_model::ops::dot::CHUNK;
use strata_model::ops::rope::Rope;
use strata_model::state::QsaState;
use strata_model::weights::AttnWeights;

use crate::ops::matvec::{matvec, matvec_at, matvec_pre, MatrixGpu, MAX_T};
use crate::ops::qsa::{ScoresVariant, TopkVariant};
use crate::ops::variants::Variants;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// The geometry an attention layer needs.
#[derive(Clone, Copy, Debug)]
pub struct AttnDims {
    pub hq: usize,
    pub hkv: usize,
    pub dh: usize,
    pub rot: usize,
    pub hi: usize,
    pub di: usize,
    pub top_k: usize,
    /// The q/k and indexer norms' epsilon (the file's `attention.layer_norm_rms_epsilon`).
    pub eps: f32,
}

pub struct AttnGpu {
    pub dims: AttnDims,
    q: MatrixGpu,
    k: MatrixGpu,
    v: MatrixGpu,
    o: MatrixGpu,
    q_norm: Buf<f32>,
    k_norm: Buf<f32>,
    /// The indexer: q and k projections and norms (absent on a dense layer without them).
    idx: Option<(MatrixGpu, MatrixGpu, Buf<f32>, Buf<f32>)>,
    /// The selection's scorer and top-k (the plan's).
    selection: (ScoresVariant, TopkVariant),
}

/// One K or V cache on the device in a KV mode.
pub struct KvGpu {
    mode: KvMode,
    halves: Buf<u16>,
    codes: Buf<i8>,
    scales: Buf<u16>,
    floats: Buf<f32>,
}

impl KvGpu {
    fn new(gpu: &Gpu, mode: KvMode, dim: usize, cells: usize) -> Result<KvGpu, CudaError> {
        let (h, c, s, f) = match mode {
            KvMode::F16 => (cells * dim, 1, 1, 1),
            KvMode::Int8 => (1, cells * dim, cells * dim / 64, 1),
            KvMode::F32 => (1, 1, 1, cells * dim),
        };
        Ok(KvGpu {
            mode,
            halves: Buf::zeros(gpu, h)?,
            codes: Buf::zeros(gpu, c)?,
            scales: Buf::zeros(gpu, s)?,
            floats: Buf::zeros(gpu, f)?,
        })
    }

    fn mode_id(&self) -> i32 {
        match self.mode {
            KvMode::F16 => 0,
            KvMode::Int8 => 1,
            KvMode::F32 => 2,
        }
    }

    /// The first `cells` cells as the CPU's store holds them.
    fn download(&self, gpu: &Gpu, dim: usize, cells: usize) -> Result<KvStore, CudaError> {
        let n = cells * dim;
        let (h, c, s, f) = match self.mode {
            KvMode::F16 => (n, 0, 0, 0),
            KvMode::Int8 => (0, n, n / INT8_GROUP, 0),
            KvMode::F32 => (0, 0, 0, n),
        };
        let parts = (
            self.halves.read_at(gpu, 0, h)?,
            self.codes.read_at(gpu, 0, c)?,
            self.scales.read_at(gpu, 0, s)?,
            self.floats.read_at(gpu, 0, f)?,
        );
        KvStore::from_parts(self.mode, dim, parts.0, parts.1, parts.2, parts.3, cells).map_err(CudaError::Shape)
    }

    fn zero(&self, gpu: &Gpu) -> Result<(), CudaError> {
        self.halves.zero(gpu)?;
        self.codes.zero(gpu)?;
        self.scales.zero(gpu)?;
        self.floats.zero(gpu)
    }

    fn upload(&mut self, gpu: &Gpu, store: &KvStore) -> Result<(), CudaError> {
        let (h, c, s, f) = store.parts();
        self.halves.write_at(gpu, 0, h)?;
        self.codes.write_at(gpu, 0, c)?;
        self.scales.write_at(gpu, 0, s)?;
        self.floats.write_at(gpu, 0, f)
    }

    fn args(&self, gpu: &Gpu) -> [Arg; 4] {
        [self.halves.ptr(gpu), self.codes.ptr(gpu), self.scales.ptr(gpu), self.floats.ptr(gpu)].map(Arg::Ptr)
    }
}

/// An attention layer's state on the device: the caches, the indexer's raw keys (every cell's) and the
/// complete blocks' keys, and the cells held.
pub struct AttnStateGpu {
    k: KvGpu,
    v: KvGpu,
    raw: Buf<f32>,
    blocks: Buf<f32>,
    pub cells: usize,
    pub capacity: usize,
}

impl AttnGpu {
    /// The layer's weights, its products and selection to run in `v`'s variants.
    pub fn upload(gpu: &Gpu, w: &AttnWeights, dims: AttnDims, v: &Variants) -> Result<AttnGpu, CudaError> {
        let AttnDims { dh, rot, di, hq, hkv, .. } = dims;
        if !dh.is_multiple_of(8) || !di.is_multiple_of(8) || rot > dh || rot > di || hq % hkv != 0 {
            return Err(CudaError::Shape(format!("attention dims: dh {dh}, di {di}, rot {rot}, heads {hq}/{hkv}")));
        }
        let idx = match &w.indexer {
            Some(i) => Some((
                MatrixGpu::upload(gpu, &i.q, &v.layouts)?,
                MatrixGpu::upload(gpu, &i.k, &v.layouts)?,
                Buf::from_host(gpu, &i.q_norm)?,
                Buf::from_host(gpu, &i.k_norm)?,
            )),
            None => None,
        };
        Ok(AttnGpu {
            dims,
            q: MatrixGpu::upload(gpu, &w.q, &v.layouts)?,
            k: MatrixGpu::upload(gpu, &w.k, &v.layouts)?,
            v: MatrixGpu::upload(gpu, &w.v, &v.layouts)?,
            o: MatrixGpu::upload(gpu, &w.o, &v.layouts)?,
            q_norm: Buf::from_host(gpu, &w.q_norm)?,
            k_norm: Buf::from_host(gpu, &w.k_norm)?,
            idx,
            selection: (v.scores, v.topk),
        })
    }

    pub fn new_state(&self, gpu: &Gpu, mode: KvMode, capacity: usize) -> Result<AttnStateGpu, CudaError> {
        let dim = self.dims.hkv * self.dims.dh;
        if mode == KvMode::Int8 && !dim.is_multiple_of(64) {
            return Err(CudaError::Shape(format!("int8 KV needs whole groups of 64 ({dim})")));
        }
        // The indexer's keys only where there is an indexer (a dense layer, such as the MTP layer's
        // cache of the whole context, keeps none).
        let keys = |n: usize| if self.idx.is_some() { Buf::zeros(gpu, n) } else { Ok(Buf::empty()) };
        Ok(AttnStateGpu {
            k: KvGpu::new(gpu, mode, dim, capacity)?,
            v: KvGpu::new(gpu, mode, dim, capacity)?,
            raw: keys(capacity * self.dims.di)?,
            blocks: keys(capacity * self.dims.di)?,
            cells: 0,
            capacity,
        })
    }
}

impl AttnGpu {
    /// A layer's state as the CPU holds it (checkpoints): the caches' cells, and on a QSA layer of block
    /// size `ratio` the complete blocks' keys and the raw keys of the incomplete block.
    pub fn download_state(&self, gpu: &Gpu, st: &AttnStateGpu, ratio: usize) -> Result<QsaState, CudaError> {
        let (dim, di, cells) = (self.dims.hkv * self.dims.dh, self.dims.di, st.cells);
        let (raw, blocks) = match ratio {
            0 => (Vec::new(), Vec::new()),
            r => {
                let done = cells / r;
                (st.raw.read_at(gpu, done * r * di, (cells - done * r) * di)?, st.blocks.read_at(gpu, 0, done * di)?)
            }
        };
        Ok(QsaState { k: st.k.download(gpu, dim, cells)?, v: st.v.download(gpu, dim, cells)?, raw, blocks })
    }

    /// A layer's state from the CPU's, in a cache of `capacity` cells.
    /// A layer's state written over `st` from the CPU's (a checkpoint restored in place: no second set of
    /// caches on the card). Every buffer is zeroed first, so the cells past the saved ones read as a fresh
    /// state's do.
    pub fn load_state(&self, gpu: &Gpu, st: &mut AttnStateGpu, q: &QsaState, ratio: usize) -> Result<(), CudaError> {
        let cells = q.k.len();
        if cells > st.capacity {
            return Err(CudaError::Shape(format!("the saved context holds {cells} cells, more than {}", st.capacity)));
        }
        let di = self.dims.di;
        let (raw, blocks) = if ratio > 0 { ((cells % ratio) * di, cells / ratio * di) } else { (0, 0) };
        if q.raw.len() != raw || q.blocks.len() != blocks || q.v.len() != cells {
            return Err(CudaError::Shape(format!(
                "a saved attention layer of {cells} cells has arrays of other sizes"
            )));
        }
        if q.k.mode() != st.k.mode || q.v.mode() != st.v.mode {
            return Err(CudaError::Shape(format!("a saved {:?} cache into a {:?} one", q.k.mode(), st.k.mode)));
        }
        for kv in [&st.k, &st.v] {
            kv.zero(gpu)?;
        }
        for keys in [&st.raw, &st.blocks].into_iter().filter(|b| !b.is_empty()) {
            keys.zero(gpu)?;
        }
        st.k.upload(gpu, &q.k)?;
        st.v.upload(gpu, &q.v)?;
        if ratio > 0 {
            st.raw.write_at(gpu, (cells - cells % ratio) * di, &q.raw)?;
            st.blocks.write_at(gpu, 0, &q.blocks)?;
        }
        st.cells = cells;
        Ok(())
    }
}

fn warps_cfg(warps: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (warps.div_ceil(4) as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 }
}

/// Rope rows (cos, sin pairs) of the given positions as one flat buffer.
pub fn rope_rows(gpu: &Gpu, rope: &Rope, positions: impl Iterator<Item = usize>) -> Result<Buf<f32>, CudaError> {
    let v: Vec<f32> = positions.flat_map(|p| rope.row(p as u64)).flat_map(|(c, s)| [c, s]).collect();
    Buf::from_host(gpu, &v)
}

/// How the window's tokens choose their cells.
#[derive(Clone, Copy, Debug)]
pub enum Cells {
    /// QSA with blocks of this many cells.
    Qsa(usize),
    /// Every cell, at most the last `window` (the dense layers: `usize::MAX`; the MTP layer: 32,768).
    Dense(usize),
}

/// The cells a dense layer's score rows are sized for, rounded up to (see `attention`).
const SBUF_CELLS: usize = 4096;

/// The layer's output for the window's inputs `x` (T rows of n), appended at cells `st.cells, …` and roped
/// with `rows`, the [`rope_rows`] of the window's positions (the trunk's cells are its positions; the MTP
/// layer's cache holds only the drafted positions). Every attention layer of a window shares one `rows`.
pub fn attention(
    gpu: &Gpu,
    w: &AttnGpu,
    st: &mut AttnStateGpu,
    x: &Buf<f32>,
    t: usize,
    cells: Cells,
    (rope, rows): (&Rope, &Buf<f32>),
) -> Result<Buf<f32>, CudaError> {
    if !(1..=MAX_T).contains(&t) || st.cells + t > st.capacity {
        return Err(CudaError::Shape(format!("a window of {t} tokens at cell {} of {}", st.cells, st.capacity)));
    }
    let d = w.dims;
    let (pos, i) = (st.cells, |v: usize| Arg::I32(v as i32));
    let n_cells: Vec<i32> = (1..=t).map(|j| (pos + j) as i32).collect();
    // The indexer's selection on the step graph's side lane (`Gpu::side`): it reads x and the indexer's
    // own keys, and writes only those and its outputs, beside the projections and the KV append, which
    // it does not read.
    let selected = match cells {
        Cells::Qsa(r) => Some(gpu.side(|| select(gpu, w, st, x, t, r, rope, &n_cells, rows))?),
        Cells::Dense(_) => None,
    };
    let (qg, q) = project(gpu, w, st, x, t, rows, true)?;
    gpu.join()?;
    let (ids, ids_stride, count, lo) = match (selected, cells) {
        // With the selection's ids the kernels never read lo (attend_cell), so it is left unset.
        (Some((ids, stride, count)), _) => (Some(ids), stride, count, Buf::<i32>::uninit(gpu, t)?),
        (None, Cells::Qsa(_)) => return Err(CudaError::Shape("a QSA layer made no selection".into())),
        (None, Cells::Dense(window)) => {
            let count_host: Vec<i32> = n_cells.iter().map(|&n| (n as usize).min(window) as i32).collect();
            let lo: Vec<i32> = n_cells.iter().zip(&count_host).map(|(n, c)| n - c).collect();
            (None, 0, Buf::from_host(gpu, &count_host)?, Buf::from_host(gpu, &lo)?)
        }
    };
    // The most cells a token of the window attends to; the scores, the sum's parts and the sum per head.
    let max_n = if ids.is_some() { ids_stride } else { pos + t };
    // Rows of whole chunks, so that each row starts 32-byte aligned and the values kernel reads a chunk's
    // e_j by two 16-byte loads. A dense layer's rows are sized for its cells rounded up to SBUF_CELLS:
    // the arena's later buffers then keep their addresses from one step to the next (a step graph
    // matches its copies and zeroings by address; the MTP layer's cache grows every step).
    let span = if ids.is_some() { max_n } else { max_n.next_multiple_of(SBUF_CELLS) };
    let sbuf_stride = (span + span.div_ceil(CHUNK) + 1).next_multiple_of(CHUNK);
    // Left unset: per (token, head) attend_scores writes the n scores (its grid covers max_n ≥ n),
    // attend_softmax the chunks' parts and the sum after them, and every reader stays below those.
    let sbuf = Buf::<f32>::uninit(gpu, t * d.hq * sbuf_stride)?;
    // Every (token, head, dim) is written by the values kernel.
    let out = Buf::<f32>::uninit(gpu, t * d.hq * d.dh)?;
    let ids_ptr = ids.as_ref().map_or(0, |b| b.ptr(gpu));
    let cells_args = [Arg::Ptr(ids_ptr), i(ids_stride), Arg::Ptr(count.ptr(gpu)), Arg::Ptr(lo.ptr(gpu))];
    let heads = [i(d.hq), i(d.hkv), i(d.dh)];
    let block = |grid: (usize, usize)| LaunchConfig {
        grid_dim: (grid.0 as u32, grid.1 as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let name = kernel_for("attend_scores", st.k.mode);
    let f = gpu.function(&crate::ops::sources::ATTN_FILE, name)?;
    let args = [
        &[Arg::Ptr(q.ptr(gpu))][..],
        &st.k.args(gpu),
        &cells_args,
        &[Arg::Ptr(sbuf.ptr(gpu)), i(sbuf_stride)],
        &heads,
        &[Arg::F32(rsqrt(d.dh as f32))],
    ]
    .concat();
    // 8 warps a block, SCORE_CELLS = 4 cells a warp (kernels/attn.cu).
    launch(gpu, &f, name, block((max_n.div_ceil(8 * 4), t * d.hq)), &args)?;
    let f = gpu.function(&crate::ops::sources::ATTN_FILE, "attend_softmax")?;
    let args = [Arg::Ptr(sbuf.ptr(gpu)), i(sbuf_stride), Arg::Ptr(count.ptr(gpu)), i(d.hq)];
    launch(gpu, &f, "attend_softmax", block((t * d.hq, 1)), &args)?;
    attend_values(gpu, &Values { qg: &qg, v: &st.v, cells: &cells_args, sbuf: (&sbuf, sbuf_stride), out: &out }, d, t)?;
    st.cells += t;
    let y = Buf::<f32>::uninit(gpu, t * w.o.rows)?;
    matvec(gpu, &w.o, &out, &y, t)?;
    Ok(y)
}

/// The window's k and v cells (k normed and roped with `rows`) appended to the caches at cells
/// `st.cells, …`, the layer's cell count left as it was; with `with_q`, also the q projection (its gates
/// beside the heads, `qg`) and the q heads normed and roped (`q`), else both empty. The part of
/// [`attention`] before its scores, on the main lane.
fn project(
    gpu: &Gpu,
    w: &AttnGpu,
    st: &AttnStateGpu,
    x: &Buf<f32>,
    t: usize,
    rows: &Buf<f32>,
    with_q: bool,
) -> Result<(Buf<f32>, Buf<f32>), CudaError> {
    let d = w.dims;
    let (pos, dim, i) = (st.cells, d.hkv * d.dh, |v: usize| Arg::I32(v as i32));
    let hq = if with_q { d.hq } else { 0 };
    // The products' outputs are filled whole: left unset (no memset on the stream).
    let (qg, kk, vv) = (
        Buf::<f32>::uninit(gpu, t * hq * 2 * d.dh)?,
        Buf::<f32>::uninit(gpu, t * dim)?,
        Buf::<f32>::uninit(gpu, t * dim)?,
    );
    // By default (STRATA_QKV_ONCE=0: a launch each) x is quantized once for the three products (after
    // the selection's fork, which reads x as floats), not by a launch before each.
    let shared = if crate::ops::qdot::can_share_input(gpu, &[w.q.ty, w.k.ty, w.v.ty]) {
        Some(crate::ops::qdot::quantize_shared(gpu, &w.q, x, t)?)
    } else {
        None
    };
    let xq = shared.as_ref();
    if with_q {
        matvec_pre(gpu, (x, xq), (&w.q, &qg), None, t)?;
    }
    matvec_pre(gpu, (x, xq), (&w.k, &kk), Some((&w.v, &vv)), t)?;
    // The q and k heads normed and roped in one launch (blockIdx.y picks the set; no q heads without
    // with_q); written whole by norm_rope (a warp per head writes all its dims), so no memset on the
    // stream.
    let (q, k) = (Buf::<f32>::uninit(gpu, t * hq * d.dh)?, Buf::<f32>::uninit(gpu, t * dim)?);
    let q_rows = [Arg::Ptr(qg.ptr(gpu)), i(hq * 2 * d.dh), i(2 * d.dh), Arg::Ptr(q.ptr(gpu))];
    let k_rows = [Arg::Ptr(kk.ptr(gpu)), i(dim), i(d.dh), Arg::Ptr(k.ptr(gpu))];
    let args = [
        &q_rows[..],
        &[Arg::Ptr(w.q_norm.ptr(gpu)), i(hq)],
        &k_rows,
        &[Arg::Ptr(w.k_norm.ptr(gpu)), i(d.hkv)],
        &[Arg::Ptr(rows.ptr(gpu)), i(d.dh), i(d.rot), i(t)],
    ]
    .concat();
    let eps = [Arg::F32(d.eps)];
    let mut cfg = warps_cfg(t * hq.max(d.hkv));
    // By default (STRATA_KV_FUSE=0: kv_store after) the k and v cells are appended in the same launch
    // (norm_rope_kv).
    if kv_fuse(gpu) && (st.k.mode != KvMode::Int8 || d.dh.is_multiple_of(64)) {
        cfg.grid_dim.1 = 3;
        let mode = [Arg::I32(st.k.mode_id()), i(pos)];
        let args = [&args[..], &[Arg::Ptr(vv.ptr(gpu))], &st.k.args(gpu), &st.v.args(gpu), &mode, &eps].concat();
        launch(gpu, &gpu.function(&crate::ops::sources::ATTN_FILE, "norm_rope_kv")?, "norm_rope_kv", cfg, &args)?;
    } else {
        cfg.grid_dim.1 = 2;
        let args = [&args[..], &eps].concat();
        launch(gpu, &gpu.function(&crate::ops::sources::ATTN_FILE, "norm_rope")?, "norm_rope", cfg, &args)?;
        store_kv(gpu, st, (&k, &vv), (dim, t))?;
    }
    Ok((qg, q))
}

/// [`attention`]'s cells alone: the window's k and v appended at cells `st.cells, …` (roped with `rows`),
/// with no query, scores or output: the MTP layer's cells of positions whose drafts are not asked for
/// (`backend::mtp_cells`). The same kernels on the same inputs as `attention`'s, so the same cells.
pub fn append_cells(
    gpu: &Gpu,
    w: &AttnGpu,
    st: &mut AttnStateGpu,
    x: &Buf<f32>,
    t: usize,
    rows: &Buf<f32>,
) -> Result<(), CudaError> {
    if !(1..=MAX_T).contains(&t) || st.cells + t > st.capacity {
        return Err(CudaError::Shape(format!("a window of {t} tokens at cell {} of {}", st.cells, st.capacity)));
    }
    project(gpu, w, st, x, t, rows, false)?;
    st.cells += t;
    Ok(())
}

/// The window's k (normed and roped) and v cells of `dim` values appended to the caches at the layer's next
/// cell, in one launch (kv_store; blockIdx.y picks the cache).
fn store_kv(
    gpu: &Gpu,
    st: &AttnStateGpu,
    (k, v): (&Buf<f32>, &Buf<f32>),
    (dim, t): (usize, usize),
) -> Result<(), CudaError> {
    let (pos, i) = (st.cells, |v: usize| Arg::I32(v as i32));
    let store = gpu.function(&crate::ops::sources::ATTN_FILE, "kv_store")?;
    let mut cfg = if st.k.mode == KvMode::Int8 { warps_cfg(t * dim / 64) } else { warps_cfg((t * dim).div_ceil(32)) };
    cfg.grid_dim.1 = 2;
    let args = [
        &[Arg::Ptr(k.ptr(gpu))][..],
        &st.k.args(gpu),
        &[Arg::Ptr(v.ptr(gpu))],
        &st.v.args(gpu),
        &[Arg::I32(st.k.mode_id()), i(dim), i(pos), i(t)],
    ]
    .concat();
    launch(gpu, &store, "kv_store", cfg, &args)
}

/// On by default (`STRATA_KV_FUSE=0`: `norm_rope` then `kv_store`): the q and k heads' norms and rope and
/// the k and v cells' append in one launch (attn.cu's `norm_rope_kv`, the same values as `norm_rope` and
/// `kv_store`), one link fewer on an attention layer's chain.
fn kv_fuse(gpu: &Gpu) -> bool {
    gpu.settings.kv_fuse
}

/// The values kernel's inputs: the output gates, the V cache, the cells' arguments (ids, stride, counts,
/// lows), the e_j with their sums (and the rows' stride), the output.
struct Values<'a> {
    qg: &'a Buf<f32>,
    v: &'a KvGpu,
    cells: &'a [Arg; 4],
    sbuf: (&'a Buf<f32>, usize),
    out: &'a Buf<f32>,
}

/// `out = dot(e, v[·][d]) / Σe · σ(gate)` per query head, token and dim (attn.cu's `attend_values_<mode>`: a
/// block takes 8 dims of 4 heads of a KV group, a thread a chunk of 8 cells).
fn attend_values(gpu: &Gpu, x: &Values, d: AttnDims, t: usize) -> Result<(), CudaError> {
    const HEADS: usize = 4; // VALUES_HEADS
    const DIMS: usize = 8; // VALUES_DIMS
    if !d.dh.is_multiple_of(DIMS) {
        return Err(CudaError::Shape(format!(
            "attention heads of {} dims: the values kernel takes multiples of 8",
            d.dh
        )));
    }
    if !x.sbuf.1.is_multiple_of(CHUNK) {
        return Err(CudaError::Shape(format!(
            "score rows of {} floats: the values kernel takes whole chunks",
            x.sbuf.1
        )));
    }
    let i = |v: usize| Arg::I32(v as i32);
    let args = [
        &[Arg::Ptr(x.qg.ptr(gpu))][..],
        &x.v.args(gpu),
        x.cells,
        &[Arg::Ptr(x.sbuf.0.ptr(gpu)), i(x.sbuf.1), Arg::Ptr(x.out.ptr(gpu))],
        &[i(d.hq), i(d.hkv), i(d.dh)],
    ]
    .concat();
    let hpg = d.hq / d.hkv;
    let cfg = LaunchConfig {
        grid_dim: ((d.dh / DIMS) as u32, (t * d.hkv * hpg.div_ceil(HEADS)) as u32, 1),
        block_dim: (256, 1, 1), // VALUES_THREADS
        shared_mem_bytes: 0,
    };
    let name = kernel_for("attend_values", x.v.mode);
    launch(gpu, &gpu.function(&crate::ops::sources::ATTN_FILE, name)?, name, cfg, &args)
}

/// Attention kernel `family` (attn.cu's `attend_scores`, `attend_values`) in its form for caches in `mode`:
/// a kernel per mode, so that each holds its cells' loads in flight before any is used.
fn kernel_for(family: &'static str, mode: KvMode) -> &'static str {
    let suffix = match mode {
        KvMode::F16 => "_f16",
        KvMode::Int8 => "_i8",
        KvMode::F32 => "_f32",
    };
    crate::runtime::device::kernel_name([family, suffix, ""])
}

/// The indexer for the window: raw keys stored, the blocks they complete keyed, the queries normed and
/// roped, every complete block scored and the top-k taken (the plan's kernels). Returns the ids (T rows of
/// `top_k + r − 1`), that stride and the counts.
#[allow(clippy::too_many_arguments)]
fn select(
    gpu: &Gpu,
    w: &AttnGpu,
    st: &mut AttnStateGpu,
    x: &Buf<f32>,
    t: usize,
    r: usize,
    rope: &Rope,
    n_cells: &[i32],
    rows: &Buf<f32>,
) -> Result<(Buf<u32>, usize, Buf<i32>), CudaError> {
    let d = w.dims;
    let i = |v: usize| Arg::I32(v as i32);
    let (iq, ik, qn, kn) =
        w.idx.as_ref().ok_or_else(|| CudaError::Shape("a QSA layer without indexer weights".into()))?;
    let pos = st.cells;
    // Raw keys of the window's cells, straight into the per-cell buffer.
    if (pos + t) * d.di > st.raw.len() {
        return Err(CudaError::Shape(format!(
            "the indexer's keys hold {} cells, not {}",
            st.raw.len() / d.di,
            pos + t
        )));
    }
    matvec_at(gpu, ik, x.ptr(gpu), st.raw.ptr(gpu) + (pos * d.di * 4) as u64, t)?;
    // Blocks completed by the window's cells.
    let (done_before, done_after) = (pos / r, (pos + t) / r);
    if done_after > done_before {
        let n_new = done_after - done_before;
        let brows = rope_rows(gpu, rope, (done_before..done_after).map(|b| b * r))?;
        let f = gpu.function(&crate::ops::sources::ATTN_FILE, "block_keys")?;
        let args = [
            Arg::Ptr(st.raw.ptr(gpu)),
            Arg::Ptr(st.blocks.ptr(gpu)),
            i(done_before),
            i(n_new),
            i(r),
            i(d.di),
            Arg::Ptr(kn.ptr(gpu)),
            Arg::Ptr(brows.ptr(gpu)),
            i(d.rot),
            Arg::F32(d.eps),
        ];
        launch(gpu, &f, "block_keys", warps_cfg(n_new), &args)?;
    }
    // Queries, scores of every complete block, selection.
    // Both filled whole (the product writes every row of every token; norm_rope, a warp a head, every
    // dim): left unset, no memset on the stream.
    let qraw = Buf::<f32>::uninit(gpu, t * d.hi * d.di)?;
    matvec(gpu, iq, x, &qraw, t)?;
    let queries = Buf::<f32>::uninit(gpu, t * d.hi * d.di)?;
    let nr = gpu.function(&crate::ops::sources::ATTN_FILE, "norm_rope")?;
    // One set of rows (the second set repeats it; blockIdx.y stays 0).
    let set =
        [Arg::Ptr(qraw.ptr(gpu)), i(d.hi * d.di), i(d.di), Arg::Ptr(queries.ptr(gpu)), Arg::Ptr(qn.ptr(gpu)), i(d.hi)];
    let args = [&set[..], &set, &[Arg::Ptr(rows.ptr(gpu)), i(d.di), i(d.rot), i(t), Arg::F32(d.eps)]].concat();
    launch(gpu, &nr, "norm_rope", warps_cfg(t * d.hi), &args)?;
    let stride = (st.capacity / r).max(1);
    let scored: Vec<i32> = n_cells.iter().map(|&n| n / r as i32).collect();
    // Left unset: a query's scores are written for its n/r complete blocks, the only ones top-k reads.
    let (scores, nb, nc) =
        (Buf::<f32>::uninit(gpu, t * stride)?, Buf::from_host(gpu, &scored)?, Buf::from_host(gpu, n_cells)?);
    // Every scorer gives the same bits; the plan's fastest where it takes this shape, else the reference.
    let (scorer, topk) = w.selection;
    let scorer = if scorer.fits(d.hi, d.di) { scorer } else { ScoresVariant::Butterfly };
    crate::ops::qsa::scores(gpu, scorer, &st.blocks, &queries, &scores, &nb, done_after, d.di, d.hi, t, stride)?;
    let out_stride = d.top_k + r - 1;
    // Left unset: top-k writes every query's count and its first count ids, and the attention reads no more.
    let (ids, count) = (Buf::<u32>::uninit(gpu, t * out_stride)?, Buf::<i32>::uninit(gpu, t)?);
    let mut scratch = crate::ops::qsa::TopkScratch::new(gpu, t, stride)?;
    crate::ops::qsa::topk(gpu, topk, &scores, stride, &nc, d.top_k, r, &ids, out_stride, &count, t, &mut scratch)?;
    Ok((ids, out_stride, count))
}
