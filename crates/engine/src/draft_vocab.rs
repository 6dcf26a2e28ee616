//! Which tokens a draft chooses among when `--draft-vocab K` cuts its head to K rows (docs/SPECULATION.md,
//! "A draft vocabulary"): the K tokens this run has seen most often, in its prompts and its replies, and
//! below those the lowest ids (a byte-level BPE vocabulary lists its tokens roughly from the most frequent,
//! so with nothing seen yet these are its first K). Drafts only propose: the verify pass's whole head
//! decides every token, so the list moves the acceptance, never the text.

/// The tokens seen so far and the draft vocabulary made from them.
#[derive(Debug)]
pub struct DraftVocab {
    k: usize,
    /// Whether tokens are counted at all (without, the list is the first K ids: `STRATA_DRAFT_BY_ID`).
    ranked: bool,
    /// Times each token was seen.
    counts: Vec<u32>,
    /// Tokens seen in all, and since the list was last made.
    seen: usize,
    fresh: usize,
    /// The list last made (ascending; empty before the first).
    ids: Vec<u32>,
}

/// Tokens seen between two lists at the least: making one gathers K rows of the head (on a card, from its
/// own copy of the head; on the host, a copy of them).
const FRESH_MIN: usize = 64;

impl DraftVocab {
    /// A draft vocabulary of `k` tokens (1 ..= `vocab`) of a vocabulary of `vocab`.
    pub fn new(k: usize, vocab: usize) -> DraftVocab {
        assert!((1..=vocab).contains(&k), "a draft vocabulary of {k} tokens in {vocab}");
        DraftVocab { k, ranked: true, counts: vec![0; vocab], seen: 0, fresh: 0, ids: Vec::new() }
    }

    /// The first `k` ids, whatever is seen (`STRATA_DRAFT_BY_ID`: the ranking's A/B).
    pub fn by_id(k: usize, vocab: usize) -> DraftVocab {
        DraftVocab { ranked: false, ..DraftVocab::new(k, vocab) }
    }

    /// Counts `tokens` (ids outside the vocabulary are not counted).
    pub fn note(&mut self, tokens: &[u32]) {
        if !self.ranked {
            return;
        }
        for &t in tokens {
            if let Some(c) = self.counts.get_mut(t as usize) {
                *c = c.saturating_add(1);
                self.seen += 1;
                self.fresh += 1;
            }
        }
    }

    /// A new list when one is due and differs from the last: the first time, then once the tokens seen
    /// since the last are an eighth of all seen (and at least [`FRESH_MIN`]), so a long run makes a few.
    pub fn due(&mut self) -> Option<&[u32]> {
        let due = self.ids.is_empty() || self.fresh >= FRESH_MIN.max(self.seen / 8);
        if !due {
            return None;
        }
        self.fresh = 0;
        let ids = self.ranked();
        (ids != self.ids).then(|| {
            self.ids = ids;
            &self.ids[..]
        })
    }

    /// The K tokens seen most often (the lower id first among equals), then the lowest ids not among
    /// them; ascending.
    pub fn ranked(&self) -> Vec<u32> {
        let mut seen: Vec<u32> = (0..self.counts.len() as u32).filter(|&t| self.counts[t as usize] > 0).collect();
        seen.sort_by_key(|&t| (std::cmp::Reverse(self.counts[t as usize]), t));
        seen.truncate(self.k);
        let mut keep = vec![false; self.counts.len()];
        for &t in &seen {
            keep[t as usize] = true;
        }
        let lowest = (0..self.counts.len() as u32).filter(|&t| !keep[t as usize]).take(self.k - seen.len());
        let mut ids: Vec<u32> = seen.into_iter().chain(lowest).collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_seen_tokens_then_the_lowest_ids() {
        let mut v = DraftVocab::new(4, 10);
        assert_eq!(v.ranked(), vec![0, 1, 2, 3], "nothing seen: the first K");
        v.note(&[9, 7, 9, 5, 7, 9, 8, 42]);
        // 9 three times, 7 twice, then 5 and 8 once each: the lower id (5) first; 42 is outside.
        assert_eq!(v.ranked(), vec![5, 7, 8, 9]);
        let mut w = DraftVocab::new(4, 10);
        w.note(&[6, 6]);
        assert_eq!(w.ranked(), vec![0, 1, 2, 6], "one seen: it, then the lowest ids");
        let mut by_id = DraftVocab::by_id(4, 10);
        by_id.note(&[9, 9, 8]);
        assert_eq!(by_id.due(), Some(&[0, 1, 2, 3][..]));
        by_id.note(&[9; 100]);
        assert_eq!(by_id.due(), None, "nothing counted, nothing due");
    }

    #[test]
    fn a_list_comes_first_then_when_enough_has_been_seen_and_only_when_it_changed() {
        let mut v = DraftVocab::new(2, 1000);
        v.note(&[500; 3]);
        assert_eq!(v.due(), Some(&[0, 500][..]));
        v.note(&[600; FRESH_MIN - 1]);
        assert_eq!(v.due(), None, "fewer than FRESH_MIN seen since");
        v.note(&[600]);
        assert_eq!(v.due(), Some(&[500, 600][..]));
        v.note(&[600; FRESH_MIN]);
        assert_eq!(v.due(), None, "due, but the same list");
        // Past 8 × FRESH_MIN seen, an eighth of them is needed.
        v.note(&[700; 8 * FRESH_MIN]);
        let seen = 3 + 2 * FRESH_MIN + 8 * FRESH_MIN;
        assert_eq!(v.due(), Some(&[600, 700][..]));
        v.note(&vec![800; seen / 8]);
        assert_eq!(v.due(), None, "an eighth of those before, not of all seen");
    }
}
