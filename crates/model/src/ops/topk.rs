//! Exact top-k rules (spec §5.5, §7; docs/ARITHMETIC.md § topk): the expert choice of the MoE router and
//! the QSA cell selection. Both order by value descending with the lower index first among equals, so
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
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| score_key(values[b]).cmp(&score_key(values[a])).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// The QSA selection of spec §5.5: the ascending ids of the cells one query attends to.
///
/// `block_scores[b]` scores complete block b for b below the tail block (the block of the current, last
/// cell `n_cells − 1`); `kpool` cells per block.
pub fn select_cells(block_scores: &[f32], n_cells: usize, top_k: usize, kpool: usize) -> Vec<u32> {
    let width = n_cells.min(top_k + kpool - 1);
    if n_cells <= width {
        return (0..n_cells as u32).collect();
    }
    let tail = (n_cells - 1) / kpool;
    debug_assert_eq!(block_scores.len(), tail);
    let mut budget = width - (n_cells - tail * kpool);
    let mut keep = vec![0usize; tail]; // cells kept per block, lowest ones first
    for b in top_k_order(block_scores) {
        if budget == 0 {
            break;
        }
        keep[b] = kpool.min(budget);
        budget -= keep[b];
    }
    let mut ids: Vec<u32> = Vec::with_capacity(width);
    for (b, &n) in keep.iter().enumerate() {
        ids.extend((b * kpool..b * kpool + n).map(|c| c as u32));
    }
    ids.extend((tail * kpool..n_cells).map(|c| c as u32));
    ids
}

fn top_k_order(values: &[f32]) -> Vec<usize> {
    top_k(values, values.len())
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
    }

    #[test]
    fn selection_keeps_tail_and_best_blocks() {
        // 23 cells: blocks 0..5 complete and scored, tail block 5 holds cells 20..23 (3 cells).
        // width = min(23, 8 + 4 − 1) = 11: the tail's 3, then 8 cells by score.
        let scores = [0.5, 9.0, 1.0, 9.0, 2.0];
        let ids = select_cells(&scores, 23, 8, 4);
        assert_eq!(ids, vec![4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22]);
        // A cut block keeps its lowest cells: width 12 here leaves 9 for blocks 1, 3 and one cell of 4.
        let ids = select_cells(&scores, 23, 9, 4);
        assert_eq!(ids, vec![4, 5, 6, 7, 12, 13, 14, 15, 16, 20, 21, 22]);
        // Everything fits: every cell.
        assert_eq!(select_cells(&[], 3, 8, 4), vec![0, 1, 2]);
        // All equal: the lowest blocks win; width 7 leaves 3 cells beside the full tail block.
        let ids = select_cells(&[1.0; 5], 24, 4, 4);
        assert_eq!(ids, vec![0, 1, 2, 20, 21, 22, 23]);
    }
}
