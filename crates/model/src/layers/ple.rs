//! The per-layer n-gram embedding (spec §6; docs/ARITHMETIC.md § ple), applied to R before layer 1.

use crate::config::{Config, PleConfig};
use crate::ops::act::{sigmoid, silu};
use crate::ops::dot::dot;
use crate::ops::norm::grouped_rms_norm;
use crate::state::PleState;
use crate::weights::PleWeights;

const HEAD_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// The table rows of token `t` given its predecessors (most recent first): one per head.
pub fn ple_rows(c: &PleConfig, t: u32, prev: [Option<u32>; 2]) -> Vec<u64> {
    // An EOS among the predecessors is replaced, with every older one, by u64::MAX; t itself never is.
    let mut ctx = vec![t as u64];
    let mut seen_eos = false;
    for p in prev.iter().take(c.ngram_size - 1) {
        let v = match p {
            Some(p) if !seen_eos && *p as u64 != c.eos_token_id => *p as u64,
            Some(_) if !seen_eos => {
                seen_eos = true;
                u64::MAX
            }
            _ => u64::MAX,
        };
        ctx.push(v);
    }
    let heads = (c.ngram_size - 1) * c.heads_per_ngram;
    (0..heads)
        .map(|h| {
            let len = 2 + h / c.heads_per_ngram;
            let mixed = ctx[..len].iter().zip(&c.layer_multipliers).fold(0u64, |m, (&x, &k)| m ^ x.wrapping_mul(k));
            let hashed = mixed ^ (h as u64).wrapping_mul(HEAD_MIX);
            c.head_offsets[h] + hashed % c.head_vocab_sizes[h]
        })
        .collect()
}

/// The PLE block on R (hc·n) for token `t`; advances the history.
pub fn ple(r: &mut [f32], w: &PleWeights, c: &Config, t: u32, st: &mut PleState) {
    let (n, hc, m) = (c.n_embd, c.hc, c.ple_dim);
    let mut emb = vec![0f32; n];
    for (h, row) in ple_rows(&c.ple, t, st.prev).into_iter().enumerate() {
        w.table.row(row as usize, &mut emb[h * m..(h + 1) * m]);
    }
    st.prev = [Some(t), st.prev[0]];

    let mut key = vec![0f32; hc * n];
    grouped_rms_norm(&w.key.matvec(&emb), &w.norm_key, n, &mut key);
    let mut query = vec![0f32; hc * n];
    grouped_rms_norm(r, &w.norm_query, n, &mut query);
    let value = w.value.matvec(&emb);
    let sqrt_n = (n as f32).sqrt();
    let mut gated = vec![0f32; hc * n];
    for ch in 0..hc {
        let s = dot(&key[ch * n..(ch + 1) * n], &query[ch * n..(ch + 1) * n]) / sqrt_n;
        let gate = sigmoid(signum0(s) * s.abs().max(1e-6).sqrt());
        for (g, &v) in gated[ch * n..(ch + 1) * n].iter_mut().zip(&value) {
            *g = v * gate;
        }
    }
    let mut z = vec![0f32; hc * n];
    grouped_rms_norm(&gated, &w.norm_conv, n, &mut z);
    // Causal conv at dilation 3 over z_{t−9}, z_{t−6}, z_{t−3}, z_t with taps w[0..4], by fma from the
    // oldest. The history holds the 9 frames before t, oldest first.
    for (i, rv) in r.iter_mut().enumerate() {
        let mut s = 0f32;
        for tap in 0..3 {
            s = w.conv[4 * i + tap].mul_add(st.z[3 * tap][i], s);
        }
        s = w.conv[4 * i + 3].mul_add(z[i], s);
        *rv += gated[i] + silu(s);
    }
    st.z.remove(0);
    st.z.push(z);
}

/// sign(x) with sign(0) = 0.
fn signum0(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}
