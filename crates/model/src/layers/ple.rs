//! The per-layer n-gram embedding (spec §6; docs/ARITHMETIC.md § ple), applied to R at the start of the
//! layer `ple.layers` names.

use crate::config::{Config, PleConfig};
use crate::ops::act::{sigmoid, silu};
use crate::ops::dot::dot;
use crate::ops::norm::grouped_rms_norm;
use crate::state::PleState;
use crate::weights::PleWeights;

/// The PLE table's pages read once, on a thread of its own, so that a token's rows (16 random rows of a
/// table that may hold tens of GB, read from the memory-mapped file on the host) do not each wait for a
/// page fault or the disk while the device waits for them (`strata bench ple_rows`: 78 µs a token from a
/// cold page cache, 4 µs read ahead). Skipped, and said, when the table is more than half the memory the
/// system has available (the command line turns it off: `STRATA_PLE_WARM=0`). Returns the thread (None
/// when skipped); nothing waits for it.
pub fn warm_table(w: &PleWeights) -> Option<std::thread::JoinHandle<()>> {
    let bytes = w.table.bytes.clone();
    let len = bytes.len() as u64;
    match crate::placement::available_memory() {
        Some(avail) if len <= avail / 2 => {}
        Some(avail) => {
            eprintln!(
                "note: the PLE table ({:.1} GB) is not read ahead: more than half the available memory ({:.1} GB)",
                len as f64 / 1e9,
                avail as f64 / 1e9
            );
            return None;
        }
        None => return None,
    }
    let spawned = std::thread::Builder::new().name("ple-warm".into()).spawn(move || strata_gguf::read_pages(&bytes));
    spawned.ok()
}

/// The table rows of token `t` given its predecessors `prev` (most recent first, as given; before the
/// start they are `ple.eos_token_id`): one per head. An EOS among the predecessors stands, and every
/// older one is replaced by the EOS id; t itself never is. The hash is transformers': products and XOR
/// in wrapping 64-bit arithmetic, then the floored remainder of the signed value (torch.remainder).
pub fn ple_rows(c: &PleConfig, t: u32, prev: &[u64]) -> Vec<u64> {
    let eos = c.eos_token_id;
    let mut ctx = vec![t as u64];
    let mut seen_eos = false;
    for &p in prev.iter().take(c.ngram_size - 1) {
        ctx.push(if seen_eos { eos } else { p });
        seen_eos |= p == eos;
    }
    (0..c.heads())
        .map(|h| {
            let len = 2 + h / c.heads_per_ngram;
            let mixed = ctx[..len].iter().zip(&c.layer_multipliers).fold(0u64, |m, (&x, &k)| m ^ x.wrapping_mul(k));
            let size = c.head_vocab_sizes[h] as i64; // checked at load: below 2^40
            c.head_offsets[h] + (mixed as i64).rem_euclid(size) as u64
        })
        .collect()
}

/// Token `t`'s table rows, one per head, dequantized into `emb` (heads × row_dim values), and the history
/// `prev` (most recent first) moved on by t. Both devices read the rows on the host this way.
pub fn table_rows(c: &PleConfig, w: &PleWeights, t: u32, prev: &mut [u64], emb: &mut [f32]) {
    let m = c.row_dim;
    let rows = ple_rows(c, t, prev);
    // A byte of each cache line of every row read before any row is dequantized: the rows' cache and TLB
    // misses (random rows of a table of tens of GB) then overlap, where one row's dequantizing stood
    // between them (`strata bench ple_rows`, a table of 2.9 GB: 12.0–13.5 against 3.8–4.2 µs a token on
    // the 2-core build machine, bench/results/2026-12-02-cpu-ple-rows/).
    let touched = rows.iter().fold(0u8, |acc, &row| {
        let b = w.table.row_slice(row as usize);
        b.iter().step_by(64).chain(b.last()).fold(acc, |a, &x| a ^ x)
    });
    std::hint::black_box(touched);
    for (h, &row) in rows.iter().enumerate() {
        w.table.row(row as usize, &mut emb[h * m..(h + 1) * m]);
    }
    prev.rotate_right(1);
    prev[0] = t as u64;
}

/// The PLE block on R (hc·n) for token `t`; advances the history.
pub fn ple(r: &mut [f32], w: &PleWeights, c: &Config, p: &PleConfig, t: u32, st: &mut PleState) {
    let (n, hc) = (c.n_embd, c.hc);
    let mut emb = vec![0f32; p.embd_dim()];
    table_rows(p, w, t, &mut st.prev, &mut emb);

    let mut key = vec![0f32; hc * n];
    grouped_rms_norm(&w.key.matvec(&emb), &w.norm_key, n, c.eps, &mut key);
    let mut query = vec![0f32; hc * n];
    grouped_rms_norm(r, &w.norm_query, n, c.eps, &mut query);
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
    grouped_rms_norm(&gated, &w.norm_conv, n, c.eps, &mut z);
    // Causal conv of K taps at dilation ngram_size over z_{t−(K−1)d} … z_t, by fma from the oldest. The
    // history holds the (K−1)·d frames before t, oldest first.
    let (k, d) = (p.conv_kernel, p.ngram_size);
    for (i, rv) in r.iter_mut().enumerate() {
        let mut s = 0f32;
        for tap in 0..k - 1 {
            s = w.conv[k * i + tap].mul_add(st.z[d * tap][i], s);
        }
        s = w.conv[k * i + k - 1].mul_add(z[i], s);
        *rv += gated[i] + silu(s);
    }
    if !st.z.is_empty() {
        st.z.remove(0);
        st.z.push(z);
    }
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
