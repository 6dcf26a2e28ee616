//! A step's ops captured into a CUDA graph, instantiated, and updated in place (graph.rs records the ops
//! and decides when): one lane captured in order and read back as the chain from its root, or a main lane
//! and side lanes each on a stream of its own, each op's node read from the capture as it is made.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{sys, CudaEvent, CudaStream};

use crate::runtime::buf::launch_now;
use crate::runtime::device::Gpu;
use crate::runtime::error::{Check, CudaError};
use crate::runtime::op::{issue_copy, Op, LANES};
use crate::runtime::recorder::StepGraph;

impl StepGraph {
    /// `ops` captured from the streams into a graph (the main lane on the device's stream, each side lane
    /// on one of its side streams), instantiated, with each op's node (null for the marks).
    pub(crate) fn capture(gpu: &Gpu, ops: &[Op]) -> Result<StepGraph, CudaError> {
        let s = gpu.stream.cu_stream();
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: our own stream, idle on the host side; ended below on every path.
        unsafe { sys::cuStreamBeginCapture_v2(s, mode) }.result().check("starting a graph capture")?;
        // One lane: the ops in order, and the graph a chain read back from its root. With a side lane:
        // each op on its lane's stream, its node read from the capture as it is made.
        let lanes = ops.iter().any(|o| matches!(o, Op::Fork(_)));
        let nodes = if lanes { capture_ops(gpu, ops) } else { issue_all(gpu, ops).map(|()| Vec::new()) };
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above, writing the graph handle.
        let ended = unsafe { sys::cuStreamEndCapture(s, &mut graph) }.result().check("ending a graph capture");
        let mut g =
            StepGraph { graph, exec: std::ptr::null_mut(), nodes: Vec::new(), funcs: Vec::new(), ops: Vec::new() };
        let nodes = nodes?;
        ended?;
        g.nodes = if lanes { nodes } else { chain(graph)? };
        if g.nodes.len() != ops.len() {
            return Err(CudaError::Shape(format!("a step of {} ops captured as {} nodes", ops.len(), g.nodes.len())));
        }
        // On by default (`STRATA_PDL=0` turns them off): 119.7 against 111.6 tok/s at 4K on the H200.
        let pdl = gpu.settings.pdl && !PDL_FAILED.load(Ordering::Relaxed);
        if gpu.arch.0 >= 9 && pdl {
            programmatic(graph, &g.nodes, ops, join_pdl(gpu))?;
        }
        // SAFETY: a graph just captured; writes the executable's handle.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0) }
            .result()
            .check("instantiating a step's graph")?;
        for (node, op) in g.nodes.iter().zip(ops) {
            let mut func = std::ptr::null_mut();
            if matches!(op, Op::Kernel { .. }) {
                // SAFETY: a kernel node of this graph; the parameters are written into a zeroed struct.
                let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
                unsafe { sys::cuGraphKernelNodeGetParams_v2(*node, &mut p) }.result().check("reading a kernel node")?;
                func = p.func;
            }
            g.funcs.push(func);
        }
        Ok(g)
    }

    /// The kernel nodes whose launch differs from `ops` set anew (the next launch runs them), each one's
    /// name told to `updated`; how many.
    pub(crate) fn update(&mut self, ops: Vec<Op>, updated: &mut dyn FnMut(&'static str)) -> Result<u64, CudaError> {
        let mut n = 0;
        for (i, op) in ops.into_iter().enumerate() {
            if self.ops[i].same_launch(&op) {
                continue;
            }
            if let Op::Kernel { name, cfg, args, .. } = &op {
                let mut slots: Vec<u64> = args.iter().map(|a| a.slot()).collect();
                let mut ptrs: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
                // SAFETY: zeroed is a valid value of this plain C struct (null pointers).
                let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
                p.func = self.funcs[i];
                (p.gridDimX, p.gridDimY, p.gridDimZ) = cfg.grid_dim;
                (p.blockDimX, p.blockDimY, p.blockDimZ) = cfg.block_dim;
                p.sharedMemBytes = cfg.shared_mem_bytes;
                p.kernelParams = ptrs.as_mut_ptr();
                // SAFETY: a kernel node of this executable; the driver copies each argument (the slots hold
                // it in their low bytes, as many as the kernel's parameter takes) before returning.
                unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, self.nodes[i], &p) }
                    .result()
                    .check("updating a step's kernel")?;
                updated(name);
                n += 1;
            }
            self.ops[i] = op;
        }
        Ok(n)
    }
}

/// Set when the driver refused a programmatic edge: later graphs keep plain ones.
static PDL_FAILED: AtomicBool = AtomicBool::new(false);
/// Set when the driver refused a programmatic edge into a kernel that joins two lanes: later graphs keep
/// those plain (and the others programmatic).
static JOIN_PDL_FAILED: AtomicBool = AtomicBool::new(false);

/// A kernel that joins a side lane follows its main-lane kernel by a programmatic edge too (the side
/// lane's edge stays plain), so it may start while that kernel runs once the side lane has completed. On
/// unless `STRATA_PDL_JOIN=0` (133.6 against 131.1 tok/s decoding after 1,024 tokens on the H200,
/// bench/results/2026-12-01-h200-speed-8/).
fn join_pdl(gpu: &Gpu) -> bool {
    gpu.settings.pdl_join && !JOIN_PDL_FAILED.load(Ordering::Relaxed)
}

/// Programmatic launches (on unless `STRATA_PDL=0`): each kernel whose one dependency is a kernel follows it
/// by a programmatic edge instead (sm_90+): it may be launched while that one runs, and waits in
/// `grid_dep_wait` (common.cuh) for it to complete before it reads anything the kernels before wrote; the
/// dense staged and stream products start copying their weights before that wait, so the copy overlaps the
/// kernel before. A kernel that joins two lanes keeps a plain edge from its side lane (and from its main lane
/// too under `STRATA_PDL_JOIN=0`), and zeroings and copies keep theirs. Each kernel waits before it lets the
/// next one launch, so when a kernel starts early, every kernel before the one it follows has completed.
fn programmatic(graph: sys::CUgraph, nodes: &[sys::CUgraphNode], ops: &[Op], joins: bool) -> Result<(), CudaError> {
    // Each node's op index: of a join's dependencies, the main lane's is the one recorded last (the side
    // lane's ops were all recorded before the main lane's that follow its fork).
    let index: std::collections::HashMap<sys::CUgraphNode, usize> =
        nodes.iter().enumerate().filter(|(_, n)| !n.is_null()).map(|(i, n)| (*n, i)).collect();
    for (i, to) in nodes.iter().enumerate() {
        if !matches!(ops[i], Op::Kernel { .. }) || to.is_null() {
            continue;
        }
        let deps = dependencies(*to)?;
        let join = deps.len() > 1;
        if join && !joins {
            continue;
        }
        let Some(from) = deps.iter().copied().max_by_key(|d| index.get(d).copied()) else { continue };
        if !index.get(&from).is_some_and(|&k| matches!(ops[k], Op::Kernel { .. })) {
            continue;
        }
        if !make_programmatic(graph, from, *to)? {
            let (flag, what) = if join { (&JOIN_PDL_FAILED, "into a joining kernel ") } else { (&PDL_FAILED, "") };
            flag.store(true, Ordering::Relaxed);
            eprintln!("note: programmatic launches {what}are off for this run: the driver refused the edge");
            if !join {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The plain edge `from` → `to` replaced by a programmatic one; false (the plain edge put back) when the
/// driver refuses it.
fn make_programmatic(graph: sys::CUgraph, from: sys::CUgraphNode, to: sys::CUgraphNode) -> Result<bool, CudaError> {
    let edge = sys::CUgraphEdgeData {
        from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
        to_port: 0,
        type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
        reserved: [0; 5],
    };
    // SAFETY: two nodes of this graph joined by one plain edge; it is replaced by one programmatic edge
    // between the same nodes, or put back as it was.
    unsafe {
        sys::cuGraphRemoveDependencies_v2(graph, &from, &to, std::ptr::null(), 1).result().check("editing a graph")?;
        if sys::cuGraphAddDependencies_v2(graph, &from, &to, &edge, 1).result().is_ok() {
            return Ok(true);
        }
        sys::cuGraphAddDependencies_v2(graph, &from, &to, std::ptr::null(), 1).result().check("editing a graph")?;
    }
    Ok(false)
}

/// The nodes `node` depends on.
fn dependencies(node: sys::CUgraphNode) -> Result<Vec<sys::CUgraphNode>, CudaError> {
    let mut k = 0usize;
    // SAFETY: counting a node's dependencies, then reading them into a buffer of that many.
    unsafe { sys::cuGraphNodeGetDependencies_v2(node, std::ptr::null_mut(), std::ptr::null_mut(), &mut k) }
        .result()
        .check("reading a graph")?;
    let mut deps = vec![std::ptr::null_mut(); k];
    if k > 0 {
        unsafe { sys::cuGraphNodeGetDependencies_v2(node, deps.as_mut_ptr(), std::ptr::null_mut(), &mut k) }
            .result()
            .check("reading a graph")?;
    }
    deps.truncate(k);
    Ok(deps)
}

/// Every op issued on the stream, in order.
/// Every op issued on the device's stream, in order (the side lane's marks are nothing there).
pub(crate) fn issue_all(gpu: &Gpu, ops: &[Op]) -> Result<(), CudaError> {
    ops.iter().try_for_each(|op| match op {
        Op::Kernel { name, f, cfg, args } => launch_now(gpu, &gpu.stream, f, name, *cfg, args),
        _ => issue_copy(&gpu.stream, op),
    })
}

/// Each op issued into the capture on its lane's stream, and the node it made (null for the marks).
fn capture_ops(gpu: &Gpu, ops: &[Op]) -> Result<Vec<sys::CUgraphNode>, CudaError> {
    let main = &*gpu.stream;
    let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
    let mut events = Vec::with_capacity(2 * LANES);
    for _ in 0..2 * LANES {
        events.push(gpu.ctx.new_event(flags).check("creating an event")?);
    }
    let (forks, joins) = events.split_at(LANES);
    // An event recorded on one stream and waited for on the other: an edge in the captured graph.
    let edge = |e: &CudaEvent, from: &CudaStream, to: &CudaStream| {
        // SAFETY: an event of this context, recorded and waited for on this context's streams.
        unsafe {
            sys::cuEventRecord(e.cu_event(), from.cu_stream()).result().check("recording an event")?;
            sys::cuStreamWaitEvent(to.cu_stream(), e.cu_event(), 0).result().check("waiting for an event")
        }
    };
    // The lane the ops go on now (None: the main lane), and each side lane's: forked, not yet joined.
    let (mut on, mut open) = (None::<usize>, [false; LANES]);
    let mut nodes = Vec::with_capacity(ops.len());
    for op in ops {
        let lane = on.map_or(main, |l| &*gpu.side_streams[l]);
        let node = match op {
            Op::Fork(l) if on.is_none() && !open[l.0] => {
                edge(&forks[l.0], main, &gpu.side_streams[l.0])?;
                (on, open[l.0]) = (Some(l.0), true);
                std::ptr::null_mut()
            }
            Op::Back(l) if on == Some(l.0) => {
                on = None;
                std::ptr::null_mut()
            }
            Op::Join(l) if open[l.0] && on.is_none() => {
                edge(&joins[l.0], &gpu.side_streams[l.0], main)?;
                open[l.0] = false;
                std::ptr::null_mut()
            }
            Op::Kernel { name, f, cfg, args } => {
                launch_now(gpu, lane, f, name, *cfg, args)?;
                last_node(lane)?
            }
            Op::Zero { .. } | Op::Copy { .. } => {
                issue_copy(lane, op)?;
                last_node(lane)?
            }
            _ => return Err(CudaError::Shape("a step's side-lane marks out of order".into())),
        };
        nodes.push(node);
    }
    for l in (0..LANES).filter(|&l| open[l]) {
        // A side lane never joined: joined at the end (a capture ends on the stream it began on).
        edge(&joins[l], &gpu.side_streams[l], main)?;
    }
    Ok(nodes)
}

/// The node the last op issued on a capturing stream made (the stream's one dependency now).
fn last_node(stream: &CudaStream) -> Result<sys::CUgraphNode, CudaError> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let (mut deps, mut n): (*const sys::CUgraphNode, usize) = (std::ptr::null(), 0);
    // SAFETY: a query on a stream in capture; the dependency array is the driver's, read at once.
    unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream.cu_stream(),
            &mut status,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut deps,
            std::ptr::null_mut(),
            &mut n,
        )
        .result()
        .check("reading a capture")?;
        if n != 1 || deps.is_null() {
            return Err(CudaError::Shape(format!("an op left {n} dependencies in a capture, not one")));
        }
        Ok(*deps)
    }
}
/// The nodes of a graph captured from one stream, in order: a chain from its one root.
fn chain(graph: sys::CUgraph) -> Result<Vec<sys::CUgraphNode>, CudaError> {
    let mut n = 0usize;
    // SAFETY: counting, then reading at most that many handles.
    unsafe { sys::cuGraphGetRootNodes(graph, std::ptr::null_mut(), &mut n) }.result().check("reading a graph")?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut node = std::ptr::null_mut();
    let mut one = 1usize;
    if n != 1 {
        return Err(CudaError::Shape(format!("a step's graph has {n} roots, not one")));
    }
    unsafe { sys::cuGraphGetRootNodes(graph, &mut node, &mut one) }.result().check("reading a graph")?;
    let mut nodes = vec![node];
    loop {
        let mut k = 0usize;
        let last = *nodes.last().expect("one node at least");
        // SAFETY: counting the dependents of a node of this graph, then reading the one there is.
        unsafe { sys::cuGraphNodeGetDependentNodes_v2(last, std::ptr::null_mut(), std::ptr::null_mut(), &mut k) }
            .result()
            .check("reading a graph")?;
        match k {
            0 => return Ok(nodes),
            1 => {
                let mut next = std::ptr::null_mut();
                unsafe { sys::cuGraphNodeGetDependentNodes_v2(last, &mut next, std::ptr::null_mut(), &mut k) }
                    .result()
                    .check("reading a graph")?;
                nodes.push(next);
            }
            _ => return Err(CudaError::Shape(format!("a step's graph branches ({k} dependents)"))),
        }
    }
}
