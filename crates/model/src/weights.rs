//! The model's tensors bound by name (spec §2–§9), each checked against the config's shape. Quantized
//! weights stay in the file's memory map; small vectors (norm gammas, biases) are read as f32.

use strata_gguf::{GgmlType, GgufSet};

use crate::config::Config;
use crate::error::ModelError;
use crate::ops::matvec::Matrix;

/// One hyper-connection read: `hc_*_norm`, `hc_*_down`, `hc_*_up`, `hc_*_inject` (absent for the final read).
pub struct HcWeights {
    pub norm: Vec<f32>,
    pub down: Matrix,
    pub up: Matrix,
    pub inject: Option<Matrix>,
}

pub struct GdnWeights {
    pub qkv: Matrix,
    pub gate: Matrix,
    /// `[4, channels]`: channel ch's taps at `4·ch .. 4·ch + 4`, oldest first.
    pub conv: Vec<f32>,
    pub alpha: Matrix,
    pub beta: Matrix,
    pub a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out: Matrix,
}

pub struct QsaWeights {
    pub q: Matrix,
    pub k: Matrix,
    pub v: Matrix,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub o: Matrix,
    pub idx_q: Matrix,
    pub idx_k: Matrix,
    pub idx_q_norm: Vec<f32>,
    pub idx_k_norm: Vec<f32>,
}

pub enum Mixer {
    Gdn(GdnWeights),
    Qsa(QsaWeights),
}

/// Routed experts are stored stacked: expert e's rows follow expert e−1's.
pub struct MoeWeights {
    pub router: Matrix,
    pub gate_exps: Matrix,
    pub up_exps: Matrix,
    pub down_exps: Matrix,
    pub gate_shexp: Matrix,
    pub up_shexp: Matrix,
    pub down_shexp: Matrix,
    pub shexp_gate: Matrix,
}

pub struct PleWeights {
    pub table: Matrix,
    pub key: Matrix,
    pub value: Matrix,
    pub norm_key: Vec<f32>,
    pub norm_query: Vec<f32>,
    pub norm_conv: Vec<f32>,
    /// `[4, hc·n]`, as `GdnWeights::conv`.
    pub conv: Vec<f32>,
}

pub struct Layer {
    pub hc_attn: HcWeights,
    pub mixer: Mixer,
    pub hc_ffn: HcWeights,
    pub moe: MoeWeights,
}

/// The MTP draft layer (spec §9).
pub struct MtpWeights {
    /// `pre_fc_norm_embedding` [n] and `pre_fc_norm_hidden` [hc·n] (a gamma per stream).
    pub norm_embd: Vec<f32>,
    pub norm_hidden: Vec<f32>,
    pub fc_embd: Matrix,
    pub fc_hidden: Matrix,
    /// A QSA layer (`mtp.blk.0.*`), run dense over its own cache.
    pub layer: Layer,
    pub output_hc: HcWeights,
}

pub struct Weights {
    pub token_embd: Matrix,
    pub ple: PleWeights,
    pub layers: Vec<Layer>,
    pub output_hc: HcWeights,
    pub output: Matrix,
    /// Present when the file has `nextn_predict_layers` ≥ 1.
    pub mtp: Option<MtpWeights>,
}

/// Binds tensors by name with shape checks.
struct Binder<'a> {
    set: &'a GgufSet,
}

impl Binder<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<strata_gguf::TensorView<'_>, ModelError> {
        let t = self.set.tensor(name).ok_or_else(|| ModelError::MissingTensor { tensor: name.into() })?;
        let expected: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        if t.info.shape != expected {
            return Err(ModelError::Shape { tensor: name.into(), expected, found: t.info.shape.clone() });
        }
        Ok(t)
    }

    /// A matrix `[cols, rows]` (GGUF order: the input dimension first).
    fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Matrix, ModelError> {
        let t = self.tensor(&format!("{name}.weight"), &[cols, rows])?;
        Ok(Matrix { ty: t.info.ty, rows, cols, bytes: t.bytes() })
    }

    /// A stack of `e` matrices `[cols, rows, e]`, as one matrix of `rows·e` rows.
    fn experts(&self, name: &str, cols: usize, rows: usize, e: usize) -> Result<Matrix, ModelError> {
        let t = self.tensor(&format!("{name}.weight"), &[cols, rows, e])?;
        Ok(Matrix { ty: t.info.ty, rows: rows * e, cols, bytes: t.bytes() })
    }

    /// A vector (any shape with `len` elements in that order) as f32.
    fn vector(&self, full_name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let t = self.tensor(full_name, shape)?;
        Ok(t.to_f32()?)
    }

    fn bf16_or_float(&self, m: Matrix, name: &str) -> Result<Matrix, ModelError> {
        match m.ty {
            GgmlType::BF16 | GgmlType::F16 | GgmlType::F32 => Ok(m),
            ty => Err(ModelError::Type { tensor: name.into(), ty: ty.name().into(), what: "expected BF16".into() }),
        }
    }

    fn hc(&self, prefix: &str, c: &Config, inject: bool) -> Result<HcWeights, ModelError> {
        let wide = c.hc * c.n_embd;
        let down = self.matrix(&format!("{prefix}_down"), wide, c.hc_rank)?;
        let up = self.matrix(&format!("{prefix}_up"), c.hc_rank, wide)?;
        Ok(HcWeights {
            norm: self.vector(&format!("{prefix}_norm.weight"), &[wide])?,
            down: self.bf16_or_float(down, prefix)?,
            up: self.bf16_or_float(up, prefix)?,
            inject: if inject { Some(self.matrix(&format!("{prefix}_inject"), wide, c.hc)?) } else { None },
        })
    }

    fn gdn(&self, b: &str, c: &Config) -> Result<GdnWeights, ModelError> {
        let (n, s, hv) = (c.n_embd, c.ssm_state, c.ssm_heads);
        let ch = c.ssm_conv_channels();
        Ok(GdnWeights {
            qkv: self.matrix(&format!("{b}.attn_qkv"), n, ch)?,
            gate: self.matrix(&format!("{b}.attn_gate"), n, hv * s)?,
            conv: self.vector(&format!("{b}.ssm_conv1d.weight"), &[c.conv_kernel, ch])?,
            alpha: self.matrix(&format!("{b}.ssm_alpha"), n, hv)?,
            beta: self.matrix(&format!("{b}.ssm_beta"), n, hv)?,
            a: self.vector(&format!("{b}.ssm_a"), &[hv])?,
            dt_bias: self.vector(&format!("{b}.ssm_dt.bias"), &[hv])?,
            norm: self.vector(&format!("{b}.ssm_norm.weight"), &[s])?,
            out: self.matrix(&format!("{b}.ssm_out"), hv * s, n)?,
        })
    }

    fn qsa(&self, b: &str, c: &Config) -> Result<QsaWeights, ModelError> {
        let (n, dh, di) = (c.n_embd, c.head_dim, c.idx_dim);
        Ok(QsaWeights {
            q: self.matrix(&format!("{b}.attn_q"), n, c.n_head * 2 * dh)?,
            k: self.matrix(&format!("{b}.attn_k"), n, c.n_head_kv * dh)?,
            v: self.matrix(&format!("{b}.attn_v"), n, c.n_head_kv * dh)?,
            q_norm: self.vector(&format!("{b}.attn_q_norm.weight"), &[dh])?,
            k_norm: self.vector(&format!("{b}.attn_k_norm.weight"), &[dh])?,
            o: self.matrix(&format!("{b}.attn_output"), c.n_head * dh, n)?,
            idx_q: self.matrix(&format!("{b}.indexer.q_proj"), n, c.idx_heads * di)?,
            idx_k: self.matrix(&format!("{b}.indexer.k_proj"), n, di)?,
            idx_q_norm: self.vector(&format!("{b}.indexer.q_norm.weight"), &[di])?,
            idx_k_norm: self.vector(&format!("{b}.indexer.k_norm.weight"), &[di])?,
        })
    }

    fn moe(&self, b: &str, c: &Config) -> Result<MoeWeights, ModelError> {
        let (n, f, e) = (c.n_embd, c.expert_ff, c.n_expert);
        Ok(MoeWeights {
            router: self.matrix(&format!("{b}.ffn_gate_inp"), n, e)?,
            gate_exps: self.experts(&format!("{b}.ffn_gate_exps"), n, f, e)?,
            up_exps: self.experts(&format!("{b}.ffn_up_exps"), n, f, e)?,
            down_exps: self.experts(&format!("{b}.ffn_down_exps"), f, n, e)?,
            gate_shexp: self.matrix(&format!("{b}.ffn_gate_shexp"), n, f)?,
            up_shexp: self.matrix(&format!("{b}.ffn_up_shexp"), n, f)?,
            down_shexp: self.matrix(&format!("{b}.ffn_down_shexp"), f, n)?,
            shexp_gate: {
                let t = self.tensor(&format!("{b}.ffn_gate_inp_shexp.weight"), &[n])?;
                Matrix { ty: t.info.ty, rows: 1, cols: n, bytes: t.bytes() }
            },
        })
    }

    fn mtp(&self, c: &Config) -> Result<MtpWeights, ModelError> {
        let (n, wide) = (c.n_embd, c.hc * c.n_embd);
        let p = "mtp.blk.0";
        Ok(MtpWeights {
            norm_embd: self.vector("mtp.pre_fc_norm_embedding.weight", &[n])?,
            norm_hidden: self.vector("mtp.pre_fc_norm_hidden.weight", &[wide])?,
            fc_embd: self.matrix("mtp.fc_embedding", n, n)?,
            fc_hidden: self.matrix("mtp.fc_hidden", n, n)?,
            layer: Layer {
                hc_attn: self.hc(&format!("{p}.hc_attn"), c, true)?,
                mixer: Mixer::Qsa(self.qsa(p, c)?),
                hc_ffn: self.hc(&format!("{p}.hc_ffn"), c, true)?,
                moe: self.moe(p, c)?,
            },
            output_hc: self.hc("mtp.output_hc", c, false)?,
        })
    }

    fn ple(&self, c: &Config) -> Result<PleWeights, ModelError> {
        let (n, wide) = (c.n_embd, c.hc * c.n_embd);
        let rows = c.ple.head_offsets.iter().zip(&c.ple.head_vocab_sizes).map(|(o, s)| o + s).max().unwrap_or(0);
        let t = self
            .set
            .tensor("per_layer_token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor { tensor: "per_layer_token_embd.weight".into() })?;
        if t.info.shape.len() != 2 || t.info.shape[0] != c.ple_dim as u64 || t.info.shape[1] < rows {
            return Err(ModelError::Shape {
                tensor: "per_layer_token_embd.weight".into(),
                expected: vec![c.ple_dim as u64, rows],
                found: t.info.shape.clone(),
            });
        }
        let table = Matrix { ty: t.info.ty, rows: t.info.shape[1] as usize, cols: c.ple_dim, bytes: t.bytes() };
        Ok(PleWeights {
            table,
            key: self.matrix("blk.1.ple_key", n, wide)?,
            value: self.matrix("blk.1.ple_value", n, n)?,
            norm_key: self.vector("blk.1.ple_norm_key.weight", &[wide])?,
            norm_query: self.vector("blk.1.ple_norm_query.weight", &[wide])?,
            norm_conv: self.vector("blk.1.ple_norm_conv.weight", &[wide])?,
            conv: self.vector("blk.1.ple_conv1d.weight", &[4, wide])?,
        })
    }
}

impl Weights {
    pub fn load(set: &GgufSet, c: &Config) -> Result<Weights, ModelError> {
        let b = Binder { set };
        let layers = (0..c.n_layer)
            .map(|l| {
                let p = format!("blk.{l}");
                Ok(Layer {
                    hc_attn: b.hc(&format!("{p}.hc_attn"), c, true)?,
                    mixer: if c.is_qsa(l) { Mixer::Qsa(b.qsa(&p, c)?) } else { Mixer::Gdn(b.gdn(&p, c)?) },
                    hc_ffn: b.hc(&format!("{p}.hc_ffn"), c, true)?,
                    moe: b.moe(&p, c)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Weights {
            token_embd: b.matrix("token_embd", c.n_embd, c.vocab)?,
            ple: b.ple(c)?,
            layers,
            output_hc: b.hc("output_hc", c, false)?,
            output: b.matrix("output", c.n_embd, c.vocab)?,
            mtp: if c.nextn_layers >= 1 { Some(b.mtp(c)?) } else { None },
        })
    }
}
