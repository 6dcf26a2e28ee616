//! What the device keeps between steps for their graphs (graph.rs, capture.rs): the step being recorded,
//! the arenas its temporaries and inputs come from, the graphs kept, and the counts `strata run` prints.

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaSlice, CudaStream, PinnedHostSlice};

use crate::runtime::error::{Check, CudaError};
use crate::runtime::op::Op;

/// Device memory handed out in order from chunks kept across steps: the same requests in the same order
/// get the same addresses.
pub(crate) const CHUNK: usize = 64 << 20;
const ALIGN: usize = 256;

#[derive(Default)]
pub(crate) struct Chunks {
    pub(crate) dev: Vec<CudaSlice<u8>>,
    /// The pinned host mirror of each chunk (staging only).
    pub(crate) host: Vec<PinnedHostSlice<u8>>,
    pub(crate) used: Vec<usize>,
    pub(crate) cur: usize,
}

impl Chunks {
    pub(crate) fn reset(&mut self) {
        self.used.iter_mut().for_each(|u| *u = 0);
        self.cur = 0;
    }

    /// (chunk, offset) of `bytes` fresh bytes; a new chunk when none has room.
    pub(crate) fn take(
        &mut self,
        (ctx, stream): (&std::sync::Arc<CudaContext>, &std::sync::Arc<CudaStream>),
        bytes: usize,
        pinned: bool,
    ) -> Result<(usize, usize), CudaError> {
        let bytes = bytes.div_ceil(ALIGN) * ALIGN;
        while self.cur < self.dev.len() && self.dev[self.cur].len() - self.used[self.cur] < bytes {
            self.cur += 1;
        }
        if self.cur == self.dev.len() {
            let size = bytes.max(CHUNK);
            // SAFETY: plain bytes; every byte a step reads was written earlier in the step.
            self.dev.push(unsafe { stream.alloc::<u8>(size) }.check("allocating a step's arena")?);
            if pinned {
                // SAFETY: plain bytes, written by the host before each copy up.
                self.host.push(unsafe { ctx.alloc_pinned::<u8>(size) }.check("allocating pinned staging")?);
            }
            self.used.push(0);
        }
        let at = self.used[self.cur];
        self.used[self.cur] += bytes;
        Ok((self.cur, at))
    }

    pub(crate) fn ptr(&self, stream: &CudaStream, chunk: usize, at: usize) -> u64 {
        use cudarc::driver::DevicePtr;
        let (p, _sync) = self.dev[chunk].device_ptr(stream);
        p + at as u64
    }
}

/// A step recorded ahead of its run (`Gpu::prepare`): its graph, matched and updated (or captured)
/// ahead too, or its ops when no graph could be made.
pub struct Prepared {
    /// Launched in order: one graph, or two with `STRATA_GRAPH_SPLIT`.
    pub(crate) parts: Vec<Ready>,
}

pub(crate) enum Ready {
    Graph(sys::CUgraphExec),
    Ops(Vec<Op>),
}

/// A step's executable graph, or why none could be captured and its ops.
pub(crate) type Found = Result<sys::CUgraphExec, (CudaError, Vec<Op>)>;

/// What a process's steps did with graphs (printed by `strata run`).
#[derive(Default, Clone, Copy)]
pub struct GraphStats {
    pub steps: u64,
    /// Decode steps recorded ahead that ran as two graphs (`STRATA_GRAPH_SPLIT`).
    pub split: u64,
    pub built: u64,
    pub updated_kernels: u64,
    /// The last captured graph's ops (the side lane's marks among them, which make no node), and of
    /// those its kernels, zeroings and copies: a zeroing or copy keeps plain edges, so the kernel after
    /// it cannot start early.
    pub nodes: u64,
    pub kernels: u64,
    pub zeroings: u64,
    pub copies: u64,
    /// Device memory held for steps' temporaries and inputs (the arena and staging chunks).
    pub arena_bytes: u64,
    pub staging_bytes: u64,
    /// The host's time in steps, from a step's start to its graph's launch (recording the ops, matching
    /// a kept graph, updating it, copying the inputs up): in a decode step, which waits for the token
    /// before it, the card has nothing queued meanwhile.
    pub host_ns: u64,
    /// The host's time matching the recorded ops with a kept graph and updating it (or capturing a new
    /// one), wherever it ran: before the launch, or ahead.
    pub graph_ns: u64,
    /// The host's time in the graphs' launches, and copying the inputs up (parts of `host_ns`), and the
    /// bytes copied up.
    pub launch_ns: u64,
    pub copy_ns: u64,
    pub staged: u64,
    /// The host's time from handing a decode step's token back to the caller to the next step's start
    /// (the generation loop's, and the token's own inputs written: embedding id and PLE rows), and of it
    /// writing those inputs, and of that reading the PLE rows from the table.
    pub between_ns: u64,
    pub late_ns: u64,
    pub ple_ns: u64,
    /// The host's time recording steps ahead (`Gpu::prepare`), while the card ran the step before, and
    /// how many.
    pub ahead_ns: u64,
    pub ahead: u64,
}

/// Graphs kept, the least recently used dropped first: a decode step and the shapes around it (a block's
/// keys made, a prompt window), and while drafting the draft chains of 1..7 tokens and the verify windows
/// of 1..8 (each also as one that completes an index block). With 16 a drafting run recaptured graphs
/// all the time; a graph is matched by its op count first, so more cost little to search.
pub(crate) const KEPT: usize = 64;

/// The step being recorded and what is kept between steps.
#[derive(Default)]
pub struct Recorder {
    pub(crate) ops: Vec<Op>,
    pub(crate) arena: Chunks,
    /// With `STRATA_ARENA_LAYERS`: the temporaries of the trunk's layers, layer l's from area l mod 2,
    /// which layer l + 2 takes again (`Gpu::layer_scope`); the rest of a step's from `arena`.
    pub(crate) layers: [Chunks; 2],
    /// The area of `layers` the step's allocations come from now (None: `arena`).
    pub(crate) scope: Option<usize>,
    pub(crate) staging: Chunks,
    /// Recorded after the last copy up: the staging area is not written again before it.
    pub(crate) copied: Option<CudaEvent>,
    /// The event `copied` holds between steps, kept for the next copy up (creating one costs the host
    /// a few µs in the gap before a decode step's launch).
    pub(crate) spare: Option<CudaEvent>,
    pub(crate) graphs: Vec<StepGraph>,
    pub(crate) stats: GraphStats,
    /// Each side lane: forked and not yet joined.
    pub(crate) side_open: [bool; crate::runtime::op::LANES],
    /// `STRATA_GAPS=1`: timing events before each prepared step's copy up and after its launch.
    pub(crate) marks: Vec<(CudaEvent, CudaEvent)>,
    /// `STRATA_HOST_PROFILE=1`: the host's time recording, op by op.
    pub(crate) host: Option<crate::runtime::host_profile::HostProfile>,
}

impl Recorder {
    /// Where `ops` first part from the kept graph of the same length (`STRATA_GRAPH=debug`).
    pub(crate) fn nearest(&self, ops: &[Op]) -> String {
        let name = |o: &Op| match o {
            Op::Kernel { name, .. } => name.to_string(),
            Op::Zero { ptr, bytes } => format!("zero {ptr:#x} {bytes}"),
            Op::Copy { dst, src, bytes } => format!("copy {dst:#x} <- {src:#x} {bytes}"),
            Op::Fork(l) => format!("fork {}", l.0),
            Op::Back(l) => format!("back {}", l.0),
            Op::Join(l) => format!("join {}", l.0),
        };
        let Some(g) = self.graphs.iter().find(|g| g.ops.len() == ops.len()) else {
            return "no kept graph of that length".into();
        };
        match g.ops.iter().zip(ops).position(|(a, b)| !a.same_node(b)) {
            Some(i) => format!("op {i}: {} was {}", name(&ops[i]), name(&g.ops[i])),
            None => "the same".into(),
        }
    }
}

/// A captured, instantiated step and the ops it was made from (with any updates since).
pub(crate) struct StepGraph {
    pub(crate) graph: sys::CUgraph,
    pub(crate) exec: sys::CUgraphExec,
    pub(crate) nodes: Vec<sys::CUgraphNode>,
    /// The driver's function of each kernel node (null for the others), for updates.
    pub(crate) funcs: Vec<sys::CUfunction>,
    pub(crate) ops: Vec<Op>,
}

// SAFETY: driver handles, valid on any thread that binds the context; the recorder's lock serialises use.
unsafe impl Send for StepGraph {}

impl Drop for StepGraph {
    fn drop(&mut self) {
        // SAFETY: handles made by this struct; a graph still running is freed when it completes.
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}
