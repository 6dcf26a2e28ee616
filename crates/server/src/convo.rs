//! The conversation cache: context states kept in RAM under the tokens that made them, so a request that
//! extends a conversation reads only its new tokens. The GDN layers' states are recurrent, so a state can
//! only be taken up exactly where it was saved: a checkpoint serves a prompt that starts with all of its
//! tokens. Entries past the memory budget go, the least recently used first.

/// One saved state: the tokens that made it, and its size in bytes.
struct Entry<S> {
    tokens: Vec<u32>,
    state: S,
    bytes: usize,
    used: u64,
}

pub struct Convos<S> {
    entries: Vec<Entry<S>>,
    budget: usize,
    held: usize,
    clock: u64,
}

impl<S> Convos<S> {
    /// A cache of at most `budget` bytes of states (0 keeps none).
    pub fn new(budget: usize) -> Convos<S> {
        Convos { entries: Vec::new(), budget, held: 0, clock: 0 }
    }

    /// Keeps `state`, made by `tokens`, replacing an entry of the same tokens; then evicts the least
    /// recently used entries until the budget holds. A state larger than the budget is not kept.
    pub fn put(&mut self, tokens: Vec<u32>, state: S, bytes: usize) {
        if tokens.is_empty() || bytes > self.budget {
            return;
        }
        self.remove(&tokens);
        self.clock += 1;
        self.held += bytes;
        self.entries.push(Entry { tokens, state, bytes, used: self.clock });
        while self.held > self.budget {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used).expect("held > 0");
            self.held -= self.entries.swap_remove(oldest).bytes;
        }
    }

    /// Whether anything can be kept (a budget above 0).
    pub fn keeps(&self) -> bool {
        self.budget > 0
    }

    /// Whether an entry for exactly these tokens is kept.
    pub fn contains(&self, tokens: &[u32]) -> bool {
        self.entries.iter().any(|e| e.tokens == tokens)
    }

    /// The longest kept entry whose tokens begin `prompt` and leave at least one token of it to read
    /// (the last token's logits choose the first new one): its token count and state, marked as used.
    pub fn longest_prefix(&mut self, prompt: &[u32]) -> Option<(usize, &S)> {
        let best = (0..self.entries.len())
            .filter(|&i| {
                let t = &self.entries[i].tokens;
                t.len() < prompt.len() && prompt.starts_with(t)
            })
            .max_by_key(|&i| self.entries[i].tokens.len())?;
        self.clock += 1;
        let e = &mut self.entries[best];
        e.used = self.clock;
        Some((e.tokens.len(), &e.state))
    }

    fn remove(&mut self, tokens: &[u32]) {
        if let Some(i) = self.entries.iter().position(|e| e.tokens == tokens) {
            self.held -= self.entries.swap_remove(i).bytes;
        }
    }

    /// The most bytes kept.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Entries kept and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        (self.entries.len(), self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::Convos;

    #[test]
    fn the_longest_saved_prefix_is_found_and_leaves_a_token_to_read() {
        let mut c = Convos::new(100);
        c.put(vec![1, 2], "a", 10);
        c.put(vec![1, 2, 3, 4], "b", 10);
        c.put(vec![9], "c", 10);
        assert_eq!(c.longest_prefix(&[1, 2, 3, 4, 5]), Some((4, &"b")));
        assert_eq!(c.longest_prefix(&[1, 2, 3, 4]), Some((2, &"a")), "a whole-prompt entry leaves nothing to read");
        assert_eq!(c.longest_prefix(&[1, 3]), None);
        assert_eq!(c.longest_prefix(&[]), None);
    }

    #[test]
    fn the_least_recently_used_entries_go_past_the_budget() {
        let mut c = Convos::new(30);
        c.put(vec![1], "a", 10);
        c.put(vec![2], "b", 10);
        c.put(vec![3], "c", 10);
        assert!(c.longest_prefix(&[1, 0]).is_some()); // a is now the most recently used
        c.put(vec![4], "d", 10);
        assert!(!c.contains(&[2]), "b was the least recently used");
        assert!(c.contains(&[1]) && c.contains(&[3]) && c.contains(&[4]));
        assert_eq!(c.usage(), (3, 30));
        c.put(vec![5], "e", 31);
        assert!(!c.contains(&[5]), "larger than the budget: not kept");
        c.put(vec![3], "c2", 5);
        assert_eq!(c.usage(), (3, 25), "the same tokens replace their entry");
        assert_eq!(c.longest_prefix(&[3, 1]), Some((1, &"c2")));
    }
}
