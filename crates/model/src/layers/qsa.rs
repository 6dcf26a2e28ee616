//! QSA attention (spec §5; docs/ARITHMETIC.md § qsa): gated GQA over the cells the block indexer selects
//! (every cell on a dense layer, block size 0).

use crate::config::Config;
use crate::ops::act::{exp, rsqrt, sigmoid};
#[cfg(target_arch = "x86_64")]
use crate::ops::dot::dots8;
use crate::ops::dot::{butterfly_used, dot, sum, CHUNK, LANES};
use crate::ops::matvec::Inputs;
use crate::ops::norm::rms_norm_inplace;
use crate::ops::rope::Rope;
use crate::ops::topk::select_blocks;
use crate::state::QsaState;
use crate::weights::{AttnWeights, IndexerWeights};

/// One token at position `pos` (its cell is appended first, so n_cells = pos + 1), attending to the cells
/// the indexer selects with block size `ratio`, or to every cell when `ratio` is 0.
pub fn qsa(
    x: &[f32],
    w: &AttnWeights,
    c: &Config,
    st: &mut QsaState,
    pos: usize,
    ratio: usize,
    rope: &Rope,
) -> Vec<f32> {
    qsa_window(&[x], w, c, st, pos, ratio, rope).swap_remove(0)
}

/// A window of tokens at positions `pos..`, each as [`qsa`] in turn: the projections (the indexer's too)
/// of every token at once, each weight read once for the window; then token by token its cell
/// appended, its cells selected and attended; then the output projection at once.
pub fn qsa_window(
    xs: &[&[f32]],
    w: &AttnWeights,
    c: &Config,
    st: &mut QsaState,
    pos: usize,
    ratio: usize,
    rope: &Rope,
) -> Vec<Vec<f32>> {
    let inputs = Inputs::new(xs);
    let qg = w.q.matvec_inputs(&inputs);
    let (k, v) = (w.k.matvec_inputs(&inputs), w.v.matvec_inputs(&inputs));
    let indexer = match (&w.indexer, ratio) {
        (Some(idx), r) if r > 0 => Some((idx, idx.k.matvec_inputs(&inputs), indexer_queries(idx, c, xs, pos, r))),
        _ => None,
    };
    // The window's cells and closed blocks stored first, in order; then each token, reading only the
    // cells and blocks up to its own position (the same values as token by token), on the threads.
    for t in 0..xs.len() {
        let row = rope.row((pos + t) as u64);
        push_kv(k[t].clone(), &v[t], w, c, st, &row, rope);
        if let Some((idx, raw, _)) = &indexer {
            close_block(&raw[t], idx, c, st, pos + t, ratio, rope);
        }
    }
    let st = &*st;
    let one = |t: usize| {
        let p = pos + t;
        let row = rope.row(p as u64);
        let cells = match &indexer {
            Some((idx, _, qi)) => select(&qi[t], idx, c, st, p, ratio, rope, &row),
            None => (0..=p as u32).collect(),
        };
        debug_assert!(cells.iter().all(|&i| (i as usize) <= p));
        attend_heads(&qg[t], w, c, st, &cells, &row, rope)
    };
    let heads: Vec<Vec<f32>> = if xs.len() > 1 {
        use rayon::prelude::*;
        (0..xs.len()).into_par_iter().map(one).collect()
    } else {
        vec![one(0)]
    };
    w.o.matvec_window(&heads.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// The indexer's query projections of the window's tokens, made only for those that will score blocks
/// (more complete blocks than are kept); empty for the others.
fn indexer_queries(idx: &IndexerWeights, c: &Config, xs: &[&[f32]], pos: usize, r: usize) -> Vec<Vec<f32>> {
    let scores = |t: usize| (pos + t + 1) / r > c.idx_top_k / r;
    let first = (0..xs.len()).find(|&t| scores(t)).unwrap_or(xs.len());
    let mut qi = vec![Vec::new(); first];
    qi.extend(idx.q.matvec_window(&xs[first..]));
    qi
}

/// The dense form (the MTP layer, spec §9): the same projections at rope position `pos`, attending to
/// every cell of the layer's own cache, at most the last `window`.
pub fn qsa_dense(
    x: &[f32],
    w: &AttnWeights,
    c: &Config,
    st: &mut QsaState,
    pos: usize,
    rope: &Rope,
    window: usize,
) -> Vec<f32> {
    let row = rope.row(pos as u64);
    let qg = w.q.matvec(x);
    push_kv(w.k.matvec(x), &w.v.matvec(x), w, c, st, &row, rope);
    let n = st.k.len();
    let cells: Vec<u32> = (n.saturating_sub(window)..n).map(|i| i as u32).collect();
    w.o.matvec(&attend_heads(&qg, w, c, st, &cells, &row, rope))
}

/// [`qsa_dense`]'s cell alone: this token's k and v appended, with no query or attention (the same
/// products on the same input, so the same cell).
pub fn qsa_dense_append(x: &[f32], w: &AttnWeights, c: &Config, st: &mut QsaState, pos: usize, rope: &Rope) {
    push_kv(w.k.matvec(x), &w.v.matvec(x), w, c, st, &rope.row(pos as u64), rope);
}

/// This token's k (normed, roped) and v appended to the cache.
fn push_kv(
    mut k: Vec<f32>,
    v: &[f32],
    w: &AttnWeights,
    c: &Config,
    st: &mut QsaState,
    row: &[(f32, f32)],
    rope: &Rope,
) {
    for head in k.chunks_mut(c.head_dim) {
        rms_norm_inplace(head, &w.k_norm, c.eps);
        rope.apply(row, head);
    }
    st.k.push(&k);
    st.v.push(v);
}

/// Gated attention of every query head over `cells` (ascending): the heads the output projection reads.
fn attend_heads(
    qg: &[f32],
    w: &AttnWeights,
    c: &Config,
    st: &QsaState,
    cells: &[u32],
    row: &[(f32, f32)],
    rope: &Rope,
) -> Vec<f32> {
    let (dh, hq, hkv) = (c.head_dim, c.n_head, c.n_head_kv);
    // Gather the cells once (dequantized).
    let dim = hkv * dh;
    let (mut ks, mut vs) = (vec![0f32; cells.len() * dim], vec![0f32; cells.len() * dim]);
    for (j, &cell) in cells.iter().enumerate() {
        st.k.get(cell as usize, &mut ks[j * dim..(j + 1) * dim]);
        st.v.get(cell as usize, &mut vs[j * dim..(j + 1) * dim]);
    }
    let scale = rsqrt(dh as f32);
    let mut out = vec![0f32; hq * dh];
    for h in 0..hq {
        let g = h / (hq / hkv);
        let mut q = qg[h * 2 * dh..h * 2 * dh + dh].to_vec();
        let gate = &qg[h * 2 * dh + dh..(h + 1) * 2 * dh];
        rms_norm_inplace(&mut q, &w.q_norm, c.eps);
        rope.apply(row, &mut q);
        let a = attend(&q, &ks, &vs, dim, g * dh, scale);
        for (o, (&av, &gv)) in out[h * dh..(h + 1) * dh].iter_mut().zip(a.iter().zip(gate)) {
            *o = av * sigmoid(gv);
        }
    }
    out
}

/// Softmax attention of one query over gathered cells (`dim` values each, this head's kv at `off`):
/// scores `(q·k)·scale`, weights `e_j = exp(s_j − max)`, output `o[d] = dot(e, v[·][d]) / Σ_j e_j`: for each
/// dim the weighted sum over the cells (ascending) by the reduction contract (§ dot, the cells cut into
/// chunks of 8), as is the denominator.
pub fn attend(q: &[f32], ks: &[f32], vs: &[f32], dim: usize, off: usize, scale: f32) -> Vec<f32> {
    let dh = q.len();
    let n = ks.len() / dim;
    let s: Vec<f32> = (0..n).map(|j| dot(q, &ks[j * dim + off..j * dim + off + dh]) * scale).collect();
    let m = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let e: Vec<f32> = s.iter().map(|&v| exp(v - m)).collect();
    let total = sum(&e);
    weighted_sum(&e, vs, dim, off, dh).iter().map(|&v| v / total).collect()
}

/// `o[d] = dot(e, v[·][d])` for d in 0..dh, the cells' values `dh` at `off` of each `dim`-wide row of `vs`:
/// every dim's dot by the contract (§ dot), all dims side by side.
fn weighted_sum(e: &[f32], vs: &[f32], dim: usize, off: usize, dh: usize) -> Vec<f32> {
    let mut lanes = vec![[0f32; LANES]; dh];
    let mut part = vec![0f32; dh];
    for (c, ec) in e.chunks(CHUNK).enumerate() {
        part.fill(0.0);
        for (i, &ej) in ec.iter().enumerate() {
            let row = (c * CHUNK + i) * dim + off;
            for (p, &v) in part.iter_mut().zip(&vs[row..row + dh]) {
                *p = ej.mul_add(v, *p);
            }
        }
        for (lane, &p) in lanes.iter_mut().zip(&part) {
            lane[c % LANES] += p;
        }
    }
    let used = e.len().div_ceil(CHUNK);
    lanes.into_iter().map(|l| butterfly_used(l, used)).collect()
}

/// The indexer's keys (spec §0.7, §5.2–5.4): store this token's raw key, and close its block (the mean
/// of its raw keys, normed and roped at the block's first cell) if this cell completes it.
fn close_block(raw: &[f32], w: &IndexerWeights, c: &Config, st: &mut QsaState, pos: usize, r: usize, rope: &Rope) {
    st.raw.extend_from_slice(raw);
    let n_cells = pos + 1;
    if n_cells.is_multiple_of(r) {
        let mut key = block_mean(&st.raw, c.idx_dim);
        st.raw.clear();
        rms_norm_inplace(&mut key, &w.k_norm, c.eps);
        rope.apply(&rope.row((n_cells - r) as u64), &mut key);
        st.blocks.extend(key);
    }
}

/// The cells the token at `pos` attends to (spec §5.5), given its indexer query projections: every cell
/// while no more blocks are complete than are kept; else the complete blocks up to it (the one it
/// closes too) scored with its queries, whole blocks selected, plus the incomplete block's cells.
#[allow(clippy::too_many_arguments)]
fn select(
    qi: &[f32],
    w: &IndexerWeights,
    c: &Config,
    st: &QsaState,
    pos: usize,
    r: usize,
    rope: &Rope,
    row: &[(f32, f32)],
) -> Vec<u32> {
    let di = c.idx_dim;
    let n_cells = pos + 1;
    let complete = n_cells / r;
    let keep = c.idx_top_k / r;
    if complete <= keep {
        return (0..n_cells as u32).collect();
    }
    let mut qi = qi.to_vec();
    for head in qi.chunks_mut(di) {
        rms_norm_inplace(head, &w.q_norm, c.eps);
        rope.apply(row, head);
    }
    let scorer = BlockScorer::new(&qi, di);
    let scores: Vec<f32> = (0..complete).map(|b| scorer.score(&st.blocks[b * di..(b + 1) * di])).collect();
    select_blocks(&scores, n_cells, keep, r)
}

/// The mean of a block's raw keys: summed in cell order, then divided by the count.
pub fn block_mean(raw: &[f32], di: usize) -> Vec<f32> {
    let n = raw.len() / di;
    (0..di)
        .map(|d| {
            let mut s = raw[d];
            for cell in 1..n {
                s += raw[cell * di + d];
            }
            s / n as f32
        })
        .collect()
}

/// The block score of spec §0.7: `(Σ_h relu(Q_h·K_b)) / √di`, heads in order from +0, relu adding only
/// dots > 0 (a NaN or a zero adds nothing); IEEE square root and division.
pub fn block_score(q: &[f32], key: &[f32]) -> f32 {
    let mut s = 0f32;
    for qh in q.chunks(key.len()) {
        let d = dot(qh, key);
        if d > 0.0 {
            s += d;
        }
    }
    s / (key.len() as f32).sqrt()
}

/// [`block_score`] for every block of one token's query: with AVX2, eight heads side by side in a
/// register (each lane one head's dot: chunk c's fma chain in element order, its lane total `+0 + chunk`,
/// then the butterfly over the chunks in use, all as the contract does them: the same bits) where a key
/// has at most 32 chunks (one chunk a lane); else [`block_score`] itself.
pub struct BlockScorer {
    di: usize,
    q: Vec<f32>,
    /// Groups of eight heads, element-major: `lanes[g][e][h]` is head 8g + h's element e (zero past the
    /// last head).
    lanes: Vec<Vec<[f32; 8]>>,
    simd: bool,
}

impl BlockScorer {
    pub fn new(q: &[f32], di: usize) -> BlockScorer {
        let n_heads = q.len() / di;
        let simd = cfg!(target_arch = "x86_64")
            && crate::ops::vector::current() != crate::ops::vector::Vector::Scalar
            && di.div_ceil(CHUNK) <= LANES;
        let lane = |g: usize, e: usize| -> [f32; 8] {
            std::array::from_fn(|h| if 8 * g + h < n_heads { q[(8 * g + h) * di + e] } else { 0.0 })
        };
        let lanes = if simd {
            (0..n_heads.div_ceil(8)).map(|g| (0..di).map(|e| lane(g, e)).collect()).collect()
        } else {
            Vec::new()
        };
        BlockScorer { di, q: q.to_vec(), lanes, simd }
    }

    /// The block score of the block whose key is `key`.
    pub fn score(&self, key: &[f32]) -> f32 {
        debug_assert_eq!(key.len(), self.di);
        #[cfg(target_arch = "x86_64")]
        if self.simd {
            let n_heads = self.q.len() / self.di;
            let mut s = 0f32;
            for (g, lanes) in self.lanes.iter().enumerate() {
                // SAFETY: `simd` is set only where the CPU has AVX2 and FMA (ops/vector.rs).
                let d = unsafe { dots8(lanes, key) };
                for &d in &d[..(n_heads - 8 * g).min(8)] {
                    if d > 0.0 {
                        s += d;
                    }
                }
            }
            return s / (key.len() as f32).sqrt();
        }
        block_score(&self.q, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_scores_with_eight_heads_a_register_are_the_contracts() {
        let mut rng = strata_gguf::SplitMix64::new(3);
        let mut value = || (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0;
        for di in [8, 12, 32, 64, 72, 128, 200, 256, 300] {
            let q: Vec<f32> = (0..4 * di).map(|_| value()).collect();
            for _ in 0..20 {
                let key: Vec<f32> = (0..di).map(|_| value()).collect();
                for n_heads in [1, 3, 4, 8, 9, 11, 16] {
                    let q: Vec<f32> = q.iter().copied().cycle().take(n_heads * di).collect();
                    let scorer = BlockScorer::new(&q, di);
                    assert_eq!(
                        scorer.score(&key).to_bits(),
                        block_score(&q, &key).to_bits(),
                        "di {di}, heads {n_heads}"
                    );
                }
            }
        }
    }

    /// Each dim of the weighted sum is the contract's dot of e with that dim's column, whatever the count
    /// of cells (a partial last chunk, fewer chunks than lanes, many rounds of lanes) and the offset.
    #[test]
    fn weighted_sum_is_each_columns_dot() {
        let mut rng = strata_gguf::SplitMix64::new(7);
        for n in [1usize, 7, 8, 9, 255, 256, 257, 2051] {
            let (dim, off, dh) = (24, 8, 16);
            let e: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
            let vs: Vec<f32> = (0..n * dim).map(|_| rng.uniform() - 0.5).collect();
            let got = weighted_sum(&e, &vs, dim, off, dh);
            for (d, g) in got.iter().enumerate() {
                let column: Vec<f32> = (0..n).map(|j| vs[j * dim + off + d]).collect();
                assert_eq!(g.to_bits(), dot(&e, &column).to_bits(), "n = {n}, d = {d}");
            }
        }
    }

    /// The order is the contract's: a sequential fma chain over the cells gives other bits somewhere.
    #[test]
    fn weighted_sum_is_not_a_chain() {
        let mut rng = strata_gguf::SplitMix64::new(8);
        let (n, dh) = (2048, 32);
        let e: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
        let vs: Vec<f32> = (0..n * dh).map(|_| rng.uniform() - 0.5).collect();
        let got = weighted_sum(&e, &vs, dh, 0, dh);
        let chain: Vec<f32> = (0..dh).map(|d| (0..n).fold(0f32, |o, j| e[j].mul_add(vs[j * dh + d], o))).collect();
        assert!(got.iter().zip(&chain).any(|(a, b)| a.to_bits() != b.to_bits()));
    }
}
