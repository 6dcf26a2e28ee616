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
//!    new expert is still the host's to compute, so nothing reads the slot); a thread of the cache's own
//!    fills the staging and issues the copies, so neither the decoder's thread nor the card waits for
//!    the host's copying;
//! 3. at the next pass's end the device's stream waits for the copies and sets the new expert's entry.
//!
//! Where a slot is computed changes no bit, so neither the cache's state nor a swap can change the
//! output (tested whole by `gpu_parity`'s placed pass with a cache re-ranked after every pass).

use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use strata_model::backend::MoeId;
use strata_model::placement::{ExpertCache, ExpertKey};
use strata_model::routing_file;
use strata_model::weights::MoeWeights;

use crate::ops::misses::Routed;
use crate::ops::moe::{MoeGpu, SlotCopy};
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};

/// A new expert waiting for its copy before its residency entry is set.
struct Landing {
    block: usize,
    expert: usize,
    slot: usize,
}

/// A re-rank's copies, to start once the card's stream has passed `cleared`.
struct Batch {
    copies: Vec<SlotCopy>,
    cleared: CudaEvent,
}

/// The thread that fills the staging and issues a batch's copies on the copy stream, answering each
/// batch with the event its copies end at.
struct Copier {
    batches: Option<Sender<Batch>>,
    copied: Receiver<Result<CudaEvent, CudaError>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Copier {
    fn spawn(ctx: Arc<CudaContext>, stream: Arc<CudaStream>) -> Copier {
        let (batches, todo) = channel::<Batch>();
        let (done, copied) = channel();
        let handle = std::thread::Builder::new()
            .name("expert-cache".into())
            .spawn(move || {
                let mut staging: Option<PinnedHostSlice<u8>> = None;
                let mut last: Option<CudaEvent> = None;
                for b in todo {
                    let _ = done.send(copy_batch(&ctx, &stream, b, &mut staging, &mut last));
                }
                // The staging lives until its last copies have read it.
                if let Some(e) = last {
                    let _ = e.synchronize();
                }
            })
            .expect("spawning the expert cache's thread");
        Copier { batches: Some(batches), copied, handle: Some(handle) }
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        self.batches = None; // the thread's loop ends
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One batch: the copy stream made to wait for the clearing, the staging (once the last batch's copies
/// have left it) filled with the rows in the card's layout, and the copies issued. Returns the event
/// they end at; `last` keeps one of its own for the next batch's staging.
fn copy_batch(
    ctx: &Arc<CudaContext>,
    stream: &CudaStream,
    b: Batch,
    staging: &mut Option<PinnedHostSlice<u8>>,
    last: &mut Option<CudaEvent>,
) -> Result<CudaEvent, CudaError> {
    ctx.bind_to_thread().check("binding the context")?;
    stream.wait(&b.cleared).check("ordering the cache's copies")?;
    if let Some(e) = last.take() {
        e.synchronize().check("waiting for the cache's last copies")?;
    }
    let bytes: usize = b.copies.iter().map(|c| c.rows.len()).sum();
    if staging.as_ref().is_none_or(|s| s.len() < bytes) {
        *staging = None; // the old staging freed first: its copies have passed
                         // SAFETY: plain bytes, written below before each copy reads them.
        *staging = Some(unsafe { ctx.alloc_pinned::<u8>(bytes) }.check("allocating the cache's staging")?);
    }
    let area = staging.as_mut().expect("made above").as_mut_slice().check("the cache's staging")?;
    let mut at = 0;
    for c in &b.copies {
        let dst = &mut area[at..at + c.rows.len()];
        if c.pairs {
            dst.copy_from_slice(&crate::ops::matrix::pair_q2_0_blocks(&c.rows));
        } else {
            dst.copy_from_slice(&c.rows);
        }
        // SAFETY: pinned staging not written again before `last` has passed; the slot's device rows are
        // read by no pass until its entry is set after the returned event (step 3).
        unsafe { cudarc::driver::result::memcpy_htod_async(c.dst, &area[at..at + c.rows.len()], stream.cu_stream()) }
            .check("copying an expert into the cache")?;
        at += c.rows.len();
    }
    *last = Some(stream.record_event(None).check("recording the cache's copies")?);
    stream.record_event(None).check("recording the cache's copies")
}

pub(crate) struct CardCache {
    policy: Arc<Mutex<ExpertCache>>,
    /// Slots a block holds.
    held: usize,
    /// The trunk's blocks (the MTP layer's is block `layers`).
    layers: usize,
    copier: Copier,
    /// The last re-rank's new experts, resident once its batch's copies have landed.
    landing: Vec<Landing>,
    swaps: u64,
    /// Where the routing counts are kept between runs (None: not kept).
    counts: Option<PathBuf>,
    passes: u64,
}

/// Passes between two writes of the routing counts (and one at the end).
const SAVE_EVERY: u64 = 4096;

impl Drop for CardCache {
    fn drop(&mut self) {
        if self.passes > 0 {
            self.save_counts();
        }
    }
}

impl CardCache {
    /// A cache of `held` slots in each of `layers` trunk blocks and the MTP block of `experts` each,
    /// re-ranked every `every` passes with at most `max_swaps` swaps. It first holds each block's hottest
    /// experts by the routing counts kept at `counts` (earlier runs'), where there are some, else each
    /// block's first `held`: what the blocks are uploaded with. The counts are written there again every
    /// [`SAVE_EVERY`] passes and at the end.
    pub(crate) fn new(
        gpu: &Gpu,
        (layers, experts, held): (usize, usize, usize),
        (every, max_swaps): (usize, usize),
        counts: Option<PathBuf>,
    ) -> Result<CardCache, CudaError> {
        let held = held.clamp(1, experts);
        let mut policy = ExpertCache::per_layer(layers, experts, held, every, max_swaps);
        if let Some(path) = &counts {
            match routing_file::load(path, (layers + 1, experts)) {
                Ok(Some(c)) if policy.seed(&c) => {
                    eprintln!("expert cache: starting from the routing counts of earlier runs ({})", path.display())
                }
                Ok(_) => {}
                Err(e) => eprintln!("note: the routing counts at {} were not used: {e}", path.display()),
            }
        }
        for block in 0..=layers {
            for (j, e) in policy.hottest(block, held).into_iter().enumerate() {
                policy.hold(block * held + j, ExpertKey { layer: block as u32, expert: e as u32 });
            }
        }
        let copies = gpu.ctx.new_stream().check("creating a stream for the cache's copies")?;
        Ok(CardCache {
            policy: Arc::new(Mutex::new(policy)),
            held,
            layers,
            copier: Copier::spawn(gpu.ctx.clone(), copies),
            landing: Vec::new(),
            swaps: 0,
            counts,
            passes: 0,
        })
    }

    /// The routing counts written where the next run finds them; a failure said once, not fatal (they
    /// only make the next start faster).
    fn save_counts(&mut self) {
        let Some(path) = self.counts.clone() else { return };
        let (shape, all) = {
            let p = self.policy();
            ((self.layers + 1, p.experts()), p.counts().to_vec())
        };
        if let Err(e) = routing_file::save(&path, shape, &all) {
            eprintln!("note: the routing counts could not be kept at {}: {e}", path.display());
            self.counts = None;
        }
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

    /// The routings the card counted itself since the last call (`STRATA_ASK_MISSES_ONLY`; nothing
    /// otherwise), given to the policy: before each re-rank (the slots change only there, so this is the
    /// cache the routings one by one would make), each save, and each report. A read a block, so not
    /// after every pass.
    pub(crate) fn take_card_counts(
        &mut self,
        gpu: &Gpu,
        blocks: &[Option<(&MoeGpu, &MoeWeights)>],
    ) -> Result<(), CudaError> {
        for (b, block) in blocks.iter().enumerate() {
            let Some((moe, _)) = block else { continue };
            if let Some(counts) = moe.take_counts(gpu)? {
                let id = if b < self.layers { MoeId::Layer(b) } else { MoeId::Mtp };
                self.policy().record_counts(id, &counts);
            }
        }
        Ok(())
    }

    /// The end of a pass (the card idle or running the next; every routing of this one counted): the
    /// last re-rank's experts made resident once their copies have been issued (waited for only before
    /// the next re-rank: until then a pass that comes first leaves them to the host, which changes no
    /// bit), then, every `every` passes, this re-rank's leaving experts handed to the host and its copies
    /// begun. The policy's choices depend on the routings alone. `blocks`: each block's
    /// device weights and host weights, None where the block is not on the card (the MTP layer before
    /// drafting; its slots change with the policy alone).
    pub(crate) fn end_pass(&mut self, gpu: &Gpu, blocks: &[Option<(&MoeGpu, &MoeWeights)>]) -> Result<(), CudaError> {
        if !self.landing.is_empty() {
            let ended = || CudaError::Shape("the expert cache's thread ended".into());
            let copied = if self.policy().rerank_due() {
                Some(self.copier.copied.recv().map_err(|_| ended())?)
            } else {
                match self.copier.copied.try_recv() {
                    Ok(c) => Some(c),
                    Err(std::sync::mpsc::TryRecvError::Empty) => None,
                    Err(_) => return Err(ended()),
                }
            };
            if let Some(copied) = copied {
                gpu.stream.wait(&copied?).check("waiting for the cache's copies")?;
                for l in std::mem::take(&mut self.landing) {
                    if let Some(Some((moe, _))) = blocks.get(l.block) {
                        moe.set_resident(gpu, l.expert, Some(l.slot))?;
                    }
                }
            }
        }
        if self.policy().rerank_due() || (self.passes + 1).is_multiple_of(SAVE_EVERY) {
            self.take_card_counts(gpu, blocks)?;
        }
        self.passes += 1;
        if self.passes.is_multiple_of(SAVE_EVERY) {
            self.save_counts();
        }
        let swaps = self.policy().end_pass();
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
        let sent = self.copier.batches.as_ref().map(|b| b.send(Batch { copies, cleared }));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(CudaError::Shape("the expert cache's thread ended".into())),
        }
    }
}
