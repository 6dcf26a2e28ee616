//! Host side of kernels/gdn.cu: a GDN layer (spec §4) for a window of T = 1..8 tokens on the device, the
//! twin of strata_model::layers::gdn (the same bits, state carried token to token).

use cudarc::driver::LaunchConfig;
use strata_gguf::GgmlType;
use strata_model::ops::act::rsqrt;
use strata_model::weights::GdnWeights;

use crate::ops::matvec::{matvec, matvec_two, MatrixGpu, MAX_T};
use crate::ops::variants::Variants;
use crate::runtime::buf::{launch, Arg, Buf};
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;

/// A GDN layer's weights on the device.
pub struct GdnGpu {
    /// Head dim S, key heads Hk, value heads Hv, conv taps K.
    pub dims: (usize, usize, usize, usize),
    qkv: MatrixGpu,
    gate: MatrixGpu,
    alpha: MatrixGpu,
    beta: MatrixGpu,
    /// How the α and β logits are made: by gdn_conv_norm's gate warps from F32 (1) or BF16 (2) rows, or
    /// (0) by the products.
    ab_kind: i32,
    out: MatrixGpu,
    conv: Buf<f32>,
    a: Buf<f32>,
    dt_bias: Buf<f32>,
    norm: Buf<f32>,
    /// The output norm's epsilon (the file's rms epsilon; the q/k l2 norms keep the model's fixed 1e-6).
    eps: f32,
}

/// A GDN layer's state on the device: the conv tail ((K − 1) frames of the channels) and Hv S×S matrices;
/// while drafting, the rewind slots of a verify window.
pub struct GdnStateGpu {
    pub tail: Buf<f32>,
    pub m: Buf<f32>,
    pub slots: Option<GdnSlots>,
}

/// A verify window's rewind slots (docs/SPECULATION.md): slot t holds the state after the window's token
/// t, for t < T − 1 (the last token's is the state itself), written by the window's kernels as they go.
/// A rewind to the point after token t is then a copy, not a second pass.
pub struct GdnSlots {
    pub tail: Buf<f32>,
    pub m: Buf<f32>,
}

impl GdnStateGpu {
    /// Room for a verify window's slots (made once, when drafting starts).
    pub fn keep_slots(&mut self, gpu: &Gpu) -> Result<(), CudaError> {
        if self.slots.is_none() {
            let n = MAX_T - 1;
            self.slots =
                Some(GdnSlots { tail: Buf::uninit(gpu, n * self.tail.len())?, m: Buf::uninit(gpu, n * self.m.len())? });
        }
        Ok(())
    }
}

impl GdnGpu {
    pub fn upload(
        gpu: &Gpu,
        w: &GdnWeights,
        (s, hk, hv): (usize, usize, usize),
        eps: f32,
        v: &Variants,
    ) -> Result<GdnGpu, CudaError> {
        let channels = 2 * hk * s + hv * s;
        let k = w.conv.len() / channels;
        if !s.is_multiple_of(8) || s > 1024 || !(1..=16).contains(&k) || hk == 0 || !hv.is_multiple_of(hk) {
            return Err(CudaError::Shape(format!("GDN dims: S a multiple of 8 up to 1024, K ≤ 16 (S {s}, K {k})")));
        }
        // One row per value head over the layer's input width, F32 or BF16 both: the gate warps dot them.
        let row_kind = |m: &strata_model::ops::matvec::Matrix| match (m.ty, m.rows == hv, m.cols == w.alpha.cols) {
            (GgmlType::F32, true, true) => 1,
            (GgmlType::BF16, true, true) => 2,
            _ => 0,
        };
        let ab_kind = if row_kind(&w.alpha) == row_kind(&w.beta) { row_kind(&w.alpha) } else { 0 };
        Ok(GdnGpu {
            dims: (s, hk, hv, k),
            ab_kind,
            qkv: MatrixGpu::upload(gpu, &w.qkv, &v.layouts)?,
            gate: MatrixGpu::upload(gpu, &w.gate, &v.layouts)?,
            alpha: MatrixGpu::upload(gpu, &w.alpha, &v.layouts)?,
            beta: MatrixGpu::upload(gpu, &w.beta, &v.layouts)?,
            out: MatrixGpu::upload(gpu, &w.out, &v.layouts)?,
            conv: Buf::from_host(gpu, &w.conv)?,
            a: Buf::from_host(gpu, &w.a)?,
            dt_bias: Buf::from_host(gpu, &w.dt_bias)?,
            norm: Buf::from_host(gpu, &w.norm)?,
            eps,
        })
    }

    /// A fresh state: zero tail and matrices.
    pub fn new_state(&self, gpu: &Gpu) -> Result<GdnStateGpu, CudaError> {
        let (s, hk, hv, k) = self.dims;
        let channels = 2 * hk * s + hv * s;
        Ok(GdnStateGpu { tail: Buf::zeros(gpu, (k - 1) * channels)?, m: Buf::zeros(gpu, hv * s * s)?, slots: None })
    }
}

fn grid(n: usize, per_block: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(per_block) as u32, 1, 1),
        block_dim: (per_block as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Which of gdn_conv_norm's warps a launch runs: every one, the conv's (a warp a q, k or v head), or the
/// gates' (a warp a token and value head).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ConvWarps {
    All,
    Conv,
    Gates,
}

/// The α and β logits of each token and value head, where products made them.
type Logits = (Buf<f32>, Buf<f32>);

/// gdn_conv_norm (kernels/gdn.cu): the conv of `u` into `conv` with the q/k norms (a verify window's tail
/// slots at a non-zero `slots`), and the gates into `decay` and `betas` from `logits` (made by products) or
/// from x's dots with the α and β rows.
fn conv_norm(
    gpu: &Gpu,
    w: &GdnGpu,
    st: &GdnStateGpu,
    (u, x, logits): (&Buf<f32>, &Buf<f32>, Option<&Logits>),
    (decay, betas): (&Buf<f32>, &Buf<f32>),
    (conv, t, slots): (&Buf<f32>, usize, u64),
    warps: ConvWarps,
) -> Result<(), CudaError> {
    let (s, hk, hv, k) = w.dims;
    let channels = 2 * hk * s + hv * s;
    let ci = |v: usize| Arg::I32(v as i32);
    let (al, be) = logits.map_or((0, 0), |(a, b)| (a.ptr(gpu), b.ptr(gpu)));
    let f = gpu.function(&crate::ops::sources::GDN_FILE, "gdn_conv_norm")?;
    let conv_args = [u.ptr(gpu), st.tail.ptr(gpu), w.conv.ptr(gpu), conv.ptr(gpu)].map(Arg::Ptr);
    let norm = [ci(channels), ci(k), ci(t), ci(hk), ci(s), Arg::F32(rsqrt(s as f32))];
    let gates = [al, be, w.dt_bias.ptr(gpu), w.a.ptr(gpu), decay.ptr(gpu), betas.ptr(gpu)];
    // A warp a q, k or v head of the conv, then a warp a (token, value head) of the gates.
    let (h0, n_warps) = match warps {
        ConvWarps::All => (0, 2 * hk + hv + t * hv),
        ConvWarps::Conv => (0, 2 * hk + hv),
        ConvWarps::Gates => (2 * hk + hv, t * hv),
    };
    let ab = [
        Arg::Ptr(w.alpha.ptr(gpu)),
        Arg::Ptr(w.beta.ptr(gpu)),
        Arg::I32(w.ab_kind),
        Arg::Ptr(x.ptr(gpu)),
        ci(w.alpha.cols),
        ci(h0),
        ci(h0 + n_warps),
        Arg::Ptr(slots),
    ];
    let args = [&conv_args[..], &norm, &gates.map(Arg::Ptr), &[ci(hv)], &ab].concat();
    launch(gpu, &f, "gdn_conv_norm", grid(n_warps * 32, 128), &args)
}

/// Where it applies, the conv in the qkv product's epilogue (qdot.rs `dense_conv`: a § qdot type, K = 4)
/// and the q/k norms in the delta kernel (its register forms, S = 32, 64, 128): the same bits, one launch
/// fewer on the chain (+1.8% decode in speed-14). `STRATA_GDN_FUSE=0` keeps the separate `gdn_conv_norm`.
fn fuse(gpu: &Gpu, w: &GdnGpu) -> bool {
    let (s, _, _, k) = w.dims;
    gpu.settings.gdn_fuse && k == 4 && matches!(s, 32 | 64 | 128) && crate::ops::qdot::can_conv(gpu, &w.qkv)
}

/// The layer's output for the window's inputs `x` (T rows of n), advancing `st` by T tokens; with `keep`
/// (a verify window), the state after each token but the last kept in its slots.
pub fn gdn(
    gpu: &Gpu,
    w: &GdnGpu,
    st: &mut GdnStateGpu,
    x: &Buf<f32>,
    t: usize,
    keep: bool,
) -> Result<Buf<f32>, CudaError> {
    if !(1..=MAX_T).contains(&t) {
        return Err(CudaError::Shape(format!("a window of {t} tokens (1..=8)")));
    }
    let (tail_slots, m_slots) = match (&st.slots, keep) {
        (Some(s), true) => (s.tail.ptr(gpu), s.m.ptr(gpu)),
        (None, true) => return Err(CudaError::Shape("a verify window without rewind slots".into())),
        (_, false) => (0, 0),
    };
    let (s, hk, hv, _) = w.dims;
    let channels = 2 * hk * s + hv * s;
    // Buffers that a matrix-vector product fills whole are left unset (no memset on the stream).
    let (u, z) = (Buf::<f32>::uninit(gpu, t * channels)?, Buf::<f32>::uninit(gpu, t * hv * s)?);
    // The gates' warps of gdn_conv_norm read only x when they make the α and β logits themselves: on a
    // step graph's side lane they run there, beside the products, as a launch of their own.
    let side_gates = w.ab_kind != 0 && gpu.side_lanes();
    let (decay, betas) = (Buf::<f32>::uninit(gpu, t * hv)?, Buf::<f32>::uninit(gpu, t * hv)?);
    // conv, o and y are written whole by their kernels (every channel, column and dim of each token).
    let conv = Buf::<f32>::uninit(gpu, t * channels)?;
    // The output gate's product on the step graph's side lane, beside the conv and the gates: only the
    // delta kernel's output norm reads it.
    gpu.side(|| {
        if side_gates {
            conv_norm(gpu, w, st, (&u, x, None), (&decay, &betas), (&conv, t, 0), ConvWarps::Gates)?;
        }
        matvec(gpu, &w.gate, x, &z, t)
    })?;
    // Where the fusion applies (fuse above) the qkv product runs the conv in its epilogue and the delta
    // kernel normalises q and k: gdn_conv_norm then makes only the gates, if they are not on the side lane.
    let fuse = fuse(gpu, w);
    if fuse {
        let conv_args = (conv.ptr(gpu), st.tail.ptr(gpu), w.conv.ptr(gpu));
        crate::ops::qdot::dense_conv(gpu, &w.qkv, x.ptr(gpu), conv_args, tail_slots, t)?;
    } else {
        matvec(gpu, &w.qkv, x, &u, t)?;
    }
    // The α and β logits: by the products here only when gdn_conv_norm's gate warps cannot make them.
    let logits = if w.ab_kind == 0 {
        let (al, be) = (Buf::<f32>::uninit(gpu, t * hv)?, Buf::<f32>::uninit(gpu, t * hv)?);
        matvec_two(gpu, (&w.alpha, &al), (&w.beta, &be), x, t)?;
        Some((al, be))
    } else {
        None
    };
    let ci = |v: usize| Arg::I32(v as i32);
    let warps = match (side_gates, fuse) {
        (true, true) => None,
        (false, true) => Some(ConvWarps::Gates),
        (true, false) => Some(ConvWarps::Conv),
        (false, false) => Some(ConvWarps::All),
    };
    if let Some(warps) = warps {
        conv_norm(gpu, w, st, (&u, x, logits.as_ref()), (&decay, &betas), (&conv, t, tail_slots), warps)?;
    }
    let o = Buf::<f32>::uninit(gpu, t * hv * s)?;
    // The state held in registers where S is one of the compiled sizes; else read and written in place.
    // (threads per block, dynamic shared bytes): S·P threads for the register kernels (kernels/gdn.cu).
    // With STRATA_GDN_QUANTIZE=1 (qdot.rs `can_gdn_quantize`; the fused conv's `_n` kernels only) the
    // `_nq` kernels also quantize y for the output product, which then takes those pieces (no quantizing
    // launch of its own).
    let yq = if fuse && crate::ops::qdot::can_gdn_quantize(gpu, w.out.ty, s) {
        Some(Buf::<i32>::uninit(gpu, crate::ops::qdot::quantized_words(t, hv * s))?)
    } else {
        None
    };
    // STRATA_GDN_SPLIT=G (2 by default, 4; 1: one block a head): the register kernels of S = 128 by a
    // cluster of G CTAs a head on sm_90 and later, each a G-th of the head's columns and of its threads, so
    // a window's tokens run on G times the multiprocessors (kernels/gdn.cu).
    let split = if s == 128 && gpu.arch.0 >= 9 { gpu.settings.gdn_split } else { 1 };
    let (name, threads, shared) = match (s, fuse, yq.is_some(), split) {
        (32, false, _, _) => ("gdn_delta_32", 32, 0),
        (64, false, _, _) => ("gdn_delta_64", 64, 0),
        (128, false, _, 2) => ("gdn_delta_128_c2", 128, 0),
        (128, false, _, 4) => ("gdn_delta_128_c4", 64, 0),
        (128, false, _, _) => ("gdn_delta_128", 256, 0),
        (32, true, false, _) => ("gdn_delta_32_n", 32, 0),
        (64, true, false, _) => ("gdn_delta_64_n", 64, 0),
        (128, true, false, 2) => ("gdn_delta_128_n_c2", 128, 0),
        (128, true, false, 4) => ("gdn_delta_128_n_c4", 64, 0),
        (128, true, false, _) => ("gdn_delta_128_n", 256, 0),
        (32, true, true, _) => ("gdn_delta_32_nq", 32, 0),
        (64, true, true, _) => ("gdn_delta_64_nq", 64, 0),
        (128, true, true, 2) => ("gdn_delta_128_nq_c2", 128, 0),
        (128, true, true, 4) => ("gdn_delta_128_nq_c4", 64, 0),
        (128, true, true, _) => ("gdn_delta_128_nq", 256, 0),
        _ => ("gdn_delta", s.max(32), 2 * s * 4),
    };
    let f = gpu.function(&crate::ops::sources::GDN_FILE, name)?;
    let cfg = LaunchConfig {
        grid_dim: ((hv * split) as u32, 1, 1), // split > 1 only where S = 128 picked a `_c<split>` kernel
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    // The delta rule, then each head's output norm in the same launch (kernels/gdn.cu).
    let y = Buf::<f32>::uninit(gpu, t * hv * s)?;
    gpu.join()?;
    let args = [st.m.ptr(gpu), conv.ptr(gpu), decay.ptr(gpu), betas.ptr(gpu), o.ptr(gpu)].map(Arg::Ptr);
    let sizes = [ci(channels), ci(hk), ci(hv), ci(s), ci(t)];
    let norm = [Arg::Ptr(z.ptr(gpu)), Arg::Ptr(w.norm.ptr(gpu)), Arg::Ptr(y.ptr(gpu)), Arg::F32(w.eps)];
    let qscale = fuse.then_some(Arg::F32(rsqrt(s as f32)));
    let quantized = yq.as_ref().map(|q| Arg::Ptr(q.ptr(gpu)));
    let kept = [Arg::Ptr(m_slots)];
    launch(gpu, &f, name, cfg, &[&args[..], &sizes, &norm, qscale.as_slice(), quantized.as_slice(), &kept].concat())?;
    let out = Buf::<f32>::uninit(gpu, t * w.out.rows)?;
    match &yq {
        Some(yq) => crate::ops::qdot::dense_quantized(gpu, &w.out, yq, (out.ptr(gpu), None), t)?,
        None => matvec(gpu, &w.out, &y, &out, t)?,
    }
    Ok(out)
}
