//! Which tokens a draft chooses among when `--draft-vocab K` cuts its head to K rows (docs/SPECULATION.md,
//! "A draft vocabulary"). A byte-level BPE vocabulary lists its tokens roughly from the most frequent, so
//! the first K/2 ids are always in; the rest are the tokens this run has seen at least twice (in its
//! prompts and replies), the most seen first, and below those the next ids. So a conversation in a script
//! or domain the first ids miss (CJK text, a codebase's names) gets its own tokens, and a token seen once
//! displaces no frequent one. Drafts only propose: the verify pass's whole head decides every token, so
//! the list moves the acceptance, never the text.

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
    /// The list last made (ascending; empty before the first), and how many were made.
    ids: Vec<u32>,
    made: usize,
}

/// Times a token must be seen to displace an id of the vocabulary's order: a token seen once was as
/// likely a one-off (on the built-in model, tokens seen once in 1,000 tokens of context cost 3 points of
/// acceptance at K = 1,024; docs/SPECULATION.md).
const SEEN_MIN: u32 = 2;

/// Tokens seen after which every count is halved, so that a server's list follows what it is asked now
/// (a run of conversations in another language, say) rather than everything since it started: a list is
/// then made again at least every [`HALF_LIFE`] / 8 tokens.
const HALF_LIFE: usize = 1 << 20;

/// Tokens seen between two lists at the least: making one gathers K rows of the head (on a card, from its
/// own copy of the head; on the host, a copy of them).
const FRESH_MIN: usize = 64;

impl DraftVocab {
    /// A draft vocabulary of `k` tokens (1 ..= `vocab`) of a vocabulary of `vocab`.
    pub fn new(k: usize, vocab: usize) -> DraftVocab {
        assert!((1..=vocab).contains(&k), "a draft vocabulary of {k} tokens in {vocab}");
        DraftVocab { k, ranked: true, counts: vec![0; vocab], seen: 0, fresh: 0, ids: Vec::new(), made: 0 }
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
        if self.seen >= HALF_LIFE {
            self.counts.iter_mut().for_each(|c| *c /= 2);
            self.seen /= 2;
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
            self.made += 1;
            &self.ids[..]
        })
    }

    /// What it is, for a run's report: its size and the lists made.
    pub fn describe(&self) -> String {
        let how = if self.ranked { "the first half by id, then the most seen" } else { "the first by id" };
        format!("drafts among {} tokens ({how}); lists made: {}", self.k, self.made)
    }

    /// The first K/2 ids; then, past them, the tokens seen [`SEEN_MIN`] times or more, the most seen
    /// first (the lower id among equals); then the lowest ids not yet in: K tokens, ascending.
    pub fn ranked(&self) -> Vec<u32> {
        let (k, vocab) = (self.k, self.counts.len() as u32);
        let first = (k / 2) as u32;
        let mut seen: Vec<u32> = (first..vocab).filter(|&t| self.counts[t as usize] >= SEEN_MIN).collect();
        seen.sort_by_key(|&t| (std::cmp::Reverse(self.counts[t as usize]), t));
        seen.truncate(k - first as usize);
        let mut keep = vec![false; vocab as usize];
        for &t in &seen {
            keep[t as usize] = true;
        }
        let next = (first..vocab).filter(|&t| !keep[t as usize]).take(k - first as usize - seen.len());
        let mut ids: Vec<u32> = (0..first).chain(seen).chain(next).collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_half_then_the_tokens_seen_twice_most_seen_first_then_the_next_ids() {
        let mut v = DraftVocab::new(6, 20);
        assert_eq!(v.ranked(), vec![0, 1, 2, 3, 4, 5], "nothing seen: the first K");
        v.note(&[19, 17, 19, 15, 17, 19, 15, 12, 1, 1, 1, 42]);
        // 0..3 always; past them 19 (three times), then 15 and 17 (twice: the lower id first). 12 was
        // seen once, 1 is in already, 42 is outside.
        assert_eq!(v.ranked(), vec![0, 1, 2, 15, 17, 19]);
        let mut w = DraftVocab::new(6, 20);
        w.note(&[16, 16, 12]);
        assert_eq!(w.ranked(), vec![0, 1, 2, 3, 4, 16], "one seen twice: it, then the next ids");
        let mut x = DraftVocab::new(1, 20);
        x.note(&[7, 7]);
        assert_eq!(x.ranked(), vec![7], "K = 1: no first half");
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
        assert_eq!(v.due(), Some(&[0, 600][..]));
        v.note(&[600; FRESH_MIN]);
        assert_eq!(v.due(), None, "due, but the same list");
        // Past 8 × FRESH_MIN seen, an eighth of them is needed.
        v.note(&[700; 8 * FRESH_MIN]);
        let seen = 3 + 2 * FRESH_MIN + 8 * FRESH_MIN;
        assert_eq!(v.due(), Some(&[0, 700][..]));
        v.note(&vec![800; seen / 8]);
        assert_eq!(v.due(), None, "an eighth of those before, not of all seen");
    }

    #[test]
    fn old_counts_fade() {
        let mut v = DraftVocab::new(2, 1000);
        v.note(&vec![500; HALF_LIFE]);
        assert_eq!(v.due(), Some(&[0, 500][..]));
        // Fewer of another token since (three quarters as many), seen after the first were halved: it
        // leads now, where counts that never faded would keep 500.
        for _ in 0..3 {
            v.note(&vec![600; HALF_LIFE / 4]);
        }
        assert_eq!(v.due(), Some(&[0, 600][..]));
        assert!(v.seen < HALF_LIFE, "{}", v.seen);
    }
}
