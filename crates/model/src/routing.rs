//! How often each layer's router chose each expert: what a cache of the hottest experts is ranked by,
//! and how a router's skew is measured (`strata synth --router zipf`).

use std::sync::Mutex;

use crate::backend::MoeId;

/// What takes each token's routing choices as a back-end makes them (a profile, an expert cache).
pub trait RoutingSink: Sync {
    fn record(&self, id: MoeId, experts: &[usize]);
}

impl RoutingSink for RoutingProfile {
    fn record(&self, id: MoeId, experts: &[usize]) {
        RoutingProfile::record(self, id, experts)
    }
}

/// Routings counted by layer (the trunk's, then the MTP layer's) and expert.
pub struct RoutingProfile {
    layers: usize,
    experts: usize,
    counts: Mutex<Vec<u64>>,
}

impl RoutingProfile {
    /// A profile for `layers` trunk layers (and the MTP layer) of `experts` experts each.
    pub fn new(layers: usize, experts: usize) -> RoutingProfile {
        RoutingProfile { layers, experts, counts: Mutex::new(vec![0; (layers + 1) * experts]) }
    }

    fn row(&self, id: MoeId) -> usize {
        match id {
            MoeId::Layer(l) => l.min(self.layers),
            MoeId::Mtp => self.layers,
        }
    }

    /// One token's choices.
    pub fn record(&self, id: MoeId, experts: &[usize]) {
        let at = self.row(id) * self.experts;
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for &e in experts.iter().filter(|&&e| e < self.experts) {
            c[at + e] += 1;
        }
    }

    /// A layer's counts by expert id.
    pub fn counts(&self, id: MoeId) -> Vec<u64> {
        let at = self.row(id) * self.experts;
        self.counts.lock().unwrap_or_else(|e| e.into_inner())[at..at + self.experts].to_vec()
    }

    /// The share of the trunk's routings that each layer's `top` most chosen experts take: the hit rate
    /// of a cache holding those experts, had it known the counts beforehand.
    pub fn top_share(&self, top: usize) -> f64 {
        let (mut hit, mut all) = (0u64, 0u64);
        for l in 0..self.layers {
            let mut c = self.counts(MoeId::Layer(l));
            c.sort_unstable_by(|a, b| b.cmp(a));
            hit += c.iter().take(top).sum::<u64>();
            all += c.iter().sum::<u64>();
        }
        if all == 0 {
            0.0
        } else {
            hit as f64 / all as f64
        }
    }

    /// The share of the trunk's routings that its `slots` most chosen experts take, whichever layers they
    /// are in: the hit rate of a cache of that many, had it known the counts beforehand.
    pub fn hottest_share(&self, slots: usize) -> f64 {
        let mut c: Vec<u64> = (0..self.layers).flat_map(|l| self.counts(MoeId::Layer(l))).collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        let all = c.iter().sum::<u64>();
        if all == 0 {
            0.0
        } else {
            c.iter().take(slots).sum::<u64>() as f64 / all as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_shares_add_up() {
        let p = RoutingProfile::new(2, 4);
        p.record(MoeId::Layer(0), &[0, 1]);
        p.record(MoeId::Layer(0), &[0, 2]);
        p.record(MoeId::Layer(1), &[3, 3]);
        p.record(MoeId::Mtp, &[1]);
        assert_eq!(p.counts(MoeId::Layer(0)), vec![2, 1, 1, 0]);
        assert_eq!(p.counts(MoeId::Layer(1)), vec![0, 0, 0, 2]);
        assert_eq!(p.counts(MoeId::Mtp), vec![0, 1, 0, 0]);
        // Top one of each trunk layer: 2 of 4 and 2 of 2; the MTP layer's are not the trunk's.
        assert_eq!(p.top_share(1), 4.0 / 6.0);
        assert_eq!(p.top_share(4), 1.0);
        // The two hottest of the trunk: layer 0's expert 0 and layer 1's expert 3, 4 of 6.
        assert_eq!(p.hottest_share(2), 4.0 / 6.0);
        assert_eq!(p.hottest_share(3), 5.0 / 6.0);
    }
}
