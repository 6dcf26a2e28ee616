//! A step as one CUDA graph. The host code of a step (a decode step, a verify window, a prompt window)
//! runs as always, but each launch, zeroing and device copy is recorded instead of issued; its temporaries
//! come from an arena and what the host hands it (token ids, PLE rows, rope rows, counts) from a pinned
//! staging area, both at the same addresses step after step. At the end the recorded ops either match a
//! graph made before, op for op (the same kernels in the same order), and only the kernels whose arguments
//! or grid changed (those that take the depth) are updated in it, or they are captured into a new graph.
//! Then the staging area is copied up and the graph launched: one launch a step instead of ~1,400.
//!
//! The bits do not change: the same kernels run with the same arguments in the same order on one stream.
//! `STRATA_GRAPH=0` issues every op directly instead, and so does a profiled run (it times each launch).

use std::sync::atomic::Ordering;

use cudarc::driver::{sys, CudaEvent};

use crate::runtime::capture::issue_all;
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};
use crate::runtime::op::{Lane, Op, LANES};
use crate::runtime::recorder::{Chunks, Found, GraphStats, Prepared, Ready, Recorder, StepGraph, KEPT};
use crate::runtime::settings::{GraphMode, Settings};

/// `STRATA_GRAPH=lanes`: the first decode step recorded ahead, its side lane's fork-to-joins (lanes.rs;
/// the lane ahead's ops are left out, as marks of no kernel).
fn print_lanes_once(ops: &[Op]) {
    use crate::runtime::lanes::Mark;
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    let mut ahead = false;
    let marks: Vec<Mark> = ops
        .iter()
        .map(|o| match o {
            Op::Fork(l) | Op::Back(l) if *l != Lane::SIDE => {
                ahead = matches!(o, Op::Fork(_));
                Mark::Other
            }
            Op::Kernel { name, .. } if !ahead => Mark::Kernel(name),
            Op::Fork(_) => Mark::Fork,
            Op::Back(_) => Mark::Back,
            Op::Join(Lane::SIDE) => Mark::Join,
            _ => Mark::Other,
        })
        .collect();
    eprint!("{}", crate::runtime::lanes::report(&marks));
}

/// The first graph's ops by default: at 4K on the H200 (speed-21) the step in two graphs cut after 48
/// ops ran 200.4–201.2 tok/s against one graph's 198.3–200.4 (with the attention's one quantize and fused
/// append). A step of fewer ops than this runs as one graph.
const DEFAULT_SPLIT: usize = 48;

/// `STRATA_GRAPH_SPLIT=k`: a decode step recorded ahead runs as two graphs, the first of its first k ops
/// (or the first point after them where no side lane is open). The card starts on the short first graph
/// while the host launches the long second one, where one graph's launch (~30 µs on the H200) stood
/// between the token's inputs and the card's start. 0: one graph. Unset: [`DEFAULT_SPLIT`].
fn split_at(s: &Settings) -> usize {
    s.graph_split.unwrap_or(DEFAULT_SPLIT)
}

/// The first index at or after `k` (0 < index < ops.len()) where the ops before it hold no open side
/// lane: the two parts then each capture as a graph of their own. None when there is none.
fn balanced_split(ops: &[Op], k: usize) -> Option<usize> {
    let mut open = [false; LANES];
    for (i, op) in ops.iter().enumerate() {
        if i >= k.max(1) && !open.contains(&true) {
            return Some(i);
        }
        match op {
            Op::Fork(l) => open[l.0] = true,
            Op::Join(l) => open[l.0] = false,
            _ => {}
        }
    }
    None
}

/// The steps' time on the card in all, ms: each mark's events from its start to its end (the card has
/// run them).
fn busy_ms(marks: &[(CudaEvent, CudaEvent)]) -> Result<f64, CudaError> {
    let mut busy = 0.0f64;
    for (a, b) in marks {
        busy += a.elapsed_ms(b).check("timing a step")? as f64;
    }
    Ok(busy)
}

impl Gpu {
    /// Whether a step is being recorded (ops are kept, not issued).
    pub fn recording(&self) -> bool {
        self.rec_on.load(Ordering::Relaxed)
    }

    fn recorder(&self) -> std::sync::MutexGuard<'_, Recorder> {
        self.recorder.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn record(&self, op: Op) -> Result<(), CudaError> {
        let mut r = self.recorder();
        if let Some(h) = r.host.as_mut() {
            h.op(&op);
        }
        r.ops.push(op);
        Ok(())
    }

    /// `bytes` of the step's arena while one is recorded.
    pub(crate) fn step_arena(&self, bytes: usize) -> Result<Option<u64>, CudaError> {
        if !self.recording() {
            return Ok(None);
        }
        let mut r = self.recorder();
        let area = match r.scope {
            Some(i) => &mut r.layers[i],
            None => &mut r.arena,
        };
        let (c, at) = area.take((&self.ctx, &self.stream), bytes, false)?;
        Ok(Some(area.ptr(&self.stream, c, at)))
    }

    /// With `STRATA_ARENA_LAYERS`, while a step is recorded: the temporaries made from now on belong to
    /// the trunk's layer `layer` (None: to the step, until its end). Layer l's come from area l mod 2,
    /// emptied here for it: what layer l − 2 made there is dead by then (a layer's outputs are read by
    /// the next layer, never later; the residual streams and the step's inputs and outputs are the
    /// step's). Reuse in stream order is safe: a kernel writes only after `grid_dep_wait`, and the one
    /// before it has then finished, so every kernel of layer l − 2 has.
    pub(crate) fn layer_scope(&self, layer: Option<usize>) {
        if !self.settings.arena_layers || !self.recording() {
            return;
        }
        let mut r = self.recorder();
        r.scope = layer.map(|l| l % 2);
        if let Some(l) = layer {
            r.layers[l % 2].reset();
        }
    }

    /// `data` placed in the staging area (copied up just before the step's graph runs) while a step is
    /// recorded; its device address.
    pub(crate) fn step_stage(&self, data: &[u8]) -> Result<Option<u64>, CudaError> {
        if !self.recording() {
            return Ok(None);
        }
        let mut r = self.recorder();
        let (c, at) = r.staging.take((&self.ctx, &self.stream), data.len().max(1), true)?;
        let host = r.staging.host[c].as_mut_slice().check("writing the staging area")?;
        host[at..at + data.len()].copy_from_slice(data);
        Ok(Some(r.staging.ptr(&self.stream, c, at)))
    }

    /// `f`'s ops on the step's side lane, forked from everything recorded so far: in the graph they may
    /// run beside the main lane's ops recorded after them, until [`Gpu::join`]. For work that reads only
    /// what was made before the fork and writes only its own buffers (the shared expert beside the routed
    /// ones, say), so the order does not matter to the bits. Outside a recorded step `f` just runs, and
    /// so it does with `STRATA_SIDE=0`.
    pub fn side<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        self.on_lane(Lane::SIDE, f)
    }

    /// `f`'s ops on the step's lane ahead (op.rs `Lane::AHEAD`), as [`Gpu::side`] does on the side lane,
    /// until [`Gpu::join_ahead`]: it may stay open across the side lane's forks and joins.
    pub fn ahead<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        self.on_lane(Lane::AHEAD, f)
    }

    /// `f`'s ops on the step's second lane ahead (op.rs `Lane::SECOND`), beside what the lane ahead
    /// still runs; joined with it by [`Gpu::join_ahead`].
    pub fn ahead_second<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        self.on_lane(Lane::SECOND, f)
    }

    fn on_lane<R>(&self, lane: Lane, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        if !self.side_lanes() {
            return f();
        }
        if self.recorder().side_open[lane.0] {
            // One fork at a time a lane: what is open is joined first.
            self.join_lane(lane)?;
        }
        self.record(Op::Fork(lane))?;
        self.recorder().side_open[lane.0] = true;
        let out = f();
        self.record(Op::Back(lane))?;
        out
    }

    /// Whether [`Gpu::side`] puts work on a side lane now (a step is recorded, unless `STRATA_SIDE=0`).
    pub fn side_lanes(&self) -> bool {
        self.recording() && self.settings.side
    }

    /// The main lane waits here for the side lane's ops (nothing where no side lane is open).
    pub fn join(&self) -> Result<(), CudaError> {
        self.join_lane(Lane::SIDE)
    }

    /// The main lane waits here for the lanes ahead's ops (nothing where they are not open).
    pub fn join_ahead(&self) -> Result<(), CudaError> {
        self.join_lane(Lane::AHEAD)?;
        self.join_lane(Lane::SECOND)
    }

    fn join_lane(&self, lane: Lane) -> Result<(), CudaError> {
        let mut r = self.recorder();
        if self.recording() && r.side_open[lane.0] {
            r.ops.push(Op::Join(lane));
            r.side_open[lane.0] = false;
        }
        Ok(())
    }

    /// Whether steps run as graphs: on unless `STRATA_GRAPH=0` or a profile times each launch.
    pub fn graphs_on(&self) -> bool {
        self.profile.is_none() && !self.graphs_failed.load(Ordering::Relaxed) && self.settings.graph != GraphMode::Off
    }

    /// `f` as one step: recorded, then run as a graph. Buffers it makes stay valid until the next step.
    pub fn step<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
        if !self.graphs_on() || self.recording() {
            return f();
        }
        let t0 = std::time::Instant::now();
        let (out, ops) = self.record_step(f)?;
        let out = out?;
        self.run(ops)?;
        self.recorder().stats.host_ns += t0.elapsed().as_nanos() as u64;
        Ok(out)
    }

    /// `f` recorded as the next step but not run: the ops are kept in the returned [`Prepared`] until
    /// [`Gpu::run_prepared`], so the host's recording overlaps the step the card is still running
    /// (`STRATA_OVERLAP`). Its graph is matched and updated, or captured, now too; nothing is issued.
    /// Inputs the recording could not know yet are written into the staging area afterwards
    /// ([`Gpu::write_staged`]).
    pub fn prepare<R>(&self, f: impl FnOnce() -> Result<R, CudaError>) -> Result<(R, Prepared), CudaError> {
        if !self.graphs_on() || self.recording() {
            return Err(CudaError::Shape("a step prepared ahead needs graphs on and no step recording".into()));
        }
        let t0 = std::time::Instant::now();
        let (out, ops) = self.record_step(f)?;
        let out = out?;
        if self.settings.graph == GraphMode::Lanes {
            print_lanes_once(&ops);
        }
        // The graph is matched and updated now too: an update changes only later launches of an
        // executable graph, not the one of the step still running (cuGraphExecKernelNodeSetParams).
        self.ctx.bind_to_thread().check("binding the context")?;
        let mut ops = ops;
        let rest = match balanced_split(&ops, split_at(&self.settings)) {
            Some(i) if split_at(&self.settings) > 0 => Some(ops.split_off(i)),
            _ => None,
        };
        let mut parts = Vec::with_capacity(2);
        for part in std::iter::once(ops).chain(rest) {
            parts.push(match self.graph_ahead(part)? {
                Ok(exec) => Ready::Graph(exec),
                Err(ops) => Ready::Ops(ops),
            });
        }
        let mut r = self.recorder();
        r.stats.ahead_ns += t0.elapsed().as_nanos() as u64;
        r.stats.ahead += 1;
        r.stats.split += u64::from(parts.len() == 2);
        Ok((out, Prepared { parts }))
    }

    /// A prepared step on the card: its inputs copied up and its graphs launched (a part that has no
    /// graph: one made now, or its ops issued one by one).
    pub fn run_prepared(&self, p: Prepared) -> Result<(), CudaError> {
        let t0 = std::time::Instant::now();
        self.ctx.bind_to_thread().check("binding the context")?;
        self.marked(|| {
            for part in p.parts {
                match part {
                    Ready::Graph(exec) => self.launch_graph(exec)?,
                    Ready::Ops(ops) => self.launch_ops(ops)?,
                }
            }
            Ok(())
        })?;
        self.recorder().stats.host_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// `f`'s ops recorded as a step (begun afresh), and what `f` returned.
    fn record_step<R>(
        &self,
        f: impl FnOnce() -> Result<R, CudaError>,
    ) -> Result<(Result<R, CudaError>, Vec<Op>), CudaError> {
        self.begin()?;
        let out = f();
        let mut r = self.recorder();
        if let Some(h) = r.host.as_mut() {
            h.end();
        }
        // The next step starts with room for as many ops (~1,400 of ~300 bytes: growing there would
        // copy them over and over).
        let room = r.ops.len();
        let ops = std::mem::replace(&mut r.ops, Vec::with_capacity(room));
        drop(r);
        self.rec_on.store(false, Ordering::Relaxed);
        Ok((out, ops))
    }

    /// `bytes` written at the device address `ptr` of the staging area (a prepared step's input that
    /// was not known when it was recorded); copied up when the step runs.
    pub fn write_staged(&self, ptr: u64, bytes: &[u8]) -> Result<(), CudaError> {
        let mut r = self.recorder();
        for c in 0..r.staging.dev.len() {
            let base = r.staging.ptr(&self.stream, c, 0);
            if ptr >= base && ptr + bytes.len() as u64 <= base + r.staging.used[c] as u64 {
                let at = (ptr - base) as usize;
                let host = r.staging.host[c].as_mut_slice().check("writing the staging area")?;
                host[at..at + bytes.len()].copy_from_slice(bytes);
                return Ok(());
            }
        }
        Err(CudaError::Shape(format!("{ptr:#x}: not a staged input of the prepared step")))
    }

    fn begin(&self) -> Result<(), CudaError> {
        let mut r = self.recorder();
        // The last copy up read the staging area: wait for it before writing the area again.
        if let Some(e) = r.copied.take() {
            e.synchronize().check("waiting for the last step's inputs")?;
            r.spare = Some(e);
        }
        r.arena.reset();
        r.layers.iter_mut().for_each(Chunks::reset);
        r.scope = None;
        r.staging.reset();
        r.ops.clear();
        r.side_open = [false; LANES];
        if let Some(h) = r.host.as_mut() {
            h.begin();
        }
        self.rec_on.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The recorded ops on the card: a kept graph updated, or a new one captured; then the inputs copied
    /// up and the graph launched.
    fn run(&self, ops: Vec<Op>) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().check("binding the context")?;
        self.marked(|| self.launch_ops(ops))
    }

    /// The staging area copied up, then `launch` (a step's graphs), between two timing events where
    /// `STRATA_GAPS=1` asks for them: a mark of the step's time on the card.
    fn marked(&self, launch: impl FnOnce() -> Result<(), CudaError>) -> Result<(), CudaError> {
        let before = self.gap_mark()?;
        self.copy_up()?;
        launch()?;
        if let (Some(a), Some(b)) = (before, self.gap_mark()?) {
            self.recorder().marks.push((a, b));
        }
        Ok(())
    }

    /// `ops` as a graph (matched, updated or captured) and launched; nothing where there are none.
    fn launch_ops(&self, ops: Vec<Op>) -> Result<(), CudaError> {
        if ops.is_empty() {
            return Ok(());
        }
        match self.graph_for(ops)? {
            Some(exec) => self.launch_graph(exec),
            None => Ok(()),
        }
    }

    fn launch_graph(&self, exec: sys::CUgraphExec) -> Result<(), CudaError> {
        let t0 = std::time::Instant::now();
        // SAFETY: an instantiated graph of this context, kept by the recorder, launched on its stream.
        unsafe { sys::cuGraphLaunch(exec, self.stream.cu_stream()) }.result().check("launching a step's graph")?;
        self.recorder().stats.launch_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// The executable graph for a step recorded ahead, or its ops back when none could be captured (they
    /// are then issued one by one when the step runs, after its inputs are written).
    fn graph_ahead(&self, ops: Vec<Op>) -> Result<Result<sys::CUgraphExec, Vec<Op>>, CudaError> {
        if ops.is_empty() {
            return Ok(Err(ops));
        }
        Ok(self.find_or_capture(ops)?.map_err(|(_, ops)| ops))
    }

    /// The staging area's used bytes copied to the device, and an event recorded after them.
    fn copy_up(&self) -> Result<(), CudaError> {
        let t0 = std::time::Instant::now();
        let mut r = self.recorder();
        r.stats.steps += 1;
        let stream = self.stream.cu_stream();
        for c in 0..r.staging.used.len() {
            let used = r.staging.used[c];
            if used > 0 {
                let dst = r.staging.ptr(&self.stream, c, 0);
                let src = r.staging.host[c].as_slice().check("reading the staging area")?;
                // SAFETY: pinned memory kept alive by the recorder, into device memory kept alive by it; the
                // area is not written again before the event below has passed.
                unsafe { cudarc::driver::result::memcpy_htod_async(dst, &src[..used], stream) }
                    .check("copying a step's inputs")?;
                r.stats.staged += used as u64;
            }
        }
        let e = match r.spare.take() {
            Some(e) => e,
            None => self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).check("creating an event")?,
        };
        e.record(&self.stream).check("recording an event")?;
        r.copied = Some(e);
        r.stats.copy_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// The executable graph for `ops`: a kept one of the same shape with its changed kernels updated, or
    /// a new one captured. None when no graph could be made (the ops were then issued one by one).
    fn graph_for(&self, ops: Vec<Op>) -> Result<Option<sys::CUgraphExec>, CudaError> {
        match self.find_or_capture(ops)? {
            Ok(exec) => Ok(Some(exec)),
            Err((e, ops)) => self.give_up(e, &ops).map(|()| None),
        }
    }

    /// A kept graph of the same shape as `ops` with its changed kernels updated, or a new one captured
    /// and kept; the capture's error and the ops back when it failed.
    fn find_or_capture(&self, ops: Vec<Op>) -> Result<Found, CudaError> {
        let t0 = std::time::Instant::now();
        let mut r = self.recorder();
        let found = r
            .graphs
            .iter()
            .position(|g| g.ops.len() == ops.len() && g.ops.iter().zip(&ops).all(|(a, b)| a.same_node(b)));
        let captured = found.is_none();
        let exec = match found {
            Some(i) => {
                let rec = &mut *r;
                let mut host = rec.host.as_mut();
                let updated = rec.graphs[i].update(ops, &mut |name| {
                    if let Some(h) = host.as_mut() {
                        h.updated(name);
                    }
                })?;
                r.stats.updated_kernels += updated;
                let g = r.graphs.remove(i); // the most recently used last: dropped last
                let exec = g.exec;
                r.graphs.push(g);
                exec
            }
            None => {
                if self.settings.graph == GraphMode::Debug {
                    eprintln!("graph: new shape of {} ops ({})", ops.len(), r.nearest(&ops));
                }
                drop(r);
                let mut g = match StepGraph::capture(self, &ops) {
                    Ok(g) => g,
                    Err(e) => return Ok(Err((e, ops))),
                };
                g.ops = ops;
                r = self.recorder();
                r.stats.built += 1;
                r.stats.nodes = g.nodes.len() as u64;
                let count = |f: fn(&Op) -> bool| g.ops.iter().filter(|o| f(o)).count() as u64;
                r.stats.kernels = count(|o| matches!(o, Op::Kernel { .. }));
                r.stats.zeroings = count(|o| matches!(o, Op::Zero { .. }));
                r.stats.copies = count(|o| matches!(o, Op::Copy { .. }));
                if r.graphs.len() == KEPT {
                    // A step recorded ahead may be capturing while the step before still runs.
                    self.stream.synchronize().check("waiting for the step before")?;
                    r.graphs.remove(0);
                }
                let exec = g.exec;
                r.graphs.push(g);
                exec
            }
        };
        r.stats.graph_ns += t0.elapsed().as_nanos() as u64;
        if let Some(h) = r.host.as_mut() {
            h.graph_time(t0.elapsed(), captured);
        }
        Ok(Ok(exec))
    }

    /// A graph that could not be made: said once, and this step and every later one issued op by op
    /// (the same kernels in the same order: the same bits, only slower).
    fn give_up(&self, e: CudaError, ops: &[Op]) -> Result<(), CudaError> {
        eprintln!("note: CUDA graphs are off for this run: {e}");
        self.graphs_failed.store(true, Ordering::Relaxed);
        issue_all(self, ops)
    }

    /// A timing event recorded on the stream now, with `STRATA_GAPS=1` (None otherwise).
    fn gap_mark(&self) -> Result<Option<CudaEvent>, CudaError> {
        if !self.settings.gaps {
            return Ok(None);
        }
        let e = self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).check("creating an event")?;
        e.record(&self.stream).check("recording an event")?;
        Ok(Some(e))
    }

    /// With `STRATA_GAPS=1`, after the card has run them: the prepared steps' time on the card (inputs
    /// copied up and the graph) and the card's idle time between one and the next, each a mean over the
    /// steps.
    pub fn gap_summary(&self) -> Result<Option<(f64, f64, usize)>, CudaError> {
        let r = self.recorder();
        if r.marks.len() < 2 {
            return Ok(None);
        }
        self.stream.synchronize().check("waiting for the steps")?;
        let busy = busy_ms(&r.marks)?;
        let mut idle = 0.0f64;
        for pair in r.marks.windows(2) {
            idle += pair[0].1.elapsed_ms(&pair[1].0).check("timing a gap")? as f64;
        }
        let n = r.marks.len();
        Ok(Some((busy * 1e3 / n as f64, idle * 1e3 / (n - 1) as f64, n)))
    }

    /// With `STRATA_GAPS=1`: the mean time on the card, in ms, of the steps run since the last call (each
    /// step's inputs copied up, then its graph), and those steps' marks dropped; None without steps or
    /// without the setting. For timing one kind of step at a time (`strata bench spec`).
    pub fn card_ms_take(&self) -> Result<Option<f64>, CudaError> {
        let marks = std::mem::take(&mut self.recorder().marks);
        if marks.is_empty() {
            return Ok(None);
        }
        self.stream.synchronize().check("waiting for the steps")?;
        Ok(Some(busy_ms(&marks)? / marks.len() as f64))
    }

    /// `f` on the graphs' figures (the decoder's own parts of the host's time between steps).
    pub(crate) fn note(&self, f: impl FnOnce(&mut GraphStats)) {
        f(&mut self.recorder().stats);
    }

    /// `STRATA_HOST_PROFILE=1`: the host's time recording steps, by kind and op (none without it).
    pub fn host_profile(&self) -> Vec<String> {
        self.recorder().host.as_ref().map_or_else(Vec::new, |h| h.lines(16))
    }

    /// With `STRATA_HOST_PROFILE=1`: the next step recorded is a `kind` (its figures kept apart).
    pub(crate) fn host_kind(&self, kind: &'static str) {
        if let Some(h) = self.recorder().host.as_mut() {
            h.kind(kind);
        }
    }

    /// With `STRATA_HOST_PROFILE=1`: the figures so far dropped (the prompt read).
    pub(crate) fn host_profile_reset(&self) {
        if let Some(h) = self.recorder().host.as_mut() {
            h.reset();
        }
    }

    /// How many steps ran as graphs, graphs made, kernels updated (None when graphs are off).
    pub fn graph_stats(&self) -> Option<GraphStats> {
        let r = self.recorder();
        let held = |c: &Chunks| c.dev.iter().map(|d| d.len() as u64).sum();
        let arena = held(&r.arena) + r.layers.iter().map(held).sum::<u64>();
        let stats = GraphStats { arena_bytes: arena, staging_bytes: held(&r.staging), ..r.stats };
        self.graphs_on().then_some(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::{balanced_split, Lane, Op};

    fn zero() -> Op {
        Op::Zero { ptr: 0, bytes: 4 }
    }

    #[test]
    fn a_split_never_falls_inside_a_side_lane() {
        // 0 zero, 1 fork, 2 zero, 3 back, 4 zero, 5 join, 6 zero, 7 zero
        let (fork, back, join) = (Op::Fork(Lane::SIDE), Op::Back(Lane::SIDE), Op::Join(Lane::SIDE));
        let ops = vec![zero(), fork, zero(), back, zero(), join, zero(), zero()];
        assert_eq!(balanced_split(&ops, 0), Some(1));
        assert_eq!(balanced_split(&ops, 1), Some(1));
        for k in 2..=6 {
            assert_eq!(balanced_split(&ops, k), Some(6), "k = {k}");
        }
        assert_eq!(balanced_split(&ops, 7), Some(7));
        assert_eq!(balanced_split(&ops, 8), None);
        assert_eq!(balanced_split(&ops[..6], 2), None, "closed only at the end: no second part");
    }

    #[test]
    fn a_split_waits_for_every_lane() {
        // The lane ahead forks at 1 and joins at 7, across the side lane's fork (3) and join (5).
        let (a, s) = (Lane::AHEAD, Lane::SIDE);
        let ops = vec![
            zero(),
            Op::Fork(a),
            Op::Back(a),
            Op::Fork(s),
            Op::Back(s),
            Op::Join(s),
            zero(),
            Op::Join(a),
            zero(),
            zero(),
        ];
        for k in 2..=8 {
            assert_eq!(balanced_split(&ops, k), Some(8), "k = {k}");
        }
        assert_eq!(balanced_split(&ops, 9), Some(9));
    }
}
