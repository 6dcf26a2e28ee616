//! Every tensor of a qwen4exp file (spec §2–§9) with its shape, type and how its values are drawn.
//!
//! Scaling, so activations stay finite through every layer: a projection's weights have standard
//! deviation `gain/√fan_in` (fan_in = ne0), so each output has about the rms of its input times the gain;
//! norm gammas are 1 ± 0.05; the embeddings are unit normal; output projections back into the residual
//! streams use a gain of 0.5 so the streams grow slowly with depth; `ssm_a` is negative (−0.5 … −4) and
//! `dt_bias` in (−2, 0), so every GDN decay is in (0, 1); the head's gain of 3 gives logits a spread of a
//! few units (greedy choices are decisive). The test `logits_spread_stays_in_band` checks the result.

use strata_gguf::GgmlType::{self, *};

use crate::preset::Preset;

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal with mean 0 and this standard deviation.
    Normal(f32),
    /// 1 + Normal(std): norm gammas.
    AroundOne(f32),
    Uniform(f32, f32),
}

#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub ty: GgmlType,
    pub init: Init,
    /// A gain for each row (ne1), times the drawn values: the skewed router's (`router.rs`).
    pub row_gains: Option<Vec<f32>>,
}

/// `preferred` if ne0 is a whole number of its blocks, else the first fallback that fits.
fn fit(preferred: GgmlType, ne0: usize) -> GgmlType {
    [preferred, Q2_0, Q8_0, F16].into_iter().find(|t| ne0.is_multiple_of(t.block_size())).unwrap_or(F32)
}

struct List<'a> {
    p: &'a Preset,
    experts: GgmlType,
    out: Vec<TensorSpec>,
}

impl List<'_> {
    fn push(&mut self, name: String, shape: &[usize], ty: GgmlType, init: Init) {
        let ty = fit(ty, shape[0]);
        self.out.push(TensorSpec { name, shape: shape.iter().map(|&d| d as u64).collect(), ty, init, row_gains: None });
    }

    /// A projection from `cols` inputs to `rows` outputs with this gain.
    fn proj(&mut self, name: String, cols: usize, rows: usize, ty: GgmlType, gain: f32) {
        self.push(name, &[cols, rows], ty, Init::Normal(gain / (cols as f32).sqrt()));
    }

    fn gamma(&mut self, name: String, len: usize) {
        self.push(name, &[len], F32, Init::AroundOne(0.05));
    }

    fn hc(&mut self, prefix: &str, inject: bool) {
        let (wide, r, hc) = (self.p.hc * self.p.n_embd, self.p.hc_rank, self.p.hc);
        self.gamma(format!("{prefix}_norm.weight"), wide);
        self.proj(format!("{prefix}_down.weight"), wide, r, BF16, 1.0);
        self.proj(format!("{prefix}_up.weight"), r, wide, BF16, 1.0);
        if inject {
            self.proj(format!("{prefix}_inject.weight"), wide, hc, BF16, 1.0);
        }
    }

    fn gdn(&mut self, b: &str) {
        let p = self.p;
        let (n, s, hv) = (p.n_embd, p.ssm_state, p.ssm_heads);
        let ch = 2 * p.ssm_groups * s + hv * s;
        self.proj(format!("{b}.attn_qkv.weight"), n, ch, Q4_K, 1.0);
        self.proj(format!("{b}.attn_gate.weight"), n, hv * s, Q6_K, 1.0);
        self.push(format!("{b}.ssm_conv1d.weight"), &[4, ch], F32, Init::Uniform(-0.6, 0.6));
        self.proj(format!("{b}.ssm_alpha.weight"), n, hv, BF16, 1.0);
        self.proj(format!("{b}.ssm_beta.weight"), n, hv, BF16, 1.0);
        self.push(format!("{b}.ssm_a"), &[hv], F32, Init::Uniform(-4.0, -0.5));
        self.push(format!("{b}.ssm_dt.bias"), &[hv], F32, Init::Uniform(-2.0, 0.0));
        self.gamma(format!("{b}.ssm_norm.weight"), s);
        self.proj(format!("{b}.ssm_out.weight"), hv * s, n, Q8_0, 0.5);
    }

    fn qsa(&mut self, b: &str) {
        let p = self.p;
        let (n, dh, di) = (p.n_embd, p.head_dim, p.idx_dim);
        self.proj(format!("{b}.attn_q.weight"), n, p.n_head * 2 * dh, Q4_K, 1.0);
        self.proj(format!("{b}.attn_k.weight"), n, p.n_head_kv * dh, Q8_0, 1.0);
        self.proj(format!("{b}.attn_v.weight"), n, p.n_head_kv * dh, Q4_0, 1.0);
        self.gamma(format!("{b}.attn_q_norm.weight"), dh);
        self.gamma(format!("{b}.attn_k_norm.weight"), dh);
        self.proj(format!("{b}.attn_output.weight"), p.n_head * dh, n, IQ4_NL, 0.5);
        self.proj(format!("{b}.indexer.q_proj.weight"), n, p.idx_heads * di, BF16, 1.0);
        self.proj(format!("{b}.indexer.k_proj.weight"), n, di, BF16, 1.0);
        self.gamma(format!("{b}.indexer.q_norm.weight"), di);
        self.gamma(format!("{b}.indexer.k_norm.weight"), di);
    }

    fn moe(&mut self, b: &str) {
        let p = self.p;
        let (n, f, e) = (p.n_embd, p.expert_ff, p.n_expert);
        self.proj(format!("{b}.ffn_gate_inp.weight"), n, e, F32, 2.0);
        let std_in = 1.0 / (n as f32).sqrt();
        self.push(format!("{b}.ffn_gate_exps.weight"), &[n, f, e], self.experts, Init::Normal(std_in));
        self.push(format!("{b}.ffn_up_exps.weight"), &[n, f, e], self.experts, Init::Normal(std_in));
        let down = Init::Normal(0.5 / (f as f32).sqrt());
        self.push(format!("{b}.ffn_down_exps.weight"), &[f, n, e], self.experts, down);
        self.proj(format!("{b}.ffn_gate_shexp.weight"), n, f, Q8_0, 1.0);
        self.proj(format!("{b}.ffn_up_shexp.weight"), n, f, Q8_0, 1.0);
        self.proj(format!("{b}.ffn_down_shexp.weight"), f, n, Q4_0, 0.5);
        // The converter writes the shared expert's gate as [n, 1].
        self.proj(format!("{b}.ffn_gate_inp_shexp.weight"), n, 1, BF16, 1.0);
    }

    fn layer(&mut self, b: &str, qsa: bool) {
        self.hc(&format!("{b}.hc_attn"), true);
        if qsa {
            self.qsa(b)
        } else {
            self.gdn(b)
        }
        self.hc(&format!("{b}.hc_ffn"), true);
        self.moe(b);
    }

    fn ple(&mut self, b: &str) {
        let p = self.p;
        let (n, wide) = (p.n_embd, p.hc * p.n_embd);
        self.proj(format!("{b}.ple_key.weight"), n, wide, Q8_0, 1.0);
        self.proj(format!("{b}.ple_value.weight"), n, n, BF16, 1.0);
        self.gamma(format!("{b}.ple_norm_key.weight"), wide);
        self.gamma(format!("{b}.ple_norm_query.weight"), wide);
        self.gamma(format!("{b}.ple_norm_conv.weight"), wide);
        self.push(format!("{b}.ple_conv1d.weight"), &[4, wide], F16, Init::Uniform(-0.5, 0.5));
    }

    /// The MTP block in the `nextn` layout: block `n_layer`'s ordinary attention-layer tensors plus
    /// `nextn.enorm`, `nextn.hnorm` (a gamma per stream), `nextn.eh_proj [2n, n]` and `nextn.hc_head_*`.
    fn mtp(&mut self) {
        let p = self.p;
        let n = p.n_embd;
        let b = format!("blk.{}", p.n_layer);
        self.gamma(format!("{b}.nextn.enorm.weight"), n);
        self.gamma(format!("{b}.nextn.hnorm.weight"), p.hc * n);
        self.proj(format!("{b}.nextn.eh_proj.weight"), 2 * n, n, Q8_0, 1.0);
        self.layer(&b, true);
        self.hc(&format!("{b}.nextn.hc_head"), false);
    }
}

/// The layer whose start runs the PLE block (spec §6).
pub const PLE_LAYER: usize = 1;

/// Layer i is attention (QSA with blocks of [`QSA_RATIO`]) when this holds, else GDN.
pub fn is_attn(i: usize) -> bool {
    i % 4 == 3
}

/// The QSA block size of the synthetic models' attention layers.
pub const QSA_RATIO: usize = 4;

/// The tensors of the trunk file, in the order they are written. The PLE table comes last (or goes to
/// its own shard: see [`ple_table`]).
pub fn trunk(p: &Preset, vocab: usize, experts: GgmlType) -> Vec<TensorSpec> {
    let mut l = List { p, experts, out: Vec::new() };
    l.push("token_embd.weight".into(), &[p.n_embd, vocab], Q4_K, Init::Normal(1.0));
    for i in 0..p.n_layer {
        if i == PLE_LAYER {
            l.ple(&format!("blk.{i}"));
        }
        l.layer(&format!("blk.{i}"), is_attn(i));
    }
    l.hc("output_hc", false);
    l.proj("output.weight".into(), p.n_embd, vocab, Q6_K, 3.0);
    l.mtp();
    l.out
}

pub fn ple_table(p: &Preset) -> TensorSpec {
    TensorSpec {
        name: "per_layer_token_embd.weight".into(),
        shape: vec![p.ple_dim as u64, 16 * p.ple_rows_per_head],
        ty: fit(p.ple_type, p.ple_dim),
        init: Init::Normal(1.0),
        row_gains: None,
    }
}
