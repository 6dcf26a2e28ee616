//! The model's tensors bound under the names llama.cpp's converter writes (spec §0, §2–§9), each checked
//! against the config's shape. Quantized weights stay in the file's memory map; small vectors (norm
//! gammas, biases) are read as f32. Fused variants (`attn_qkv` on attention layers, `ffn_gate_up_exps`)
//! are bound as row ranges of the fused tensor.

use strata_gguf::{GgufSet, TensorBytes, TensorView};

use crate::config::{Config, LayerKind};
use crate::error::ModelError;
use crate::ops::matvec::{Dequantized, Matrix};

/// One hyper-connection read: `hc_*_norm`, `hc_*_down`, `hc_*_up`, `hc_*_inject` (absent for the final read).
pub struct HcWeights {
    pub norm: Vec<f32>,
    pub down: Matrix,
    pub up: Matrix,
    pub inject: Option<Matrix>,
    /// `down` and `up` kept dequantized where they are small ([`HcWeights::keep`]): the CPU's products
    /// then skip dequantizing them each token (the same bits).
    pub kept: Option<(Dequantized, Dequantized)>,
}

/// The most f32 bytes of the HC read's two products kept dequantized: the built-in model's are 256 KiB a
/// read, the full model's 25 MiB (whose BF16 weights are then read at half the bytes instead).
const HC_KEEP_MAX: usize = 1 << 20;

impl HcWeights {
    /// `down` and `up` kept dequantized when together they take at most [`HC_KEEP_MAX`] bytes so.
    pub fn keep(mut self) -> HcWeights {
        if 4 * (self.down.rows * self.down.cols + self.up.rows * self.up.cols) <= HC_KEEP_MAX {
            self.kept = Some((Dequantized::new(&self.down), Dequantized::new(&self.up)));
        }
        self
    }
}

pub struct GdnWeights {
    pub qkv: Matrix,
    pub gate: Matrix,
    /// `[K, channels]`: channel ch's taps at `K·ch .. K·ch + K`, oldest first.
    pub conv: Vec<f32>,
    pub alpha: Matrix,
    pub beta: Matrix,
    pub a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out: Matrix,
}

/// The QSA block indexer of an attention layer.
pub struct IndexerWeights {
    pub q: Matrix,
    pub k: Matrix,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
}

pub struct AttnWeights {
    /// Per head `[q(dh) | gate(dh)]`.
    pub q: Matrix,
    pub k: Matrix,
    pub v: Matrix,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub o: Matrix,
    /// Present on every QSA layer; a dense layer (block size 0) may lack it.
    pub indexer: Option<IndexerWeights>,
}

pub enum Mixer {
    Gdn(GdnWeights),
    Attn(AttnWeights),
}

/// One projection of every routed expert: expert e's rows start at `e·stride + offset` of `m`.
#[derive(Clone)]
pub struct Stacked {
    pub m: Matrix,
    pub stride: usize,
    pub offset: usize,
}

impl Stacked {
    pub fn first_row(&self, e: usize) -> usize {
        e * self.stride + self.offset
    }

    /// Expert `e`'s `stride` rows as the tensor holds them (both halves of a fused gate/up tensor): what
    /// a device's cache slot takes. None past the tensor's end.
    pub fn expert_bytes(&self, e: usize) -> Option<TensorBytes> {
        let len = self.stride * self.m.row_view().row_bytes();
        self.m.bytes.slice(e.checked_mul(len)?, len)
    }
}

#[derive(Clone)]
pub struct MoeWeights {
    pub router: Matrix,
    pub gate_exps: Stacked,
    pub up_exps: Stacked,
    pub down_exps: Stacked,
    pub gate_shexp: Matrix,
    pub up_shexp: Matrix,
    pub down_shexp: Matrix,
    /// `ffn_gate_inp_shexp`: one row of n.
    pub shexp_gate: Matrix,
}

pub struct PleWeights {
    pub table: Matrix,
    pub key: Matrix,
    pub value: Matrix,
    pub norm_key: Vec<f32>,
    pub norm_query: Vec<f32>,
    pub norm_conv: Vec<f32>,
    /// `[K, hc·n]`, as `GdnWeights::conv`.
    pub conv: Vec<f32>,
}

pub struct Layer {
    pub hc_attn: HcWeights,
    pub mixer: Mixer,
    pub hc_ffn: HcWeights,
    pub moe: MoeWeights,
}

/// The MTP draft layer (spec §0.11, §9), stored as block `n_layer` with `nextn.*` tensors.
pub struct MtpWeights {
    /// `nextn.enorm` [n].
    pub enorm: Vec<f32>,
    /// `nextn.hnorm`: [n] shared by the streams, or [hc·n] (a gamma per stream); stored as [hc·n].
    pub hnorm: Vec<f32>,
    /// `nextn.eh_proj [2n, n]`, applied to the concatenation `[enorm(e) | hnorm(R[c])]`.
    pub eh_proj: Matrix,
    /// An attention layer run dense over its own cache.
    pub layer: Layer,
    pub output_hc: HcWeights,
}

pub struct Weights {
    pub token_embd: Matrix,
    pub ple: Option<PleWeights>,
    pub layers: Vec<Layer>,
    pub output_hc: HcWeights,
    /// `output.weight`, or `token_embd` when the file has no head of its own (tied).
    pub output: Matrix,
    pub mtp: Option<MtpWeights>,
}

/// Binds tensors by name with shape checks.
struct Binder<'a> {
    set: &'a GgufSet,
}

impl Binder<'_> {
    fn find(&self, name: &str) -> Result<TensorView<'_>, ModelError> {
        self.set.tensor(name).ok_or_else(|| ModelError::MissingTensor { tensor: name.into() })
    }

    fn tensor(&self, name: &str, shape: &[usize]) -> Result<TensorView<'_>, ModelError> {
        let t = self.find(name)?;
        // Trailing dimensions of 1 are the same shape to ggml (the converter writes [n, 1] for some vectors).
        let mut found = t.info.shape.clone();
        while found.len() > shape.len() && found.last() == Some(&1) {
            found.pop();
        }
        let expected: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        if found != expected {
            return Err(ModelError::Shape { tensor: name.into(), expected, found: t.info.shape.clone() });
        }
        Ok(t)
    }

    fn has(&self, name: &str) -> bool {
        self.set.tensor(name).is_some()
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

    /// A vector of `len` values as f32, stored as `[len]` or as any 2-D shape of `len` elements (the hc
    /// norms may be `[n, hc]`).
    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.find(name)?;
        if t.info.n_elements != len as u64 || t.info.shape.len() > 2 {
            return Err(ModelError::Shape {
                tensor: name.into(),
                expected: vec![len as u64],
                found: t.info.shape.clone(),
            });
        }
        Ok(t.to_f32()?)
    }

    fn hc(&self, prefix: &str, c: &Config, inject: bool) -> Result<HcWeights, ModelError> {
        let wide = c.hc * c.n_embd;
        Ok(HcWeights {
            norm: self.vector(&format!("{prefix}_norm.weight"), wide)?,
            down: self.matrix(&format!("{prefix}_down"), wide, c.hc_rank)?,
            up: self.matrix(&format!("{prefix}_up"), c.hc_rank, wide)?,
            inject: if inject { Some(self.matrix(&format!("{prefix}_inject"), wide, c.hc)?) } else { None },
            kept: None,
        }
        .keep())
    }

    fn gdn(&self, b: &str, c: &Config) -> Result<GdnWeights, ModelError> {
        let (n, s, hv) = (c.n_embd, c.ssm_state, c.ssm_heads);
        let ch = c.ssm_conv_channels();
        Ok(GdnWeights {
            qkv: self.matrix(&format!("{b}.attn_qkv"), n, ch)?,
            gate: self.matrix(&format!("{b}.attn_gate"), n, hv * s)?,
            conv: self.tensor(&format!("{b}.ssm_conv1d.weight"), &[c.conv_kernel, ch])?.to_f32()?,
            alpha: self.matrix(&format!("{b}.ssm_alpha"), n, hv)?,
            beta: self.matrix(&format!("{b}.ssm_beta"), n, hv)?,
            a: self.vector(&format!("{b}.ssm_a"), hv)?,
            dt_bias: self.vector(&format!("{b}.ssm_dt.bias"), hv)?,
            norm: self.vector(&format!("{b}.ssm_norm.weight"), s)?,
            out: self.matrix(&format!("{b}.ssm_out"), hv * s, n)?,
        })
    }

    fn attn(&self, b: &str, c: &Config, ratio: usize) -> Result<AttnWeights, ModelError> {
        let (n, dh, di) = (c.n_embd, c.head_dim, c.idx_dim);
        let (q_rows, kv_rows) = (c.n_head * 2 * dh, c.n_head_kv * dh);
        let (q, k, v) = if self.has(&format!("{b}.attn_qkv.weight")) {
            let name = format!("{b}.attn_qkv");
            let fused = self.matrix(&name, n, q_rows + 2 * kv_rows)?;
            let part = |first, count| fused.row_range(first, count).expect("rows within the fused tensor");
            (part(0, q_rows), part(q_rows, kv_rows), part(q_rows + kv_rows, kv_rows))
        } else {
            (
                self.matrix(&format!("{b}.attn_q"), n, q_rows)?,
                self.matrix(&format!("{b}.attn_k"), n, kv_rows)?,
                self.matrix(&format!("{b}.attn_v"), n, kv_rows)?,
            )
        };
        let indexer = if ratio > 0 || self.has(&format!("{b}.indexer.q_proj.weight")) {
            Some(IndexerWeights {
                q: self.matrix(&format!("{b}.indexer.q_proj"), n, c.idx_heads * di)?,
                k: self.matrix(&format!("{b}.indexer.k_proj"), n, di)?,
                q_norm: self.vector(&format!("{b}.indexer.q_norm.weight"), di)?,
                k_norm: self.vector(&format!("{b}.indexer.k_norm.weight"), di)?,
            })
        } else {
            None
        };
        Ok(AttnWeights {
            q,
            k,
            v,
            q_norm: self.vector(&format!("{b}.attn_q_norm.weight"), dh)?,
            k_norm: self.vector(&format!("{b}.attn_k_norm.weight"), dh)?,
            o: self.matrix(&format!("{b}.attn_output"), c.n_head * dh, n)?,
            indexer,
        })
    }

    fn moe(&self, b: &str, c: &Config) -> Result<MoeWeights, ModelError> {
        let (n, f, e, fs) = (c.n_embd, c.expert_ff, c.n_expert, c.shexp_ff);
        let (gate_exps, up_exps) = if self.has(&format!("{b}.ffn_gate_up_exps.weight")) {
            // Fused: per expert 2f rows, the gate's first.
            let m = self.experts(&format!("{b}.ffn_gate_up_exps"), n, 2 * f, e)?;
            (Stacked { m: m.clone(), stride: 2 * f, offset: 0 }, Stacked { m, stride: 2 * f, offset: f })
        } else {
            (
                Stacked { m: self.experts(&format!("{b}.ffn_gate_exps"), n, f, e)?, stride: f, offset: 0 },
                Stacked { m: self.experts(&format!("{b}.ffn_up_exps"), n, f, e)?, stride: f, offset: 0 },
            )
        };
        let sg = self.tensor(&format!("{b}.ffn_gate_inp_shexp.weight"), &[n])?;
        Ok(MoeWeights {
            router: self.matrix(&format!("{b}.ffn_gate_inp"), n, e)?,
            gate_exps,
            up_exps,
            down_exps: Stacked { m: self.experts(&format!("{b}.ffn_down_exps"), f, n, e)?, stride: n, offset: 0 },
            gate_shexp: self.matrix(&format!("{b}.ffn_gate_shexp"), n, fs)?,
            up_shexp: self.matrix(&format!("{b}.ffn_up_shexp"), n, fs)?,
            down_shexp: self.matrix(&format!("{b}.ffn_down_shexp"), fs, n)?,
            shexp_gate: Matrix { ty: sg.info.ty, rows: 1, cols: n, bytes: sg.bytes() },
        })
    }

    fn layer(&self, l: usize, kind: LayerKind, c: &Config) -> Result<Layer, ModelError> {
        let p = format!("blk.{l}");
        Ok(Layer {
            hc_attn: self.hc(&format!("{p}.hc_attn"), c, true)?,
            mixer: match kind {
                LayerKind::Gdn => Mixer::Gdn(self.gdn(&p, c)?),
                LayerKind::Attn { ratio } => Mixer::Attn(self.attn(&p, c, ratio)?),
            },
            hc_ffn: self.hc(&format!("{p}.hc_ffn"), c, true)?,
            moe: self.moe(&p, c)?,
        })
    }

    /// The MTP block `blk.{l}` (`l` = the trunk's layer count). Its final mixer is `nextn.hc_head_*`; an
    /// MTP-only file written before those names existed keeps it under its own `output_hc_*`
    /// (`sidecar`), as the newer llama.cpp reads it.
    fn mtp(&self, c: &Config, sidecar: bool) -> Result<MtpWeights, ModelError> {
        let (n, wide, l) = (c.n_embd, c.hc * c.n_embd, c.n_layer);
        let p = format!("blk.{l}.nextn");
        let hnorm_name = format!("{p}.hnorm.weight");
        let hnorm = match self.find(&hnorm_name)?.info.n_elements {
            e if e == n as u64 => self.vector(&hnorm_name, n)?.repeat(c.hc),
            _ => self.vector(&hnorm_name, wide)?,
        };
        let head = format!("{p}.hc_head");
        let output_hc = if sidecar && !self.has(&format!("{head}_norm.weight")) {
            self.hc("output_hc", c, false)?
        } else {
            self.hc(&head, c, false)?
        };
        Ok(MtpWeights {
            enorm: self.vector(&format!("{p}.enorm.weight"), n)?,
            hnorm,
            eh_proj: self.matrix(&format!("{p}.eh_proj"), 2 * n, n)?,
            layer: self.layer(l, LayerKind::Attn { ratio: 0 }, c)?,
            output_hc,
        })
    }

    fn ple(&self, c: &Config) -> Result<Option<PleWeights>, ModelError> {
        let Some(p) = &c.ple else { return Ok(None) };
        let (n, wide, e) = (c.n_embd, c.hc * c.n_embd, p.embd_dim());
        let heads = p.heads();
        let rows = (0..heads).map(|h| p.head_offsets[h] + p.head_vocab_sizes[h]).max().unwrap_or(0);
        let name = "per_layer_token_embd.weight";
        let t = self.find(name)?;
        if t.info.shape.len() != 2 || t.info.shape[0] != p.row_dim as u64 || t.info.shape[1] < rows {
            return Err(ModelError::Shape {
                tensor: name.into(),
                expected: vec![p.row_dim as u64, rows],
                found: t.info.shape.clone(),
            });
        }
        let table = Matrix { ty: t.info.ty, rows: t.info.shape[1] as usize, cols: p.row_dim, bytes: t.bytes() };
        let b = format!("blk.{}", p.layer);
        Ok(Some(PleWeights {
            table,
            key: self.matrix(&format!("{b}.ple_key"), e, wide)?,
            value: self.matrix(&format!("{b}.ple_value"), e, n)?,
            norm_key: self.vector(&format!("{b}.ple_norm_key.weight"), wide)?,
            norm_query: self.vector(&format!("{b}.ple_norm_query.weight"), wide)?,
            norm_conv: self.vector(&format!("{b}.ple_norm_conv.weight"), wide)?,
            conv: self.tensor(&format!("{b}.ple_conv1d.weight"), &[p.conv_kernel, wide])?.to_f32()?,
        }))
    }
}

impl Weights {
    pub fn load(set: &GgufSet, c: &Config) -> Result<Weights, ModelError> {
        let b = Binder { set };
        let layers = c.kinds.iter().enumerate().map(|(l, &k)| b.layer(l, k, c)).collect::<Result<Vec<_>, _>>()?;
        let token_embd = b.matrix("token_embd", c.n_embd, c.vocab)?;
        let output = if b.has("output.weight") { b.matrix("output", c.n_embd, c.vocab)? } else { token_embd.clone() };
        Ok(Weights {
            ple: b.ple(c)?,
            layers,
            output_hc: b.hc("output_hc", c, false)?,
            output,
            mtp: if c.nextn_layers >= 1 { Some(b.mtp(c, false)?) } else { None },
            token_embd,
        })
    }
}

impl MtpWeights {
    /// The MTP block of a separate MTP-only file (`--mtp FILE`: the newer converter's `--mtp` output),
    /// checked against the trunk's geometry; the embedding and the head stay the trunk's.
    pub fn load_sidecar(set: &GgufSet, trunk: &Config) -> Result<MtpWeights, ModelError> {
        let c = Config::from_gguf(set)?;
        if c.nextn_layers == 0 {
            return Err(ModelError::Metadata {
                key: format!("{}.nextn_predict_layers", crate::config::ARCH),
                what: "is 0 or missing: the file holds no MTP block".into(),
            });
        }
        let same = |what: &str, a: usize, b: usize| {
            if a == b {
                Ok(())
            } else {
                Err(ModelError::Metadata {
                    key: format!("{}.{what}", crate::config::ARCH),
                    what: format!("is {a} in the MTP file but {b} in the model"),
                })
            }
        };
        same("embedding_length", c.n_embd, trunk.n_embd)?;
        same("hyper_connection.count", c.hc, trunk.hc)?;
        same("hyper_connection.low_rank", c.hc_rank, trunk.hc_rank)?;
        same("attention.head_count", c.n_head, trunk.n_head)?;
        same("attention.head_count_kv", c.n_head_kv, trunk.n_head_kv)?;
        same("attention.key_length", c.head_dim, trunk.head_dim)?;
        same("expert_count", c.n_expert, trunk.n_expert)?;
        same("expert_used_count", c.n_expert_used, trunk.n_expert_used)?;
        same("expert_feed_forward_length", c.expert_ff, trunk.expert_ff)?;
        same("expert_shared_feed_forward_length", c.shexp_ff, trunk.shexp_ff)?;
        same("vocab_size", c.vocab, trunk.vocab)?;
        Binder { set }.mtp(&c, true)
    }
}
