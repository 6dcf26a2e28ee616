//! The VRAM expert cache's policy (docs/PLACEMENT.md): which routed experts hold its slots. Experts are
//! ranked by their routing counts, halved once the routings since the last halving reach eight an
//! expert, so the ranking follows the conversation but has seen enough to rank (halved at every re-rank,
//! 512 experts a layer were ranked on 80 routings: bench/results/2026-12-06-cpu-routing/); every `every`
//! passes the cache is re-ranked and at most `max_swaps` slots change hands, the coldest residents making
//! way for the hottest others. Only counts decide, never the time: the same routings give the same
//! cache. The policy knows no device: a back-end copies the experts a re-rank names, and where an expert
//! is computed changes no bit (layers/experts.rs), so neither the cache's state nor a swap in the middle
//! of a window can change the output.

use crate::backend::MoeId;

/// The host's available memory, MemAvailable from /proc/meminfo, in bytes (None where there is none):
/// what host memory can take (the experts locked in RAM, the PLE table read ahead).
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Routings an expert, on average, between two halvings of the counts.
const HALVE_AFTER: u64 = 8;

/// An expert of the model: the trunk's layer, or the MTP layer's (after the trunk's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExpertKey {
    pub layer: u32,
    pub expert: u32,
}

/// One slot's change: `old` (if any) leaves, `new` is copied in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Swap {
    pub slot: usize,
    pub old: Option<ExpertKey>,
    pub new: ExpertKey,
}

pub struct ExpertCache {
    layers: usize,
    experts: usize,
    /// Routings since the start, halved now and then (see the module's note), by layer · experts + expert.
    counts: Vec<u64>,
    /// Routings since the counts were last halved.
    since_halving: u64,
    /// Which expert each slot holds.
    slots: Vec<Option<ExpertKey>>,
    /// The slot of each expert, by layer · experts + expert.
    slot_of: Vec<Option<u32>>,
    /// Slots a layer holds when each layer has its own (a card's blocks, each with its cache buffers):
    /// layer l's are l·quota.. (l + 1)·quota. None: one pool for every layer.
    quota: Option<usize>,
    every: usize,
    max_swaps: usize,
    passes: usize,
    hits: u64,
    misses: u64,
}

impl ExpertCache {
    /// A cache of `slots` experts for `layers` trunk layers and the MTP layer, of `experts` each; empty
    /// until the first re-rank, which may fill every slot.
    pub fn new(layers: usize, experts: usize, slots: usize, every: usize, max_swaps: usize) -> ExpertCache {
        let all = (layers + 1) * experts;
        ExpertCache {
            layers,
            experts,
            counts: vec![0; all],
            since_halving: 0,
            slots: vec![None; slots.min(all)],
            slot_of: vec![None; all],
            quota: None,
            every: every.max(1),
            max_swaps,
            passes: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// A cache of `quota` slots in each of the `layers` trunk layers and the MTP layer (slots
    /// l·quota..(l + 1)·quota are layer l's; the MTP layer's come last): a re-rank swaps an expert only
    /// against a resident of its own layer. What a card needs whose blocks hold their own caches.
    pub fn per_layer(layers: usize, experts: usize, quota: usize, every: usize, max_swaps: usize) -> ExpertCache {
        let quota = quota.min(experts);
        ExpertCache { quota: Some(quota), ..ExpertCache::new(layers, experts, (layers + 1) * quota, every, max_swaps) }
    }

    /// Puts `key` in `slot` before any re-rank (a cache that starts full, as a card's does): false, and
    /// nothing changed, when the slot is taken or not the key's layer's, or the key is held already.
    pub fn hold(&mut self, slot: usize, key: ExpertKey) -> bool {
        let i = self.flat(key);
        let fits = key.expert < self.experts as u32 && i < self.slot_of.len() && slot < self.slots.len();
        if !fits || self.slots[slot].is_some() || self.slot_of[i].is_some() || self.group_of_slot(slot) != self.group(i)
        {
            return false;
        }
        self.slots[slot] = Some(key);
        self.slot_of[i] = Some(slot as u32);
        true
    }

    /// The group whose slots expert index `i` may take: its layer under a quota, else the one pool.
    fn group(&self, i: usize) -> usize {
        if self.quota.is_some() {
            i / self.experts
        } else {
            0
        }
    }

    fn group_of_slot(&self, slot: usize) -> usize {
        self.quota.map_or(0, |q| slot / q.max(1))
    }

    fn index(&self, id: MoeId, e: usize) -> usize {
        let l = match id {
            MoeId::Layer(l) => l.min(self.layers),
            MoeId::Mtp => self.layers,
        };
        l * self.experts + e.min(self.experts - 1)
    }

    fn key(&self, i: usize) -> ExpertKey {
        ExpertKey { layer: (i / self.experts) as u32, expert: (i % self.experts) as u32 }
    }

    /// Experts a layer has.
    pub fn experts(&self) -> usize {
        self.experts
    }

    /// The slot holding expert `e` of layer `id`, if the cache holds it.
    pub fn slot(&self, id: MoeId, e: usize) -> Option<usize> {
        self.slot_of[self.index(id, e)].map(|s| s as usize)
    }

    /// One token's choices in a layer: counted, and scored as hits or misses of the cache as it is.
    pub fn record(&mut self, id: MoeId, experts: &[usize]) {
        for &e in experts.iter().filter(|&&e| e < self.experts) {
            let i = self.index(id, e);
            self.counts[i] += 1;
            self.since_halving += 1;
            if self.slot_of[i].is_some() {
                self.hits += 1
            } else {
                self.misses += 1
            }
        }
    }

    /// Routings counted elsewhere (a card that counts its own): `counts[e]` choices of expert e in layer
    /// `id`, as that many [`ExpertCache::record`]s of it. The slots change only at a re-rank, so counts
    /// given before the re-rank that follows them leave the cache as the choices one by one would.
    pub fn record_counts(&mut self, id: MoeId, counts: &[u32]) {
        for (e, &c) in counts.iter().enumerate().take(self.experts).filter(|(_, &c)| c > 0) {
            let (i, c) = (self.index(id, e), u64::from(c));
            self.counts[i] += c;
            self.since_halving += c;
            if self.slot_of[i].is_some() {
                self.hits += c
            } else {
                self.misses += c
            }
        }
    }

    /// Whether the next [`ExpertCache::end_pass`] re-ranks.
    pub fn rerank_due(&self) -> bool {
        (self.passes + 1).is_multiple_of(self.every)
    }

    /// The end of a pass: every `every` passes, a re-rank; its swaps (none between).
    pub fn end_pass(&mut self) -> Vec<Swap> {
        self.passes += 1;
        if self.passes.is_multiple_of(self.every) {
            self.rerank()
        } else {
            Vec::new()
        }
    }

    /// The hottest experts take the slots: empty slots first, then, up to `max_swaps` in all, each
    /// hottest outsider against the coldest resident it beats (ties keep the resident), within its own
    /// layer under a quota. Counts are then halved if eight routings an expert have come since they last
    /// were.
    pub fn rerank(&mut self) -> Vec<Swap> {
        let mut order: Vec<usize> = (0..self.counts.len()).filter(|&i| self.counts[i] > 0).collect();
        order.sort_by(|&a, &b| self.counts[b].cmp(&self.counts[a]).then(a.cmp(&b)));
        let groups = self.quota.map_or(1, |_| self.layers + 1);
        // Each group's free slots (lowest first) and residents by coldness (the coldest, then the
        // highest index, first).
        let mut free: Vec<Vec<usize>> = vec![Vec::new(); groups];
        for s in (0..self.slots.len()).rev().filter(|&s| self.slots[s].is_none()) {
            free[self.group_of_slot(s)].push(s);
        }
        let mut residents: Vec<Vec<usize>> = vec![Vec::new(); groups];
        for k in self.slots.iter().flatten() {
            let i = self.flat(*k);
            residents[self.group(i)].push(i);
        }
        for r in &mut residents {
            r.sort_by(|&a, &b| self.counts[b].cmp(&self.counts[a]).then(a.cmp(&b)));
        }
        let mut swaps = Vec::new();
        for i in order {
            if swaps.len() >= self.max_swaps {
                break;
            }
            let g = self.group(i);
            if self.slot_of[i].is_some() {
                continue;
            }
            let (slot, old) = if let Some(slot) = free[g].pop() {
                (slot, None)
            } else {
                match residents[g].last() {
                    Some(&r) if self.counts[i] > self.counts[r] => {
                        residents[g].pop();
                        (self.slot_of[r].expect("a resident has a slot") as usize, Some(r))
                    }
                    _ => continue, // a colder outsider cannot beat this group's coldest either
                }
            };
            if let Some(r) = old {
                self.slot_of[r] = None;
            }
            self.slot_of[i] = Some(slot as u32);
            self.slots[slot] = Some(self.key(i));
            swaps.push(Swap { slot, old: old.map(|r| self.key(r)), new: self.key(i) });
        }
        if self.since_halving >= HALVE_AFTER * self.counts.len() as u64 {
            self.counts.iter_mut().for_each(|c| *c /= 2);
            self.since_halving = 0;
        }
        swaps
    }

    fn flat(&self, k: ExpertKey) -> usize {
        k.layer as usize * self.experts + k.expert as usize
    }

    /// Every expert's count, by layer · experts + expert (the trunk's layers, then the MTP layer): what a
    /// later run starts from (`routing_file`).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Counts an earlier run left (`routing_file`) taken as this cache's own, before any routing: false,
    /// and nothing changed, where their number is not this cache's.
    pub fn seed(&mut self, counts: &[u64]) -> bool {
        if counts.len() != self.counts.len() {
            return false;
        }
        self.counts.copy_from_slice(counts);
        true
    }

    /// Layer `layer`'s `n` most counted experts (ties: the lower id first), hottest first: a cache's
    /// first holding where counts were seeded.
    pub fn hottest(&self, layer: usize, n: usize) -> Vec<usize> {
        let at = layer.min(self.layers) * self.experts;
        let c = &self.counts[at..at + self.experts];
        let mut order: Vec<usize> = (0..self.experts).collect();
        order.sort_by(|&a, &b| c[b].cmp(&c[a]).then(a.cmp(&b)));
        order.truncate(n);
        order
    }

    /// Routings the cache held and those it did not, since the start.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    pub fn hit_rate(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(layer: u32, expert: u32) -> ExpertKey {
        ExpertKey { layer, expert }
    }

    #[test]
    fn seeded_counts_rank_the_first_holding() {
        let mut c = ExpertCache::per_layer(1, 4, 2, 8, 100);
        assert!(!c.seed(&[1, 2, 3]), "three counts for 2 × 4");
        assert_eq!(c.hottest(0, 2), vec![0, 1], "no counts: the first experts");
        assert!(c.seed(&[5, 9, 0, 9, 1, 0, 7, 7]));
        assert_eq!(c.hottest(0, 3), vec![1, 3, 0], "9, 9 (the lower id first), 5");
        assert_eq!(c.hottest(1, 2), vec![2, 3], "the MTP layer's row");
        assert_eq!(c.counts(), &[5, 9, 0, 9, 1, 0, 7, 7]);
    }

    #[test]
    fn the_first_rerank_fills_the_slots_with_the_hottest() {
        let mut c = ExpertCache::new(2, 4, 3, 1, 100);
        for _ in 0..5 {
            c.record(MoeId::Layer(0), &[1, 2]);
        }
        c.record(MoeId::Layer(1), &[3]);
        c.record(MoeId::Mtp, &[0]);
        c.record(MoeId::Mtp, &[0]);
        assert_eq!(c.hits_and_misses(), (0, 13), "an empty cache misses everything");
        let swaps = c.end_pass();
        let new: Vec<ExpertKey> = swaps.iter().map(|s| s.new).collect();
        // Counts 5, 5, 2, 1: the layer-0 pair, then the MTP layer's (layer 2) expert.
        assert_eq!(new, vec![key(0, 1), key(0, 2), key(2, 0)]);
        assert!(swaps.iter().all(|s| s.old.is_none()));
        assert_eq!(c.slot(MoeId::Layer(0), 1), Some(swaps[0].slot));
        assert_eq!(c.slot(MoeId::Layer(1), 3), None);
        c.record(MoeId::Layer(0), &[1, 3]);
        assert_eq!(c.hits_and_misses(), (1, 14));
    }

    #[test]
    fn a_rerank_swaps_at_most_max_swaps_and_only_for_hotter_experts() {
        let mut c = ExpertCache::new(1, 8, 2, 2, 1);
        c.record(MoeId::Layer(0), &[0, 1]);
        c.record(MoeId::Layer(0), &[0, 1]);
        assert_eq!(c.end_pass(), vec![], "re-ranked every second pass");
        assert_eq!(c.end_pass().len(), 1, "one swap a re-rank");
        assert_eq!(c.end_pass(), vec![]);
        assert_eq!(c.end_pass().len(), 1);
        // Both held: experts 5 and 6 become hot; 5 replaces the coldest resident (1).
        for _ in 0..4 {
            c.record(MoeId::Layer(0), &[5, 6]);
        }
        c.record(MoeId::Layer(0), &[0]);
        c.end_pass();
        let swaps = c.end_pass();
        assert_eq!(
            swaps,
            vec![Swap { slot: c.slot(MoeId::Layer(0), 5).unwrap(), old: Some(key(0, 1)), new: key(0, 5) }]
        );
        // A tie keeps the resident: 2 and 3 at two routings each.
        let mut d = ExpertCache::new(1, 4, 1, 1, 4);
        d.record(MoeId::Layer(0), &[2]);
        d.record(MoeId::Layer(0), &[2]);
        assert_eq!(d.end_pass().len(), 1);
        d.record(MoeId::Layer(0), &[3]);
        d.record(MoeId::Layer(0), &[3]);
        assert_eq!(d.end_pass(), vec![]);
        d.record(MoeId::Layer(0), &[3]);
        assert_eq!(d.end_pass().len(), 1, "3 (three) against 2 (two)");
    }

    #[test]
    fn a_cache_by_layers_swaps_within_each_layer_and_starts_from_what_it_holds() {
        // Two trunk layers and the MTP layer, 6 experts each, 2 slots each: slots 0-1, 2-3 and 4-5.
        let mut c = ExpertCache::per_layer(2, 6, 2, 1, 100);
        assert!(c.hold(0, key(0, 0)) && c.hold(1, key(0, 1)) && c.hold(2, key(1, 0)));
        assert!(!c.hold(3, key(0, 2)), "slot 3 is layer 1's");
        assert!(!c.hold(1, key(0, 3)), "slot 1 is taken");
        assert!(!c.hold(5, key(2, 9)), "no expert 9");
        assert_eq!(c.slot(MoeId::Layer(1), 0), Some(2));
        // Layer 0's experts 4 and 5 are hot and layer 1's 3 warm: layer 0's residents go, layer 1 takes
        // its free slot; nothing leaves its layer even though layer 0 has more hot experts than slots.
        for _ in 0..3 {
            c.record(MoeId::Layer(0), &[4, 5]);
        }
        c.record(MoeId::Layer(0), &[2]);
        c.record(MoeId::Layer(1), &[3]);
        c.record(MoeId::Mtp, &[1]);
        let mut swaps = c.end_pass();
        swaps.sort_by_key(|s| s.slot);
        let moved: Vec<(usize, Option<ExpertKey>, ExpertKey)> = swaps.iter().map(|s| (s.slot, s.old, s.new)).collect();
        assert_eq!(
            moved,
            vec![
                (0, Some(key(0, 0)), key(0, 5)),
                (1, Some(key(0, 1)), key(0, 4)),
                (3, None, key(1, 3)),
                (4, None, key(2, 1)),
            ]
        );
        assert_eq!(c.slot(MoeId::Layer(0), 2), None, "a third hot expert has no slot of layer 0 left");
        assert_eq!(c.hits_and_misses(), (0, 9));
    }

    #[test]
    fn counts_are_halved_after_eight_routings_an_expert() {
        // 2 layers' worth of 4 experts (the trunk's one and the MTP layer's): halved after 64 routings.
        let mut c = ExpertCache::new(1, 4, 1, 1, 4);
        let rec = |c: &mut ExpertCache, e: usize, n: usize| (0..n).for_each(|_| c.record(MoeId::Layer(0), &[e]));
        rec(&mut c, 0, 60);
        assert_eq!(c.end_pass().len(), 1, "0 takes the slot");
        rec(&mut c, 1, 4);
        assert_eq!(c.end_pass(), vec![], "1 (4) against 0 (60); 64 routings: halved to 2 and 30");
        rec(&mut c, 1, 29);
        let swaps = c.end_pass();
        assert_eq!(swaps.len(), 1, "1 (31) beats 0 (30) only because the counts were halved");
        assert_eq!(swaps[0].old, Some(key(0, 0)));
    }

    /// Counts given in bulk before each re-rank leave the cache, its hits and its misses as the same
    /// routings recorded one by one (a card that counts its own routings feeds the policy so).
    #[test]
    fn counts_in_bulk_are_the_routings_one_by_one() {
        let (layers, experts) = (3, 16);
        let mut one = ExpertCache::per_layer(layers, experts, 4, 2, 3);
        let mut bulk = ExpertCache::per_layer(layers, experts, 4, 2, 3);
        let mut rng = strata_gguf::SplitMix64::new(11);
        for pass in 0..40 {
            let mut counts = vec![vec![0u32; experts]; layers + 1];
            for (l, c) in counts.iter_mut().enumerate() {
                let id = if l < layers { MoeId::Layer(l) } else { MoeId::Mtp };
                for _ in 0..5 {
                    // Skewed choices, so the ranking has something to follow.
                    let u = rng.uniform() as f64;
                    let e = ((u * u * experts as f64) as usize).min(experts - 1);
                    one.record(id, &[e]);
                    c[e] += 1;
                }
            }
            for (l, c) in counts.iter().enumerate() {
                bulk.record_counts(if l < layers { MoeId::Layer(l) } else { MoeId::Mtp }, c);
            }
            assert_eq!(one.end_pass(), bulk.end_pass(), "pass {pass}");
            assert_eq!(one.counts(), bulk.counts(), "pass {pass}");
            assert_eq!(one.hits_and_misses(), bulk.hits_and_misses(), "pass {pass}");
        }
        assert!(one.hits_and_misses().0 > 0, "the cache held some routings");
    }
}
