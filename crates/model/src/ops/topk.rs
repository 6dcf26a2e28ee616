//! Exact top-k rules (spec §5.5, §7; docs/ARITHMETIC.md § topk): the expert choice of the MoE router,
//! the QSA cell selection and the greedy token. Both order by value descending with the lower index first among equals, so
//! the result is a pure function of the values.

/// The order key of a score: `s + 0.0` (−0 → +0), NaN ranks as 0; then the IEEE bits mapped so that
/// unsigned comparison is numeric comparison.
pub fn score_key(s: f32) -> u32 {
    let s = if s.is_nan() { 0.0 } else { s + 0.0 };
    let b = s.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Indices of the `k` largest values, largest first, lower index first among equals.
/// The order is total (key, then index), so selecting the first k and sorting only them gives the list a
/// whole sort would: linear in the values, not n·log n (QSA selects among every block of the context for
/// every token).
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    if k == 0 {
        return Vec::new();
    }
    let order = |&a: &usize, &b: &usize| score_key(values[b]).cmp(&score_key(values[a])).then(a.cmp(&b));
    let mut idx: Vec<usize> = (0..values.len()).collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
    }
    idx.sort_unstable_by(order);
    idx
}

/// The QSA selection of spec §0.7 / §5.5: the ascending ids of the cells one query attends to.
///
/// `block_scores[b]` scores complete block b (`n_cells / r` of them, the one the current cell completes
/// included); the `keep` best complete blocks are kept whole (equal scores: the lower block first), and
/// so are the `n_cells mod r` cells of the incomplete block.
pub fn select_blocks(block_scores: &[f32], n_cells: usize, keep: usize, r: usize) -> Vec<u32> {
    let complete = n_cells / r;
    debug_assert_eq!(block_scores.len(), complete);
    if complete <= keep {
        return (0..n_cells as u32).collect();
    }
    let mut chosen = top_k(block_scores, keep);
    chosen.sort_unstable();
    let mut ids: Vec<u32> = Vec::with_capacity(keep * r + r);
    for b in chosen {
        ids.extend((b * r..(b + 1) * r).map(|c| c as u32));
    }
    ids.extend((complete * r..n_cells).map(|c| c as u32));
    ids
}

/// The greedy token: the highest key, the lowest id among equals (top-1 of [`top_k`]'s order).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if score_key(v) > score_key(logits[best]) {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_like_numbers() {
        let v = [f32::NEG_INFINITY, -3.0, -1e-40, -0.0, 0.0, 1e-40, 2.0, f32::INFINITY];
        for w in v.windows(2) {
            assert!(score_key(w[0]) <= score_key(w[1]), "{w:?}");
        }
        assert_eq!(score_key(-0.0), score_key(0.0));
        assert_eq!(score_key(f32::NAN), score_key(0.0));
        assert_eq!(score_key(-f32::NAN), score_key(0.0));
    }

    #[test]
    fn top_k_breaks_ties_by_index() {
        assert_eq!(top_k(&[1.0, 3.0, 3.0, 2.0, 3.0], 3), vec![1, 2, 4]);
        assert_eq!(top_k(&[0.0, -0.0, f32::NAN], 3), vec![0, 1, 2]);
        assert_eq!(top_k(&[1.0, 2.0], 0), Vec::<usize>::new());
        assert_eq!(top_k(&[1.0, 2.0], 5), vec![1, 0]);
        // Against a whole sort, on values with many ties, for every k.
        let v: Vec<f32> = (0..300).map(|i| ((i * 7919) % 23) as f32 - 11.0).collect();
        let mut all: Vec<usize> = (0..v.len()).collect();
        all.sort_by(|&a, &b| score_key(v[b]).cmp(&score_key(v[a])).then(a.cmp(&b)));
        for k in 0..=v.len() {
            assert_eq!(top_k(&v, k), all[..k], "k = {k}");
        }
    }

    #[test]
    fn selection_keeps_whole_blocks_and_the_tail() {
        // 23 cells of blocks of 4: blocks 0..5 complete (cells 0..20), cells 20..23 incomplete.
        let scores = [0.5, 9.0, 1.0, 9.0, 2.0];
        // Keep 2 blocks: 1 and 3 (the two 9s), then the incomplete block's 3 cells.
        assert_eq!(select_blocks(&scores, 23, 2, 4), vec![4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22]);
        // Keep 3: block 4 (2.0) joins; never a part of a block.
        assert_eq!(select_blocks(&scores, 23, 3, 4), vec![4, 5, 6, 7, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]);
        // Everything fits: every cell.
        assert_eq!(select_blocks(&[1.0; 5], 23, 5, 4), (0..23).collect::<Vec<u32>>());
        // All equal: the lowest blocks win.
        assert_eq!(select_blocks(&[1.0; 6], 24, 1, 4), vec![0, 1, 2, 3]);
    }

    #[test]
    fn the_block_the_current_cell_completes_can_lose() {
        // 24 cells: 6 complete blocks, no incomplete one; block 5 holds the current cell 23 and scores
        // lowest, so the token does not attend to itself (spec §0.7).
        let scores = [3.0, 4.0, 5.0, 6.0, 7.0, 0.0];
        let ids = select_blocks(&scores, 24, 2, 4);
        assert_eq!(ids, vec![12, 13, 14, 15, 16, 17, 18, 19]);
        assert!(!ids.contains(&23));
    }
}
