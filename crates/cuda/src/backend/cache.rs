//! The VRAM expert cache on the card (docs/PLACEMENT.md, "On the GPU", step 5): the policy
//! (strata_model's `placement.rs`, one quota of slots a MoE block, since each block keeps its own cache
//! buffers) counts every routing the host is told of, and every `every` passes names its swaps, which
//! are copied here on a stream of their own while the next pass runs.
//!
//! A swap never lets a pass read a slot that is being written:
//! 1. between passes, the leaving expert's residency entry is cleared on the device's stream, so every
//!    later pass has the host compute it; the copy stream waits for that point (the pass before has
//!    then finished with the slot);
//! 2. the new expert's rows are copied from pinned staging into the slot while the next pass runs (the
//!    new expert is still the host's to compute, so nothing reads the slot);
//! 3. at the next pass's end the device's stream waits for the copies and sets the new expert's entry.
//!
//! Where a slot is computed changes no bit, so neither the cache's state nor a swap can change the
//! output (tested whole by `gpu_parity`'s placed pass with a cache re-ranked after every pass).

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaEvent, CudaStream, PinnedHostSlice};
use strata_model::backend::MoeId;
use strata_model::placement::{ExpertCache, ExpertKey};
use strata_model::weights::MoeWeights;

use crate::ops::misses::Routed;
use crate::ops::moe::MoeGpu;
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};

/// A new expert waiting for its copy before its residency entry is set.
struct Landing {
    block: usize,
    expert: usize,
    slot: usize,
}

pub(crate) struct CardCache {
    policy: Arc<Mutex<ExpertCache>>,
    /// Slots a block holds.
    held: usize,
    /// The trunk's blocks (the MTP layer's is block `layers`).
    layers: usize,
    copies: Arc<CudaStream>,
    staging: Option<PinnedHostSlice<u8>>,
    /// The last batch's copies: passed before staging is written again, waited for before its experts
    /// are made resident.
    copied: Option<CudaEvent>,
    landing: Vec<Landing>,
    swaps: u64,
}

impl CardCache {
    /// A cache of `held` slots in each of `layers` trunk blocks and the MTP block of `experts` each,
    /// holding each block's first `held` experts (what the blocks are uploaded with), re-ranked every
    /// `every` passes with at most `max_swaps` swaps.
    pub(crate) fn new(
        gpu: &Gpu,
        (layers, experts, held): (usize, usize, usize),
        (every, max_swaps): (usize, usize),
    ) -> Result<CardCache, CudaError> {
        let held = held.clamp(1, experts);
        let mut policy = ExpertCache::per_layer(layers, experts, held, every, max_swaps);
        for block in 0..=layers {
            for j in 0..held {
                policy.hold(block * held + j, ExpertKey { layer: block as u32, expert: j as u32 });
            }
        }
        let copies = gpu.ctx.new_stream().check("creating a stream for the cache's copies")?;
        Ok(CardCache {
            policy: Arc::new(Mutex::new(policy)),
            held,
            layers,
            copies,
            staging: None,
            copied: None,
            landing: Vec::new(),
            swaps: 0,
        })
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, ExpertCache> {
        self.policy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The experts block `block`'s slots hold, in slot order (what its cache buffers are made of).
    pub(crate) fn held(&self, block: usize) -> Vec<usize> {
        let p = self.policy();
        let id = |e| if block < self.layers { p.slot(MoeId::Layer(block), e) } else { p.slot(MoeId::Mtp, e) };
        let mut by_slot: Vec<(usize, usize)> = (0..p.experts()).filter_map(|e| id(e).map(|s| (s, e))).collect();
        by_slot.sort_unstable();
        by_slot.into_iter().map(|(_, e)| e).collect()
    }

    /// What the host's thread tells the policy of each request's routing.
    pub(crate) fn routed(&self) -> Routed {
        let (policy, layers) = (self.policy.clone(), self.layers);
        Arc::new(move |block: usize, experts: &[usize]| {
            let id = if block < layers { MoeId::Layer(block) } else { MoeId::Mtp };
            policy.lock().unwrap_or_else(|p| p.into_inner()).record(id, experts);
        })
    }

    /// Routings held and not held on the card since the start, and swaps made.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let (hits, misses) = self.policy().hits_and_misses();
        (hits, misses, self.swaps)
    }

    /// The end of a pass (the card idle or running the next; every routing of this one counted): the
    /// last re-rank's experts made resident, then, every `every` passes, this re-rank's swaps begun.
    /// `blocks`: each block's device weights and host weights, None where the block is not on the card
    /// (the MTP layer before drafting; its slots change with the policy alone).
    pub(crate) fn end_pass(&mut self, gpu: &Gpu, blocks: &[Option<(&MoeGpu, &MoeWeights)>]) -> Result<(), CudaError> {
        if !self.landing.is_empty() {
            if let Some(e) = &self.copied {
                gpu.stream.wait(e).check("waiting for the cache's copies")?;
            }
            for l in std::mem::take(&mut self.landing) {
                if let Some(Some((moe, _))) = blocks.get(l.block) {
                    moe.set_resident(gpu, l.expert, Some(l.slot))?;
                }
            }
        }
        let swaps = self.policy().end_pass();
        if swaps.is_empty() {
            return Ok(());
        }
        // 1. The leaving experts to the host, then the copies wait for the passes before.
        let mut copies = Vec::new();
        for s in &swaps {
            let (block, slot) = (s.slot / self.held, s.slot % self.held);
            let Some(Some((moe, w))) = blocks.get(block) else { continue };
            if let Some(old) = s.old {
                moe.set_resident(gpu, old.expert as usize, None)?;
            }
            copies.extend(moe.slot_copies(gpu, w, slot, s.new.expert as usize)?);
            self.landing.push(Landing { block, expert: s.new.expert as usize, slot });
        }
        self.swaps += swaps.len() as u64;
        if copies.is_empty() {
            return Ok(());
        }
        let cleared = gpu.stream.record_event(None).check("recording the cache's clearing")?;
        self.copies.wait(&cleared).check("ordering the cache's copies")?;
        // 2. The rows into staging (once the last batch has left it), then copied up on their stream.
        if let Some(e) = self.copied.take() {
            e.synchronize().check("waiting for the cache's last copies")?;
        }
        let bytes: usize = copies.iter().map(|(_, b)| b.len()).sum();
        if self.staging.as_ref().is_none_or(|s| s.len() < bytes) {
            // SAFETY: plain bytes, written below before each copy reads them.
            self.staging = Some(unsafe { gpu.ctx.alloc_pinned::<u8>(bytes) }.check("allocating the cache's staging")?);
        }
        let staging = self.staging.as_mut().expect("made above").as_mut_slice().check("the cache's staging")?;
        let mut at = 0;
        for (dst, b) in &copies {
            staging[at..at + b.len()].copy_from_slice(b);
            // SAFETY: pinned staging not written again before `copied` has passed; the slot's device rows
            // are read by no pass until its entry is set after `copied` (step 3).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(*dst, &staging[at..at + b.len()], self.copies.cu_stream())
            }
            .check("copying an expert into the cache")?;
            at += b.len();
        }
        self.copied = Some(self.copies.record_event(None).check("recording the cache's copies")?);
        Ok(())
    }
}
