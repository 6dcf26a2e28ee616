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
    /// The largest temporaries of a window of 8 tokens: attention scores over every cell, the logits,
    /// the expert activations, the window's streams.
    pub scratch: u64,
}

pub fn plan_bytes(model: &Model, kv: KvMode, cells: usize) -> DevicePlan {
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
        + c.vocab
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
    let arena = (c.n_layer * per_layer + c.vocab) as u64 * 4 * crate::ops::matvec::MAX_T as u64;
    let chunks = 2 * crate::runtime::recorder::CHUNK as u64;
    let scratch = 4 * crate::ops::matvec::MAX_T as u64 * per_token as u64 + arena.max(chunks);
    DevicePlan { weights, caches, scratch }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
