//! Per-shape matvec layouts for one token's dense products, chosen when a model is loaded, on the model's
//! own weights. The plan (plan.rs) picks a layout per weight type on stand-in shapes, once per card; a
//! type can serve shapes that want different layouts (on the H200, Q8_0's 2560 × 6144 output projection
//! ran `warp` 1.6 µs faster than `staged`, and its 640 × 2560 shared expert the other way round). Here
//! each shape the decode step multiplies by is checked and timed in every layout as the plan does
//! (check.rs `check_then_time`), the calls rotating over the model's layers' matrices of that shape. A
//! layout is used only if it gives the block layout's bits, so the bits never depend on the choice. A
//! forced layout (`STRATA_MATVEC`) is not tuned over. The choice takes a fraction of a second and is made
//! at each load. Opt-in (`STRATA_TUNE=1`): on the H200 it gives the same bits but a slower step than the
//! plan's choice (bench/results/2026-12-01-h200-speed-8/).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use strata_gguf::GgmlType;

use crate::buf::Buf;
use crate::check::check_then_time;
use crate::device::Gpu;
use crate::error::CudaError;
use crate::matvec::{matvec_with, Layout, MatrixGpu};
use crate::plan::fastest;

/// A product's weight type, rows and columns.
pub type Shape = (GgmlType, usize, usize);

/// The tuned layouts of this process (the shapes of every model loaded so far).
static TUNED: RwLock<Vec<(Shape, Layout)>> = RwLock::new(Vec::new());
/// Whether TUNED holds any: the products ask at every launch, and without tuning skip the lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// The tuned layout for `w`'s shape, if there is one.
pub fn tuned(w: &MatrixGpu) -> Option<Layout> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    let shape = (w.ty, w.rows, w.cols);
    TUNED.read().ok()?.iter().find(|(s, _)| *s == shape).map(|&(_, l)| l)
}

/// One shape's choice and why.
pub struct ShapeChoice {
    pub shape: Shape,
    pub layout: Layout,
    pub reason: String,
}

impl ShapeChoice {
    /// `Q8_0 2560×6144 warp`.
    pub fn name(&self) -> String {
        let (ty, rows, cols) = self.shape;
        format!("{ty} {rows}×{cols} {}", self.layout.name())
    }
}

/// Chooses and keeps a layout for each shape among `mats` (the matrices a decode step multiplies one token
/// by, every layer's): the fastest of those that give the block layout's bits.
pub fn tune(gpu: &Gpu, mats: &[&MatrixGpu]) -> Result<Vec<ShapeChoice>, CudaError> {
    let on = std::env::var("STRATA_TUNE").is_ok_and(|v| v == "1");
    if !on || std::env::var_os("STRATA_MATVEC").is_some() {
        return Ok(Vec::new());
    }
    let mut groups: Vec<(Shape, Vec<&MatrixGpu>)> = Vec::new();
    // The § qdot types have one layout (qdot.rs): nothing to choose.
    for m in mats.iter().filter(|m| !crate::qdot::uses(m.ty)) {
        let shape = (m.ty, m.rows, m.cols);
        match groups.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, g)) => g.push(m),
            None => groups.push((shape, vec![m])),
        }
    }
    let mut out = Vec::new();
    for (shape, group) in groups {
        let (rows, cols) = (shape.1, shape.2);
        let mut rng = strata_gguf::SplitMix64::new(rows as u64 ^ (cols as u64) << 20);
        let x = Buf::from_host(gpu, &(0..cols).map(|_| rng.uniform() - 0.5).collect::<Vec<f32>>())?;
        let y = Buf::<f32>::zeros(gpu, rows)?;
        let run = |l: Layout, t: usize, set: usize| matvec_with(gpu, l, group[set], &x, &y, t);
        let what = format!("{} {rows} × {cols}, T = 1, {} matrices in turn", shape.0, group.len());
        let c = fastest(&what, &Layout::ALL, Layout::name, |l| {
            check_then_time(gpu, l, (&y, &|_| rows), (1, 1, group.len()), &run)
        });
        out.push(ShapeChoice { shape, layout: c.variant, reason: c.reason });
    }
    let mut kept = TUNED.write().unwrap_or_else(|p| p.into_inner());
    for c in &out {
        kept.retain(|(s, _)| *s != c.shape);
        kept.push((c.shape, c.layout));
    }
    ANY.store(!kept.is_empty(), Ordering::Relaxed);
    Ok(out)
}
